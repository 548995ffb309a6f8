"""What a run records of its precision: the ``mixed_precision`` setting, what it became on this hardware
(``precision.resolve_mixed_precision``), and the line the log and the model card print of it."""

from __future__ import annotations

from ...precision import bf16_hardware, resolve_mixed_precision


def mixed_precision_record(setting: str, device) -> dict:
    """What ``mixed_precision`` resolves to on ``device``, for the log line, results.json and the card."""
    return {
        "setting": setting,
        "used": resolve_mixed_precision(setting, device),
        "hardware": bf16_hardware(device),
    }


def describe_precision(record: dict) -> str:
    used = "bf16 autocast, fp32 weights" if record["used"] == "bf16" else "fp32"
    return f"{used} (mixed_precision: {record['setting']}; {record['hardware']})"


__all__ = ["mixed_precision_record", "describe_precision"]
