"""Checkpoints that survive crashes, and checkpoint averaging (§6.1).

A checkpoint is a folder ``step-00001200/`` holding ``model/`` (a complete ``save_pretrained`` folder:
safetensors, config, generation config, tokenizer, remote code), ``state/`` (``accelerator.save_state``:
optimizer, scheduler, RNG states, for an exact resume) and ``trainer_state.json``.

Every change to the folder of checkpoints is an atomic rename, so a process killed at any moment leaves
each ``step-*`` folder complete:

* a checkpoint is written under ``.tmp-step-N`` and renamed into place when complete;
* a step saved again (a run restarted in the same folder) moves the earlier save aside to
  ``.replaced-step-N`` before the new one takes its name, and deletes it only afterwards; killed between
  the two renames, the earlier save still counts as checkpoint N (``checkpoint_dirs``), and the next save
  renames it back;
* a checkpoint beyond ``keep_last`` is renamed to ``.deleting-step-N`` before it is deleted, so a
  half-deleted folder never looks like a checkpoint.

Leftover ``.tmp-*`` and ``.deleting-*`` folders are ignored, and removed by the next save.
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
REPLACED_DIR = re.compile(r"^\.replaced-step-(\d{8})$")
STATE_FILE = "trainer_state.json"


def checkpoint_step(folder: Path) -> int:
    """The update a checkpoint folder was saved at (``step-N`` or an interrupted re-save's ``.replaced-step-N``)."""
    match = STEP_DIR.match(folder.name) or REPLACED_DIR.match(folder.name)
    if match is None:
        raise ValueError(f"{folder} is not a checkpoint folder (step-NNNNNNNN).")
    return int(match.group(1))


def checkpoint_dirs(root: Path) -> list[Path]:
    """Complete checkpoints under ``root``, oldest first: every ``step-N``, and the earlier save of a step
    whose re-save was interrupted between its two renames (``.replaced-step-N`` without ``step-N``)."""
    if not root.is_dir():
        return []
    found = {}
    for pattern in (REPLACED_DIR, STEP_DIR):  # step-N wins over a .replaced-step-N of the same step
        for folder in root.iterdir():
            if folder.is_dir() and pattern.match(folder.name) and (folder / STATE_FILE).is_file():
                found[checkpoint_step(folder)] = folder
    return [found[step] for step in sorted(found)]


def spaced_checkpoints(root: Path, last: int, spacing: int) -> list[Path]:
    """The last ``last`` checkpoints of a run at least about ``spacing`` updates apart (§6.1 averages
    checkpoints written at regular intervals). A checkpoint written only a few updates before the next
    one (the final save when a time budget stops a run just after a periodic save) is left out, so it
    does not count twice in the average."""
    chosen: list[Path] = []
    for folder in reversed(checkpoint_dirs(root)):
        if len(chosen) == last:
            break
        step = checkpoint_step(folder)
        if chosen and checkpoint_step(chosen[-1]) - step < spacing // 2:
            continue
        chosen.append(folder)
    return chosen[::-1]


def latest_checkpoint(root: Path) -> Path | None:
    found = checkpoint_dirs(root)
    return found[-1] if found else None


def save_checkpoint(
    accelerator, model, tokenizer, root: Path, step: int, trainer_state: dict, keep_last: int
) -> Path:
    """Write checkpoint ``step`` atomically (see the module docstring); every process must call it
    (``save_state`` is collective)."""
    final = root / f"step-{step:08d}"
    temporary = root / f".tmp-step-{step:08d}"
    if accelerator.is_main_process:
        root.mkdir(parents=True, exist_ok=True)
        tidy_up(root)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(temporary / "state"))
    if accelerator.is_main_process:
        accelerator.unwrap_model(model).save_pretrained(temporary / "model")
        tokenizer.save_pretrained(temporary / "model")
        (temporary / STATE_FILE).write_text(json.dumps(trainer_state, indent=2))
        replaced = root / f".replaced-step-{step:08d}"
        if final.exists():  # the same step saved again: the earlier save steps aside, whole
            os.replace(final, replaced)
        os.replace(temporary, final)
        _delete(replaced)
        for old in checkpoint_dirs(root)[:-keep_last]:
            _delete(old)
    accelerator.wait_for_everyone()
    return final


def tidy_up(root: Path) -> None:
    """What an interrupted save left behind: an earlier save moved aside whose step has no checkpoint
    goes back in place; unfinished, replaced and half-deleted folders go."""
    for folder in sorted(root.glob(".replaced-step-*")):
        original = root / folder.name.removeprefix(".replaced-")
        if REPLACED_DIR.match(folder.name) and not original.exists():
            os.replace(folder, original)
        else:
            shutil.rmtree(folder, ignore_errors=True)
    for leftover in [*root.glob(".tmp-step-*"), *root.glob(".deleting-step-*")]:
        shutil.rmtree(leftover, ignore_errors=True)


def _delete(folder: Path) -> None:
    """Remove a folder by renaming it out of the checkpoints' names first (a kill mid-way leaves a
    ``.deleting-*`` folder, never a partial ``step-*``)."""
    if not folder.exists():
        return
    doomed = folder.with_name(".deleting-" + folder.name.removeprefix(".replaced-"))
    shutil.rmtree(doomed, ignore_errors=True)  # an earlier attempt's remains: os.replace needs the name free
    os.replace(folder, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


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


__all__ = [
    "save_checkpoint",
    "latest_checkpoint",
    "checkpoint_dirs",
    "checkpoint_step",
    "average_checkpoints",
]
