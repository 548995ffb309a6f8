"""`init_from`: a training run (translation's `train`, `classify train`) that starts from a trained model.

It starts from the parent's weights (every tensor equal at update 0, and a first loss far below a run from
scratch), keeps its tokenizer byte for byte (no vocabulary is trained), takes its architecture (the recipe
may only repeat it, or change dropout and label smoothing), refuses a recipe that disagrees before the run
folder exists, records the parent (card's `base_model`, run.json), and a resumed run continues from its
checkpoint without the parent. Classification starts from a translation model's encoder or a classifier
(its head kept for the same labels, a new one for others). Offline, on the shared tiny folders."""

import gzip
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import TRAINED_RUN
from huggingface_hub import ModelCard
from safetensors.torch import load_file

from vanilla_transformer import VanillaTransformerForSequenceClassification
from vanilla_transformer.cli import main
from vanilla_transformer.train.classification import finetune
from vanilla_transformer.train.classification import task as classification_task
from vanilla_transformer.train.classification.arguments import load_classification_arguments
from vanilla_transformer.train.run import train
from vanilla_transformer.train.tasks import get_task
from vanilla_transformer.train.translation import task as translation_task
from vanilla_transformer.train.translation.arguments import load_arguments


def record_start(monkeypatch, module, name: str) -> dict:
    """Every tensor of the model that ``module.name`` (the run's model builder) returns, as it starts."""
    started, build = {}, getattr(module, name)

    def recording(*args, **kwargs):
        model = build(*args, **kwargs)
        started.update({key: value.detach().clone() for key, value in model.state_dict().items()})
        return model

    monkeypatch.setattr(module, name, recording)
    return started


