"""The settings of a classification run (``ClassificationArguments``) and how a recipe becomes them.

A recipe holds ``ClassificationArguments`` and ``transformers.TrainingArguments`` keys side by side,
and the encoder's ``VanillaTransformerConfig`` fields in its ``model:`` block (``train/common/recipes.py``).
The data's settings (files, columns, the validation split) are ``data.classification.ClassificationData``'s,
which the arguments inherit (``classify evaluate`` reads them alone).

Texts keep their language and case; only HTML line breaks (``<br />``, as in IMDB) become spaces. A
text longer than ``max_length`` is read as ``long_text`` says (by default its head and its tail: Sun et al.,
2019, the first 128 and the last tokens of a review carry most of its sentiment, so the verdict at the end
of a review survives); the reading is saved with the model (``classification_pipeline.py``). Validation
reviews are held out of the training file (``split_validation``); the test file is only scored."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from transformers import TrainingArguments

from ...classification_pipeline import LongText
from ...data.classification import ClassificationData
from ...recipes import read_recipe, source_name
from ..common.arguments import RunArguments
from ..common.init_from import recipe_values
from ..common.recipes import (
    SET_BY_RUN,
    SET_BY_THE_CORE,
    check_model_block,
    default_model_block,
    default_tracker,
    parse_settings,
)

# The built-in encoder: four post-LN layers of width 256. A recipe's ``model:`` block replaces it whole.
ENCODER_MODEL = {"d_model": 256, "d_ff": 1024, "num_heads": 4, "num_encoder_layers": 4, "dropout": 0.1}
# The BPE vocabulary's size where the recipe sets none and starts from no model.
DEFAULT_VOCAB_SIZE = 16000


# Beyond the fields every run sets: the encoder-only shape, the masked-LM head's setting and the long-text
# reading (from the recipe's max_length, head_tokens, long_text and window_stride).
PRETRAINING_OBJECTIVES = ("mlm", "electra")


SET_BY_CLASSIFICATION_RUN = (
    *SET_BY_RUN,
    "num_decoder_layers",
    "sparse_prediction",
    "classifier_long_text",
    "classifier_max_length",
    "classifier_head_tokens",
    "classifier_window_stride",
)


@dataclass
class ClassificationArguments(ClassificationData, RunArguments, TrainingArguments):
    set_by_run: ClassVar[tuple[str, ...]] = SET_BY_CLASSIFICATION_RUN  # model fields the run sets itself

    # ClassificationData's fields (dataset, files, columns, validation split, seed, ...), then training's
    max_train_examples: int | None = None
    vocab_size: int | None = field(
        default=None,
        metadata={
            "help": f"The BPE vocabulary's size, special tokens included (default {DEFAULT_VOCAB_SIZE}); with "
            "init_from the model's, which the recipe may only repeat."
        },
    )
    lowercase: bool = field(
        default=False,
        metadata={
            "help": "Train the tokenizer to lower-case every text (kept in the saved tokenizer, so evaluation "
            "and the pipeline do it too). A tokenizer that already exists (init_from, a resumed run) keeps "
            "its own normalisation."
        },
    )
    max_length: int = field(
        default=512, metadata={"help": "Tokens the classifier reads at once, </s> included."}
    )
    long_text: str = field(
        default="head_tail",
        metadata={
            "help": "How a text longer than max_length is read, in training, evaluation and the saved model's "
            "pipeline: head | head_tail (first head_tokens + last tokens) | windows (every window_stride "
            "tokens, logits averaged; training sees every window)."
        },
    )
    head_tokens: int = 128
    window_stride: int | None = field(default=None, metadata={"help": "windows: default half a window."})
    model: dict[str, Any] = field(
        default_factory=lambda: dict(ENCODER_MODEL),
        metadata={
            "help": "VanillaTransformerConfig fields of the encoder (with init_from: only those to check "
            "against the model, or the dropout-like ones to change)."
        },
    )
    objective: str = field(
        default="mlm",
        metadata={
            "help": "pretrain: mlm (BERT's masked LM) | electra (replaced-token detection, Clark et al. 2020)."
        },
    )
    mlm_probability: float = field(
        default=0.15, metadata={"help": "pretrain: the fraction of tokens masked."}
    )
    pack_length: int | None = field(
        default=None,
        metadata={
            "help": "pretrain: run the texts together (each ending in </s>) and cut them into sequences of this "
            "many tokens, without padding (default: each text as the classifier reads it)."
        },
    )
    generator_size: float = field(
        default=0.25,
        metadata={"help": "electra: the generator's width as a fraction of the discriminator's."},
    )
    discriminator_weight: float = field(
        default=50.0, metadata={"help": "electra: lambda, the weight of the discriminator's loss (Eq. 3)."}
    )
    output_dir: str = field(
        default="runs/imdb-classifier",
        metadata={
            "help": "The run folder: checkpoints in checkpoints/<stage>/ (pretrain, train), the model in model/ "
            "(pre-training: mlm/ or discriminator/), results, logs, the tokenizer."
        },
    )

    def __post_init__(self):
        self.reading()  # a bad long_text, max_length or window_stride fails now, naming the setting
        if self.objective not in PRETRAINING_OBJECTIVES:
            raise ValueError(
                f"`objective` must be one of {list(PRETRAINING_OBJECTIVES)}, got {self.objective!r}."
            )
        if not 0 < self.mlm_probability < 1:
            raise ValueError(f"`mlm_probability` must lie in (0, 1), got {self.mlm_probability!r}.")
        if self.pack_length is not None and self.pack_length < 2:
            raise ValueError(f"`pack_length` must be at least 2 tokens, got {self.pack_length!r}.")
        if not 0 < self.generator_size <= 1:
            raise ValueError(f"`generator_size` must lie in (0, 1], got {self.generator_size!r}.")
        if not self.discriminator_weight > 0:
            raise ValueError(f"`discriminator_weight` must be positive, got {self.discriminator_weight!r}.")
        for name in ("vocab_size", "max_length", "head_tokens"):
            if getattr(self, name) is not None and getattr(self, name) < 1:  # vocab_size: None with init_from
                raise ValueError(f"`{name}` must be at least 1, got {getattr(self, name)!r}.")
        if self.max_train_examples is not None and self.max_train_examples < 1:
            raise ValueError(
                f"`max_train_examples` must be at least 1 (or null: all), got {self.max_train_examples!r}."
            )
        if self.vocab_size is None and not self.init_from:
            self.vocab_size = DEFAULT_VOCAB_SIZE
        check_model_block(self.model, self.set_by_run)
        super().__post_init__()  # ClassificationData's; RunArguments: resume, overwrite, precision, budgets

    def reading(self) -> LongText:
        """How the run reads a text (``LongText``), from ``long_text``, ``max_length``, ``head_tokens``,
        ``window_stride``."""
        return LongText(self.long_text, self.max_length, self.head_tokens, self.window_stride)

    def reading_config(self) -> dict:
        """The config fields that carry the reading into the saved classifier."""
        return {
            "classifier_long_text": self.long_text,
            "classifier_max_length": self.max_length,
            "classifier_head_tokens": self.head_tokens,
            "classifier_window_stride": self.window_stride,
        }


def _run_dir_as_output_dir(values: dict, where) -> dict:
    """``run_dir`` (the run folder's name before every task's was ``output_dir``) read as ``output_dir``, with
    a notice; one source that sets both is refused. For one release."""
    if "run_dir" not in values:
        return values
    if "output_dir" in values:
        raise ValueError(f"{where}: set `output_dir` (the run folder), not both it and `run_dir`.")
    print(f"Notice: {where}: `run_dir` is now `output_dir` (read as output_dir: {values['run_dir']}).")
    values = dict(values)
    values["output_dir"] = values.pop("run_dir")
    return values


def load_classification_arguments(
    recipe: str | None, overrides: Mapping | None, stage: str, arguments: type | None = None
) -> ClassificationArguments:
    """A classification recipe and ``--set`` overrides, parsed into ``ClassificationArguments``.

    ``mixed_precision`` becomes the Trainer's ``bf16`` / ``fp16`` (so a recipe cannot set them itself); the
    Trainer reports to TensorBoard where it is installed. ``run_dir``, the run folder's name before every
    task's was ``output_dir``, is read as ``output_dir`` with a notice (for one release)."""
    types = (arguments or ClassificationArguments,)  # the causal LM's are a subclass
    from_file = _run_dir_as_output_dir(read_recipe(recipe) if recipe else {}, recipe)
    overrides = _run_dir_as_output_dir(dict(overrides or {}), "--set")
    values = recipe_values(from_file, overrides, default_model_block(types))
    where = source_name(recipe, overrides)
    if stage == "pretrain" and values.get("init_from"):
        raise ValueError(
            f"{where}: `init_from` starts `classify train` (or `train`) from a model; pre-training starts from "
            "random weights."
        )
    for key in ("bf16", "fp16"):
        if key in values:
            raise ValueError(f"{where}: set `mixed_precision` (auto | no | bf16 | fp16), not `{key}`.")
    for key, why in SET_BY_THE_CORE.items():
        if key in values:
            raise ValueError(f"{where}: `{key}` is not a classification setting: {why}.")
    values.setdefault("report_to", default_tracker())
    (args,) = parse_settings(values, types, recipe, from_file, overrides)
    return args


__all__ = ["ENCODER_MODEL", "ClassificationArguments", "load_classification_arguments"]
