"""Loading a saved model folder into the class it was saved from, after checking that it holds one.

Not remote code: this module belongs to the installed package (the CLI, the Hub upload, the attention maps
and the benchmarks use it), so the model file stays free of package imports.

Every command that loads a model (``translate``, ``evaluate``, ``attention``, ``average``, ``classify
evaluate``, ``export-onnx``, ``export-ct2``, ``push``, ``demo``) goes through :func:`check_model_folder`
before ``from_pretrained`` reads anything: a missing folder, a folder of another architecture (BERT,
Marian), missing or damaged weights, or a tokenizer with more tokens than the model's ``vocab_size`` is one
error that names the file or field, a ``ValueError`` or ``FileNotFoundError`` that the CLI prints as one
line. :func:`load_saved_model` then refuses weights that leave a tensor unloaded or differ in shape from the
config (a flipped bit in a tensor's name, an edited config.json), instead of filling in random values.
"""

from __future__ import annotations

import json
from pathlib import Path

from safetensors import SafetensorError, safe_open

from . import modeling_vanilla_transformer
from .configuration_vanilla_transformer import VanillaTransformerConfig
from .model_tasks import MODEL_TASKS
from .modeling_vanilla_transformer import VanillaTransformerModel, VanillaTransformerPreTrainedModel

# {class name: class}, for every class of the one table of tasks.
MODEL_CLASSES = {name: getattr(modeling_vanilla_transformer, name) for name in MODEL_TASKS}
WEIGHTS, WEIGHTS_INDEX = "model.safetensors", "model.safetensors.index.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
SAVE_HINT = "Pass a folder that save_pretrained or a training run wrote (the run's model/ folder)."


def load_saved_model(
    folder, model_class=None, *, allow_hub_id: bool = False, **kwargs
) -> VanillaTransformerPreTrainedModel:
    """Load a saved folder into ``model_class``, by default the class it was saved from
    (``config.architectures``; the bare ``VanillaTransformerModel`` when that names none of ours).
    ``kwargs`` go to ``from_pretrained``.

    The folder is checked first (:func:`check_model_folder`); with ``allow_hub_id`` (the demo), a Hub id
    (``USER/NAME`` that names no local path) goes to ``from_pretrained`` unchecked instead. Weights that
    leave a tensor of the model unloaded (a bit flipped in a tensor's name, another model's file) or that
    differ in shape from what ``config.json`` describes raise a ``ValueError`` naming the file, instead of
    loading random values with a warning.
    """
    config = None if allow_hub_id and is_hub_id(folder) else check_model_folder(folder)
    if model_class is None:
        config = config or VanillaTransformerConfig.from_pretrained(folder)
        names = [name for name in (config.architectures or []) if name in MODEL_CLASSES]
        model_class = MODEL_CLASSES[names[0]] if names else VanillaTransformerModel
    strict = not kwargs.pop("ignore_mismatched_sizes", False)
    model, info = model_class.from_pretrained(
        folder, output_loading_info=True, ignore_mismatched_sizes=True, **kwargs
    )
    _check_loaded(folder, model, info, strict)
    return model


def _check_loaded(folder, model, info: dict, strict: bool) -> None:
    """Refuse a model that ``from_pretrained`` filled in part: tensors the weights lack (random values) or
    hold in another shape than the config describes."""
    weights = Path(folder) / (WEIGHTS_INDEX if (Path(folder) / WEIGHTS_INDEX).is_file() else WEIGHTS)
    missing, unexpected = sorted(info["missing_keys"]), sorted(info["unexpected_keys"])
    if missing:
        extra = f" and holds {len(unexpected)} it has not ({_few(unexpected)})" if unexpected else ""
        raise ValueError(
            f"{weights} lacks {len(missing)} tensor(s) of the {type(model).__name__} that "
            f"config.json describes ({_few(missing)}){extra}: the file is damaged or holds another model. "
            "Copy or save the model again."
        )
    mismatched = sorted(info["mismatched_keys"]) if strict else []
    if mismatched:
        name, saved, expected = mismatched[0]
        raise ValueError(
            f"{weights} does not fit config.json: {name} is {list(saved)} in the file but "
            f"{list(expected)} in the model the config describes"
            + (f" ({len(mismatched) - 1} more tensors differ)" if len(mismatched) > 1 else "")
            + ". Restore the config.json the weights were saved with, or save the model again."
        )


def _few(names: list[str]) -> str:
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


def is_hub_id(name) -> bool:
    """``USER/NAME`` that names no local path: ``from_pretrained`` downloads it from the Hub."""
    text = str(name)
    return (
        text.count("/") == 1 and not text.startswith(("/", ".", "~")) and not Path(text).expanduser().exists()
    )


