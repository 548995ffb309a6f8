"""What every classification stage sets up: its run folder (the run core's lock, record and decision), the
settings a resumed run must keep, the encoder's config and tokenizer, the precision record, the time-budget
callbacks, and the data's name for the model card."""

from __future__ import annotations

import json
from pathlib import Path

from transformers import TrainerCallback, TrainingArguments
from transformers.trainer_callback import ProgressCallback

from ...classification_pipeline import clean_text
from ...configuration_vanilla_transformer import VanillaTransformerConfig
from ...precision import bf16_hardware, precision_reason
from ...tokenization import MASK_TOKEN
from ..common.budget import BudgetedTrainer, TimeBudget, TrainingProgressCallback
from ..common.checkpoints import checkpoint_dirs
from ..common.data import FILE_FORMATS, load_or_train_tokenizer
from ..common.init_from import load_parent_tokenizer
from ..common.recipes import build_config
from ..common.run_folder import RunFolder
from .arguments import ClassificationArguments

# Each stage's outputs in the run folder, beside its Trainer's checkpoints (``output_dir``).
STAGE_OUTPUTS = {
    "pretrain": ("mlm", "discriminator", "pretraining_log.json"),
    "train": ("model", "results.json"),
}
# What a resumed stage must share with its checkpoint: what an update is (the data and how it is read, the
# model, the examples of an update, precision, optimiser and schedule). Budgets (max_steps,
# num_train_epochs, run_minutes, session_minutes), logging, evaluation, saving and the test file may change.
CLASSIFICATION_SETTINGS = (
    "init_from",
    "dataset",
    "dataset_revision",
    "train_file",
    "validation_file",
    "text_column",
    "label_column",
    "drop_empty_texts",
    "class_names",
    "validation_size",
    "validation_runs",
    "max_train_examples",
    "vocab_size",
    "lowercase",
    "max_length",
    "long_text",
    "head_tokens",
    "window_stride",
    "model",
)
PRETRAINING_SETTINGS = (
    "unlabelled_files",
    "objective",
    "mlm_probability",
    "pack_length",
    "generator_size",
    "discriminator_weight",
)
TRAINER_SETTINGS = (
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "world_size",
    "bf16",
    "fp16",
    "learning_rate",
    "lr_scheduler_type",
    "warmup_steps",
    "weight_decay",
    "adam_beta1",
    "adam_beta2",
    "adam_epsilon",
    "max_grad_norm",
    "optim",
    "seed",
)
BUDGETS = ("max_steps", "num_train_epochs")


def run_folder(args: ClassificationArguments, training: TrainingArguments, stage: str) -> RunFolder:
    """``run_dir`` as the stage's run folder. Pre-training and fine-tuning may share one: each stage owns its
    Trainer's checkpoints and its outputs (``STAGE_OUTPUTS``), and the tokenizer while no other stage's
    run is there."""
    run, checkpoints = Path(args.run_dir), Path(training.output_dir)
    other = next(name for name in STAGE_OUTPUTS if name != stage)

    def stage_holds_run(path: Path, name: str) -> bool:
        trainer_folder = checkpoints if name == stage else path / f"trainer-{name}"
        outputs = (path / output for output in STAGE_OUTPUTS[name])
        return bool(checkpoint_dirs(trainer_folder)) or any(output.exists() for output in outputs)

    def own_files(path: Path):
        files = [path / name for name in STAGE_OUTPUTS[stage]]
        if checkpoints.resolve().is_relative_to(path.resolve()):
            files.append(checkpoints)
        if not stage_holds_run(path, other) and not (args.init_from or "").startswith(str(path)):
            files.append(path / "tokenizer")
        return files

    return RunFolder(
        run, stage, own_files, lambda path: stage_holds_run(path, stage), is_main=training.process_index == 0
    )


