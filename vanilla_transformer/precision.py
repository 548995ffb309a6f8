"""Which floating-point format a run computes in: ``mixed_precision: auto | no | bf16 | fp16``.

bf16 matrix products are several times faster than fp32 where the hardware multiplies bf16 natively:
on CPUs with AMX (``amx_bf16``) or AVX512-BF16 (``avx512_bf16``, as torch reports them), and on
CUDA GPUs of compute capability 8.0 (Ampere) or newer. CUDA GPUs below 8.0 (T4, V100: Colab's free GPU
among them) have fp16 tensor cores and no bf16: there ``auto`` picks fp16, which trains with dynamic loss
scaling (a ``GradScaler``: an update whose gradients overflow is skipped and the scale lowered). Apple GPUs
(``mps``) get fp16 too, what torch supports there best. Elsewhere both are emulated and slower than fp32,
so ``auto`` picks fp32. The weights a run saves stay fp32 either way: bf16 / fp16 is the compute format
(Accelerate's / the Trainer's autocast), not the storage format.
"""

from __future__ import annotations

import warnings

import torch

MIXED_PRECISION_CHOICES = ("auto", "no", "bf16", "fp16")
# What the inference commands' ``--dtype`` and ``inference_dtype`` accept: the same choices (``fp32`` is
# another name for ``no``).
DTYPE_CHOICES = ("auto", "no", "fp32", "bf16", "fp16")


def native_bf16(device: torch.device | str | None = None) -> bool:
    """Whether ``device`` (default: ``devices.pick_device()``) multiplies bf16 natively."""
    device = torch.device(device) if device is not None else _default_device()
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.get_device_capability(device) >= (8, 0)
    if device.type == "xpu":
        return True
    if device.type == "cpu":
        capabilities = torch.cpu.get_capabilities() if hasattr(torch.cpu, "get_capabilities") else {}
        return bool(capabilities.get("amx_bf16") or capabilities.get("avx512_bf16"))
    return False


def bf16_hardware(device: torch.device | str | None = None) -> str:
    """A short description of what this device offers for bf16, for logs and model cards."""
    device = torch.device(device) if device is not None else _default_device()
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return f"{torch.cuda.get_device_name(device)} (compute capability {major}.{minor})"
    if device.type == "mps":
        return "Apple GPU (mps)"
    if device.type == "cpu" and hasattr(torch.cpu, "get_capabilities"):
        capabilities = torch.cpu.get_capabilities()
        flags = [name for name in ("amx_bf16", "avx512_bf16") if capabilities.get(name)]
        return f"{capabilities.get('cpu_name', 'CPU')} ({', '.join(flags) or 'no native bf16'})"
    return device.type


def check_mixed_precision(setting: str) -> None:
    """Refuse a ``mixed_precision`` that is not auto | no | bf16 | fp16, naming the setting."""
    if setting not in MIXED_PRECISION_CHOICES:
        raise ValueError(
            f"`mixed_precision` must be one of {' | '.join(MIXED_PRECISION_CHOICES)}, got {setting!r}."
        )


def resolve_mixed_precision(setting: str, device: torch.device | str | None = None) -> str:
    """``"bf16"``, ``"fp16"`` or ``"no"``: what ``setting`` means on ``device`` (``precision_reason`` says why).

    ``auto`` picks bf16 where the hardware multiplies it natively, fp16 on CUDA GPUs below compute
    capability 8.0 and on Apple GPUs, fp32 (``"no"``) elsewhere. bf16 or fp16 forced where the hardware
    lacks it works (emulated) but is slow, and says so with a warning.
    """
    check_mixed_precision(setting)
    device = torch.device(device) if device is not None else _default_device()
    if setting == "auto":
        if native_bf16(device):
            return "bf16"
        return "fp16" if device.type in ("cuda", "mps") else "no"
    if setting == "bf16" and not native_bf16(device):
        warnings.warn(
            f"mixed_precision='bf16' on {bf16_hardware(device)}, which has no native bf16 matrix unit: "
            "bf16 is emulated there and usually slower than fp32. Use 'auto' to pick what this hardware "
            "runs fastest.",
            stacklevel=2,
        )
    if setting == "fp16" and device.type == "cpu":
        warnings.warn(
            "mixed_precision='fp16' on a CPU: torch runs fp16 autocast and loss scaling there, but CPUs "
            "multiply fp16 no faster than fp32 (use it to test the fp16 path; 'auto' picks what is fastest).",
            stacklevel=2,
        )
    return setting


def precision_reason(setting: str, used: str, device: torch.device | str | None = None) -> str:
    """Why ``setting`` became ``used`` on ``device``: the line the log, results.json and the card carry."""
    device = torch.device(device) if device is not None else _default_device()
    if setting != "auto":
        return "as the recipe sets it"
    if used == "bf16":
        return "the hardware multiplies bf16 natively"
    if used == "fp16":
        return "no native bf16, fp16 tensor cores: fp16 with dynamic loss scaling"
    return "no native bf16 or fp16 here: fp32 is the fast path"


def inference_dtype(choice: str, device: torch.device | str | None = None) -> torch.dtype:
    """The type a model serves in on ``device`` for ``choice`` (``--dtype`` of ``translate``, ``evaluate``,
    ``classify evaluate``, ``attention`` and ``demo``; pass it as ``dtype=`` to ``from_pretrained`` or to
    ``pipeline(...)``): what ``mixed_precision: choice`` computes in during training, here as the weights'
    type. ``auto``: bf16 where the device multiplies it natively, fp16 on CUDA GPUs below compute capability
    8.0 and on Apple GPUs, float32 elsewhere; ``no`` / ``fp32``: float32. Weights in bf16 or fp16 halve
    memory; scores move slightly against float32 (docs/serving.md)."""
    if choice not in DTYPE_CHOICES:
        raise ValueError(f"--dtype must be one of {' | '.join(DTYPE_CHOICES)}, got {choice!r}.")
    if choice == "fp32":
        return torch.float32
    with warnings.catch_warnings():  # serving in a forced type is the user's choice: no training advice
        warnings.simplefilter("ignore")
        used = resolve_mixed_precision(choice, device)
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(used, torch.float32)


def _default_device() -> torch.device:
    from .devices import pick_device

    return pick_device()


def use_fast_bf16_kernels(model, precision: dict, device: torch.device) -> None:
    """Training in bf16 on a CPU, attention runs on the eager path (Eq. 1 as two bf16 matrix products):
    torch's CPU flash-attention kernel is slow backwards in bf16 at translation lengths, and the eager
    path trains faster (docs/results.md). Only the training run's attention changes; saved folders
    load with SDPA as usual."""
    if precision["used"] == "bf16" and device.type == "cpu":
        model.set_attn_implementation("eager")


__all__ = [
    "MIXED_PRECISION_CHOICES",
    "DTYPE_CHOICES",
    "inference_dtype",
    "native_bf16",
    "bf16_hardware",
    "resolve_mixed_precision",
    "precision_reason",
    "check_mixed_precision",
    "use_fast_bf16_kernels",
]
