"""What a run records of its precision: the ``mixed_precision`` setting, what it became on this hardware
(decided once, by the run's arguments: ``arguments.RunArguments``), and the line the log and the model card
print of it."""

from __future__ import annotations

from ...precision import bf16_hardware, precision_reason


def precision_record(args) -> dict:
    """The run's precision, for the log line, results.json and the card: the recipe's ``mixed_precision``,
    what it became on the run's device, on which hardware, and why."""
    setting, used = args.mixed_precision_setting, args.mixed_precision
    return {
        "setting": setting,
        "used": used,
        "hardware": bf16_hardware(args.device),
        "reason": precision_reason(setting, used, args.device),
    }


FORMATS = {
    "bf16": "bf16 autocast, fp32 weights",
    "fp16": "fp16 autocast with dynamic loss scaling, fp32 weights",
    "no": "fp32",
}


def describe_precision(record: dict) -> str:
    reason = f"; {record['reason']}" if record.get("reason") else ""
    return f"{FORMATS[record['used']]} (mixed_precision: {record['setting']}; {record['hardware']}{reason})"


__all__ = ["precision_record", "describe_precision"]
