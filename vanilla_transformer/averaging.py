"""§6.1: checkpoint averaging. "For the base models, we used a single model obtained by averaging the last
5 checkpoints, which were written at 10-minute intervals": ``average_checkpoints`` averages the parameters
of saved model folders (checkpoints of one run) into a new model folder: the ``average`` command, and a
training run's ``average_last`` (which of a run's checkpoints: ``train/translation/averaging.py``).
``checkpoint_dirs`` lists a run folder's complete checkpoints: ``average --last N`` reads a run with it, and
the run itself (``train/common/checkpoints.py``) writes them so that it finds only complete ones."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from .loading import check_model_folder, load_saved_model

# A run folder's checkpoints (``checkpoints/checkpoint-N``, as ``train/common/checkpoints.py`` writes them).
STEP_DIR = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")
REPLACED_DIR = re.compile(rf"^\.replaced-{PREFIX_CHECKPOINT_DIR}-(\d+)$")
STATE_FILE = TRAINER_STATE_NAME
# The settings a checkpoint's run trained with (written by ``train/common/run_trainer.py``): two checkpoints
# whose files differ come from different runs.
SETTINGS_FILE = "run_settings.json"
# Config fields that do not change what the weights compute (regularisation during training, bookkeeping).
NOT_MEANING = {
    "_name_or_path",
    "transformers_version",
    "dtype",
    "torch_dtype",
    "dropout",
    "attention_dropout",
    "activation_dropout",
    "label_smoothing",
    "use_cache",
    "output_attentions",
    "output_hidden_states",
}


def average_checkpoints(model_dirs: Sequence[str | Path], output_dir: str | Path) -> Path:
    """§6.1: average the parameters of several checkpoints of one run into a new model folder.

    The first folder supplies config, tokenizer, generation config and code; every folder must hold
    the same tensors. Every folder is checked before anything is averaged (``loading.check_model_folder``:
    config.json of this package's model, readable weights, a tokenizer that fits the vocabulary); a bad one
    is named. A folder that holds ``model/`` (a run folder) stands for it. Returns the output folder,
    loadable with ``from_pretrained``.
    """
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    if len(model_dirs) < 1:
        raise ValueError("Give at least one checkpoint to average.")
    folders = [model_folder(Path(d)) for d in model_dirs]
    model = load_saved_model(folders[0], AutoModelForSeq2SeqLM)  # checks the first folder
    for folder in folders[1:]:
        check_model_folder(folder)
        check_averageable(folders[0], folder)
    total: dict[str, torch.Tensor] | None = None
    for folder in folders:
        tensors = load_file(folder / "model.safetensors")
        if total is None:
            total = {name: tensor.to(torch.float64) for name, tensor in tensors.items()}
            dtypes = {name: tensor.dtype for name, tensor in tensors.items()}
            continue
        if tensors.keys() != total.keys():
            lacks, holds = sorted(total.keys() - tensors.keys()), sorted(tensors.keys() - total.keys())
            raise ValueError(
                f"{folder} holds different tensors than {folders[0]} (it lacks "
                f"{', '.join(lacks[:3]) or '-'}, holds {', '.join(holds[:3]) or '-'}); average checkpoints "
                "of one run."
            )
        for name, tensor in tensors.items():
            if tensor.shape != total[name].shape:
                raise ValueError(
                    f"{folder}'s {name} is {list(tensor.shape)}, {folders[0]}'s {list(total[name].shape)}; "
                    "average checkpoints of one run."
                )
            total[name] += tensor.to(torch.float64)
    averaged = {name: (value / len(folders)).to(dtypes[name]) for name, value in total.items()}
    result = model.load_state_dict(averaged, strict=False)
    tied = set(model.all_tied_weights_keys)  # stored once in the file, shared in the model
    if result.unexpected_keys or set(result.missing_keys) - tied:
        raise ValueError(
            f"Averaged tensors do not fit the model of {folders[0]}: missing "
            f"{sorted(set(result.missing_keys) - tied)}, unexpected {sorted(result.unexpected_keys)}."
        )
    output_dir = Path(output_dir)
    model.save_pretrained(output_dir)
    AutoTokenizer.from_pretrained(folders[0]).save_pretrained(output_dir)
    return output_dir


def check_averageable(first: Path, other: Path) -> None:
    """Refuse to average two folders whose weights mean different things, naming the first difference: a
    config field that changes what the model computes (the architecture, its shape, the tokenizer it was
    trained with: ``tokenizer_fingerprint``, the position encoding, ...; dropout and other training-only
    fields may differ), or the run's settings (``run_settings.json`` of two checkpoints of different runs:
    another seed, other data), which tensors of the same shapes would not show."""
    import json

    configs = [json.loads((folder / "config.json").read_text(encoding="utf-8")) for folder in (first, other)]
    for key in sorted((configs[0].keys() | configs[1].keys()) - NOT_MEANING):
        if configs[0].get(key) != configs[1].get(key):
            raise ValueError(
                f"{other} is not a checkpoint of the same model as {first}: config.json's {key} is "
                f"{configs[1].get(key)!r}, not {configs[0].get(key)!r}. Average checkpoints of one run."
            )
    if all((folder / SETTINGS_FILE).is_file() for folder in (first, other)):
        settings = [
            json.loads((folder / SETTINGS_FILE).read_text(encoding="utf-8")) for folder in (first, other)
        ]
        for key in sorted(settings[0].keys() & settings[1].keys()):  # a setting an older record lacks: not
            if settings[0].get(key) != settings[1].get(key):
                raise ValueError(
                    f"{other} comes from another run than {first}: its {SETTINGS_FILE} has {key} "
                    f"{settings[1].get(key)!r}, not {settings[0].get(key)!r}. Average checkpoints of one run."
                )


def model_folder(path: str | Path) -> Path:
    """A model folder, or the ``model/`` of a folder that holds one (a run folder): what
    :func:`average_checkpoints` reads for ``path``."""
    path = Path(path)
    if not (path / "config.json").is_file() and (path / "model" / "config.json").is_file():
        return path / "model"
    return path


def checkpoint_step(folder: Path) -> int:
    """The update a checkpoint folder was saved at (``checkpoint-N`` or an interrupted re-save's
    ``.replaced-checkpoint-N``)."""
    match = STEP_DIR.match(folder.name) or REPLACED_DIR.match(folder.name)
    if match is None:
        raise ValueError(f"{folder} is not a checkpoint folder ({PREFIX_CHECKPOINT_DIR}-N).")
    return int(match.group(1))


def checkpoint_dirs(root: Path) -> list[Path]:
    """Complete checkpoints under ``root``, oldest first: every ``checkpoint-N``, and the earlier save of a
    step whose re-save was interrupted between its two renames (``.replaced-checkpoint-N`` without
    ``checkpoint-N``)."""
    if not root.is_dir():
        return []
    found = {}
    for pattern in (
        REPLACED_DIR,
        STEP_DIR,
    ):  # checkpoint-N wins over a .replaced-checkpoint-N of the same step
        for folder in root.iterdir():
            if folder.is_dir() and pattern.match(folder.name) and (folder / STATE_FILE).is_file():
                found[checkpoint_step(folder)] = folder
    return [found[step] for step in sorted(found)]


__all__ = ["average_checkpoints", "model_folder", "checkpoint_dirs", "checkpoint_step", "STATE_FILE"]
