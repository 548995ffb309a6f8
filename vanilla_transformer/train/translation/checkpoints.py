"""Checkpoints that survive crashes, and checkpoint averaging (§6.1).

A checkpoint is the Trainer's folder ``checkpoint-1200/``: a complete ``save_pretrained`` folder
(safetensors, config, generation config, tokenizer, remote code) beside the optimizer, scheduler and RNG
states and ``trainer_state.json``, so ``from_pretrained`` loads it and ``Trainer.train(resume_from_checkpoint=)``
continues from it.

The Trainer writes a checkpoint in place, file by file, and ``get_last_checkpoint`` takes the highest
number whatever it holds. Here every change to the folder of checkpoints is an atomic rename instead, so
a process killed at any moment leaves each ``checkpoint-*`` folder complete:

* a checkpoint is written under ``.tmp-checkpoint-N/`` (``TranslationTrainer`` points the Trainer's save
  there) and renamed into place when complete (``publish_checkpoint``);
* a step saved again (a run restarted in the same folder) moves the earlier save aside to
  ``.replaced-checkpoint-N`` before the new one takes its name, and deletes it only afterwards; killed
  between the two renames, the earlier save still counts as checkpoint N (``checkpoint_dirs``), and the
  next save renames it back;
* a checkpoint beyond the last ``save_total_limit`` is renamed to ``.deleting-checkpoint-N`` before it is deleted, so a
  half-deleted folder never looks like a checkpoint.

Leftover ``.tmp-*`` and ``.deleting-*`` folders are ignored, and removed by the next save.

A rename cannot protect a checkpoint from what happens to it afterwards (a disk error, a copy cut short, a
flipped bit): every checkpoint carries ``checksums.json``, the SHA-256 of each of its files, written last
before the rename, and ``damage`` checks a checkpoint against it before a run resumes from it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

STEP_DIR = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")
REPLACED_DIR = re.compile(rf"^\.replaced-{PREFIX_CHECKPOINT_DIR}-(\d+)$")
STATE_FILE = TRAINER_STATE_NAME
CHECKSUMS_FILE = "checksums.json"


def checkpoint_name(step: int) -> str:
    return f"{PREFIX_CHECKPOINT_DIR}-{step}"


def staging_dir(root: Path, step: int) -> Path:
    """Where checkpoint ``step`` is written before ``publish_checkpoint`` renames it into place."""
    return root / f".tmp-{checkpoint_name(step)}"


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


def publish_checkpoint(staged: Path, root: Path, keep: int | None) -> Path:
    """Rename the complete checkpoint ``staged`` (``.tmp-checkpoint-N/checkpoint-N``) into ``root``,
    atomically (see the module docstring), and delete the checkpoints beyond the last ``keep`` (None: none). The
    main process calls it once every process has written its part."""
    final = root / staged.name
    replaced = root / f".replaced-{staged.name}"
    if final.exists():  # the same step saved again: the earlier save steps aside, whole
        os.replace(final, replaced)
    os.replace(staged, final)
    shutil.rmtree(staged.parent, ignore_errors=True)  # the empty .tmp-checkpoint-N
    _delete(replaced)
    for old in checkpoint_dirs(root)[:-keep] if keep else []:
        _delete(old)
    return final


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_checksums(folder: Path) -> None:
    """``checksums.json``: the size and SHA-256 of every file of a complete checkpoint."""
    files = sorted(path for path in folder.rglob("*") if path.is_file() and path.name != CHECKSUMS_FILE)
    sums = {
        str(path.relative_to(folder)): {"bytes": path.stat().st_size, "sha256": _sha256(path)}
        for path in files
    }
    (folder / CHECKSUMS_FILE).write_text(json.dumps(sums, indent=1))


def damage(folder: Path) -> str | None:
    """What is wrong with a checkpoint (a missing, truncated or changed file, named), or None if every
    file matches its checksum. A checkpoint without checksums (written by another tool, or before they
    were kept) cannot be checked: None."""
    try:
        sums = json.loads((folder / CHECKSUMS_FILE).read_text())
    except FileNotFoundError:
        return None
    except (ValueError, UnicodeDecodeError) as error:
        return f"{CHECKSUMS_FILE} is unreadable ({error})"
    for name, expected in sums.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        size = path.stat().st_size
        if size != expected["bytes"]:
            return f"{name} has {size:,} bytes, {expected['bytes']:,} when saved (truncated or replaced)"
        if _sha256(path) != expected["sha256"]:
            return f"{name} has changed since it was saved (its SHA-256 differs)"
    return None


def tidy_up(root: Path) -> None:
    """What an interrupted save left behind: an earlier save moved aside whose step has no checkpoint
    goes back in place; unfinished, replaced and half-deleted folders go."""
    for folder in sorted(root.glob(f".replaced-{PREFIX_CHECKPOINT_DIR}-*")):
        original = root / folder.name.removeprefix(".replaced-")
        if REPLACED_DIR.match(folder.name) and not original.exists():
            os.replace(folder, original)
        else:
            shutil.rmtree(folder, ignore_errors=True)
    for leftover in [
        *root.glob(f".tmp-{PREFIX_CHECKPOINT_DIR}-*"),
        *root.glob(f".deleting-{PREFIX_CHECKPOINT_DIR}-*"),
    ]:
        shutil.rmtree(leftover, ignore_errors=True)


def _delete(folder: Path) -> None:
    """Remove a folder by renaming it out of the checkpoints' names first (a kill mid-way leaves a
    ``.deleting-*`` folder, never a partial ``checkpoint-*``)."""
    if not folder.exists():
        return
    doomed = folder.with_name(".deleting-" + folder.name.removeprefix(".replaced-"))
    shutil.rmtree(doomed, ignore_errors=True)  # an earlier attempt's remains: os.replace needs the name free
    os.replace(folder, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def average_checkpoints(model_dirs: Sequence[str | Path], output_dir: str | Path) -> Path:
    """§6.1: average the parameters of several checkpoints of one run into a new model folder.

    The first folder supplies config, tokenizer, generation config and code; every folder must hold
    the same tensors. Every folder is checked before anything is averaged (``loading.check_model_folder``:
    config.json of this package's model, readable weights, a tokenizer that fits the vocabulary); a bad one
    is named. Returns the output folder, loadable with ``from_pretrained``.
    """
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from ...loading import check_model_folder, load_saved_model

    if len(model_dirs) < 1:
        raise ValueError("Give at least one checkpoint to average.")
    folders = [_model_folder(Path(d)) for d in model_dirs]
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


def _model_folder(path: Path) -> Path:
    """Accept a model folder or a folder holding ``model/`` (a run folder)."""
    if not (path / "config.json").is_file() and (path / "model" / "config.json").is_file():
        return path / "model"
    return path


__all__ = [
    "damage",
    "write_checksums",
    "publish_checkpoint",
    "staging_dir",
    "tidy_up",
    "latest_checkpoint",
    "checkpoint_dirs",
    "checkpoint_step",
    "average_checkpoints",
]
