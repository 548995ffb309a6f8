"""The pre-training tasks' trainer and card (``pretraining_task.py``): the encoder pre-trained on the task's
own text, as BERT's masked LM or as ELECTRA's discriminator (``electra.py``), with ``transformers.Trainer``."""

from __future__ import annotations

from pathlib import Path

import torch

from ...loading import is_hub_id
from ...model_card import write_model_card
from ..common.budget import BudgetedTrainer
from ..common.precision_record import describe_precision
from .setup import data_name


class PretrainingTrainer(BudgetedTrainer):
    """``transformers.Trainer`` for ``classify pretrain``. Each logged loss also gets ``elapsed_minutes``
    (``TrainingClock``) and, for ELECTRA, its two parts (``mlm_loss``, ``discriminator_loss``) and the
    ``replaced_fraction``, averaged over the updates since the last log, so that runs of different
    objectives plot against wall-clock time. With a time budget the learning rate follows
    ``budget_schedule``."""

    PARTS = ("mlm_loss", "discriminator_loss", "replaced_fraction")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._parts = {name: [] for name in self.PARTS}

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss, outputs = super().compute_loss(
            model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch
        )
        if model.training:
            for name in self.PARTS:
                if isinstance(outputs, dict) and outputs.get(name) is not None:
                    self._parts[name].append(outputs[name])
        return (loss, outputs) if return_outputs else loss

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs:
            for name, values in self._parts.items():
                if values:
                    logs[name] = round(torch.stack(values).float().mean().item(), 4)
                    values.clear()
        clock = self.clock
        if clock is not None:
            logs["elapsed_minutes"] = round(clock.elapsed_seconds / 60, 4)
        super().log(logs, start_time)


def pretraining_card(args, trainer, model, folder: Path, rows: int, precision: dict) -> Path:
    name, kind = data_name(args)
    clock = trainer.clock
    settings = {
        "data": f"{name}: {rows:,} sequences"
        + (f" of {args.pack_length} packed tokens" if args.pack_length else ""),
        "updates": trainer.state.global_step,
        "batch size": args.per_device_train_batch_size * args.gradient_accumulation_steps,
        "learning rate": args.learning_rate,
        "masking": f"{args.mlm_probability:.0%} of tokens",
        "training time": f"{clock.elapsed_seconds / 60:.1f} min" if clock else "",
        "precision": describe_precision(precision),
    }
    if args.objective == "electra":
        settings["generator"] = (
            f"{args.generator_size:g} of the discriminator's width; lambda {args.discriminator_weight:g}"
        )
        summary = (
            "The Transformer's encoder pre-trained as ELECTRA's discriminator (replaced-token detection, Clark et "
            "al., 2020) on the task's own text, to be fine-tuned as a classifier "
            "(`VanillaTransformerForSequenceClassification.from_pretrained`)."
        )
        task, suffix = "feature-extraction", "-electra"
    else:
        summary = (
            "The Transformer's encoder pre-trained as a BERT-style masked language model on the task's own text, "
            "to be fine-tuned as a classifier."
        )
        task, suffix = "fill-mask", "-mlm"
    return write_model_card(
        folder,
        model,
        task=task,
        name=Path(args.output_dir).name + suffix,
        summary=summary,
        results=[],
        datasets=[name] if is_hub_id(name) else [],  # the Hub refuses a card naming a local path
        training=settings,
    )


__all__ = ["PretrainingTrainer", "pretraining_card"]
