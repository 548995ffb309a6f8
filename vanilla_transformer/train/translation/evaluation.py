"""Translation with beam search (§6.1) and BLEU the way papers report it; ``evaluate_folder`` /
``evaluate_split`` score a saved model on a split (the ``evaluate`` command, Table 3, validation choices).

Two scores:

* ``sacrebleu``: cased, detokenized output against raw references, sacreBLEU's defaults (13a);
  the headline number of modern papers.
* ``bleu_lc_tok``: the Multi30k shared-task convention: hypotheses lowercased, Moses-normalised and
  tokenized (``escape=False``, no aggressive dash splitting), scored with ``tokenize="none"`` against
  references processed the same way (or the task's official tokenized reference files).

Both call sacreBLEU directly, not the ``evaluate`` library (the README's "Metrics" says why).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

import sacrebleu
from sacremoses import MosesPunctNormalizer, MosesTokenizer
from transformers.utils import logging

from ...inference import translate
from ...loading import load_saved_model

logger = logging.get_logger(__name__)


@functools.lru_cache(maxsize=8)
def _moses(lang: str) -> tuple[MosesPunctNormalizer, MosesTokenizer]:
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
    import numpy as np

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


def set_decoding(generation_config, num_beams: int, length_penalty: float) -> None:
    """The recipe's decoding (§6.1: beam 4, alpha 0.6) in the generation config saved with the model.
    Greedy search (``num_beams: 1``) has no length penalty or early stopping: both go back to their
    defaults, which transformers requires of a valid greedy config."""
    if num_beams < 1:
        raise ValueError(f"The beam size (`num_beams`) must be at least 1, got {num_beams}.")
    generation_config.num_beams = num_beams
    beam = num_beams > 1
    generation_config.length_penalty = length_penalty if beam else 1.0
    generation_config.early_stopping = generation_config.early_stopping if beam else False


def evaluate_folder(
    model_dir: str | Path,
    split,
    args,
    hypotheses_file: Path,
    tokenized_references: str | None = None,
    num_beams: int | None = None,
    length_penalty: float | None = None,
    device=None,
    dtype: str = "fp32",
):
    """A saved model folder on a split: :func:`evaluate_split` with the folder's generation config, or
    with ``num_beams`` / ``length_penalty`` in its place (the folder is not changed). Returns both BLEUs
    and the decoding used, and three samples; ``device``: where it runs (``devices.pick_device``), ``dtype``: in
    which type (``precision.inference_dtype``). A folder that holds no readable model of this package
    (another architecture, missing or damaged weights, a tokenizer larger than ``vocab_size``) is refused
    with the file or field named (``loading.check_model_folder``)."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from ...devices import pick_device
    from ...precision import inference_dtype

    device = pick_device(device)
    model = load_saved_model(str(model_dir), AutoModelForSeq2SeqLM, device=device).eval()
    model.to(inference_dtype(dtype, device))
    decoding = model.generation_config
    if num_beams is not None or length_penalty is not None:
        set_decoding(
            decoding,
            decoding.num_beams if num_beams is None else num_beams,
            decoding.length_penalty if length_penalty is None else length_penalty,
        )
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    scores, samples = evaluate_split(model, tokenizer, split, args, hypotheses_file, tokenized_references)
    return {**scores, "num_beams": decoding.num_beams, "length_penalty": decoding.length_penalty}, samples


def evaluate_split(
    model, tokenizer, split, args, hypotheses_file: Path, tokenized_references: str | None = None
):
    """Translate a whole split with the generation config, write the hypotheses, score both BLEUs.
    ``tokenized_references`` (a file, one line a sentence) must have as many lines as the split has
    sentences: checked before anything is translated, a ``ValueError`` naming the file and both counts."""
    official = None
    if tokenized_references:
        official = Path(tokenized_references).read_text(encoding="utf-8").splitlines()
        if len(official) != len(split):
            raise ValueError(
                f"tokenized_test_references: {tokenized_references} has {len(official)} lines but the split "
                f"has {len(split)} sentences; they must match line for line. Name the references of this split."
            )
    hypotheses = translate(model, tokenizer, split["source"], args.per_device_eval_batch_size, progress=True)
    hypotheses_file.write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
    scores = bleu_scores(hypotheses, split["target"], args.target_lang, official)
    samples = list(zip(split["source"][:3], hypotheses[:3], split["target"][:3], strict=True))
    return scores, samples


__all__ = [
    "translate",
    "bleu_scores",
    "bleu_metric",
    "moses_lowercase_tokenize",
    "set_decoding",
    "evaluate_folder",
    "evaluate_split",
]
