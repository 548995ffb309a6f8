"""The settings of a translation training run: one dataclass, ``Seq2SeqTrainingArguments`` with the
translation run's own fields added, read from a YAML recipe and the command line by ``HfArgumentParser``
(``train/common/recipes.py``); the data's settings are ``data.translation.TranslationData``'s, which it
inherits (``evaluate`` reads them alone), and the model's settings are its ``model:`` block.

Every trainer switch is a recipe key with its transformers name and meaning (``max_steps``,
``gradient_accumulation_steps``, ``eval_steps``, ``save_steps``, ``save_total_limit``, ``logging_steps``,
``per_device_eval_batch_size``, ``report_to``, ``push_to_hub``, ``torch_compile``, ...); ``output_dir`` is the
run's folder (checkpoints in ``output_dir/checkpoints``).

Defaults are the built-in main job: a small Transformer trained on the synthetic English -> German
task in a few minutes on two CPU cores. The paper's recipe values (Adam betas 0.9 / 0.98, epsilon 1e-9,
Eq. 3 with its warmup) are the defaults of the fields that carry them; label smoothing (§5.4) is the model
config's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from transformers import Seq2SeqTrainingArguments

from ...data.translation import TranslationData
from ...modeling_vanilla_transformer import PAPER_LENGTH_PENALTY, PAPER_NUM_BEAMS
from ..common.arguments import RunArguments
from ..common.recipes import SET_BY_RUN, SET_BY_THE_CORE, check_model_block, default_tracker

# The built-in job's model: a small post-LN Transformer (the paper's base model is too slow for minutes
# of CPU). A recipe's ``model:`` block replaces it whole.
SYNTHETIC_MODEL = {
    "d_model": 128,
    "d_ff": 512,
    "num_heads": 4,
    "num_encoder_layers": 3,
    "num_decoder_layers": 3,
    "dropout": 0.1,
    "label_smoothing": 0.1,
}

# The shared BPE vocabulary's size where the recipe sets none and starts from no model.
DEFAULT_VOCAB_SIZE = 1000

# Trainer settings a translation recipe may not set: the run decides them (mixed_precision is the
# precision switch; the learning rate is Eq. 3's, times lr_scale; §5.4's smoothing is the model config's).
SET_BY_TRANSLATION = {
    "bf16": "set `mixed_precision` (auto | no | bf16 | fp16)",
    "fp16": "set `mixed_precision` (auto | no | bf16 | fp16)",
    "learning_rate": "the rate is Eq. 3's: scale it with `lr_scale`",
    "lr_scheduler_type": "the schedule is Eq. 3 (with `lr_cooldown` for a cool-down)",
    "label_smoothing_factor": "set `model.label_smoothing` (§5.4, computed in the model's loss)",
    "optim": "the optimizer is §5.3's Adam (set `adam_beta1`, `adam_beta2`, `adam_epsilon`)",
    **SET_BY_THE_CORE,
}


@dataclass
class TranslationTrainingArguments(TranslationData, RunArguments, Seq2SeqTrainingArguments):
    # -- data: TranslationData's fields (dataset, files, languages, seed, ...), then the lengths trained on --
    max_source_length: int = 128
    max_target_length: int = 128
    # -- tokenizer (§5.1: one shared BPE vocabulary) ------------------------------------------------
    vocab_size: int | None = field(
        default=None,
        metadata={
            "help": f"The BPE vocabulary's size, special tokens included (default {DEFAULT_VOCAB_SIZE}); with "
            "init_from the model's, which the recipe may only repeat."
        },
    )
    tokenizer_path: str | None = field(
        default=None, metadata={"help": "Reuse a saved tokenizer instead of training one."}
    )
    # -- model ---------------------------------------------------------------------------------------------
    model: dict[str, Any] = field(
        default_factory=lambda: dict(SYNTHETIC_MODEL),
        metadata={
            "help": "VanillaTransformerConfig fields, with an optional `preset` (base | big, Table 3) under them "
            "(with init_from: only those to check against the model, or the dropout-like ones to change)."
        },
    )
    # -- optimisation (§5.3) -------------------------------------------------------------------------
    max_tokens: int = 4096
    tokens_per_update: int | None = field(
        default=None,
        metadata={
            "help": "Accumulate gradients until about this many target tokens (instead of a fixed "
            "gradient_accumulation_steps; default: one batch per update)."
        },
    )
    max_epochs: int | None = None
    lr_scale: float = 1.0
    lr_cooldown: float = field(
        default=0.0,
        metadata={
            "help": "Departure from Eq. 3 (0: none). The last fraction of the run's budget (run_minutes, "
            "else max_steps) over which the rate of Eq. 3 falls linearly to zero, e.g. 0.2."
        },
    )
    # -- evaluation (§6.1) ---------------------------------------------------------------------------
    eval_bleu_samples: int = 200
    num_beams: int = PAPER_NUM_BEAMS
    length_penalty: float = PAPER_LENGTH_PENALTY
    # -- checkpoints and logging -----------------------------------------------------------------------
    output_dir: str = field(
        default="runs/synthetic-en-de",
        metadata={
            "help": "The run's folder: the final model, logs, results; checkpoints in its checkpoints/."
        },
    )
    average_last: int = field(
        default=1,
        metadata={"help": "§6.1: the final model averages the last N checkpoints (1: the last weights)."},
    )

    # -- the trainer's settings, with the paper's and the built-in job's defaults ---------------------
    max_steps: int = 800
    warmup_steps: int = field(default=400, metadata={"help": "Eq. 3's warmup, in updates."})
    adam_beta2: float = 0.98
    adam_epsilon: float = 1e-9
    eval_strategy: str = "steps"
    eval_steps: int = 200
    save_steps: int = 200
    save_total_limit: int | None = field(
        default=5, metadata={"help": "Checkpoints kept (older ones are deleted, by rename first)."}
    )
    logging_steps: int = 50
    report_to: str = field(
        default_factory=default_tracker,
        metadata={"help": "A tracker name, or 'none' (default: tensorboard where installed)."},
    )
    predict_with_generate: bool = True  # validation BLEU from generate()
    remove_unused_columns: bool = False  # the run's batches hold exactly the model's inputs

    def __post_init__(self):
        if self.vocab_size is None and not self.init_from:
            self.vocab_size = DEFAULT_VOCAB_SIZE
        if self.init_from and self.tokenizer_path:
            raise ValueError(
                "Set `init_from` (the run keeps that model's tokenizer) or `tokenizer_path`, not both."
            )
        for name in (
            "max_tokens",
            "vocab_size",
            "max_source_length",
            "max_target_length",
            "eval_bleu_samples",
            "gradient_accumulation_steps",
            "max_steps",
            "warmup_steps",
            "eval_steps",
            "save_steps",
            "logging_steps",
            "average_last",
            "num_beams",
        ):
            if getattr(self, name) is not None and getattr(self, name) < 1:  # vocab_size: None with init_from
                raise ValueError(f"`{name}` must be at least 1, got {getattr(self, name)}.")
        if not 0.0 <= self.lr_cooldown < 1.0:
            raise ValueError(f"`lr_cooldown` is a fraction of the budget in [0, 1), got {self.lr_cooldown}.")
        if self.save_total_limit is not None and self.average_last > self.save_total_limit:
            raise ValueError(
                f"`average_last` ({self.average_last}) cannot exceed `save_total_limit` ({self.save_total_limit}): "
                "older checkpoints are deleted."
            )
        if self.tokens_per_update and self.gradient_accumulation_steps != 1:
            raise ValueError(
                "Set `tokens_per_update` (batches per update from the token count) or "
                "`gradient_accumulation_steps`, not both."
            )
        if self.dataset in ("json", "csv", "parquet", "text") and not self.train_file:
            raise ValueError(
                f"`dataset: {self.dataset}` needs `train_file` (and usually `validation_file`, `test_file`)."
            )
        if self.tokens_per_update is not None and self.tokens_per_update < 1:
            raise ValueError(f"`tokens_per_update` must be at least 1, got {self.tokens_per_update}.")
        if self.max_epochs is not None and self.max_epochs < 1:
            raise ValueError(f"`max_epochs` must be at least 1, got {self.max_epochs}.")
        if self.save_total_limit is not None and self.save_total_limit < 1:
            raise ValueError(
                f"`save_total_limit` must be at least 1 (or null: keep all), got {self.save_total_limit}."
            )
        check_model_block(self.model, SET_BY_RUN)
        super().__post_init__()  # TranslationData's; RunArguments: resume, overwrite, budgets, the precision; the Trainer's


# What a resumed run must share with its checkpoint: what an update is. The model and the data it sees, the
# tokens of an update (batch x accumulation x processes), the precision and the schedule (a different one
# would not continue the run but crash in load_state_dict, or silently train another way). Budgets
# (max_steps, max_epochs, run_minutes, session_minutes), logging, evaluation and saving may change.
SETTINGS_OF_A_RUN = (
    "init_from",
    "model",
    "dataset",
    "dataset_config",
    "train_file",
    "source_column",
    "target_column",
    "source_lang",
    "target_lang",
    "synthetic_train_size",
    "max_source_length",
    "max_target_length",
    "vocab_size",
    "tokenizer_path",
    "max_tokens",
    "tokens_per_update",
    "gradient_accumulation_steps",
    "world_size",
    "mixed_precision",
    "warmup_steps",
    "lr_scale",
    "lr_cooldown",
    "adam_beta1",
    "adam_beta2",
    "adam_epsilon",
    "max_grad_norm",
    "seed",
)
BUDGETS = ("max_steps", "max_epochs", "run_minutes")


def run_settings(args: TranslationTrainingArguments) -> dict:
    """The settings of ``SETTINGS_OF_A_RUN``, as a checkpoint records them (``mixed_precision``: what it
    resolved to, bf16 or no; ``gradient_accumulation_steps``: the batches an update takes)."""
    return {name: getattr(args, name) for name in SETTINGS_OF_A_RUN}


def run_budgets(args: TranslationTrainingArguments) -> dict:
    return {name: getattr(args, name) for name in BUDGETS}


def load_arguments(recipe: str | None = None, overrides: dict | None = None) -> TranslationTrainingArguments:
    """Read a YAML recipe (none: the built-in synthetic job), apply ``overrides`` (``model.d_model``-style
    keys edit the model block: the built-in one, or with ``init_from`` an empty one); an unknown key is an
    error naming the key and the file, as is a trainer setting the run decides itself."""
    from ...recipes import read_recipe, source_name
    from ..common.init_from import recipe_values
    from ..common.recipes import parse_settings

    from_file = read_recipe(recipe) if recipe else {}
    for key, why in SET_BY_TRANSLATION.items():
        if key in {**from_file, **(overrides or {})}:
            raise ValueError(
                f"{source_name(recipe, overrides)}: `{key}` is not a translation setting: {why}."
            )
    values = recipe_values(from_file, overrides, dict(SYNTHETIC_MODEL))
    (args,) = parse_settings(values, (TranslationTrainingArguments,), recipe, from_file, overrides)
    return args


__all__ = [
    "TranslationTrainingArguments",
    "load_arguments",
    "SYNTHETIC_MODEL",
    "SETTINGS_OF_A_RUN",
    "run_settings",
    "run_budgets",
]
