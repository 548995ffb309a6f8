"""Issue 18: the sentiment classifier as users run it. Validation held out of the training file, the
long-text strategy that travels with a saved folder (pipeline = `classify evaluate`), resuming masked-LM
pre-training without a tied-weight warning, Korean data, and ELECTRA pre-training."""

import gzip
import json
import random
from pathlib import Path

import pytest

from vanilla_transformer.train.classification import (
    clean_text,
    load_classification_arguments,
    load_labelled,
    split_validation,
)
from vanilla_transformer.train.classify import pretraining_texts
from vanilla_transformer.train.recipes import parse_overrides

TINY_ENCODER = {"d_model": 32, "d_ff": 64, "num_heads": 4, "num_encoder_layers": 2, "dropout": 0.0}


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def arguments(tmp_path, stage="train", **values):
    """``ClassificationArguments`` and ``TrainingArguments`` as ``--set key=value`` gives them."""
    settings = dict(
        vocab_size=300,
        max_length=32,
        mixed_precision="no",
        run_dir=str(tmp_path / "run"),
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        eval_strategy="no",
        logging_steps=1000,
        per_device_train_batch_size=8,
        seed=0,
    )
    settings.update({f"model.{key}": value for key, value in TINY_ENCODER.items()})
    settings.update(values)
    pairs = [
        f"{key}={json.dumps(value) if isinstance(value, list) else value}" for key, value in settings.items()
    ]
    return load_classification_arguments(None, parse_overrides(pairs), stage)


# -- 1. validation held out of the training file -----------------------------------------------------


def test_validation_split_is_disjoint_deterministic_and_sized(tmp_path):
    """The held-out reviews never reach training: not even a duplicate of one (IMDB repeats reviews),
    the same seed gives the same split, and `validation_size` is a count or a fraction of the texts."""
    rng = random.Random(0)
    texts = [f"review number {i} <br /> {'good' if i % 2 else 'bad'}" for i in range(60)]
    texts += [texts[i] for i in range(0, 60, 3)]  # 20 reviews appear twice
    rng.shuffle(texts)
    train_file = write_jsonl(tmp_path / "train.jsonl.gz", [{"text": t, "label": len(t) % 2} for t in texts])
    args, _ = arguments(tmp_path, train_file=str(train_file))
    data = load_labelled(args, args.train_file)

    train, validation = split_validation(data, 12, seed=0, text_column="text")
    seen = {clean_text(t) for t in train["text"]}
    held = {clean_text(t) for t in validation["text"]}
    assert len(held) == 12 and not seen & held
    assert len(train) + len(validation) == len(data) == 80  # every row on exactly one side
    assert split_validation(data, 12, seed=0, text_column="text")[1]["text"] == validation["text"]
    assert set(split_validation(data, 12, seed=1, text_column="text")[1]["text"]) != set(validation["text"])
    assert len(set(split_validation(data, 0.25, seed=0, text_column="text")[1]["text"])) == 15  # of 60
    with pytest.raises(ValueError, match="validation_size"):
        split_validation(data, 60, seed=0, text_column="text")


def test_pretraining_leaves_out_validation_and_test_texts(tmp_path):
    """Pre-training reads the training file minus the reviews fine-tuning validates on (same size and
    seed), and drops unlabelled texts that are test or validation texts word for word."""
    train_rows = [{"text": f"train review {i}", "label": i % 2} for i in range(40)]
    test_rows = [{"text": f"test review {i}", "label": i % 2} for i in range(10)]
    unlabelled = [{"text": "test review 3", "label": -1}, {"text": "unlabelled review", "label": -1}]
    unlabelled += [{"text": row["text"], "label": -1} for row in train_rows]  # as IMDB's repeats some
    args, training = arguments(
        tmp_path,
        "pretrain",
        train_file=str(write_jsonl(tmp_path / "train.jsonl.gz", train_rows)),
        test_file=str(write_jsonl(tmp_path / "test.jsonl.gz", test_rows)),
        unlabelled_files=[str(write_jsonl(tmp_path / "unsup.jsonl.gz", unlabelled))],
        validation_size=8,
    )
    corpus, held_out = pretraining_texts(args, training.seed)
    _, validation = split_validation(load_labelled(args, args.train_file), 8, training.seed, "text")
    assert sorted(held_out) == sorted(validation["text"])
    assert not set(corpus) & set(held_out)
    assert "test review 3" not in corpus and "unlabelled review" in corpus
    assert len(corpus) == 2 * (40 - 8) + 1