def check_model_folder(folder) -> VanillaTransformerConfig:
    """Check a saved folder before anything loads it; returns its config.

    Raises ``FileNotFoundError`` when the folder, its ``config.json`` or its weights (``model.safetensors``,
    or the shards ``model.safetensors.index.json`` lists) are missing, and ``ValueError`` when
    ``config.json`` is not a vanilla-transformer model's (``model_type`` ``bert``, ``marian``, ...), a
    weights file cannot be read (:func:`check_weights`) or the folder's tokenizer has more tokens than the
    model's ``vocab_size`` (:func:`check_tokenizer_fits`). Each message names the file or field.
    """
    folder = Path(folder).expanduser()
    if not folder.exists():
        raise FileNotFoundError(f"No such model folder: {folder} (no config.json to read). {SAVE_HINT}")
    if not folder.is_dir():
        raise NotADirectoryError(f"{folder} is a file, not a model folder. {SAVE_HINT}")
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"{folder} has no config.json: it is not a saved model folder. {SAVE_HINT}")
    try:
        model_type = json.loads(config_file.read_text(encoding="utf-8")).get("model_type")
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as error:
        raise ValueError(
            f"{config_file} is not a JSON object ({error}). Copy or save the model again."
        ) from error
    expected = VanillaTransformerConfig.model_type
    if model_type != expected:
        found = f"model_type {model_type!r}" if model_type else "no model_type"
        raise ValueError(
            f"{folder} is not a vanilla-transformer model folder: its config.json has {found}, not "
            f"{expected!r}. This command reads models saved by this package; load other models with their "
            "own transformers classes."
        )
    _check_weight_files(folder)
    check_weights(folder)
    config = VanillaTransformerConfig.from_pretrained(folder)
    if any((folder / name).is_file() for name in TOKENIZER_FILES):
        check_tokenizer_fits(_load_tokenizer(folder), config, folder)
    return config


def _check_weight_files(folder: Path) -> None:
    """The weights exist: ``model.safetensors``, or each shard that ``model.safetensors.index.json`` lists."""
    index = folder / WEIGHTS_INDEX
    if (folder / WEIGHTS).is_file() or not index.is_file():
        if not (folder / WEIGHTS).is_file():
            raise FileNotFoundError(
                f"{folder} has no {WEIGHTS} (the model's weights; nor a sharded {WEIGHTS_INDEX}). Copy the "
                "whole folder again, or save the model into it with save_pretrained."
            )
        return
    try:
        shards = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"{index} cannot be read ({error!r}). Copy or save the model again.") from error
    missing = sorted(name for name in shards if not (folder / name).is_file())
    if missing:
        raise FileNotFoundError(
            f"{folder} lacks {', '.join(missing)}, which {WEIGHTS_INDEX} lists. Copy the whole folder again."
        )


def check_weights(folder) -> None:
    """Raise a ``ValueError`` naming each ``*.safetensors`` file of ``folder`` that cannot be read (cut short
    by a full disk or an interrupted copy, a flipped bit or bad JSON in its header), instead of safetensors'
    bare "incomplete metadata"."""
    for path in sorted(Path(folder).glob("*.safetensors")):
        try:
            with safe_open(str(path), framework="pt") as weights:
                for name in weights.keys():
                    weights.get_slice(name)
        except SafetensorError as error:
            raise ValueError(
                f"{path} is damaged and cannot be read ({error}). Copy or save the model again (a training "
                "run's checkpoints/ hold earlier complete copies)."
            ) from error


def check_tokenizer_fits(tokenizer, config, folder) -> None:
    """Raise a ``ValueError`` when ``tokenizer`` has more tokens than ``config.vocab_size``: its highest ids
    would have no embedding row (an error, or nonsense, only when such a token first appears)."""
    if len(tokenizer) > config.vocab_size:
        raise ValueError(
            f"The tokenizer of {folder} has {len(tokenizer)} tokens but its config.json has "
            f"vocab_size={config.vocab_size}: ids from {config.vocab_size} on have no embedding. Put the "
            "tokenizer the model was trained with into the folder."
        )


def _load_tokenizer(folder: Path):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(folder)
    except Exception as error:  # tokenizers raises bare Exceptions for a damaged tokenizer.json
        reason = " ".join(str(error).split())  # one line
        raise ValueError(
            f"The tokenizer of {folder} ({', '.join(TOKENIZER_FILES)}) cannot be read ({reason}). Save the "
            "tokenizer into the folder again."
        ) from error


__all__ = [
    "load_saved_model",
    "check_model_folder",
    "check_weights",
    "check_tokenizer_fits",
    "is_hub_id",
    "MODEL_CLASSES",
]
