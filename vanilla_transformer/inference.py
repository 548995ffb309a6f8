"""Serving a trained model: loading a saved folder to serve, translating sentences and streams of lines,
and the opt-in speed-ups.

* ``load_for_inference(folder, device=..., dtype=..., quantize=...)``: a saved folder (any of the package's
  model classes, checked first: ``loading.check_model_folder``) and its tokenizer, on the device and in the
  type that ``placement`` decides, the one place serving decides them (``--device`` through
  ``devices.pick_device``, ``--dtype`` through ``precision.inference_dtype``); every command that runs a
  model (``translate``, ``evaluate``, ``attention``, ``classify evaluate``, ``demo``) loads through it.
* ``translate(model, tokenizer, sentences)``: batches of similar length through ``generate()`` (the
  model's saved decoding: §6.1's beam 4, alpha 0.6, source + 50 tokens), the translations in input order;
  the ``translate`` command, evaluation and the benchmarks all call it. A sentence longer than the model
  reads is cut to it, with one warning naming its line and the limit (``long_inputs``, the one policy).
* ``line_chunks(stream, ...)``: the lines of a file, a pipe or a terminal as they arrive, in chunks, so that
  memory stays flat and each translation is written while the input is still open.
* ``prepare_for_inference(model, dtype=..., quantize=...)`` switches a loaded model to evaluation mode and,
  on request, to bf16 weights or to int8 dynamically quantised linear layers (weights stored as int8,
  activations quantised per batch; oneDNN/FBGEMM kernels on CPU). Nothing here changes the architecture
  or the checkpoint format: save from the original model, not from a prepared one. Batch-1 decoding reads
  every weight once per step, so fewer bytes per weight is what speeds it up; where the CPU has no bf16
  matrix unit, torch emulates bf16 products. Measurements: docs/results.md.
"""

from __future__ import annotations

import select
from collections.abc import Sequence

import torch
from torch import nn
from tqdm.auto import tqdm

from .configuration_vanilla_transformer import check_token_ids
from .data.files import decode_line
from .long_inputs import CutLines, encode_within, reading_limit, report_cut
from .tokenization import LINE_BREAKS

# A translation is one line of output for every reader (a file's line N answers input line N): a line end
# that a tokenizer saved before ``LINE_BREAKS`` were normalised can still decode to becomes a space.
ONE_LINE = str.maketrans(dict.fromkeys(LINE_BREAKS + "\n", " "))

QUANTIZATIONS = (None, "int8")


def placement(
    device=None, dtype: str = "fp32", quantize: str | None = None
) -> tuple[torch.device, torch.dtype]:
    """Where a served model runs and the type of its weights: ``device`` (``cpu``, ``cuda``, ``cuda:1``,
    ``mps``, ``xpu``; None or ``auto``: the accelerator torch finds, else the CPU; ``devices.pick_device``)
    and ``dtype``, a ``--dtype`` choice on that device (``precision.inference_dtype``). int8 dynamic
    quantisation runs on the CPU, on float32 activations: there and in float32 then (``--device auto`` and
    ``--dtype auto`` included); a half type or another device asked for with it is refused, naming both
    options, before any model loads."""
    from .devices import pick_device
    from .precision import inference_dtype

    if quantize not in QUANTIZATIONS:
        raise ValueError(f"`quantize` must be one of {list(QUANTIZATIONS)}, got {quantize!r}.")
    if quantize and dtype in ("bf16", "fp16"):
        raise ValueError(
            f"--quantize {quantize} runs on float32 activations: drop --dtype {dtype} "
            "(or use --dtype fp32 / auto)."
        )
    chosen = pick_device("cpu" if quantize and str(device or "auto") == "auto" else device)
    if quantize and chosen.type != "cpu":
        raise ValueError(
            f"--quantize {quantize} runs on the CPU: drop --device {device} (or use --device cpu)."
        )
    return chosen, torch.float32 if quantize else inference_dtype(dtype, chosen)


def load_for_inference(
    folder,
    device=None,
    dtype: str = "fp32",
    quantize: str | None = None,
    *,
    model_class=None,
    allow_hub_id: bool = False,
):
    """``(model, tokenizer)`` of a saved folder, ready to serve: the model in evaluation mode on ``device``,
    its weights in the type ``dtype`` (a ``--dtype`` choice) means there and, with ``quantize="int8"``, its
    linear layers quantised (:func:`placement` decides where and in which type, :func:`prepare_for_inference`
    does it).

    ``model_class``: the class to load (``AutoModelForSeq2SeqLM``, one of ``loading.MODEL_CLASSES``, ...;
    default: the class the folder was saved from). The folder is checked before anything loads
    (``loading.check_model_folder``: another architecture, missing or damaged weights, a tokenizer that is
    not the model's are one error naming the file or field); with ``allow_hub_id`` (the demo) a Hub id
    (``USER/NAME``) loads unchecked instead (``loading.load_saved_model``)."""
    from transformers import AutoTokenizer

    from .loading import load_saved_model

    chosen, weights = placement(device, dtype, quantize)  # a bad choice is refused before the model loads
    model = load_saved_model(folder, model_class, allow_hub_id=allow_hub_id, needs_tokenizer=True).to(chosen)
    model = prepare_for_inference(model, dtype=weights, quantize=quantize)
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
    except (OSError, ValueError) as error:
        raise ValueError(f"{folder} has no readable tokenizer (tokenizer.json): {error}") from error
    return model, tokenizer


