"""The two sides of a check: the saved PyTorch model in float32 on the CPU, and the candidate (an export in its
engine, or the model served in another type), both decoding alike."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .compare import CHUNK, compare_classifications, compare_translations
from .report import build_report
from .sample import Sample


@dataclass
class Candidate:
    """What is checked against the PyTorch float32 model: an ``engine`` (``pytorch``, ``ctranslate2``,
    ``onnx``) with its weights' ``precision``, in ``folder`` (an export) or, for PyTorch, served from the
    model's folder with ``dtype`` (``bf16``, ``fp16``) or ``quantize`` (``int8``)."""

    engine: str
    precision: str
    folder: str | Path | None = None
    dtype: str = "fp32"
    quantize: str | None = None


def decoding_of(model, num_beams: int | None = None, length_penalty: float | None = None) -> dict:
    """The decoding both sides use: the model's saved beam size and length penalty unless given."""
    config = model.generation_config
    return {
        "num_beams": config.num_beams if num_beams is None else num_beams,
        "length_penalty": config.length_penalty if length_penalty is None else length_penalty,
    }


def _translator(candidate: Candidate, model_dir, decoding: dict, batch_size: int, cut_lines):
    import functools

    if candidate.engine in ("ctranslate2", "onnx"):  # both engines' translators take the same arguments
        if candidate.engine == "ctranslate2":
            from ..ctranslate2_export import CTranslate2Translator as Translator
        else:
            from ..onnx_export import OnnxTranslator as Translator
        engine = Translator(candidate.folder)
        return lambda chunk: engine(
            chunk,
            decoding["num_beams"],
            decoding["length_penalty"],
            batch_size=batch_size,
            cut_lines=cut_lines,
        )
    from transformers import AutoModelForSeq2SeqLM

    from ..inference import load_for_inference, translate

    model, tokenizer = load_for_inference(
        model_dir, "cpu", candidate.dtype, candidate.quantize, model_class=AutoModelForSeq2SeqLM
    )
    return functools.partial(
        translate, model, tokenizer, batch_size=batch_size, cut_lines=cut_lines, **decoding
    )


def check_translation(
    model_dir: str | Path,
    candidate: Candidate,
    sample: Sample,
    *,
    num_beams: int | None = None,
    length_penalty: float | None = None,
) -> dict:
    """The report of ``candidate`` against the saved translation model in ``model_dir`` (float32, on the CPU)
    on ``sample``, both decoding alike (:func:`decoding_of`) and on the same batches (a chunk of
    ``compare.CHUNK`` lines, one batch on each side: ``compare_translations``)."""
    import functools

    from transformers import AutoModelForSeq2SeqLM

    from ..inference import load_for_inference, translate
    from ..long_inputs import CutLines, encode_within, reading_limit

    model, tokenizer = load_for_inference(model_dir, "cpu", "fp32", model_class=AutoModelForSeq2SeqLM)
    decoding = decoding_of(model, num_beams, length_penalty)
    batch_size = CHUNK  # a chunk is one batch on both sides
    # Both sides cut the same lines to what the model reads: one warning, naming them as the user's file
    # numbers them (the sides see chunks of the sample, reordered, and would number them within a chunk).
    limit, limit_name = reading_limit(model.config.max_position_embeddings, tokenizer.model_max_length)
    cut, ignored = CutLines(), CutLines()
    for index in encode_within(tokenizer, list(sample.inputs), limit)[1]:
        cut.add([0], sample.lines[index], limit, limit_name)
    model_side = functools.partial(
        translate, model, tokenizer, batch_size=batch_size, cut_lines=ignored, **decoding
    )
    candidate_side = _translator(candidate, model_dir, decoding, batch_size, ignored)
    comparison = compare_translations(
        model_side, candidate_side, sample, tokenizer, getattr(model.config, "target_lang", None) or "en"
    )
    cut.warn()
    return build_report(
        comparison,
        engine=candidate.engine,
        precision=candidate.precision,
        model=str(model_dir),
        sample=sample,
        decoding=decoding,
    )


def check_classification(
    model_dir: str | Path, candidate: Candidate, sample: Sample, batch_size: int = 32
) -> dict:
    """The report of a classifier ``candidate`` (an ONNX export, or the PyTorch model served in another type)
    against the saved classifier in ``model_dir`` on ``sample``'s texts, each cut to what the model reads."""
    import torch

    from ..inference import load_for_inference
    from ..long_inputs import reading_limit

    model, tokenizer = load_for_inference(model_dir, "cpu", "fp32")
    limit, _ = reading_limit(model.config.max_position_embeddings, tokenizer.model_max_length)

    def batches(texts: list[str]):
        for start in range(0, len(texts), batch_size):
            yield tokenizer(
                texts[start : start + batch_size],
                padding=True,
                truncation=limit is not None,
                max_length=limit,
                return_tensors="np",
            )

    def torch_side(served):
        def probabilities(texts: list[str]) -> np.ndarray:
            rows = []
            with torch.no_grad():
                for batch in batches(texts):
                    logits = served(
                        input_ids=torch.from_numpy(batch["input_ids"]),
                        attention_mask=torch.from_numpy(batch["attention_mask"]),
                    ).logits
                    rows.append(torch.softmax(logits.float(), -1).numpy())
            return np.concatenate(rows)

        return probabilities

    if candidate.engine == "onnx":
        import onnxruntime

        from ..onnx_export import ENCODER_ONLY_FILE

        session = onnxruntime.InferenceSession(
            str(Path(candidate.folder) / ENCODER_ONLY_FILE), providers=["CPUExecutionProvider"]
        )

        def candidate_side(texts: list[str]) -> np.ndarray:
            rows = []
            for batch in batches(texts):
                (logits,) = session.run(
                    None,
                    {
                        "input_ids": batch["input_ids"].astype(np.int64),
                        "attention_mask": batch["attention_mask"].astype(np.int64),
                    },
                )
                shifted = np.exp(logits - logits.max(-1, keepdims=True))
                rows.append(shifted / shifted.sum(-1, keepdims=True))
            return np.concatenate(rows)
    else:
        served, _ = load_for_inference(model_dir, "cpu", candidate.dtype, candidate.quantize)
        candidate_side = torch_side(served)
    comparison = compare_classifications(torch_side(model), candidate_side, sample)
    return build_report(
        comparison,
        engine=candidate.engine,
        precision=candidate.precision,
        model=str(model_dir),
        sample=sample,
        decoding=None,
    )
