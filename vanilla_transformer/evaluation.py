"""Scoring a saved model folder on data: a translation model by BLEU (``evaluate_folder``, the ``evaluate``
command; ``evaluate_split`` for a model already loaded, a training run's test split) and a classifier by
accuracy, F1 and a confusion matrix (``evaluate_classifier``; ``evaluate_on_recipe_data`` on the labelled
texts a recipe names: ``classify evaluate``, a classification run's test scores).

Each takes what it needs as plain values: the data (a ``datasets.Dataset`` split), its languages or
columns, a batch size, the decoding, the device and the type (``--device``, ``--dtype``). Which data a
recipe names is read by ``data/`` (the CLI's ``evaluate`` reads the recipe's data settings; ``train/`` its
run's splits). The folder loads through ``inference.load_for_inference``: checked first
(``loading.check_model_folder``: another architecture, missing or damaged weights, a tokenizer that is not
the model's is one error naming the file or field), then placed where and in the type the options say.
The scores themselves are ``metrics.py``'s.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from .classification_pipeline import LongText, average_logits, encode_long_texts
from .data.files import FILE_FORMATS, data_path, read_lines, refuse_missing
from .inference import load_for_inference, translate
from .loading import check_model_folder
from .metrics import bleu_scores, classification_metrics
from .plots import plot_confusion_matrix

if TYPE_CHECKING:
    from .data.classification import ClassificationData

# -- translation ------------------------------------------------------------------------------------------


def set_decoding(generation_config, num_beams: int, length_penalty: float) -> None:
    """A decoding (§6.1: beam 4, alpha 0.6) in a generation config: a recipe's, saved with its model, or
    ``evaluate --beams / --length-penalty`` tried on a loaded one. Greedy search (``num_beams: 1``) has no
    length penalty or early stopping: both go back to their defaults, which transformers requires of a
    valid greedy config."""
    if num_beams < 1:
        raise ValueError(f"The beam size (`num_beams`) must be at least 1, got {num_beams}.")
    generation_config.num_beams = num_beams
    beam = num_beams > 1
    generation_config.length_penalty = length_penalty if beam else 1.0
    generation_config.early_stopping = generation_config.early_stopping if beam else False


def evaluate_folder(
    model_dir: str | Path,
    split,
    hypotheses_file: Path,
    *,
    target_lang: str,
    batch_size: int = 64,
    tokenized_references: str | None = None,
    num_beams: int | None = None,
    length_penalty: float | None = None,
    device=None,
    dtype: str = "fp32",
):
    """A saved translation model on ``split`` (``source`` / ``target`` rows): :func:`evaluate_split` with the
    folder's generation config, or with ``num_beams`` / ``length_penalty`` in its place (the folder is not
    changed). Returns both BLEUs and the decoding used, and three samples; ``device``: where it runs,
    ``dtype``: in which type (a ``--dtype`` choice; ``inference.load_for_inference``)."""
    from transformers import AutoModelForSeq2SeqLM

    model, tokenizer = load_for_inference(model_dir, device, dtype, model_class=AutoModelForSeq2SeqLM)
    decoding = model.generation_config
    if num_beams is not None or length_penalty is not None:
        set_decoding(
            decoding,
            decoding.num_beams if num_beams is None else num_beams,
            decoding.length_penalty if length_penalty is None else length_penalty,
        )
    scores, samples = evaluate_split(
        model,
        tokenizer,
        split,
        hypotheses_file,
        target_lang=target_lang,
        batch_size=batch_size,
        tokenized_references=tokenized_references,
    )
    return {**scores, "num_beams": decoding.num_beams, "length_penalty": decoding.length_penalty}, samples


def evaluate_split(
    model,
    tokenizer,
    split,
    hypotheses_file: Path,
    *,
    target_lang: str,
    batch_size: int = 64,
    tokenized_references: str | None = None,
):
    """Translate a whole split (``source`` / ``target`` rows) with the model's generation config, in
    batches of ``batch_size`` sentences, write the hypotheses to ``hypotheses_file`` and score both BLEUs
    (``metrics.bleu_scores``, ``target_lang`` tokenizing for the lowercased one). ``tokenized_references``
    (a file, one line a sentence) must have as many lines as the split has sentences: checked before
    anything is translated, a ``ValueError`` naming the file and both counts. Returns the scores and three
    samples (source, hypothesis, reference)."""
    official = None
    if tokenized_references:
        official = read_lines(tokenized_references)  # split at "\n" only, as every line-aligned reader
        if len(official) != len(split):
            raise ValueError(
                f"tokenized_test_references: {tokenized_references} has {len(official)} lines but the split "
                f"has {len(split)} sentences; they must match line for line. Name the references of this split."
            )
    hypotheses = translate(model, tokenizer, split["source"], batch_size, progress=True)
    hypotheses_file.write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
    scores = bleu_scores(hypotheses, split["target"], target_lang, official)
    samples = list(zip(split["source"][:3], hypotheses[:3], split["target"][:3], strict=True))
    return scores, samples


# -- classification ---------------------------------------------------------------------------------------


def evaluate_classifier(
    model_dir: str | Path,
    data,
    *,
    source: str,
    text_column: str = "text",
    label_column: str = "label",
    split: str = "test",
    title: str | None = None,
    long_text: str | None = None,
    max_examples: int | None = None,
    device=None,
    dtype: str = "fp32",
) -> dict:
    """Accuracy, F1 and a confusion-matrix PNG of a saved classifier on labelled ``data`` (a ``Dataset`` with
    ``text_column`` and ``label_column``; ``source`` names where it came from, in errors and the report).
    At most ``max_examples`` rows are scored (drawn with seed 0; None: all).

    Texts are read as the model's config says (``classifier_long_text`` and its lengths), with the
    functions the model's text-classification pipeline calls, so the pipeline predicts what is scored
    here; ``long_text`` reads them another way. The report goes next to the model:
    ``eval_results[-validation][-<long_text>].json`` and ``confusion_matrix[...].png`` (``split`` and
    ``long_text`` name them; ``title`` heads the picture, by default the name of ``source``)."""
    from .modeling_vanilla_transformer import VanillaTransformerForSequenceClassification

    model, tokenizer = load_for_inference(
        model_dir, device, dtype, model_class=VanillaTransformerForSequenceClassification
    )
    num_labels = model.config.num_labels
    check_labels_fit(data[label_column], num_labels, source)
    if max_examples:
        data = data.shuffle(seed=0).select(range(min(max_examples, len(data))))
    reading = LongText.from_config(model.config, long_text)
    logits = predict_texts(model, tokenizer, data[text_column], reading, Path(model_dir) / "eval")
    metrics = classification_metrics(logits.argmax(-1).numpy(), np.asarray(data[label_column]), num_labels)
    names = [model.config.id2label[i] for i in range(num_labels)]
    suffix = ("-validation" if split == "validation" else "") + (f"-{long_text}" if long_text else "")
    image = plot_confusion_matrix(
        metrics["confusion_matrix"],
        names,
        Path(model_dir) / f"confusion_matrix{suffix}.png",
        f"{title or Path(source).name}: accuracy {metrics['accuracy']:.2%}",
    )
    metrics |= {
        "data": str(source),  # the labelled file, or which texts of the training file were held out
        "examples": len(data),
        "long_text": asdict(reading),
        "confusion_matrix_png": str(image),
    }
    report = Path(model_dir) / f"eval_results{suffix}.json"
    report.write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    return metrics


def evaluate_on_recipe_data(
    model_dir: str | Path,
    args: ClassificationData,
    file: str | None = None,
    split: str = "test",
    device=None,
    dtype: str = "fp32",
) -> dict:
    """``classify evaluate`` and a classification run's test scores: :func:`evaluate_classifier` on the
    labelled texts a recipe's data settings name (``args``: ``ClassificationData``, or a run's arguments,
    which inherit it), read with its columns and checks: ``file``, else the recipe's ``test_file``; with
    ``split="validation"`` the texts ``training_and_validation`` holds out for the recipe's ``seed`` (what
    training validated on: choices such as the long-text reading are made there). Accuracy, F1 and a
    confusion-matrix PNG (next to the model). The recipe's ``eval_long_text`` and ``max_eval_examples``
    apply; ``device`` / ``dtype``: where and in which type the model runs (``--device``, ``--dtype``). A
    misspelt file is named before the model loads, and the folder is checked before the data is read
    (``loading.check_model_folder``: another architecture, missing or damaged weights or a tokenizer larger
    than ``vocab_size`` is one error naming the file or field)."""
    from .data.classification import load_labelled, training_and_validation

    if split not in ("test", "validation"):
        raise ValueError(f"`split` must be 'test' or 'validation', got {split!r}.")
    if split == "validation" and file is not None:
        raise ValueError("Pass a labelled `file` or `split='validation'`, not both.")
    if split == "test" and not (file or args.test_file):
        raise ValueError("Nothing to evaluate on: give a labelled file or set the recipe's `test_file`.")
    if split == "test" and args.dataset in FILE_FORMATS:  # a misspelt file is named before the model loads
        refuse_missing({"--file" if file else "test_file": data_path(file or args.test_file, args.data_dir)})
    check_model_folder(model_dir)  # the folder before the data
    if split == "validation":
        source = (
            args.validation_file
            or f"{args.train_file} (validation_size {args.validation_size}, seed {args.seed})"
        )
        title = f"validation ({Path(args.validation_file or args.train_file).name})"
        data = training_and_validation(args, args.seed, check_paths=False)[1]
    else:
        source = file or args.test_file
        title = Path(source).name
        data = load_labelled(args, source)
    return evaluate_classifier(
        model_dir,
        data,
        source=source,
        text_column=args.text_column,
        label_column=args.label_column,
        split=split,
        title=title,
        long_text=args.eval_long_text,
        max_examples=args.max_eval_examples,
        device=device,
        dtype=dtype,
    )


def check_labels_fit(labels: list[int], num_labels: int, source) -> None:
    """Refuse labels the model has no class for (it was trained on ``num_labels`` classes), naming them,
    ``source`` and the first row (1-based, among the data's rows) that has one."""
    bad = sorted({label for label in labels if not 0 <= label < num_labels})
    if bad:
        row = next(index for index, label in enumerate(labels, 1) if label in bad)
        raise ValueError(
            f"{source}: labels {bad} are outside the model's num_labels={num_labels} (classes 0 to "
            f"{num_labels - 1}); the first is row {row}'s label {labels[row - 1]}."
        )


def predict_texts(model, tokenizer, texts: list[str], reading: LongText, output_dir: Path) -> torch.Tensor:
    """(texts, labels) logits: each text read as ``reading`` says, a text's windows' logits averaged
    (``classification_pipeline.average_logits``, as the pipeline does), on the model's device."""
    from datasets import Dataset
    from transformers import DataCollatorWithPadding, Trainer, TrainingArguments

    views = encode_long_texts(tokenizer, texts, reading)
    rows = [ids for text_views in views for ids in text_views]
    owners = [index for index, text_views in enumerate(views) for _ in text_views]
    encoded = Dataset.from_dict({"input_ids": rows, "attention_mask": [[1] * len(ids) for ids in rows]})
    # Shortest first: batches of similar lengths pad little. The Trainer keeps this order (sequential).
    order = np.argsort([len(ids) for ids in rows], kind="stable")
    trainer = Trainer(
        model=model,
        args=TrainingArguments(
            output_dir=str(output_dir),
            report_to=[],
            per_device_eval_batch_size=64,
            use_cpu=model.device.type == "cpu",  # the Trainer runs on the accelerator unless told
        ),
        data_collator=DataCollatorWithPadding(tokenizer),
    )
    predictions = trainer.predict(encoded.select(order)).predictions  # (rows, labels), in `order`
    # float32 scores whatever the weights' type (numpy has no bf16)
    return average_logits(torch.as_tensor(predictions).float(), [owners[i] for i in order], len(texts))


__all__ = [
    "evaluate_folder",
    "evaluate_split",
    "set_decoding",
    "evaluate_classifier",
    "evaluate_on_recipe_data",
    "check_labels_fit",
    "predict_texts",
]
