"""Recipes, parsed into a run's argument dataclasses by ``HfArgumentParser``. Finding and reading the YAML
files and ``--set`` overrides is ``vanilla_transformer/recipes/``'s (shared with the serving commands, which
read only a recipe's data settings); what a setting means to a run is here.

One way for both tasks (translation: ``TranslationTrainingArguments``; classification:
``ClassificationArguments`` and ``transformers.TrainingArguments`` side by side):

* A recipe is a mapping of ``setting: value``. A key that no dataclass of the run knows is refused,
  with the file, the key and the known settings named.
* The model's settings live only in its ``model:`` block: ``VanillaTransformerConfig`` fields, with an
  optional ``preset: base | big`` (Table 3) underneath them. A recipe's block replaces the built-in
  one; an unknown field, or one the run derives itself (vocabulary size, special tokens), is refused.
* ``--set key=value`` overrides a setting; ``--set model.d_model=64`` edits one field of the model
  block; ``--set 'model={preset: base}'`` replaces the whole block.
* YAML 1.2 scalars: only true/false are booleans (``eval_strategy: no`` stays the string "no") and
  ``3e-4`` is a float, not a string.

Example (a translation recipe)::

    dataset: json
    train_file: multi30k/train.jsonl.gz
    mixed_precision: auto
    model:
      d_model: 256
      d_ff: 1024
      num_heads: 4
      num_encoder_layers: 3
      num_decoder_layers: 3
      dropout: 0.2
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from transformers import HfArgumentParser

from ...configuration_vanilla_transformer import VanillaTransformerConfig
from ...recipes import MODEL_BLOCK, field_types, source_name, type_problem, unknown_key_hint

PRESET_KEY = "preset"


def default_tracker() -> str:
    """TensorBoard where it is installed (``pip install "vanilla-transformer[tensorboard]"``), else no
    tracker: the logs a run writes itself (``train_log.jsonl``, ``trainer_state.json``) need none."""
    import importlib.util

    return "tensorboard" if importlib.util.find_spec("tensorboard") is not None else "none"


def parse_settings(
    values: dict,
    dataclass_types: tuple,
    recipe: str | None = None,
    from_file: Mapping | None = None,
    overrides: Mapping | None = None,
) -> tuple:
    """``values`` into one instance of each of ``dataclass_types`` (``HfArgumentParser.parse_dict``).

    An unknown key is refused with the recipe file (or ``--set``) named; an error raised while building
    the dataclasses (a bad value, an unknown model field) is prefixed with where the settings came from."""
    known = {f.name for cls in dataclass_types for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(values) - known)
    if unknown:
        in_file = [key for key in unknown if key in (from_file or {})]
        named = "; ".join(
            f"{key} ({unknown_key_hint(key, known, CONFIG_FIELDS)})" for key in in_file or unknown
        )
        raise ValueError(f"Unknown setting(s) in {recipe if in_file else '--set'}: {named}.")
    from .arguments import FLAG_OR_WORD  # resume / overwrite: true | false | a word, one type for the parser

    values = {
        key: ("true" if value else "false") if key in FLAG_OR_WORD and isinstance(value, bool) else value
        for key, value in values.items()
    }
    annotations = field_types(dataclass_types)
    for key, value in values.items():
        problem = type_problem(value, annotations.get(key))
        if problem:
            where = recipe if key in (from_file or {}) and key not in (overrides or {}) else "--set"
            raise ValueError(f"{where}: `{key}` {problem}, got {value!r}.")
    try:
        return HfArgumentParser(dataclass_types).parse_dict(values, allow_extra_keys=False)
    except ValueError as error:
        raise ValueError(f"{source_name(recipe, overrides)}: {error}") from error


def default_model_block(dataclass_types: tuple) -> dict:
    """The built-in ``model:`` block: the default of the ``model`` field of the run's arguments."""
    for cls in dataclass_types:
        for f in dataclasses.fields(cls):
            if f.name == MODEL_BLOCK:
                return f.default_factory()
    return {}


# Trainer settings the run core owns, refused in a recipe of either task with what to set instead.
SET_BY_THE_CORE = {
    "enable_jit_checkpoint": "the run stops on SIGTERM, SIGINT and SIGUSR1 itself, after the update in flight "
    "and with a checkpoint; nothing needs to be set",
    "overwrite_output_dir": "set `overwrite: true` (the old run moved aside) or `overwrite: delete`",
    "resume_from_checkpoint": "set `resume: true` (the newest intact checkpoint of the run folder)",
}


