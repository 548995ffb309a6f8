"""Checkpoints that survive crashes, and checkpoint averaging (§6.1).

A checkpoint is a folder ``step-00001200/`` holding ``model/`` (a complete ``save_pretrained`` folder:
safetensors, config, generation config, tokenizer, remote code), ``state/`` (``accelerator.save_state``:
optimizer, scheduler, RNG states, for an exact resume) and ``trainer_state.json``. It is written under a
temporary name and renamed into place only when complete, so a crash mid-write never damages the last
good checkpoint; a leftover temporary folder is ignored and cleaned up by the next save.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file

STEP_DIR = re.compile(r"^step-(\d{8})$")
STATE_FILE = "trainer_state.json"


def checkpoint_dirs(root: Path) -> list[Path]:
    """Complete checkpoints under ``root``, oldest first."""
    if not root.is_dir():
        return []
    found = [
        p for p in root.iterdir() if p.is_dir() and STEP_DIR.match(p.name) and (p / STATE_FILE).is_file()
    ]
    return sorted(found, key=lambda p: int(STEP_DIR.match(p.name).group(1)))


def spaced_checkpoints(root: Path, last: int, spacing: int) -> list[Path]:
    """The last ``last`` checkpoints of a run at least about ``spacing`` updates apart (§6.1 averages
    checkpoints written at regular intervals). A checkpoint written only a few updates before the next
    one (the final save when a time budget stops a run just after a periodic save) is left out, so it
    does not count twice in the average."""
    chosen: list[Path] = []
    for folder in reversed(checkpoint_dirs(root)):
        if len(chosen) == last:
            break
        step = int(STEP_DIR.match(folder.name).group(1))
        if chosen and int(STEP_DIR.match(chosen[-1].name).group(1)) - step < spacing // 2:
            continue
        chosen.append(folder)
    return chosen[::-1]


def latest_checkpoint(root: Path) -> Path | None:
    found = checkpoint_dirs(root)
    return found[-1] if found else None


def save_checkpoint(
    accelerator, model, tokenizer, root: Path, step: int, trainer_state: dict, keep_last: int
) -> Path:
    """Write checkpoint ``step`` atomically; every process must call it (``save_state`` is collective)."""
    final = root / f"step-{step:08d}"
    temporary = root / f".tmp-step-{step:08d}"
    if accelerator.is_main_process:
        root.mkdir(parents=True, exist_ok=True)
        for leftover in root.glob(".tmp-step-*"):
            shutil.rmtree(leftover, ignore_errors=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(temporary / "state"))
    if accelerator.is_main_process:
        accelerator.unwrap_model(model).save_pretrained(temporary / "model")
        tokenizer.save_pretrained(temporary / "model")
        (temporary / STATE_FILE).write_text(json.dumps(trainer_state, indent=2))
        if final.exists():  # the same step saved again (e.g. a final save): replace it whole
            shutil.rmtree(final)
        os.replace(temporary, final)
        for old in checkpoint_dirs(root)[:-keep_last]:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def average_checkpoints(model_dirs: Sequence[str | Path], output_dir: str | Path) -> Path:
    """§6.1: average the parameters of several checkpoints of one run into a new model folder.

    The first folder supplies config, tokenizer, generation config and code; every folder must hold
    the same tensors. Returns the output folder, loadable with ``from_pretrained``.
    """
    if len(model_dirs) < 1:
        raise ValueError("Give at least one checkpoint to average.")
    folders = [_model_folder(Path(d)) for d in model_dirs]
    total: dict[str, torch.Tensor] | None = None
    for folder in folders:
        tensors = load_file(folder / "model.safetensors")
        if total is None:
            total = {name: tensor.to(torch.float64) for name, tensor in tensors.items()}
            dtypes = {name: tensor.dtype for name, tensor in tensors.items()}
            continue
        if tensors.keys() != total.keys():
            raise ValueError(
                f"{folder} holds different tensors than {folders[0]}; average checkpoints of one run."
            )
        for name, tensor in tensors.items():
            total[name] += tensor.to(torch.float64)
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    model = AutoModelForSeq2SeqLM.from_pretrained(folders[0])
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


def _model_folder(path: Path) -> Path:
    """Accept a model folder or a checkpoint folder holding ``model/``."""
    for candidate in (path, path / "model"):
        if (candidate / "model.safetensors").is_file():
            return candidate
    raise FileNotFoundError(f"{path} holds no model.safetensors (nor does {path / 'model'}).")


__all__ = ["save_checkpoint", "latest_checkpoint", "checkpoint_dirs", "average_checkpoints"]
