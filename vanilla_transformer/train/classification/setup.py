"""What every classification stage sets up: the encoder's config and tokenizer, the precision record, the
time-budget callbacks, the Trainer's last checkpoint, and the data's name for the model card."""

from __future__ import annotations

import json
from pathlib import Path

from transformers import TrainerCallback, TrainingArguments
from transformers.trainer_callback import ProgressCallback
from transformers.trainer_utils import get_last_checkpoint

from ...classification_pipeline import clean_text
from ...configuration_vanilla_transformer import VanillaTransformerConfig
from ...precision import bf16_hardware
from ...tokenization import MASK_TOKEN
from ..common.budget import BudgetedTrainer, TimeBudget, TrainingProgressCallback
from ..common.data import load_or_train_tokenizer
from ..common.recipes import build_config
from .arguments import ClassificationArguments


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


def classification_tokenizer(args: ClassificationArguments, texts: list[str]):
    """The tokenizer of ``pretrained_model`` or of an earlier run, else one trained on ``texts`` (with
    ``<mask>``, for masked-LM pre-training) and saved in ``run_dir/tokenizer``."""
    return load_or_train_tokenizer(
        [args.pretrained_model, Path(args.run_dir) / "tokenizer"],
        (clean_text(t) for t in texts),
        save_to=Path(args.run_dir) / "tokenizer",
        vocab_size=args.vocab_size,
        model_max_length=args.max_length,
        extra_special_tokens=(MASK_TOKEN,),
        lowercase=args.lowercase,
    )


def model_config(args: ClassificationArguments, tokenizer, **extra) -> VanillaTransformerConfig:
    """The encoder of the recipe's model block, with the run's vocabulary and special tokens."""
    return build_config(
        args.model,
        defaults={"max_position_embeddings": max(args.max_length, args.pack_length or 0)},
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        num_decoder_layers=0,
        is_encoder_decoder=False,
        **extra,
    )


def precision_record(args: ClassificationArguments, training: TrainingArguments) -> dict:
    """``mixed_precision`` and what it became (the Trainer's ``bf16``), on which hardware."""
    used = "bf16" if training.bf16 else "no"
    return {"setting": args.mixed_precision, "used": used, "hardware": bf16_hardware(training.device)}


def data_name(args: ClassificationArguments) -> tuple[str, str]:
    if args.dataset == "json":
        return Path(args.train_file).parent.name or "local", "json"
    return args.dataset, args.dataset


def last_checkpoint(output_dir: str) -> str | None:
    return get_last_checkpoint(output_dir) if Path(output_dir).is_dir() else None


def write_json(path: Path, payload: dict) -> None:
    path.write_text(json.dumps(payload, indent=2))


__all__ = [
    "budget_callbacks",
    "classification_tokenizer",
    "model_config",
    "precision_record",
    "data_name",
    "last_checkpoint",
    "write_json",
]