def run_settings(args: ClassificationArguments, training: TrainingArguments, stage: str) -> dict:
    """The settings of the stage's run that a checkpoint records (``CLASSIFICATION_SETTINGS``, the Trainer's
    ``TRAINER_SETTINGS``; pre-training's own too)."""
    names = CLASSIFICATION_SETTINGS + (PRETRAINING_SETTINGS if stage == "pretrain" else ())
    return {name: getattr(args, name) for name in names} | {
        name: getattr(training, name) for name in TRAINER_SETTINGS
    }


def run_budgets(args: ClassificationArguments, training: TrainingArguments) -> dict:
    return {name: getattr(training, name) for name in BUDGETS} | {"run_minutes": args.run_minutes}


def budget_callbacks(args: ClassificationArguments) -> list[TrainerCallback]:
    """This invocation's ``TimeBudget``, where ``session_minutes`` sets one."""
    return [TimeBudget(args.session_minutes)] if args.session_minutes is not None else []


def show_minutes(
    trainer: BudgetedTrainer, args: ClassificationArguments, training: TrainingArguments
) -> None:
    """A run that a minutes budget may end (``run_minutes``, ``session_minutes``) shows minutes in its
    progress bar, the updates beside them."""
    session = next((cb for cb in trainer.callback_handler.callbacks if isinstance(cb, TimeBudget)), None)
    if (args.run_minutes is not None or session) and not training.disable_tqdm:
        trainer.remove_callback(ProgressCallback)
        trainer.add_callback(TrainingProgressCallback(trainer.clock, session))


def classification_tokenizer(args: ClassificationArguments, texts: list[str], checkpoint: Path | None = None):
    """The tokenizer of the model the run starts from (``init_from``; a run that continues from its
    ``checkpoint`` reads the checkpoint's copy), or of an earlier run, else one trained on ``texts`` (with
    ``<mask>``, for masked-LM pre-training) and saved in ``run_dir/tokenizer``."""
    parent = args.init_from
    if parent:
        copy = checkpoint is not None and (checkpoint / "tokenizer.json").is_file()
        return load_parent_tokenizer(checkpoint if copy else parent)
    return load_or_train_tokenizer(
        [Path(args.run_dir) / "tokenizer"],
        (clean_text(t) for t in texts),
        save_to=Path(args.run_dir) / "tokenizer",
        vocab_size=args.vocab_size,
        model_max_length=args.max_length,
        extra_special_tokens=(MASK_TOKEN,),
        lowercase=args.lowercase,
    )


def model_config(args: ClassificationArguments, tokenizer, **extra) -> VanillaTransformerConfig:
    """The encoder of the recipe's model block, with the run's vocabulary, special tokens and tokenizer
    fingerprint; a model too large for the machine is refused here."""
    return build_config(
        args.model,
        defaults={"max_position_embeddings": max(args.max_length, args.pack_length or 0)},
        tokenizer=tokenizer,
        num_decoder_layers=0,
        is_encoder_decoder=False,
        **extra,
    )


def precision_record(args: ClassificationArguments, training: TrainingArguments) -> dict:
    """``mixed_precision``, what it became (the Trainer's ``bf16`` / ``fp16``) and why, on which hardware."""
    used = "bf16" if training.bf16 else "fp16" if training.fp16 else "no"
    return {
        "setting": args.mixed_precision,
        "used": used,
        "hardware": bf16_hardware(training.device),
        "reason": precision_reason(args.mixed_precision, used, training.device),
    }


def data_name(args: ClassificationArguments) -> tuple[str, str]:
    if args.dataset in FILE_FORMATS:
        return Path(args.train_file).parent.name or "local", args.dataset
    return args.dataset, args.dataset


def write_json(path: Path, payload: dict) -> None:
    path.write_text(json.dumps(payload, indent=2))


__all__ = [
    "budget_callbacks",
    "classification_tokenizer",
    "model_config",
    "precision_record",
    "data_name",
    "run_folder",
    "run_settings",
    "run_budgets",
    "write_json",
]
