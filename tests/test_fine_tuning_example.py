"""examples/fine_tune.py, the fine-tuning page's script (docs/fine-tuning.md): it fine-tunes a saved folder with
transformers' Seq2SeqTrainer (translation) or Trainer (a classifier with new labels), with and without LoRA,
offline, and saves a plain model folder that loads with from_pretrained, carries the parent's tokenizer and a
card naming its base model, and is complete for `vanilla-transformer push`; its training loss fell."""

import gzip
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard
from safetensors.torch import load_file

from vanilla_transformer import (
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerForSequenceClassification,
)
from vanilla_transformer.data.synthetic import synthetic_pairs
from vanilla_transformer.hub import missing_files

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "fine_tune.py"


def load_example():
    spec = importlib.util.spec_from_file_location("fine_tune_example", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def translation_file(path: Path, seed: int = 7, size: int = 32) -> Path:
    """``size`` English -> German pairs of the synthetic task, as JSON Lines of {"translation": {...}}."""
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        for pair in synthetic_pairs(size, seed=seed):
            handle.write(json.dumps({"translation": pair}, ensure_ascii=False) + "\n")
    return path


def classification_file(path: Path) -> Path:
    """48 texts of three topics the parent never classified, labelled by name."""
    topics = {"cast": "great cast", "plot": "a terrible plot", "story": "a wonderful story"}
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        for index in range(48):
            name = list(topics)[index % 3]
            text = f"{topics[name]} {'and ' * (index % 4)}{topics[name]}"
            handle.write(json.dumps({"text": text, "label": name}) + "\n")
    return path


def fell(history: list[dict]) -> tuple[float, float]:
    losses = [row["loss"] for row in history if "loss" in row]
    assert len(losses) >= 6
    first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
    assert last < first, losses
    return first, last


def check_folder(output: Path, parent: Path, model_class) -> torch.nn.Module:
    """A complete plain model folder: loads, no adapter tensors, the parent's vocabulary, card's base_model."""
    assert missing_files(output) == []  # `vanilla-transformer push` takes it as it is
    assert not any("lora" in name for name in load_file(output / "model.safetensors"))
    saved = json.loads((output / "tokenizer.json").read_text(encoding="utf-8"))
    original = json.loads((parent / "tokenizer.json").read_text(encoding="utf-8"))
    assert saved["model"] == original["model"] and saved["added_tokens"] == original["added_tokens"]
    card = ModelCard.load(output / "README.md")
    assert card.data.base_model is None and str(parent) in card.text  # a local parent: named in the text
    return model_class.from_pretrained(output)


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_a_translation_model_fine_tunes_on_a_new_file(translation_model, tmp_path, lora):
    output = tmp_path / "out"
    argv = [
        "--model", str(translation_model), "--task", "translation", "--output", str(output),
        "--train-file", str(translation_file(tmp_path / "news.jsonl.gz")),
        "--eval-file", str(translation_file(tmp_path / "valid.jsonl.gz", seed=8, size=6)),
        "--max-steps", "40", "--batch-size", "8", "--learning-rate", "1e-3" if lora else "3e-4",
    ]  # fmt: skip
    history = load_example().main(argv + (["--lora"] if lora else []))
    fell(history)
    # Scored after training as `evaluate` scores: both BLEUs of generate()'s output, in the card too.
    (scores,) = [row for row in history if "eval_sacrebleu" in row]
    assert 0 <= scores["eval_sacrebleu"] <= 100 and 0 <= scores["eval_bleu_lc_tok"] <= 100
    card = ModelCard.load(output / "README.md")
    assert card.data.eval_results[0].metric_value == round(scores["eval_sacrebleu"], 4)
    model = check_folder(output, translation_model, VanillaTransformerForConditionalGeneration)
    parent = load_file(translation_model / "model.safetensors")
    moved = (
        model.model.encoder.layers[0].self_attn.q_proj.weight
        - parent["model.encoder.layers.0.self_attn.q_proj.weight"]
    )
    assert moved.abs().max() > 1e-4  # the weights (or the merged adapters) changed
    assert model.generation_config.num_beams == 2  # the parent's decoding travels with the weights


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_a_classifier_fine_tunes_on_new_labels_and_pushes(classifier_folder, tmp_path, monkeypatch, lora):
    pushed = []

    class Commit:
        commit_url = "https://huggingface.co/you/topics/commit/0"

    monkeypatch.setattr("vanilla_transformer.hub.push_folder", lambda *args: pushed.append(args) or Commit())
    output = tmp_path / "out"
    argv = [
        "--model", str(classifier_folder), "--task", "classification", "--output", str(output),
        "--train-file", str(classification_file(tmp_path / "topics.jsonl.gz")),
        "--eval-file", str(classification_file(tmp_path / "topics-valid.jsonl.gz")),
        "--max-steps", "40", "--batch-size", "8", "--learning-rate", "3e-3", "--max-length", "32",
        "--push-to", "you/topics",
    ]  # fmt: skip
    history = load_example().main(argv + (["--lora"] if lora else []))
    fell(history)
    model = check_folder(output, classifier_folder, VanillaTransformerForSequenceClassification)
    assert list(model.config.id2label.values()) == ["cast", "plot", "story"]  # a new head for new labels
    assert model.config.classifier_max_length == 32
    assert pushed == [(str(output), "you/topics")]
    # The same texts scored after training (the topics are easy): accuracy and F1 of the Trainer's metric.
    (scores,) = [row for row in history if "eval_accuracy" in row]
    assert scores["eval_accuracy"] > 0.9 and 0 < scores["eval_f1"] <= 1


def test_the_script_runs_offline_as_a_command(translation_model, tmp_path):
    """As the page runs it: `python examples/fine_tune.py ...`, with the Hub offline."""
    output = tmp_path / "out"
    command = [sys.executable, str(SCRIPT), "--model", str(translation_model), "--task", "translation"]
    command += ["--train-file", str(translation_file(tmp_path / "news.jsonl.gz")), "--output", str(output)]
    command += ["--max-steps", "4", "--batch-size", "8", "--lora"]
    environment = os.environ | {"HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=environment)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"Saved {output}" in result.stdout
    check_folder(output, translation_model, VanillaTransformerForConditionalGeneration)
