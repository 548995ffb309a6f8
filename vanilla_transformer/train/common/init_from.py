"""``init_from``: a run that starts from a trained model instead of random weights (fine-tuning), the same
way in both tasks.

The run takes three things from the model it starts from (the *parent*: a saved folder or a Hub id):

* its weights (``from_pretrained``, in fp32; a classifier whose labels differ gets a new head);
* its tokenizer: no BPE vocabulary is trained; the run's folders carry the parent's (the same vocabulary,
  merges, normalisation and special tokens; a saved ``tokenizer.json`` also records the truncation and
  padding of the tokenizer's last call, which training may have changed);
* its architecture: the recipe's ``model:`` block holds only the fields it sets. Each must repeat the
  parent's value, except the regularisation fields (``REGULARISATION_FIELDS``: dropout and label smoothing),
  which fine-tuning on little data often needs to change; every other field comes from the parent.
  ``vocab_size``, where the recipe sets it, must be the parent's, and so must translation's languages.
  A disagreement is refused before the run folder is touched, naming each field with both values.

A resumed run continues from its own checkpoint and reads nothing of the parent: the parent was checked
when the run started, and resume refuses settings (``init_from`` among them) that differ from the
checkpoint's."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoTokenizer

from ...configuration_vanilla_transformer import PRESETS, VanillaTransformerConfig
from ...loading import check_model_folder, is_hub_id
from ...recipes import MODEL_BLOCK, apply_overrides
from .checkpoints import checkpoint_dirs
from .recipes import PRESET_KEY

# Config fields a fine-tuning recipe may set to other values than the parent's: they regularise training
# and leave every weight's shape and meaning as it was.
REGULARISATION_FIELDS = (
    "dropout",
    "attention_dropout",
    "activation_dropout",
    "classifier_dropout",
    "label_smoothing",
)


def recipe_values(from_file: dict, overrides: dict | None, built_in_model: dict) -> dict:
    """A recipe's settings with ``--set`` applied (``recipes.apply_overrides``). A run that starts from a
    model has no built-in ``model:`` block: its block holds only the fields the recipe and ``--set`` give
    (``model.<field>`` edits start from an empty block), so that every other field is the parent's."""
    starts_from_model = {**from_file, **(overrides or {})}.get("init_from")
    values = apply_overrides(from_file, overrides, {} if starts_from_model else built_in_model)
    if starts_from_model:
        values.setdefault(MODEL_BLOCK, {})
    return values


def continues_from_checkpoint(resume: str, checkpoints: Path) -> bool:
    """A run that will continue from a checkpoint of its own (``resume`` true or auto, with checkpoints under
    ``checkpoints``): it needs nothing of its parent."""
    return resume != "false" and bool(checkpoint_dirs(checkpoints))


def parent_config(init_from: str) -> VanillaTransformerConfig:
    """The parent's config. A local folder is checked first (``loading.check_model_folder``: a
    vanilla-transformer model whose weights load and whose tokenizer is its own) and must hold a tokenizer;
    a Hub id (``USER/NAME`` naming no local path) is read by ``from_pretrained``, which downloads it."""
    if not is_hub_id(init_from):
        config = check_model_folder(init_from)
        if not (Path(init_from).expanduser() / "tokenizer.json").is_file():
            raise FileNotFoundError(
                f"`init_from`: {init_from} holds no tokenizer.json. A run that starts from a model keeps its "
                "tokenizer: save the tokenizer the model was trained with into the folder."
            )
        return config
    try:
        config_dict, _ = VanillaTransformerConfig.get_config_dict(init_from)
    except OSError as error:
        raise FileNotFoundError(
            f"`init_from`: {init_from} is neither a local folder nor a model the Hub serves ({error})."
        ) from error
    if config_dict.get("model_type") != VanillaTransformerConfig.model_type:
        raise ValueError(
            f"`init_from`: {init_from} is not a vanilla-transformer model (model_type "
            f"{config_dict.get('model_type')!r}); a run starts only from a model of this package."
        )
    return VanillaTransformerConfig.from_pretrained(init_from)


