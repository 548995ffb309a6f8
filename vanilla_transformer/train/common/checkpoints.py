"""Checkpoints that survive crashes, for every trainer of the package (``run_trainer.RunTrainer``).

A checkpoint is the Trainer's folder ``checkpoint-1200/``: a complete ``save_pretrained`` folder
(safetensors, config, generation config, tokenizer, remote code) beside the optimizer, scheduler and RNG
states and ``trainer_state.json``, so ``from_pretrained`` loads it and ``Trainer.train(resume_from_checkpoint=)``
continues from it.

The Trainer writes a checkpoint in place, file by file, and ``get_last_checkpoint`` takes the highest
number whatever it holds. Here every change to the folder of checkpoints is an atomic rename instead, so
a process killed at any moment leaves each ``checkpoint-*`` folder complete:

* a checkpoint is written under ``.tmp-checkpoint-N/`` (``RunTrainer`` points the Trainer's save there)
  and renamed into place when complete (``publish_checkpoint``);
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
from pathlib import Path

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


def latest_checkpoint(root: Path) -> Path | None:
    found = checkpoint_dirs(root)
    return found[-1] if found else None


def publish_checkpoint(staged: Path, root: Path, keep: int | None, protect: Path | None = None) -> Path:
    """Rename the complete checkpoint ``staged`` (``.tmp-checkpoint-N/checkpoint-N``) into ``root``,
    atomically (see the module docstring), and delete the checkpoints beyond the last ``keep`` (None: none),
    never ``protect`` (the best checkpoint, which ``load_best_model_at_end`` loads at the end, as the
    Trainer's own rotation keeps it). The main process calls it once every process has written its part."""
    final = root / staged.name
    replaced = root / f".replaced-{staged.name}"
    if final.exists():  # the same step saved again: the earlier save steps aside, whole
        os.replace(final, replaced)
    os.replace(staged, final)
    shutil.rmtree(staged.parent, ignore_errors=True)  # the empty .tmp-checkpoint-N
    _delete(replaced)
    for old in checkpoint_dirs(root)[:-keep] if keep else []:
        if protect is None or old.resolve() != Path(protect).resolve():
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
    file matches its checksum. A checkpoint without checksums (written by another tool) cannot be checked:
    None."""
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


__all__ = [
    "STATE_FILE",
    "damage",
    "write_checksums",
    "publish_checkpoint",
    "staging_dir",
    "tidy_up",
    "latest_checkpoint",
    "checkpoint_dirs",
    "checkpoint_step",
]
