"""The encoder as a sentiment classifier: tokenizer + Trainer, masked-LM pre-training, pipelines, bad input.
Tiny English and Korean data the tests make."""

import gzip
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from datasets import Dataset
from huggingface_hub import ModelCard
from PIL import Image
from safetensors.torch import load_file
from transformers import AutoTokenizer, DataCollatorForLanguageModeling, TrainerCallback, pipeline

from vanilla_transformer import VanillaTransformerForMaskedLM, VanillaTransformerForSequenceClassification
from vanilla_transformer.classification_pipeline import LongText, clean_text, encode_long_texts
from vanilla_transformer.evaluation import evaluate_classifier
from vanilla_transformer.metrics import classification_metrics
from vanilla_transformer.recipes import parse_overrides, read_recipe
from vanilla_transformer.tokenization import MASK_TOKEN, train_bpe_tokenizer
from vanilla_transformer.train.classification.arguments import load_classification_arguments
from vanilla_transformer.train.classification.data import pretraining_texts
from vanilla_transformer.train.classification.pretraining_task import PretrainingTask
from vanilla_transformer.train.classification.setup import model_config
from vanilla_transformer.train.classification.task import ClassificationTask
from vanilla_transformer.train.run import train_recipe
from vanilla_transformer.train.tasks import get_task

POSITIVE = [
    "a wonderful film",
    "great acting",
    "정말 재미있는 영화",
    "최고의 영화",
    "loved every minute",
    "brilliant story",
]
NEGATIVE = [
    "a boring film",
    "terrible acting",
    "정말 지루한 영화",
    "최악의 영화",
    "hated every minute",
    "awful story",
]


def write_reviews(path: Path, n: int, seed: int) -> Path:
    rng = random.Random(seed)
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        for _ in range(n):
            label = rng.randint(0, 1)
            words = rng.sample(POSITIVE if label else NEGATIVE, 2)
            text = f"{words[0]} <br /><br /> {words[1]} ."
            handle.write(json.dumps({"text": text, "label": label}) + "\n")
    return path


def settings(tmp_path, **extra) -> list[str]:
    values = dict(
        train_file=str(write_reviews(tmp_path / "train.jsonl.gz", 240, 0)),
        test_file=str(write_reviews(tmp_path / "test.jsonl.gz", 60, 1)),
        vocab_size=300,
        max_length=32,
        mixed_precision="no",  # fp32 unless a test says otherwise
        output_dir=str(tmp_path / "run"),
        num_train_epochs=4,
        per_device_train_batch_size=16,
        learning_rate=0.003,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        eval_strategy="no",
        logging_steps=1000,
    )
    values.update({f"model.{key}": value for key, value in TINY_ENCODER.items()})
    values.update(extra)
    return [
        f"{key}={value if not isinstance(value, list) else json.dumps(value)}"
        for key, value in values.items()
    ]


TINY_ENCODER = dict(d_model=32, d_ff=64, num_encoder_layers=2, dropout=0.0)
RECIPES = Path(__file__).parent.parent / "vanilla_transformer" / "recipes"
ENCODER_TASKS = ("classification", "masked-lm", "electra")


def arguments(tmp_path, stage="train", recipe=None, **extra):
    """The parsed arguments, as ``--set key=value`` gives them (``model.<field>`` keys edit the encoder)."""
    return load_classification_arguments(recipe, parse_overrides(settings(tmp_path, **extra)), stage)


def train(tmp_path, task="classification", **extra) -> dict:
    """A run as ``classify train`` (``classification``) or ``classify pretrain`` (``pretraining``) starts it,
    with these settings; its results (``output_dir``, ``model``: the saved model folder)."""
    return train_recipe(None, parse_overrides(settings(tmp_path, **extra)), task)


@pytest.mark.parametrize(
    "recipe",
    [path for path in sorted(RECIPES.glob("imdb_*.yaml")) if read_recipe(str(path))["task"] in ENCODER_TASKS],
    ids=str,
)
def test_committed_recipes_parse(recipe, tokenizer):
    """Every setting of a shipped recipe is one its task (the encoder's) or transformers' Trainer knows."""
    task = read_recipe(str(recipe))["task"]
    args = get_task(task).load_arguments(str(recipe), {})
    assert args.task == task and args.output_dir.startswith("runs/")
    assert 0 < args.warmup_steps < 1  # a ratio of the updates, as transformers 5 spells it
    assert args.mixed_precision_setting == "auto"
    # A fine-tuning recipe starts from a pre-training run's encoder: its architecture and vocabulary come with it.
    if args.init_from:
        from vanilla_transformer.train.common.init_from import REGULARISATION_FIELDS

        assert args.init_from.startswith("runs/") and args.vocab_size is None
        assert set(args.model) <= set(REGULARISATION_FIELDS)
        return
    config = model_config(args, tokenizer)
    assert (config.d_model, config.num_decoder_layers, config.is_encoder_decoder) == (256, 0, False)


