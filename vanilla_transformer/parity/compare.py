"""Running the model and the candidate on one sample, alternating chunk by chunk, and comparing what they give:
identical outputs, how far apart the others are, BLEU or accuracy of both, and speed."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from .sample import Sample

CHUNK = 64  # lines per timed round of each side
SHOWN_DIFFERENCES = 20  # differing outputs kept in parity.json, for a reader to look at


def _interleaved(model_side: Callable, candidate_side: Callable, inputs: Sequence[str]):
    """Both sides' outputs on ``inputs`` and their seconds, chunk by chunk in turn."""
    outputs, seconds = ([], []), [0.0, 0.0]
    for start in range(0, len(inputs), CHUNK):
        chunk = list(inputs[start : start + CHUNK])
        for side, run in enumerate((model_side, candidate_side)):
            began = time.perf_counter()
            outputs[side].extend(run(chunk))
            seconds[side] += time.perf_counter() - began
    return outputs, seconds


def token_disagreement(tokenizer, first: str, second: str) -> float:
    """How far two outputs are apart in tokens: the edit distance between their token sequences (insertions,
    deletions and substitutions) over the longer one's length, so that a word inserted early counts once and
    not as every later position shifted."""
    a, b = (tokenizer(text_target=text, add_special_tokens=False)["input_ids"] for text in (first, second))
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1] / max(len(a), len(b), 1)


def compare_translations(
    model_translate: Callable[[list[str]], list[str]],
    candidate_translate: Callable[[list[str]], list[str]],
    sample: Sample,
    tokenizer,
    target_lang: str = "en",
) -> dict:
    """Both sides' translations of ``sample`` and the figures of the module docstring (a dict).

    Both sides get the same batches: the sample's lines longest first (in tokens), :data:`CHUNK` at a time,
    each side translating a chunk as one batch (``check_translation`` sets their batch size to it). A
    batch's padding and its length bound (the longest source + 50) are then the same on both sides, so
    that an output differs only where the engines compute differently, never because one side batched a
    line with a longer one (a translation that runs to the bound would otherwise change with its batch)."""
    lengths = [len(ids) for ids in tokenizer(list(sample.inputs), add_special_tokens=False)["input_ids"]]
    order = sorted(range(len(sample.inputs)), key=lambda index: -lengths[index])
    (by_length, got_by_length), seconds = _interleaved(
        model_translate, candidate_translate, [sample.inputs[index] for index in order]
    )
    expected, got = [""] * len(order), [""] * len(order)
    for position, index in enumerate(order):
        expected[index], got[index] = by_length[position], got_by_length[position]
    differing = [index for index, (a, b) in enumerate(zip(expected, got, strict=True)) if a != b]
    report = {
        "sentences": len(sample.inputs),
        "identical": len(sample.inputs) - len(differing),
        "identical_share": 1 - len(differing) / len(sample.inputs),
        "token_disagreement": (
            float(np.mean([token_disagreement(tokenizer, expected[i], got[i]) for i in differing]))
            if differing
            else None
        ),
        "first_difference": _difference(sample, differing, expected, got),
        "differences": [
            _difference(sample, [index], expected, got) for index in differing[:SHOWN_DIFFERENCES]
        ],
        "speed": _speed(len(sample.inputs), seconds),
        "bleu": None,
    }
    if sample.references is not None:
        from ..metrics import bleu_scores

        model_bleu = bleu_scores(expected, sample.references, target_lang)["sacrebleu"]
        candidate_bleu = bleu_scores(got, sample.references, target_lang)["sacrebleu"]
        report["bleu"] = {
            "model": model_bleu,
            "candidate": candidate_bleu,
            "difference": candidate_bleu - model_bleu,
        }
    return report


def compare_classifications(
    model_probabilities: Callable[[list[str]], np.ndarray],
    candidate_probabilities: Callable[[list[str]], np.ndarray],
    sample: Sample,
) -> dict:
    """Both sides' class probabilities on ``sample``: identical labels, the largest probability difference,
    accuracy of both where the sample is labelled, and speed."""
    (expected, got), seconds = _interleaved(model_probabilities, candidate_probabilities, sample.inputs)
    expected, got = np.asarray(expected), np.asarray(got)
    labels_a, labels_b = expected.argmax(-1), got.argmax(-1)
    differing = np.flatnonzero(labels_a != labels_b).tolist()
    report = {
        "texts": len(sample.inputs),
        "identical": len(sample.inputs) - len(differing),
        "identical_share": 1 - len(differing) / len(sample.inputs),
        "largest_probability_difference": float(np.abs(expected - got).max()),
        "first_difference": _difference(sample, differing, labels_a.tolist(), labels_b.tolist()),
        "speed": _speed(len(sample.inputs), seconds),
        "accuracy": None,
    }
    if sample.labels is not None:
        truth = np.asarray(sample.labels)
        report["accuracy"] = {
            "model": float((labels_a == truth).mean()),
            "candidate": float((labels_b == truth).mean()),
            "difference": float((labels_b == truth).mean() - (labels_a == truth).mean()),
        }
    return report


def _difference(sample: Sample, differing: list[int], expected, got) -> dict | None:
    if not differing:
        return None
    index = differing[0]
    return {
        "line": sample.lines[index],
        "input": sample.inputs[index],
        "model": expected[index],
        "candidate": got[index],
    }


def _speed(count: int, seconds: list[float]) -> dict:
    model, candidate = (count / max(value, 1e-9) for value in seconds)
    return {"model": model, "candidate": candidate, "ratio": candidate / model, "seconds": list(seconds)}
