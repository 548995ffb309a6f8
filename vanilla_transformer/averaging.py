"""§6.1: checkpoint averaging. "For the base models, we used a single model obtained by averaging the last
5 checkpoints, which were written at 10-minute intervals": ``average_checkpoints`` averages the parameters
of saved model folders (checkpoints of one run) into a new model folder: the ``average`` command, and a
training run's ``average_last`` (which of a run's checkpoints: ``train/translation/averaging.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file

from .loading import check_model_folder, load_saved_model


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


def model_folder(path: str | Path) -> Path:
    """A model folder, or the ``model/`` of a folder that holds one (a run folder): what
    :func:`average_checkpoints` reads for ``path``."""
    path = Path(path)
    if not (path / "config.json").is_file() and (path / "model" / "config.json").is_file():
        return path / "model"
    return path


__all__ = ["average_checkpoints", "model_folder"]
