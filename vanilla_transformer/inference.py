"""Serving a trained model faster: the opt-in, inference-only changes, kept out of the paper's model file.

``prepare_for_inference(model, dtype=..., quantize=...)`` switches a loaded model to evaluation mode and,
on request, to bf16 weights or to int8 dynamically quantised linear layers (weights stored as int8,
activations quantised per batch; oneDNN/FBGEMM kernels on CPU). Nothing here changes the
architecture or the checkpoint format: save from the original model, not from a prepared one.

Batch-1 decoding reads every weight once per step, so fewer bytes per weight is what speeds it up. int8
decoded faster than fp32 at every batch size and beam measured; bf16 weights are faster or slower by CPU
and batch (where the CPU has no bf16 matrix unit, torch emulates the products and large batches slow
down). The measurements, with BLEU: docs/serving.md ("Serving faster") and docs/benchmarks.md.
"""

from __future__ import annotations

import torch
from torch import nn

QUANTIZATIONS = (None, "int8")


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


__all__ = ["prepare_for_inference", "QUANTIZATIONS"]