def check_recipe_agrees(
    init_from: str,
    parent: VanillaTransformerConfig,
    block: dict,
    run_values: dict | None = None,
    where: str = "the recipe",
) -> None:
    """Refuse a recipe that describes another model than its parent: each field of the ``model:`` block
    (a ``preset`` stands for its fields), other than ``REGULARISATION_FIELDS``, must equal the parent's,
    as must ``run_values`` (settings outside the block that the run writes into the config, e.g.
    ``vocab_size``; None: not set). One ``ValueError`` names every disagreeing field with both values."""
    fields = {**PRESETS.get(block.get(PRESET_KEY), {}), **{k: v for k, v in block.items() if k != PRESET_KEY}}
    # The block's fields as the config reads them (d_k: None means d_model / num_heads): built on the
    # parent's values, so a field equal to the parent's compares equal however it is written.
    recipe = VanillaTransformerConfig.from_dict({**parent.to_dict(), **fields})
    differences = [
        f"model.{name}: {getattr(recipe, name)!r} ({where}) vs {getattr(parent, name)!r} ({init_from})"
        for name in fields
        if name not in REGULARISATION_FIELDS and getattr(recipe, name) != getattr(parent, name)
    ]
    differences += [
        f"{name}: {value!r} ({where}) vs {getattr(parent, name)!r} ({init_from})"
        for name, value in (run_values or {}).items()
        if value is not None and getattr(parent, name, None) is not None and value != getattr(parent, name)
    ]
    if differences:
        raise ValueError(
            f"`init_from`: the recipe describes another model than {init_from}, whose weights and tokenizer the "
            f"run starts from: {'; '.join(differences)}. Set them to the model's values (a `model:` field or "
            f"`vocab_size` may also be left out: it then comes from the model); only "
            f"{', '.join(REGULARISATION_FIELDS)} may change."
        )


def regularisation(block: dict) -> dict:
    """The regularisation fields a fine-tuning recipe sets (``REGULARISATION_FIELDS``), for the config."""
    fields = {**PRESETS.get(block.get(PRESET_KEY), {}), **block}
    return {name: fields[name] for name in REGULARISATION_FIELDS if name in fields}


def load_parent_tokenizer(source: str | Path):
    """The tokenizer saved with a model (a folder or a Hub id). Only the package's own files are read:
    a folder's remote code never runs (``trust_remote_code=False``)."""
    return AutoTokenizer.from_pretrained(str(source), trust_remote_code=False)


def parent_tokenizer(init_from: str, save_to: Path):
    """The run's copy of its parent's tokenizer: read from ``save_to`` where the run saved it (a continued
    run), else the parent's, saved to ``save_to`` (a tokenizer loaded and saved again writes the same
    ``tokenizer.json``)."""
    if (save_to / "tokenizer.json").is_file():
        return load_parent_tokenizer(save_to)
    tokenizer = load_parent_tokenizer(init_from)
    tokenizer.save_pretrained(save_to)
    return tokenizer


def load_parent_weights(model_class, init_from: str, allowed_missing: tuple[str, ...] = (), **config_values):
    """``model_class.from_pretrained(init_from)`` in fp32 with ``config_values`` set in its config; a tensor
    the parent lacks (other than ``allowed_missing``, e.g. a new classifier head) is refused, naming it,
    rather than trained from random values. Returns the model and the tensors that start anew."""
    model, info = model_class.from_pretrained(
        init_from,
        dtype=torch.float32,  # the weights train in fp32 whatever the parent was saved in
        output_loading_info=True,
        ignore_mismatched_sizes=bool(allowed_missing),  # a head of another number of labels starts anew
        **config_values,
    )
    mismatched = [name for name, *_ in info.get("mismatched_keys", [])]
    fresh = sorted(set(info.get("missing_keys", [])) | set(mismatched))
    lacking = [name for name in fresh if name not in allowed_missing]
    if lacking:
        shown = ", ".join(lacking[:4]) + (", ..." if len(lacking) > 4 else "")
        raise ValueError(
            f"`init_from`: {init_from} ({', '.join(model.config.architectures or ['?'])}) lacks weights a "
            f"{model_class.__name__} needs ({len(lacking)}: {shown}): start from a model of this task."
        )
    return model, fresh


__all__ = [
    "REGULARISATION_FIELDS",
    "recipe_values",
    "continues_from_checkpoint",
    "parent_config",
    "check_recipe_agrees",
    "regularisation",
    "load_parent_tokenizer",
    "parent_tokenizer",
    "load_parent_weights",
]
