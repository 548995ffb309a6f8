"""A faster dropout mask for training on CPUs where torch draws it one element at a time.

§5.4's dropout is the model's only random operation, applied to every sub-layer output, to the embedding
sums and (optionally) to attention probabilities and feed-forward activations. On a CPU, torch draws its
mask with a vectorised, multi-threaded MKL Bernoulli only when the processor is an Intel one; elsewhere
(AMD, ARM) ``bernoulli_`` runs a serial double-precision draw per element, slow enough to be a visible
share of a training step (measured in docs/results.md, "Profiles and tried changes").

``int16_dropout`` draws 64 random bits per four elements (torch's own generator, so seeding, resuming
and ``torch.manual_seed`` work as before) and keeps an element when its 16 bits clear a threshold: the
drop rate is ``p`` rounded to a multiple of 1/65,536 (0.1 -> 0.100006), and kept values are scaled by
1 / (1 - that rate), so the expectation is unchanged, as in ``F.dropout``. The mask differs from
torch's for the same seed; its statistics do not.

``use_fast_dropout(model, device)`` installs it on every sub-module of a model, which the model file's
``apply_dropout`` then calls instead of ``F.dropout``; the trainers call it for CPU runs. Nothing is
saved: a loaded model uses ``F.dropout`` again.
"""

from __future__ import annotations

import torch
from torch import nn

_STEPS = 65536  # int16 values


def int16_dropout(
    x: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False
) -> torch.Tensor:
    """``F.dropout``'s contract (zero each element with probability ``p``, scale the rest by 1/(1-p),
    identity when not training) with a mask drawn 16 bits per element. ``inplace`` is accepted for
    signature compatibility; the result is always a new tensor."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return x
    cut = round(p * _STEPS)  # elements whose 16 bits fall below cut - 32768 are dropped
    if cut >= _STEPS:
        return x * 0.0  # p rounds to 1: everything dropped (and no infinite scale in the graph)
    n = x.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=x.device).random_(-(2**63), None)
    bits = words.view(torch.int16)[:n].view(x.shape)  # four uniform 16-bit draws per 64-bit word
    keep = bits >= cut - _STEPS // 2
    scale = _STEPS / (_STEPS - cut)
    if x.dtype in (torch.float32, torch.float64):
        # x times a scaled mask: the backward pass is one product (grad x mask), where torch.where's
        # takes two
        return x * keep.to(x.dtype).mul_(scale)
    # bf16 / fp16: the scale would round in a mask of that dtype (1/0.9 -> 1.109); x * scale does not
    return torch.where(keep, x * scale, 0.0)


def torch_dropout_is_serial(device: torch.device | str) -> bool:
    """Whether torch draws dropout masks with its serial per-element kernel on ``device``: a CPU that
    torch does not route to MKL's Bernoulli (MKL builds use it on Intel processors only)."""
    if torch.device(device).type != "cpu":
        return False
    name = torch.cpu.get_capabilities().get("cpu_name", "") if hasattr(torch.cpu, "get_capabilities") else ""
    return not (torch.backends.mkl.is_available() and "intel" in name.lower())


def use_fast_dropout(model: nn.Module, device: torch.device | str) -> bool:
    """Give every sub-module of ``model`` the int16 mask when ``device`` is a CPU whose torch dropout is
    serial; returns whether it did. Training-time only: the attribute is not saved."""
    if not torch_dropout_is_serial(device):
        return False
    for module in model.modules():
        module.dropout_kernel = int16_dropout
    return True


__all__ = ["int16_dropout", "torch_dropout_is_serial", "use_fast_dropout"]
