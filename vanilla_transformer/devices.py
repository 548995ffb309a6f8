"""Where a model and its batches go: one function every command and run asks (``pick_device``).

By default, the accelerator torch finds (``torch.accelerator``: a CUDA or ROCm GPU, an Apple GPU through
``mps``, an Intel GPU through ``xpu``), else the CPU. ``--device`` on the inference commands and
``use_cpu`` in a recipe override it; a device that is not there is refused, naming what is. Serving asks
it in one place (``inference.placement``, through which every command that runs a saved model loads it), a
training run when its arguments are read, and ``precision`` for its default device.
"""

from __future__ import annotations

import torch

DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu")


def accelerator() -> torch.device | None:
    """The accelerator torch would use (``torch.accelerator.current_accelerator()``), or None."""
    if hasattr(torch, "accelerator") and torch.accelerator.is_available():
        return torch.accelerator.current_accelerator()
    return None


def available_devices() -> list[str]:
    """The device types this machine offers, the CPU last."""
    found = accelerator()
    return ([found.type] if found is not None else []) + ["cpu"]


def pick_device(requested: str | torch.device | None = None) -> torch.device:
    """``requested`` (``cpu``, ``cuda``, ``cuda:1``, ``mps``, ``xpu``; None or ``auto``: the accelerator, else
    the CPU) as a ``torch.device``. An unknown or absent device is a ``ValueError`` naming it and the devices
    there are."""
    if requested is None or str(requested) == "auto":
        return accelerator() or torch.device("cpu")
    try:
        device = torch.device(requested)
    except RuntimeError as error:
        raise ValueError(
            f"--device {requested!r} is not a device name ({', '.join(DEVICE_TYPES)})."
        ) from error
    if device.type == "cpu":
        return device
    found = accelerator()
    if found is None or found.type != device.type:
        raise ValueError(
            f"--device {requested!r}: there is no such device here; available: {', '.join(available_devices())}."
        )
    if device.index is not None and device.index >= torch.accelerator.device_count():
        raise ValueError(
            f"--device {requested!r}: this machine has {torch.accelerator.device_count()} {device.type} device(s)."
        )
    return device


__all__ = ["pick_device", "available_devices", "accelerator", "DEVICE_TYPES"]