def test_model_settings_reach_the_config(tmp_path, tokenizer):
    args = arguments(tmp_path, **{"model.norm_position": "pre", "model.num_encoder_layers": 3})
    config = model_config(args, tokenizer)
    assert (config.norm_position, config.num_encoder_layers, config.num_decoder_layers) == ("pre", 3, 0)
    assert (config.d_model, config.d_ff, config.num_heads, config.max_position_embeddings) == (32, 64, 4, 32)
    with pytest.raises(ValueError, match="norm_position"):
        model_config(arguments(tmp_path, **{"model.norm_position": "middle"}), tokenizer)


def test_recipe_model_block_is_checked_with_the_file_named(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("output_dir: runs/x\nmodel:\n  d_model: 64\n  num_layers: 2\n")
    with pytest.raises(
        ValueError,
        match=r"recipe.yaml: Unknown model setting\(s\): model\.num_layers \(did you mean .*num_encoder_layers",
    ):
        load_classification_arguments(str(recipe), {}, "train")
    recipe.write_text("output_dir: runs/x\nd_model: 64\n")  # model settings live only in the model block
    with pytest.raises(
        ValueError,
        match=r"Unknown setting\(s\) in .*recipe.yaml: d_model \(a model setting: put it under `model:`",
    ):
        load_classification_arguments(str(recipe), {}, "train")
    recipe.write_text("output_dir: runs/x\nbf16: true\n")  # precision is mixed_precision's
    with pytest.raises(ValueError, match=r"recipe.yaml: set `mixed_precision` .*not `bf16`"):
        load_classification_arguments(str(recipe), {}, "train")
    recipe.write_text("output_dir: runs/x\nmodel:\n  d_model: 64\n")
    args = load_classification_arguments(str(recipe), {"model.dropout": 0.2}, "train")
    assert args.model == {"d_model": 64, "dropout": 0.2}  # the recipe's block, edited by --set


@pytest.mark.parametrize("native", [False, True], ids=["no-native-bf16", "native-bf16"])
def test_auto_precision_becomes_the_trainers_bf16(tmp_path, monkeypatch, native):
    monkeypatch.setattr("vanilla_transformer.precision.native_bf16", lambda device=None: native)
    args = arguments(tmp_path, mixed_precision="auto")
    assert args.mixed_precision_setting == "auto" and args.bf16 is native
    assert arguments(tmp_path, mixed_precision="no").bf16 is False


def test_clean_text_keeps_language_and_case():
    assert clean_text("Great!<br /><br />Really GREAT.<br/>정말") == "Great! Really GREAT. 정말"


def test_head_and_tail_truncation():
    tokenizer = train_bpe_tokenizer([" ".join(map(str, range(100)))] * 3, vocab_size=300, min_frequency=1)
    text = " ".join(f"w{i}" for i in range(200))
    full = tokenizer(text, add_special_tokens=False)["input_ids"]
    reading = LongText("head_tail", max_length=20, head_tokens=8)
    ids = encode_long_texts(tokenizer, [text], reading)[0][0]
    assert len(ids) == 20 and ids[-1] == tokenizer.eos_token_id
    assert ids[:8] == full[:8] and ids[8:-1] == full[-11:]
    short = encode_long_texts(tokenizer, ["w1 w2"], reading)[0][0]
    assert short == tokenizer("w1 w2", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]


def test_metrics_and_confusion_matrix():
    metrics = classification_metrics(np.array([1, 1, 0, 0, 1]), np.array([1, 0, 0, 1, 1]), 2)
    assert metrics["accuracy"] == pytest.approx(0.6)
    assert metrics["confusion_matrix"] == [[1, 1], [1, 2]]
    assert metrics["f1"] == pytest.approx(2 / 3)  # precision 2/3, recall 2/3 for POSITIVE


def test_trainer_beats_chance_and_pipelines_return_label_names(tmp_path):
    results = train(tmp_path)
    assert results["test"]["accuracy"] > 0.8  # trivially separable toy data; chance is 0.5
    recorded = json.loads((Path(results["output_dir"]) / "results.json").read_text())["mixed_precision"]
    assert recorded["setting"] == "no" and recorded["used"] == "no" and recorded["hardware"]
    folder = Path(results["model"])
    assert folder == tmp_path / "run" / "model"
    assert_draws_confusion_matrix(folder / "confusion_matrix.png", results["test"]["confusion_matrix"])
    model = VanillaTransformerForSequenceClassification.from_pretrained(folder)
    assert model.config.id2label == {0: "NEGATIVE", 1: "POSITIVE"}  # labels round-trip through save/load
    card = ModelCard.load(folder / "README.md")
    accuracy = [
        r for r in card.data.eval_results if r.metric_type == "accuracy" and "held out" not in r.dataset_split
    ]
    assert accuracy[0].metric_value == pytest.approx(100 * results["test"]["accuracy"], abs=1e-3)
    assert card.data.pipeline_tag == "text-classification"
    assert "| precision | fp32 (mixed_precision: no;" in card.text
    # The folder names its own pipeline (the saved long-text reading), so it runs as remote code.
    classify = pipeline("text-classification", model=str(folder), trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    for text in ["정말 재미있는 영화", "a dull boring mess"]:
        with torch.no_grad():
            logits = model.eval()(**tokenizer(text, return_tensors="pt")).logits[0]
        result = classify(text)[0]
        assert result["label"] == model.config.id2label[int(logits.argmax())]
        assert result["score"] == pytest.approx(float(logits.softmax(-1).max()), abs=1e-5)
    assert classify(["loved every minute . great acting"])[0]["label"] == "POSITIVE"
    remote = pipeline("text-classification", model=str(folder), trust_remote_code=True)
    assert remote("a boring film")[0]["label"] == classify("a boring film")[0]["label"]
    # Evaluation batches the rows by length; its accuracy is still that of row-by-row predictions.
    rows = [json.loads(line) for line in gzip.open(tmp_path / "test.jsonl.gz", "rt")]
    predicted = [p["label"] for p in classify([clean_text(row["text"]) for row in rows], batch_size=1)]
    truth = [model.config.id2label[row["label"]] for row in rows]
    assert results["test"]["accuracy"] == pytest.approx(
        np.mean([a == b for a, b in zip(predicted, truth, strict=True)])
    )


def assert_draws_confusion_matrix(path: Path, confusion: list[list[int]]) -> None:
    """The PNG (4.5 x 4 inches at 120 dpi) draws ``confusion``: true labels down, predicted across, each
    cell in matplotlib's Blues at its count's place between the smallest and the largest count."""
    import matplotlib

    picture = np.asarray(Image.open(path).convert("RGB")).astype(int)
    assert picture.shape == (480, 540, 3)
    counts = np.asarray(confusion, dtype=float)
    span = max(counts.max() - counts.min(), 1.0)
    colours = np.array(matplotlib.colormaps["Blues"]((counts - counts.min()) / span))[..., :3] * 255
    matches = [np.abs(picture - colour).max(-1) <= 6 for colour in colours.reshape(-1, 3)]
    rows, columns = np.nonzero(np.any(matches, axis=0))  # the matrix's box: pixels of its cells' colours
    top, left = rows.min(), columns.min()
    height, width = (rows.max() - top + 1) / len(counts), (columns.max() - left + 1) / len(counts)
    for row, column in np.ndindex(counts.shape):
        y, x = int(top + (row + 0.5) * height), int(left + (column + 0.8) * width)  # beside the number
        np.testing.assert_allclose(picture[y, x], colours[row, column], atol=6, err_msg=f"cell {row, column}")


def test_session_minutes_stops_training_and_saves_a_checkpoint(tmp_path):
    results = train(tmp_path, session_minutes=0)
    checkpoints = tmp_path / "run" / "checkpoints" / "train"
    assert results["updates"] == 1 and results["stopped"] == "session_minutes"  # one update of 60 planned
    assert sorted(p.name for p in checkpoints.iterdir()) == ["checkpoint-1"]
    assert results["checkpoint"] == str(checkpoints / "checkpoint-1")
    # A session that ends before the run does leaves no model, scores or card: only its checkpoint.
    assert "test" not in results and not (tmp_path / "run" / "model").exists()
    assert not (tmp_path / "run" / "results.json").exists()


def test_lowercase_run_saves_a_classifier_that_reads_any_casing_alike(tmp_path):
    results = train(tmp_path, lowercase=True, max_steps=1)
    classify = pipeline("text-classification", model=results["model"], trust_remote_code=True)
    shouted, quiet = classify(["LOVED Every Minute . GREAT ACTING", "loved every minute . great acting"])
    assert shouted["label"] == quiet["label"] and shouted["score"] == pytest.approx(quiet["score"], abs=1e-6)


def test_padding_does_not_change_a_prediction(tmp_path):
    tokenizer = train_bpe_tokenizer(POSITIVE + NEGATIVE, vocab_size=300, min_frequency=1)
    model = VanillaTransformerForSequenceClassification.from_pretrained(
        _tiny_classifier_folder(tmp_path, tokenizer)
    ).eval()
    alone = tokenizer(["great acting"], return_tensors="pt")
    batch = tokenizer(
        ["great acting", "a much longer review that needs padding"], padding=True, return_tensors="pt"
    )
    torch.testing.assert_close(model(**batch).logits[:1], model(**alone).logits, atol=1e-5, rtol=1e-5)


def _tiny_classifier_folder(tmp_path, tokenizer):
    from vanilla_transformer import VanillaTransformerConfig

    config = VanillaTransformerConfig(
        vocab_size=len(tokenizer),
        d_model=16,
        d_ff=32,
        num_heads=4,
        num_encoder_layers=2,
        dropout=0.0,
        is_encoder_decoder=False,
    )
    folder = tmp_path / "clf"
    VanillaTransformerForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_mlm_collator_never_masks_special_tokens():
    tokenizer = train_bpe_tokenizer(
        POSITIVE + NEGATIVE, vocab_size=300, min_frequency=1, extra_special_tokens=(MASK_TOKEN,)
    )
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.9)
    torch.manual_seed(0)
    encoded = [tokenizer(text)["input_ids"] for text in POSITIVE * 5]
    batch = collator([{"input_ids": ids} for ids in encoded])
    special = torch.tensor(
        [[t in tokenizer.all_special_ids for t in row] for row in batch["labels"].clamp(min=0).tolist()]
    )
    eos_positions = batch["input_ids"] == tokenizer.eos_token_id
    assert eos_positions.sum() >= len(encoded)  # every </s> survived
    masked = batch["labels"] != -100
    assert masked.any() and not (masked & special).any()


class RecordTraining(TrainerCallback):
    """The weights the Trainer starts from, and every logged training loss and learning rate by update."""

    def __init__(self):
        self.start, self.losses, self.rates = None, {}, {}

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.start = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.losses[state.global_step] = logs["loss"]
            self.rates[state.global_step] = logs["learning_rate"]


def record_training(monkeypatch) -> RecordTraining:
    """Adds a RecordTraining to the Trainers that pre-training and fine-tuning build (beside the run's own
    callbacks)."""
    recorder = RecordTraining()
    for task in (PretrainingTask, ClassificationTask):
        own = task.trainer

        def trainer(self, args, setup, model, clock, own=own):
            built = own(self, args, setup, model, clock)
            built.add_callback(recorder)
            return built

        monkeypatch.setattr(task, "trainer", trainer)
    return recorder


def test_mlm_pretraining_then_fine_tuning_and_fill_mask(tmp_path, monkeypatch):
    pretrained = train(tmp_path, "pretraining", num_train_epochs=2)
    mlm_folder = Path(pretrained["model"])
    assert mlm_folder == tmp_path / "run" / "mlm" and pretrained["task"] == "masked-lm"
    mlm = VanillaTransformerForMaskedLM.from_pretrained(mlm_folder)
    assert mlm.lm_head.weight is mlm.model.encoder.embed_tokens.weight  # tied to the embeddings
    tokenizer = AutoTokenizer.from_pretrained(mlm_folder)
    fill = pipeline("fill-mask", model=str(mlm_folder))
    text = f"a wonderful {tokenizer.mask_token}"
    guesses = fill(text)
    # The pipeline's five guesses are the model's own: the top-5 of the softmax at the masked position.
    inputs = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        logits = mlm.eval()(**inputs).logits[inputs["input_ids"] == tokenizer.mask_token_id][0]
    top = logits.softmax(-1).topk(5)
    assert [g["token"] for g in guesses] == top.indices.tolist()
    assert [g["score"] for g in guesses] == pytest.approx(top.values.tolist(), abs=1e-5)

    # The classifier takes every encoder weight from the masked-LM folder; only its head is new.
    pretrained = load_file(mlm_folder / "model.safetensors")
    encoder_keys = {name for name in pretrained if name.startswith("model.encoder.")}
    assert len(encoder_keys) == 1 + 2 * 16  # embeddings; per layer q/k/v/out, FFN, 2 LayerNorms (w + b)
    _, info = VanillaTransformerForSequenceClassification.from_pretrained(
        mlm_folder, num_labels=2, output_loading_info=True
    )
    assert sorted(info["missing_keys"]) == ["classifier.bias", "classifier.weight"]
    assert not info["mismatched_keys"]

    recorder = record_training(monkeypatch)
    results = train(tmp_path, init_from=str(mlm_folder), output_dir=str(tmp_path / "ft"))
    assert results["test"]["accuracy"] > 0.8
    # Fine-tuning started from the pre-trained encoder, every tensor of it.
    assert {name for name in recorder.start if name.startswith("model.encoder.")} == encoder_keys
    for name in encoder_keys:
        torch.testing.assert_close(recorder.start[name], pretrained[name], rtol=0, atol=0, msg=name)
    finetuned = VanillaTransformerForSequenceClassification.from_pretrained(tmp_path / "ft" / "model")
    moved = (
        finetuned.model.encoder.layers[0].ffn.fc1.weight - pretrained["model.encoder.layers.0.ffn.fc1.weight"]
    ).abs()
    assert moved.max() > 1e-3  # and fine-tuning trained the encoder too, not the head alone


def test_mlm_pretraining_resumes_from_its_checkpoint(tmp_path, monkeypatch):
    """Stopped after its first update (``session_minutes: 0`` saves a checkpoint), the masked-LM pre-training
    run started again in the same folder with ``resume: auto`` continues from that checkpoint (the Trainer's own resume): from
    its weights, at update 2, with the learning rates of an uninterrupted run.

    Its losses are not the uninterrupted run's: the Trainer fetches the first resumed batch before it
    restores the checkpoint's RNG state, so the collator draws other masks (transformers issue #39215)."""
    common = dict(num_train_epochs=1, logging_steps=1, per_device_train_batch_size=8)
    # The model is initialised before the Trainer seeds the run: both runs start from the same RNG state,
    # as two fresh processes do.
    torch.manual_seed(0)
    straight = record_training(monkeypatch)
    train(tmp_path, "pretraining", output_dir=str(tmp_path / "straight"), **common)
    monkeypatch.undo()
    steps = sorted(straight.losses)
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 6

    folder = tmp_path / "interrupted"
    torch.manual_seed(0)
    first = record_training(monkeypatch)
    # The same command both times, as a scheduler requeues it: resume: auto starts the run, then continues it.
    train(tmp_path, "pretraining", output_dir=str(folder), session_minutes=0, resume="auto", **common)
    monkeypatch.undo()
    assert first.losses == pytest.approx({1: straight.losses[1]}, abs=1e-6)  # the same run, so far
    (checkpoint,) = (folder / "checkpoints" / "pretrain").glob("checkpoint-*")
    assert checkpoint.name == "checkpoint-1"

    resumed = record_training(monkeypatch)
    train(tmp_path, "pretraining", output_dir=str(folder), resume="auto", **common)
    assert sorted(resumed.losses) == steps[1:]  # update 1 is not done again, and the run ends where it did
    assert [resumed.rates[step] for step in steps[1:]] == pytest.approx(
        [straight.rates[step] for step in steps[1:]], rel=1e-6
    )
    saved = load_file(checkpoint / "model.safetensors")
    assert saved.keys() <= resumed.start.keys()
    for name, tensor in saved.items():  # it started from the checkpoint's weights, not a new model
        torch.testing.assert_close(resumed.start[name], tensor, rtol=0, atol=0, msg=name)
    assert not torch.equal(
        saved["model.encoder.layers.0.ffn.fc1.weight"], first.start["model.encoder.layers.0.ffn.fc1.weight"]
    )


def test_bad_input_is_named(tmp_path):
    broken = tmp_path / "broken.jsonl.gz"
    with gzip.open(broken, "wt") as handle:
        handle.write(json.dumps({"review": "no text column", "label": 1}) + "\n")
    with pytest.raises(ValueError, match=r"broken.jsonl.gz line 1: column 'text' is missing"):
        train(tmp_path, train_file=str(broken))
    assert not (tmp_path / "run").exists()  # a run that fails on its data takes away the folder it made
    empty = tmp_path / "empty.jsonl.gz"
    with gzip.open(empty, "wt") as handle:
        handle.write(
            json.dumps({"text": "fine", "label": 1}) + "\n" + json.dumps({"text": "  ", "label": 0}) + "\n"
        )
    with pytest.raises(ValueError, match=r"empty.jsonl.gz line 2: 'text' is empty"):
        train(tmp_path, train_file=str(empty))
    nolabel = tmp_path / "nolabel.jsonl.gz"
    with gzip.open(nolabel, "wt") as handle:
        handle.write(json.dumps({"text": "fine"}) + "\n")
    with pytest.raises(ValueError, match=r"nolabel.jsonl.gz line 1: column 'label' is missing"):
        train(tmp_path, train_file=str(nolabel))
    with pytest.raises(
        ValueError, match=r"Unknown setting\(s\) in --set: learning_rat \(did you mean learning_rate\?\)\.$"
    ):
        arguments(tmp_path, learning_rat=0.1)


def test_evaluating_labels_outside_num_labels_is_refused(tmp_path):
    tokenizer = train_bpe_tokenizer(POSITIVE + NEGATIVE, vocab_size=300, min_frequency=1)
    folder = _tiny_classifier_folder(tmp_path, tokenizer)
    labelled = Dataset.from_dict({"text": ["fine", "good"], "label": [1, 2]})
    with pytest.raises(
        ValueError,
        match=r"^three.jsonl.gz: labels \[2\] are outside the model's num_labels=2 .* row 2's label 2",
    ):
        evaluate_classifier(folder, labelled, source="three.jsonl.gz")
    assert not (folder / "eval_results.json").exists()  # nothing written


@pytest.mark.newest_only  # the script's own report, in its own process; the check is the test's above
def test_plain_script_reports_bad_labels_by_name(tmp_path):
    tokenizer = train_bpe_tokenizer(POSITIVE + NEGATIVE, vocab_size=300, min_frequency=1)
    folder = _tiny_classifier_folder(tmp_path, tokenizer)
    three = tmp_path / "three.jsonl.gz"
    with gzip.open(three, "wt") as handle:
        handle.write(json.dumps({"text": "fine", "label": 2}) + "\n")
    script = Path(__file__).parents[1] / "training" / "train_classifier.py"
    done = subprocess.run(
        [sys.executable, str(script), "evaluate", "--model", str(folder), "--file", str(three)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode != 0
    assert "three.jsonl.gz: labels [2] are outside the model's num_labels=2" in done.stderr
    assert not (folder / "eval_results.json").exists()  # nothing written


def test_imdb_hub_layout_trains_scores_and_feeds_pretraining_its_unsupervised_split(tmp_path):
    """``stanfordnlp/imdb``'s layout (splits train / test / unsupervised, columns text / label, label -1
    for unlabelled text), read through the ``load_dataset`` call a Hub id takes (a local parquet folder
    here): fine-tuning trains and scores its test split, pre-training reads its unsupervised split."""
    import pandas as pd

    folder = tmp_path / "imdb"
    folder.mkdir()
    for split, n, seed in (("train", 240, 0), ("test", 60, 1)):
        rows = [
            json.loads(line) for line in gzip.open(write_reviews(tmp_path / f"{split}.gz", n, seed), "rt")
        ]
        pd.DataFrame(rows).to_parquet(folder / f"{split}.parquet")
    pd.DataFrame(
        {"text": ["an unlabelled wonderful review", "an unlabelled awful review"], "label": [-1, -1]}
    ).to_parquet(folder / "unsupervised.parquet")
    # The data set's card declares its splits, as stanfordnlp/imdb's does on the Hub.
    splits = "".join(
        f"  - split: {name}\n    path: {name}.parquet\n" for name in ("train", "test", "unsupervised")
    )
    (folder / "README.md").write_text(
        f"---\nconfigs:\n- config_name: plain_text\n  data_files:\n{splits}---\n"
    )
    hub = dict(dataset=str(folder), train_file="train", test_file="test", unlabelled_files=["unsupervised"])
    results = train(tmp_path, **hub)
    assert results["test"]["examples"] == 60 and results["test"]["accuracy"] > 0.9
    # The card says what the folder's pipeline does with a long text, and how to call it.
    card = (Path(results["model"]) / "README.md").read_text()
    config = VanillaTransformerForSequenceClassification.config_class.from_pretrained(results["model"])
    assert LongText.from_config(config).describe() in card and "truncation=True" in card
    corpus, held_out = pretraining_texts(arguments(tmp_path, "pretrain", **hub), seed=0)
    assert "an unlabelled wonderful review" in corpus and held_out
    assert not set(held_out) & set(corpus)