# -- the model block ---------------------------------------------------------------------------------

# The config's own fields (Table 3's names; not the HF aliases, nor PretrainedConfig's generic fields).
CONFIG_FIELDS = tuple(
    f.name
    for f in dataclasses.fields(VanillaTransformerConfig)
    if f.name in VanillaTransformerConfig.__annotations__
)


# Config fields every run sets itself (from its tokenizer, its language pair, the model class it
# builds), so a recipe's ``model:`` block may not.
SET_BY_RUN = (
    "vocab_size",
    "pad_token_id",
    "bos_token_id",
    "eos_token_id",
    "decoder_start_token_id",
    "source_lang",
    "target_lang",
    "is_encoder_decoder",
    "is_decoder",
    "tokenizer_fingerprint",
)


def check_model_block(block: dict, set_by_run: Iterable[str]) -> None:
    """Refuse a key that is no ``VanillaTransformerConfig`` field, or a field the run sets itself."""
    if not isinstance(block, dict):
        raise ValueError(f"`model` must be a mapping of VanillaTransformerConfig fields, got {block!r}.")
    set_by_run = set(set_by_run)
    allowed = [PRESET_KEY] + [name for name in CONFIG_FIELDS if name not in set_by_run]
    unknown = sorted(set(block) - set(CONFIG_FIELDS) - {PRESET_KEY})
    if unknown:
        named = "; ".join(f"model.{key} ({unknown_key_hint(key, allowed)})" for key in unknown)
        raise ValueError(
            f"Unknown model setting(s): {named}. The model block takes VanillaTransformerConfig fields."
        )
    derived = sorted(set(block) & set_by_run)
    if derived:
        raise ValueError(
            f"{', '.join(f'model.{key}' for key in derived)}: set by the run itself (from the tokenizer and "
            "the data), not by the recipe."
        )
    # A bad value (e.g. norm_position: middle) fails now, before any work is done; so does a model too large
    # for the machine even before its vocabulary (which the run learns later) is counted. A run that sets
    # one stack's depth itself builds the other stack alone.
    from ...loading import check_fits_memory

    one_stack = {}
    if "num_decoder_layers" in set_by_run:  # the encoder alone (classification, pre-training)
        one_stack = {"num_decoder_layers": 0, "is_encoder_decoder": False}
    elif "num_encoder_layers" in set_by_run:  # the decoder alone (causal LM)
        one_stack = {"num_encoder_layers": 0, "is_encoder_decoder": False, "is_decoder": True}
    config = build_config(block, check_memory=False, **one_stack)
    check_fits_memory(config, training=True, vocabulary=False, prefix="model.")


def build_config(
    block: dict, defaults: dict | None = None, *, tokenizer=None, check_memory: bool = True, **run_values
) -> VanillaTransformerConfig:
    """The model's config: the block's ``preset`` (Table 3) or the config's defaults, then ``defaults``
    (values the run suggests, e.g. a position limit from the data), the block's fields, and the
    values only the run knows (vocabulary, special tokens).

    ``tokenizer``: the run's tokenizer, which gives the vocabulary size, the special tokens' ids (where
    ``run_values`` does not) and the ``tokenizer_fingerprint`` that ties every folder the model is saved
    in to it (``loading.check_model_folder``). ``check_memory``: refuse, before anything is allocated, a
    model too large to train on this machine (``loading.check_fits_memory``), naming its fields."""
    if tokenizer is not None:
        from ...tokenization import tokenizer_fingerprint

        run_values = {
            "vocab_size": len(tokenizer),
            "pad_token_id": tokenizer.pad_token_id,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "tokenizer_fingerprint": tokenizer_fingerprint(tokenizer),
            **run_values,
        }
    fields = {key: value for key, value in block.items() if key != PRESET_KEY}
    fields = {**(defaults or {}), **fields, **run_values}
    preset = block.get(PRESET_KEY)
    config = (
        VanillaTransformerConfig.from_preset(preset, **fields)
        if preset
        else VanillaTransformerConfig(**fields)
    )
    if check_memory:
        from ...loading import check_fits_memory

        check_fits_memory(config, training=True, prefix="model.")
    return config


# -- mixed precision -----------------------------------------------------------------------------------


__all__ = [
    "parse_settings",
    "check_model_block",
    "build_config",
]
