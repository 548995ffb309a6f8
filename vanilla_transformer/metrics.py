"""The scores the package reports: BLEU the way papers report it, and a classifier's accuracy, F1 and
confusion matrix; each also as a ``compute_metrics`` for a ``Trainer`` (``bleu_metric``, ``accuracy_metric``).

Two BLEU scores:

* ``sacrebleu``: cased, detokenized output against raw references, sacreBLEU's defaults (13a);
  the headline number of modern papers.
* ``bleu_lc_tok``: the Multi30k shared-task convention: hypotheses lowercased, Moses-normalised and
  tokenized (``escape=False``, no aggressive dash splitting), scored with ``tokenize="none"`` against
  references processed the same way (or the task's official tokenized reference files).

Both call sacreBLEU directly, not the ``evaluate`` library (the README's "Metrics" says why); accuracy and
F1 are computed with numpy.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np


@functools.lru_cache(maxsize=8)
def _moses(lang: str):
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    return MosesPunctNormalizer(lang), MosesTokenizer(lang)


def moses_lowercase_tokenize(text: str, lang: str) -> str:
    """Lowercase, Moses-normalise punctuation and tokenize, as the Multi30k references were made."""
    normalizer, tokenizer = _moses(lang)
    return tokenizer.tokenize(normalizer.normalize(text.lower()), escape=False, return_str=True)


def bleu_scores(
    hypotheses: Sequence[str],
    references: Sequence[str],
    target_lang: str,
    tokenized_references: Sequence[str] | None = None,
) -> dict[str, float]:
    """Corpus BLEU both ways (see the module docstring). ``references`` are raw sentences."""
    import sacrebleu

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references.")
    cased = sacrebleu.corpus_bleu(list(hypotheses), [list(references)], force=True).score
    if tokenized_references is None:
        tokenized_references = [moses_lowercase_tokenize(ref, target_lang) for ref in references]
    lowercased = sacrebleu.corpus_bleu(
        [moses_lowercase_tokenize(hyp, target_lang) for hyp in hypotheses],
        [list(tokenized_references)],
        tokenize="none",
        force=True,
    ).score
    return {"sacrebleu": cased, "bleu_lc_tok": lowercased}


def bleu_metric(tokenizer, target_lang: str = "en"):
    """``compute_metrics`` for ``Seq2SeqTrainer(predict_with_generate=True)``: decodes the generated ids
    and the labels (-100 = padding) and returns both BLEU conventions of :func:`bleu_scores`."""

    def compute_metrics(prediction) -> dict[str, float]:
        predictions = (
            prediction.predictions[0] if isinstance(prediction.predictions, tuple) else prediction.predictions
        )
        predictions = np.where(predictions < 0, tokenizer.pad_token_id, predictions)
        labels = np.where(prediction.label_ids < 0, tokenizer.pad_token_id, prediction.label_ids)
        hypotheses = tokenizer.batch_decode(predictions, skip_special_tokens=True)
        references = tokenizer.batch_decode(labels, skip_special_tokens=True)
        return bleu_scores(hypotheses, references, target_lang)

    return compute_metrics


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
    of :func:`classification_metrics` from the logits' argmax and the labels (:func:`bleu_metric`, for
    classifiers)."""

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


__all__ = [
    "bleu_scores",
    "bleu_metric",
    "moses_lowercase_tokenize",
    "classification_metrics",
    "accuracy_metric",
]
