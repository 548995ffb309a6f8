"""The settings every training run shares, with one meaning in every task: the task, the model a run starts
from (``init_from``), whether the run folder's run is continued or replaced, the precision, and the time
budgets.

Every task's arguments are one dataclass: the task's data settings (``data.translation.TranslationData``,
``data.classification.ClassificationData``: where relative data files are read from, ``data_dir``, is
theirs), ``RunArguments`` and ``transformers.TrainingArguments`` (or ``Seq2SeqTrainingArguments``) with the
task's own fields. The run folder is the Trainer's ``output_dir``, the same for every task (checkpoints in
``output_dir/checkpoints``).

``mixed_precision`` is decided here, once, for every task: the device the run trains on is the Trainer's
(``use_cpu``, else the accelerator ``devices.pick_device`` finds), the precision what
``precision.resolve_mixed_precision`` gives there; the Trainer's ``bf16`` / ``fp16`` follow from it (a
recipe cannot set them), the recipe's choice stays in ``mixed_precision_setting``."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ...devices import pick_device
from ...precision import check_mixed_precision, resolve_mixed_precision
from .run_folder import OVERWRITE_CHOICES, RESUME_CHOICES, normalise_choice

# Settings that read true/false or a word (YAML gives the first two as booleans).
FLAG_OR_WORD = {"resume": RESUME_CHOICES, "overwrite": OVERWRITE_CHOICES}


@dataclass
class RunArguments:
    task: str | None = field(
        default=None,
        metadata={
            "help": "What the run trains: translation (the default) | classification | masked-lm | electra | "
            "causal-lm."
        },
    )
    init_from: str | None = field(
        default=None,
        metadata={
            "help": "Start from this trained model (a saved folder, e.g. runs/x/model, or a Hub id): its "
            "weights, its tokenizer (no new vocabulary is trained) and its architecture. The recipe's `model:` "
            "block then holds only what it sets, each field the model's value except dropout, "
            "attention_dropout, activation_dropout, classifier_dropout and label_smoothing, which may change; "
            "`vocab_size` (and translation's languages) must be the model's. A disagreement is refused before "
            "the run folder is touched. A resumed run continues from its checkpoint, not from this model."
        },
    )
    resume: str = field(
        default="false",
        metadata={
            "help": "Continue the run the folder holds: true (from its newest intact checkpoint; a fresh start "
            "where it has none) | auto (the same, and a new run where the folder holds none: a requeued job's "
            "same command) | false (a folder that holds a run is refused). Only budgets, logging and "
            "evaluation may differ from the checkpoint's settings."
        },
    )
    overwrite: str = field(
        default="false",
        metadata={
            "help": "Start a new run in a folder that holds one: true (the old run's files are moved aside to "
            "<folder>.replaced-<time>/) | delete (they are deleted) | false."
        },
    )
    mixed_precision: str = field(
        default="auto",
        metadata={"help": "auto (bf16 where the hardware multiplies it natively, else fp32) | no | bf16."},
    )
    other_files: bool = field(
        default=False,
        metadata={
            "help": "Run in an output_dir that holds files of the user's but no run (notes, data): they are left "
            "alone. Without it such a folder is refused, naming what is in it."
        },
    )
    run_minutes: float | None = field(
        default=None,
        metadata={
            "help": "The run's wall-clock budget over all its invocations: it stops cleanly there (and the "
            "learning rate's decay ends there)."
        },
    )
    session_minutes: float | None = field(
        default=None,
        metadata={
            "help": "Stop this invocation after this many minutes, with a checkpoint; the same command with "
            "resume: true (or auto) continues the run."
        },
    )

    def __post_init__(self):
        for name, choices in FLAG_OR_WORD.items():
            setattr(self, name, normalise_choice(name, getattr(self, name), choices))
        if self.resume != "false" and self.overwrite != "false":
            raise ValueError(
                f"Set `resume` ({self.resume}) or `overwrite` ({self.overwrite}), not both: one continues the "
                "folder's run, the other replaces it."
            )
        for name in ("run_minutes", "session_minutes"):
            value = getattr(self, name)
            if value is not None and not value >= 0:  # 0: stop after the first update
                raise ValueError(f"`{name}` must be a number of minutes >= 0, got {value!r}.")
        check_mixed_precision(self.mixed_precision)
        if not hasattr(self, "use_cpu"):  # not a Trainer's arguments (a test of these fields alone)
            return
        # transformers (5.24+) keeps the precision it hands Accelerate in an attribute named
        # mixed_precision: the recipe's setting stays in mixed_precision_setting, the resolved one there.
        self.mixed_precision_setting = self.mixed_precision
        device = torch.device("cpu") if self.use_cpu else pick_device()
        used = resolve_mixed_precision(self.mixed_precision, device)
        self.bf16, self.fp16 = used == "bf16", used == "fp16"
        self.use_cpu = device.type == "cpu"  # the Trainer takes bf16 on a CPU only when told it runs there
        super().__post_init__()  # the Trainer's arguments
        self.mixed_precision = used


__all__ = ["RunArguments", "FLAG_OR_WORD"]