def prepare_for_inference(
    model: nn.Module, *, dtype: torch.dtype | None = None, quantize: str | None = None
) -> nn.Module:
    """Return ``model`` ready to serve: evaluation mode, weights in ``dtype`` (e.g. ``torch.bfloat16``)
    and, with ``quantize="int8"``, every ``nn.Linear`` replaced by its dynamically quantised version
    (CPU only; the embeddings stay in floating point). The model is changed in place and returned.

    Raises ``ValueError`` naming the argument for an unknown quantisation or int8 on a non-CPU model.
    """
    if quantize not in QUANTIZATIONS:
        raise ValueError(f"`quantize` must be one of {list(QUANTIZATIONS)}, got {quantize!r}.")
    model.eval()
    if dtype is not None:
        model.to(dtype)
    if quantize == "int8":
        device = next(model.parameters()).device
        if device.type != "cpu":
            raise ValueError(f"`quantize='int8'` runs on the CPU; the model is on {device}.")
        if dtype not in (None, torch.float32):
            raise ValueError(f"`quantize='int8'` needs float32 activations, not dtype={dtype}.")
        # The output projection is tied to the embedding (§3.4); quantising it gives it its own int8 copy.
        torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8, inplace=True)
    return model


@torch.no_grad()
def translate(
    model,
    tokenizer,
    sentences: Sequence[str],
    batch_size: int = 64,
    max_source_length: int | None = None,
    progress: bool = False,
    *,
    first_line: int = 1,
    cut_lines: CutLines | None = None,
    **generate_kwargs,
) -> list[str]:
    """Translate ``sentences`` in batches of similar length; returns detokenized text in input order.

    Generation settings default to the model's generation config (beam 4, alpha 0.6, input + 50
    tokens); ``generate_kwargs`` override them. An empty (or all-blank) sentence translates to an empty
    string, without running the model, so outputs stay aligned with inputs line for line.

    A sentence longer than the model reads is cut to it, never refused (``long_inputs``' policy): the limit
    is the smaller of ``max_position_embeddings`` and the tokenizer's ``model_max_length``, or
    ``max_source_length`` where that is smaller. One warning names the sentences cut as lines, the first
    being line ``first_line`` (a chunk of a longer input), and the limit; with ``cut_lines`` they are added
    to it instead, for the caller's one warning at the input's end.
    """
    model.eval()
    results: list[str] = [""] * len(sentences)
    order = sorted(
        (i for i in range(len(sentences)) if sentences[i].strip()),
        key=lambda i: len(sentences[i]),
        reverse=True,
    )
    limit, limit_name = reading_limit(model.config.max_position_embeddings, tokenizer.model_max_length)
    if max_source_length is not None and (limit is None or max_source_length < limit):
        limit, limit_name = max_source_length, "max_source_length"
    _, cut = encode_within(tokenizer, [sentences[i] for i in order], limit)
    report_cut(sorted(order[k] for k in cut), first_line, limit, limit_name, cut_lines)
    device = next(model.parameters()).device
    starts = range(0, len(order), batch_size)
    for start in tqdm(starts, desc="Translating", disable=not progress, unit="batch"):
        indices = order[start : start + batch_size]
        batch = tokenizer(
            [sentences[i] for i in indices],
            padding=True,
            truncation=limit is not None,
            max_length=limit,
            return_tensors="pt",
        )
        check_token_ids(batch["input_ids"], model.config.vocab_size, "input_ids")  # on the host, before .to()
        batch = batch.to(device)
        generated = model.generate(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], **generate_kwargs
        )
        for index, text in zip(
            indices, tokenizer.batch_decode(generated, skip_special_tokens=True), strict=True
        ):
            results[index] = text.translate(ONE_LINE).strip()
    return results


def line_chunks(source, where: str, size: int):
    """The lines of a binary stream as UTF-8 text (``\\n`` or ``\\r\\n`` ends a line), in lists of at most
    ``size``; a shorter list as soon as nothing more has arrived (a pipe or a terminal), so no line waits
    for later ones. A byte that is not UTF-8 is an error naming ``where``, the line and the column."""
    lines, pending, number = [], bytearray(), 0
    while data := source.read1(1 << 16):
        pending += data
        if b"\n" not in data:
            continue
        *complete, rest = pending.split(b"\n")
        pending = rest
        for raw in complete:
            number += 1
            lines.append(decode_line(bytes(raw.removesuffix(b"\r")), where, number))
            if len(lines) == size:
                yield lines
                lines = []
        if lines and not more_ready(source):
            yield lines
            lines = []
    if pending:
        lines.append(decode_line(bytes(pending.removesuffix(b"\r")), where, number + 1))
    if lines:
        yield lines


def more_ready(source) -> bool:
    """Whether reading ``source`` now would return at once (a file: always; a pipe: if bytes are waiting)."""
    try:
        return bool(select.select([source], [], [], 0)[0])
    except (OSError, ValueError):  # no file descriptor (an in-memory stream), or a Windows pipe
        return True


__all__ = [
    "load_for_inference",
    "placement",
    "translate",
    "line_chunks",
    "prepare_for_inference",
    "QUANTIZATIONS",
]
