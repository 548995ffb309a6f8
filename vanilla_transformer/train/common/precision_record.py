"""What a run records of its precision: the ``mixed_precision`` setting, what it became on this hardware
(``precision.resolve_mixed_precision``), and the line the log and the model card print of it."""

from __future__ import annotations

from ...precision import bf16_hardware, precision_reason, resolve_mixed_precision


def mixed_precision_record(setting: str, device) -> dict:
    """What ``mixed_precision`` resolves to on ``device``, for the log line, results.json and the card."""
    used = resolve_mixed_precision(setting, device)
    return {
        "setting": setting,
        "used": used,
        "hardware": bf16_hardware(device),
        "reason": precision_reason(setting, used, device),
    }


FORMATS = {
    "bf16": "bf16 autocast, fp32 weights",
    "fp16": "fp16 autocast with dynamic loss scaling, fp32 weights",
    "no": "fp32",
}


def describe_precision(record: dict) -> str:
    reason = f"; {record['reason']}" if record.get("reason") else ""
    return f"{FORMATS[record['used']]} (mixed_precision: {record['setting']}; {record['hardware']}{reason})"


__all__ = ["mixed_precision_record", "describe_precision"]
