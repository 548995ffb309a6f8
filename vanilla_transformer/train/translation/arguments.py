"""The settings of a translation training run: one dataclass, read from a YAML recipe and the command line
by ``HfArgumentParser`` (``train/common/recipes.py``); the model's settings are its ``model:`` block.

Defaults are the built-in main job: a small Transformer trained on the synthetic English -> German
task in a few minutes on two CPU cores. The paper's recipe values (Adam betas, epsilon, Eq. 3) are the
defaults of the fields that carry them; label smoothing (§5.4) is the model config's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ...modeling_vanilla_transformer import PAPER_LENGTH_PENALTY, PAPER_NUM_BEAMS
from ...precision import check_mixed_precision
from ..common.recipes import SET_BY_RUN, check_model_block, default_tracker, parse_recipe

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


@dataclass
class TranslationTrainingArguments:
    # -- data ---------------------------------------------------------------------------------------
    dataset: str = field(
        default="synthetic",
        metadata={"help": "'synthetic' (built in), 'json' or 'text' (local files), or a Hub data set id."},
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Hub data set configuration name."})
    data_dir: str | None = field(
        default=None,
        metadata={"help": "Folder that relative data files are read from (default: $VT_DATA_DIR)."},
    )
    train_file: str | None = field(
        default=None,
        metadata={
            "help": "The training split: a JSON Lines file (dataset: json, optionally .gz), or the common "
            "prefix of two parallel text files <prefix>.<source_lang> and <prefix>.<target_lang> (dataset: text)."
        },
    )
    validation_file: str | None = field(
        default=None, metadata={"help": "The validation split, as train_file names it."}
    )
    test_file: str | None = field(default=None, metadata={"help": "The test split, as train_file names it."})
    source_column: str | None = field(
        default=None,
        metadata={
            "help": "The column of source sentences where the rows are flat (default: the one named "
            "source_lang, as in bentrevett/multi30k); rows with a `translation` dict need none."
        },
    )
    target_column: str | None = field(
        default=None,
        metadata={"help": "The column of target sentences (default: the one named target_lang)."},
    )
    tokenized_test_references: str | None = field(
        default=None,
        metadata={"help": "Official lowercased tokenized references of the test split (Multi30k tok/)."},
    )
    source_lang: str = "en"
    target_lang: str = "de"
    synthetic_train_size: int = 20000
    synthetic_eval_size: int = 500
    max_source_length: int = 128
    max_target_length: int = 128
    # -- tokenizer (§5.1: one shared BPE vocabulary) ------------------------------------------------
    vocab_size: int = 1000
    tokenizer_path: str | None = field(
        default=None, metadata={"help": "Reuse a saved tokenizer instead of training one."}
    )
    # -- model ---------------------------------------------------------------------------------------------
    model: dict[str, Any] = field(
        default_factory=lambda: dict(SYNTHETIC_MODEL),
        metadata={
            "help": "VanillaTransformerConfig fields, with an optional `preset` (base | big, Table 3) under them."
        },
    )
    # -- optimisation (§5.3) -------------------------------------------------------------------------
    max_tokens: int = 4096
    tokens_per_update: int | None = field(
        default=None,
        metadata={"help": "Accumulate gradients until about this many target tokens (default: one batch)."},
    )
    gradient_accumulation_steps: int | None = field(
        default=None,
        metadata={"help": "Batches per process per update (default: from tokens_per_update, else 1)."},
    )
    max_steps: int = 800
    max_epochs: int | None = None
    run_minutes: float | None = field(
        default=None,
        metadata={
            "help": "The run's wall-clock budget over all its invocations: it stops cleanly there (and "
            "lr_cooldown ends there)."
        },
    )
    session_minutes: float | None = field(
        default=None,
        metadata={
            "help": "Stop this invocation after this many minutes, with a checkpoint; the same command "
            "with resume=true continues the run."
        },
    )
    warmup_steps: int = 400
    lr_scale: float = 1.0
    lr_cooldown: float = field(
        default=0.0,
        metadata={
            "help": "Departure from Eq. 3 (0: none). The last fraction of the run's budget (run_minutes, "
            "else max_steps) over which the rate of Eq. 3 falls linearly to zero, e.g. 0.2."
        },
    )
    adam_beta1: float = 0.9
    adam_beta2: float = 0.98
    adam_epsilon: float = 1e-9
    max_grad_norm: float | None = 1.0
    mixed_precision: str = field(
        default="auto",
        metadata={"help": "auto (bf16 where the hardware multiplies it natively, else fp32) | no | bf16."},
    )
    seed: int = 0
    # -- evaluation (§6.1) ---------------------------------------------------------------------------
    eval_every: int = 200
    eval_bleu_samples: int = 200
    num_beams: int = PAPER_NUM_BEAMS
    length_penalty: float = PAPER_LENGTH_PENALTY
    eval_batch_size: int = 100
    # -- checkpoints and logging -----------------------------------------------------------------------
    output_dir: str = "runs/synthetic-en-de"
    save_every: int = 200
    keep_last: int = 5
    average_last: int = field(
        default=1,
        metadata={"help": "§6.1: the final model averages the last N checkpoints (1: the last weights)."},
    )
    resume: bool = False
    log_every: int = 50
    report_to: str = field(
        default_factory=default_tracker,
        metadata={"help": "An Accelerate tracker name, or 'none' (default: tensorboard where installed)."},
    )

    def __post_init__(self):
        if self.max_tokens < 1:
            raise ValueError(f"`max_tokens` must be positive, got {self.max_tokens}.")
        for name in (
            "max_steps",
            "warmup_steps",
            "eval_every",
            "save_every",
            "keep_last",
            "log_every",
            "average_last",
            "num_beams",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be at least 1, got {getattr(self, name)}.")
        if not 0.0 <= self.lr_cooldown < 1.0:
            raise ValueError(f"`lr_cooldown` is a fraction of the budget in [0, 1), got {self.lr_cooldown}.")
        if self.average_last > self.keep_last:
            raise ValueError(
                f"`average_last` ({self.average_last}) cannot exceed `keep_last` ({self.keep_last}): "
                "older checkpoints are deleted."
            )
        if self.dataset in ("json", "text") and not self.train_file:
            raise ValueError(
                f"`dataset: {self.dataset}` needs `train_file` (and usually `validation_file`, `test_file`)."
            )
        check_mixed_precision(self.mixed_precision)
        check_model_block(self.model, SET_BY_RUN)

    def to_dict(self) -> dict:
        return asdict(self)


def load_arguments(recipe: str | None = None, overrides: dict | None = None) -> TranslationTrainingArguments:
    """Read a YAML recipe (none: the built-in synthetic job), apply ``overrides`` (``model.d_model``-style
    keys edit the model block); an unknown key is an error naming the key and the file."""
    (args,) = parse_recipe((TranslationTrainingArguments,), recipe, overrides)
    return args


__all__ = ["TranslationTrainingArguments", "load_arguments", "SYNTHETIC_MODEL"]
