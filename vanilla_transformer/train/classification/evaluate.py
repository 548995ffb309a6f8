"""``classify evaluate``: a saved classifier on a labelled file (or the held-out validation texts), reading
long texts as its pipeline does: accuracy, F1 and a confusion-matrix picture. The folder is checked before
the data is read (``loading.check_model_folder``): another architecture, missing or damaged weights or a
tokenizer larger than ``vocab_size`` is one error naming the file or field."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from datasets import Dataset
from transformers import AutoTokenizer, DataCollatorWithPadding, Trainer, TrainingArguments

from ...classification_pipeline import LongText, average_logits, encode_long_texts
from ...devices import pick_device
from ...loading import load_saved_model
from ...modeling_vanilla_transformer import VanillaTransformerForSequenceClassification
from ...precision import inference_dtype
from ..common.data import FILE_FORMATS, data_path, refuse_missing
from ..common.plots import plot_confusion_matrix
from .arguments import ClassificationArguments
from .data import load_labelled, subset, training_and_validation
from .setup import write_json


def classification_metrics(predictions: np.ndarray, labels: np.ndarray, num_labels: int) -> dict[str, float]:
    """Accuracy, macro F1 (binary F1 of the positive class for two labels) and the confusion matrix."""
    confusion = np.zeros((num_labels, num_labels), dtype=np.int64)
    np.add.at(confusion, (labels, predictions), 1)
    true_positive = np.diag(confusion).astype(np.float64)
    precision = true_positive / np.maximum(confusion.sum(axis=0), 1)
    recall = true_positive / np.maximum(confusion.sum(axis=1), 1)
    f1 = np.where(precision + recall > 0, 2 * precision * recall / np.maximum(precision + recall, 1e-12), 0.0)
    metrics = {"accuracy": float(true_positive.sum() / max(len(labels), 1))}
    metrics["f1"] = float(f1[1]) if num_labels == 2 else float(f1.mean())
    metrics["confusion_matrix"] = confusion.tolist()
    return metrics


def accuracy_metric(num_labels: int):
    """``compute_metrics`` for a ``Trainer`` that evaluates a classifier on one row per text: accuracy and F1
    of :func:`classification_metrics` from the logits' argmax and the labels (the bleu_metric of
    translation's evaluation, for classifiers)."""

    def compute_metrics(prediction) -> dict[str, float]:
        logits = (
            prediction.predictions[0] if isinstance(prediction.predictions, tuple) else prediction.predictions
        )
        metrics = classification_metrics(
            np.asarray(logits).argmax(-1), np.asarray(prediction.label_ids), num_labels
        )
        metrics.pop("confusion_matrix")
        return metrics

    return compute_metrics


def evaluate_classifier(
    model_dir: str | Path,
    args: ClassificationArguments,
    file: str | None = None,
    split: str = "test",
    seed: int = 0,
    device=None,
    dtype: str = "fp32",
) -> dict:
    """Accuracy, F1 and a confusion-matrix PNG (next to the model) on a labelled file: ``file``, else the
    recipe's ``test_file``; with ``split="validation"`` the texts ``training_and_validation`` holds out
    for ``seed`` (what training validated on: choices such as the long-text reading are made there).

    Texts are read as the model's config says (``classifier_long_text`` and its lengths), with the
    functions the model's text-classification pipeline calls, so the pipeline predicts what is scored
    here; ``eval_long_text`` reads them another way (written to ``eval_results-<reading>.json``, and
    validation scores to ``eval_results-validation*.json``)."""
    if split not in ("test", "validation"):
        raise ValueError(f"`split` must be 'test' or 'validation', got {split!r}.")
    if split == "validation" and file is not None:
        raise ValueError("Pass a labelled `file` or `split='validation'`, not both.")
    if split == "test" and not (file or args.test_file):
        raise ValueError("Nothing to evaluate on: give a labelled file or set the recipe's `test_file`.")
    if split == "test" and args.dataset in FILE_FORMATS:  # a misspelt file is named before the model loads
        refuse_missing({"--file" if file else "test_file": data_path(file or args.test_file, args.data_dir)})
    # The folder before the data (refused with the file or field named when it holds no model of ours).
    model = load_saved_model(model_dir, VanillaTransformerForSequenceClassification).eval()
    model.to(inference_dtype(dtype, pick_device(device)))  # the weights' type (``--dtype``)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if split == "validation":
        file = (
            args.validation_file or f"{args.train_file} (validation_size {args.validation_size}, seed {seed})"
        )
        title = f"validation ({Path(args.validation_file or args.train_file).name})"
        data = training_and_validation(args, seed, check_paths=False)[1]
    else:
        file = file or args.test_file
        title = Path(file).name
        data = load_labelled(args, file)
    check_labels_fit(data[args.label_column], model.config.num_labels, file)
    data = subset(data, args.max_eval_examples, 0)
    num_labels = model.config.num_labels
    reading = LongText.from_config(model.config, args.eval_long_text)
    logits = predict_texts(
        model, tokenizer, data[args.text_column], reading, Path(model_dir) / "eval", device
    )
    labels = np.asarray(data[args.label_column])
    metrics = classification_metrics(logits.argmax(-1).numpy(), labels, num_labels)
    names = [model.config.id2label[i] for i in range(num_labels)]
    suffix = "-validation" if split == "validation" else ""
    suffix += f"-{args.eval_long_text}" if args.eval_long_text else ""
    image = plot_confusion_matrix(
        metrics["confusion_matrix"],
        names,
        Path(model_dir) / f"confusion_matrix{suffix}.png",
        f"{title}: accuracy {metrics['accuracy']:.2%}",
    )
    metrics |= {
        "data": str(file),  # the labelled file, or which texts of the training file were held out
        "examples": len(data),
        "long_text": asdict(reading),
        "confusion_matrix_png": str(image),
    }
    write_json(Path(model_dir) / f"eval_results{suffix}.json", metrics)
    return metrics


def check_labels_fit(labels: list[int], num_labels: int, file) -> None:
    """Refuse labels the model has no class for (it was trained on ``num_labels`` classes), naming them and
    the first row (1-based, among the data's rows) that has one."""
    bad = sorted({label for label in labels if not 0 <= label < num_labels})
    if bad:
        row = next(index for index, label in enumerate(labels, 1) if label in bad)
        raise ValueError(
            f"{file}: labels {bad} are outside the model's num_labels={num_labels} (classes 0 to "
            f"{num_labels - 1}); the first is row {row}'s label {labels[row - 1]}."
        )


def predict_texts(
    model, tokenizer, texts: list[str], reading: LongText, output_dir: Path, device=None
) -> torch.Tensor:
    """(texts, labels) logits: each text read as ``reading`` says, a text's windows averaged."""
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
            use_cpu=pick_device(device).type == "cpu",  # the Trainer runs on the accelerator unless told
        ),
        data_collator=DataCollatorWithPadding(tokenizer),
    )
    predictions = trainer.predict(encoded.select(order)).predictions  # (rows, labels), in `order`
    # float32 scores whatever the weights' type (numpy has no bf16)
    return average_logits(torch.as_tensor(predictions).float(), [owners[i] for i in order], len(texts))


__all__ = ["classification_metrics", "evaluate_classifier", "check_labels_fit", "predict_texts"]
