"""What the encoder's tasks (classification, masked LM, ELECTRA) set up alike: the settings a resumed run
must keep, its budgets, the paths it reads, the encoder's config and tokenizer, and the data's name for the
model card."""

from __future__ import annotations

from pathlib import Path

from ...classification_pipeline import clean_text
from ...configuration_vanilla_transformer import VanillaTransformerConfig
from ...data.files import FILE_FORMATS, data_path
from ...tokenization import MASK_TOKEN
from ..common.data import load_or_train_tokenizer
from ..common.init_from import load_parent_tokenizer
from ..common.recipes import build_config
from .arguments import ClassificationArguments

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


def run_settings(args: ClassificationArguments, stage: str) -> dict:
    """The settings of the stage's run that a checkpoint records (``CLASSIFICATION_SETTINGS``, the Trainer's
    ``TRAINER_SETTINGS``; pre-training's own too)."""
    names = CLASSIFICATION_SETTINGS + (PRETRAINING_SETTINGS if stage == "pretrain" else ()) + TRAINER_SETTINGS
    return {name: getattr(args, name) for name in names}


def run_budgets(args: ClassificationArguments) -> dict:
    return {name: getattr(args, name) for name in BUDGETS} | {"run_minutes": args.run_minutes}


def data_paths(args: ClassificationArguments) -> dict:
    """The local data files the run reads, by setting (a Hub data set's are not local)."""
    if args.dataset not in FILE_FORMATS:
        return {}
    named = {
        "train_file": args.train_file,
        "validation_file": args.validation_file,
        "test_file": args.test_file,
    }
    named |= {f"unlabelled_files[{i}]": file for i, file in enumerate(args.unlabelled_files)}
    return {setting: data_path(file, args.data_dir) for setting, file in named.items() if file}


def classification_tokenizer(args: ClassificationArguments, texts: list[str], checkpoint: Path | None = None):
    """The tokenizer of the model the run starts from (``init_from``; a run that continues from its
    ``checkpoint`` reads the checkpoint's copy), or of an earlier run, else one trained on ``texts`` (with
    ``<mask>``, for masked-LM pre-training) and saved in ``output_dir/tokenizer``."""
    parent = args.init_from
    if parent:
        copy = checkpoint is not None and (checkpoint / "tokenizer.json").is_file()
        return load_parent_tokenizer(checkpoint if copy else parent)
    return load_or_train_tokenizer(
        [Path(args.output_dir) / "tokenizer"],
        (clean_text(t) for t in texts),
        save_to=Path(args.output_dir) / "tokenizer",
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


def data_name(args: ClassificationArguments) -> tuple[str, str]:
    if args.dataset in FILE_FORMATS:
        return Path(args.train_file).parent.name or "local", args.dataset
    return args.dataset, args.dataset


__all__ = [
    "classification_tokenizer",
    "model_config",
    "data_name",
    "data_paths",
    "run_settings",
    "run_budgets",
]
