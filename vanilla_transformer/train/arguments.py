"""The settings of a translation training run: one dataclass, read from a YAML recipe and the command line.

Defaults are the built-in main job: a small Transformer trained on the synthetic English -> German
task in a few minutes on two CPU cores. The paper's recipe values (Adam betas, epsilon, Eq. 3,
label smoothing) are the defaults of the fields that carry them.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import yaml


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
    train_file: str | None = field(default=None, metadata={"help": "JSON Lines file of the training split."})
    validation_file: str | None = field(
        default=None, metadata={"help": "JSON Lines file of the validation split."}
    )
    test_file: str | None = field(default=None, metadata={"help": "JSON Lines file of the test split."})
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
    # -- model (VanillaTransformerConfig fields; preset first, then these overrides) -----------------
    preset: str | None = field(
        default=None, metadata={"help": "'base' or 'big' (Table 3); other fields override it."}
    )
    d_model: int | None = 128
    d_ff: int | None = 512
    num_heads: int | None = 4
    num_encoder_layers: int | None = 3
    num_decoder_layers: int | None = 3
    dropout: float | None = 0.1
    attention_dropout: float | None = None
    activation_dropout: float | None = None
    label_smoothing: float | None = 0.1
    norm_position: str | None = None
    position_encoding: str | None = None
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
    max_minutes: float | None = field(
        default=None, metadata={"help": "Stop cleanly after this wall-clock budget."}
    )
    warmup_steps: int = 400
    lr_scale: float = 1.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.98
    adam_epsilon: float = 1e-9
    max_grad_norm: float | None = 1.0
    mixed_precision: str = "no"
    seed: int = 0
    # -- evaluation (§6.1) ---------------------------------------------------------------------------
    eval_every: int = 200
    eval_bleu_samples: int = 200
    num_beams: int = 4
    length_penalty: float = 0.6
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
    report_to: str = field(default="tensorboard", metadata={"help": "An Accelerate tracker name, or 'none'."})

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
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be at least 1, got {getattr(self, name)}.")
        if self.average_last > self.keep_last:
            raise ValueError(
                f"`average_last` ({self.average_last}) cannot exceed `keep_last` ({self.keep_last}): "
                "older checkpoints are deleted."
            )
        if self.dataset == "json" and not self.train_file:
            raise ValueError(
                "`dataset: json` needs `train_file` (and usually `validation_file`, `test_file`)."
            )

    def model_overrides(self) -> dict:
        """The VanillaTransformerConfig fields this run sets (None = keep the preset's / default value)."""
        names = (
            "d_model d_ff num_heads num_encoder_layers num_decoder_layers dropout attention_dropout "
            "activation_dropout label_smoothing norm_position position_encoding"
        ).split()
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}

    def resolve(self, name: str) -> str | None:
        """A data file's path: absolute, or relative to ``data_dir`` / ``$VT_DATA_DIR`` when set."""
        from .data import data_dir

        value = getattr(self, name)
        if value is None:
            return None
        root = data_dir(self.data_dir)
        return str(root / value) if root is not None and not Path(value).is_absolute() else value

    def to_dict(self) -> dict:
        return asdict(self)


class _RecipeLoader(yaml.SafeLoader):
    """YAML 1.2 scalars: only true/false are booleans (``eval_strategy: no`` stays the string "no") and
    ``3e-4`` is a float, not a string."""


_RecipeLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_RecipeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


_RecipeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def parse_yaml(text: str):
    """Parse a recipe or a ``--set`` value."""
    return yaml.load(text, Loader=_RecipeLoader)


def load_arguments(recipe: str | None = None, overrides: dict | None = None) -> TranslationTrainingArguments:
    """Read a YAML recipe, apply ``overrides``; an unknown key is an error naming the key and the file."""
    values: dict = {}
    if recipe is not None:
        path = Path(recipe)
        if not path.is_file():
            raise FileNotFoundError(f"No such recipe file: {path}")
        values = parse_yaml(path.read_text(encoding="utf-8")) or {}
        if not isinstance(values, dict):
            raise ValueError(f"{path}: a recipe must be a mapping of setting: value.")
    values.update(overrides or {})
    known = {f.name for f in fields(TranslationTrainingArguments)}
    unknown = sorted(set(values) - known)
    if unknown:
        where = f" in {recipe}" if recipe else ""
        raise ValueError(
            f"Unknown setting(s){where}: {', '.join(unknown)}. Known settings: {', '.join(sorted(known))}."
        )
    return TranslationTrainingArguments(**values)


__all__ = ["TranslationTrainingArguments", "load_arguments", "parse_yaml"]