def no_new_vocabulary(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a run that starts from a model trained a new BPE vocabulary")

    monkeypatch.setattr("vanilla_transformer.train.common.data.train_bpe_tokenizer", refuse)


def same_tensors(started: dict, parent_file: Path, prefix: str = "") -> int:
    """Assert each tensor of the parent's weights under ``prefix`` equals the run's at update 0."""
    parent = {name: tensor for name, tensor in load_file(parent_file).items() if name.startswith(prefix)}
    assert parent
    for name, tensor in parent.items():
        torch.testing.assert_close(started[name], tensor, rtol=0, atol=0, msg=name)
    return len(parent)


def vocabulary(folder: Path) -> dict:
    """A saved ``tokenizer.json`` without the two fields that record the last call's settings (``truncation``,
    ``padding``): the vocabulary, merges, normalisation, special tokens and post-processing."""
    saved = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    return {key: value for key, value in saved.items() if key not in ("truncation", "padding")}


# -- translation -------------------------------------------------------------------------------------------


def fine_tuning(folder: Path, parent: Path, **extra) -> dict:
    """The shared run's settings (its vocabulary size left to the parent), 8 updates, from ``parent``."""
    values = {key: value for key, value in TRAINED_RUN.items() if key != "vocab_size"}
    return (
        values
        | {"max_steps": 8, "save_steps": 4, "output_dir": str(folder), "init_from": str(parent)}
        | extra
    )


def first_loss(run: Path) -> float:
    return json.loads((run / "train_log.jsonl").read_text().splitlines()[0])["train/loss"]


def test_translation_starts_from_the_parents_weights_tokenizer_and_architecture(
    translation_model, trained_run, tmp_path, monkeypatch
):
    started = record_start(monkeypatch, translation_task, "build_model")
    no_new_vocabulary(monkeypatch)
    run = tmp_path / "run"
    settings = fine_tuning(run, translation_model) | {"model.dropout": 0.3, "model.d_model": 32}
    main(["train", *[f"--set={key}={value}" for key, value in settings.items()]])

    assert same_tensors(started, translation_model / "model.safetensors") > 10  # every tensor, at update 0
    assert first_loss(run) < 0.6 * first_loss(trained_run)  # the parent's first loss was a random model's
    parent_vocabulary = (translation_model / "tokenizer.json").read_bytes()
    assert (run / "tokenizer" / "tokenizer.json").read_bytes() == parent_vocabulary
    assert (run / "model" / "tokenizer.json").read_bytes() == parent_vocabulary
    config = json.loads((run / "model" / "config.json").read_text())
    parent = json.loads((translation_model / "config.json").read_text())
    assert config["dropout"] == 0.3 and parent["dropout"] == 0.1  # regularisation may change
    for name in ("d_model", "d_ff", "num_heads", "num_encoder_layers", "vocab_size", "tokenizer_fingerprint"):
        assert config[name] == parent[name], name
    card = ModelCard.load(run / "model" / "README.md")
    # A local parent is named in the text; only a Hub id goes into the metadata (the Hub refuses a path).
    assert card.data.base_model is None
    assert f"fine-tuned from {translation_model}" in card.text
    record = json.loads((run / "run.json").read_text())["train"]
    assert record["settings"]["init_from"] == str(translation_model) and record["status"] == "finished"


def test_a_recipe_that_disagrees_with_the_parent_is_refused_before_the_run_folder(
    translation_model, tmp_path
):
    run = tmp_path / "run"
    settings = fine_tuning(run, translation_model) | {
        "model.d_model": 64,
        "model.num_heads": 2,
        "model.dropout": 0.5,  # may differ: not named
        "vocab_size": 1000,
        "source_lang": "de",
        "target_lang": "en",
    }
    with pytest.raises(ValueError) as refused:
        train(load_arguments(None, settings))
    message = str(refused.value)
    for named in (
        f"model.d_model: 64 (the recipe) vs 32 ({translation_model})",
        "model.num_heads: 2 (the recipe) vs 4",
        "vocab_size: 1000 (the recipe) vs 400",
        "source_lang: 'de' (the recipe) vs 'en'",
        "target_lang: 'en' (the recipe) vs 'de'",
    ):
        assert named in message
    assert "model.dropout:" not in message
    assert not run.exists()


def test_translation_refuses_a_parent_without_a_decoder_and_a_second_tokenizer(
    classifier_folder, translation_model, tmp_path
):
    with pytest.raises(ValueError, match="encoder-only model .*translation starts from an encoder-decoder"):
        train(load_arguments(None, fine_tuning(tmp_path / "run", classifier_folder)))
    with pytest.raises(ValueError, match="`init_from` .* or `tokenizer_path`, not both"):
        load_arguments(None, fine_tuning(tmp_path / "run", translation_model, tokenizer_path=str(tmp_path)))
    assert not (tmp_path / "run").exists()


def test_a_resumed_run_continues_from_its_checkpoint_without_the_parent(translation_model, tmp_path):
    parent = tmp_path / "parent"
    shutil.copytree(translation_model, parent)
    run = tmp_path / "run"
    # session_minutes=0: stopped after the first update, with a checkpoint.
    main(["train", *[f"--set={k}={v}" for k, v in fine_tuning(run, parent, session_minutes=0).items()]])
    assert (run / "checkpoints" / "checkpoint-1").is_dir() and not (run / "model").exists()
    parent.rename(tmp_path / "gone")  # the parent is not read again: not its config, weights or tokenizer
    main(["train", *[f"--set={k}={v}" for k, v in fine_tuning(run, parent, resume="true").items()]])
    record = json.loads((run / "run.json").read_text())["train"]
    assert record["status"] == "finished" and record["updates"] == 8
    assert f"fine-tuned from {parent}" in ModelCard.load(run / "model" / "README.md").text


def test_a_hub_id_goes_through_from_pretrained(translation_model, tmp_path):
    """`init_from: you/parent` (a Hub id: it names no local folder) is read by from_pretrained, the Hub's
    own code path: here offline, from a Hub cache that holds the model as a download leaves it."""
    snapshot = tmp_path / "hub" / "models--you--parent" / "snapshots" / "0123abc"
    shutil.copytree(translation_model, snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0123abc")
    settings = fine_tuning(Path("run"), "you/parent", max_steps=2, save_steps=2)
    command = [sys.executable, "-m", "vanilla_transformer.cli", "train"]
    command += [f"--set={key}={value}" for key, value in settings.items()]
    environment = os.environ | {
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_CACHE": str(tmp_path / "hub"),
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
    }
    result = subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=environment
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Starting from you/parent" in result.stdout
    assert ModelCard.load(tmp_path / "run" / "model" / "README.md").data.base_model == "you/parent"
    assert (tmp_path / "run" / "tokenizer" / "tokenizer.json").read_bytes() == (
        translation_model / "tokenizer.json"
    ).read_bytes()


def test_a_parent_inside_the_run_folder_is_refused(trained_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained_run / "model", run / "model")
    with pytest.raises(ValueError, match="lies inside output_dir"):
        train(load_arguments(None, fine_tuning(run, run / "model", overwrite="true")))
    assert (run / "model" / "model.safetensors").is_file()


# -- classification ----------------------------------------------------------------------------------------

PHRASES = {
    0: ["a boring film", "terrible acting", "a terrible plot", "a boring story"],
    1: ["a wonderful film", "great acting", "a great cast", "a wonderful story"],
    2: ["정말 영화", "정말 재미있는", "정말 지루한", "영화"],
}


def write_reviews(path: Path, classes: int, n: int = 64) -> Path:
    """``n`` labelled texts of ``classes`` classes, three phrases of the label's each."""
    rng = random.Random(0)
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        for index in range(n):
            label = index % classes
            text = " . ".join(rng.choices(PHRASES[label], k=3))
            handle.write(json.dumps({"text": text, "label": label}) + "\n")
    return path


def classifying(tmp_path: Path, parent: Path, classes: int = 2, **extra):
    values = dict(
        init_from=str(parent),
        train_file=str(write_reviews(tmp_path / "train.jsonl.gz", classes)),
        test_file=None,
        validation_size=8,
        max_length=32,
        mixed_precision="no",
        output_dir=str(tmp_path / "run"),
        num_train_epochs=1,
        per_device_train_batch_size=16,
        learning_rate=0.003,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        eval_strategy="no",
    )
    return get_task("classification").load_arguments(None, values | extra)


def test_a_classifier_starts_from_a_translation_models_encoder(translation_model, tmp_path, monkeypatch):
    started = record_start(monkeypatch, classification_task, "build_classifier")
    no_new_vocabulary(monkeypatch)
    train(classifying(tmp_path, translation_model))

    assert same_tensors(started, translation_model / "model.safetensors", "model.encoder.") > 10
    assert not any(name.startswith("model.decoder.") for name in started)
    model_folder = tmp_path / "run" / "model"
    assert vocabulary(model_folder) == vocabulary(translation_model)
    classifier = VanillaTransformerForSequenceClassification.from_pretrained(model_folder)
    assert (classifier.config.num_decoder_layers, classifier.config.is_encoder_decoder) == (0, False)
    assert list(classifier.config.id2label.values()) == ["NEGATIVE", "POSITIVE"]
    assert f"fine-tuned from {translation_model}" in ModelCard.load(model_folder / "README.md").text
    record = json.loads((tmp_path / "run" / "run.json").read_text())["train"]
    assert record["settings"]["init_from"] == str(translation_model)


@pytest.mark.parametrize(
    ("classes", "names", "keeps_head"),
    [(2, ["LABEL_0", "LABEL_1"], True), (2, None, False), (3, None, False)],
    ids=["the-same-labels", "other-names", "three-labels"],
)
def test_a_classifier_parent_keeps_its_head_only_for_its_own_labels(
    classifier_folder, tmp_path, monkeypatch, classes, names, keeps_head
):
    started = record_start(monkeypatch, classification_task, "build_classifier")
    warnings = []
    monkeypatch.setattr(finetune.logger, "warning", warnings.append)
    extra = {"class_names": names} if names else {}
    train(classifying(tmp_path, classifier_folder, classes, **extra))

    same_tensors(started, classifier_folder / "model.safetensors", "model.encoder.")
    parent_head = load_file(classifier_folder / "model.safetensors")["classifier.weight"]
    assert started["classifier.weight"].shape == (classes, parent_head.shape[1])
    assert torch.equal(started["classifier.weight"], parent_head) is keeps_head
    assert bool(warnings) is not keeps_head
    if warnings:
        assert "its classifier head starts anew" in warnings[0] and "LABEL_0" in warnings[0]


def test_a_classification_recipe_that_disagrees_is_refused_and_pretraining_takes_no_parent(
    classifier_folder, tmp_path
):
    args = classifying(tmp_path, classifier_folder, **{"model.d_model": 64, "vocab_size": 300})
    with pytest.raises(ValueError) as refused:
        train(args)
    assert f"model.d_model: 64 (the recipe) vs 16 ({classifier_folder})" in str(refused.value)
    assert "vocab_size: 300 (the recipe) vs 99" in str(refused.value)
    assert not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match="pre-training starts from random weights"):
        load_classification_arguments(None, {"init_from": str(classifier_folder)}, "pretrain")


def test_a_resumed_classification_run_reads_its_checkpoint_not_the_parent(classifier_folder, tmp_path):
    parent = tmp_path / "parent"
    shutil.copytree(classifier_folder, parent)
    # session_minutes=0: stopped after the first update, with a checkpoint (its tokenizer included).
    train(classifying(tmp_path, parent, session_minutes=0, num_train_epochs=2))
    assert json.loads((tmp_path / "run" / "run.json").read_text())["train"]["status"] == "stopped"
    parent.rename(tmp_path / "gone")
    train(classifying(tmp_path, parent, resume="true", num_train_epochs=2))
    record = json.loads((tmp_path / "run" / "run.json").read_text())["train"]
    assert record["status"] == "finished" and record["updates"] > 1
