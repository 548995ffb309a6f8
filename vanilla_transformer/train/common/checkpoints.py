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
  between the two renames, the earlier save still counts as checkpoint N (``averaging.checkpoint_dirs``,
  which ``average --last`` reads a run folder with too), and the next save renames it back;
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
import shutil
from pathlib import Path

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ...averaging import REPLACED_DIR, STATE_FILE, checkpoint_dirs, checkpoint_step

CHECKSUMS_FILE = "checksums.json"


def checkpoint_name(step: int) -> str:
    return f"{PREFIX_CHECKPOINT_DIR}-{step}"


def staging_dir(root: Path, step: int) -> Path:
    """Where checkpoint ``step`` is written before ``publish_checkpoint`` renames it into place."""
    return root / f".tmp-{checkpoint_name(step)}"


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
    return unsafe_state(folder)


# The pickled states the Trainer loads on resume (optimizer, scheduler, gradient scaler, each process's RNG).
STATE_FILES = ("optimizer.pt", "scheduler.pt", "scaler.pt", "rng_state.pth", "rng_state_*.pth")


def unsafe_state(folder: Path) -> str | None:
    """What is wrong with a checkpoint's pickled states (``STATE_FILES``), or None: each is read as the
    Trainer will read it on resume (``torch.load`` with ``weights_only``, which runs no code, and the
    Trainer's own allow-list), memory-mapped, so that a file holding a payload that would run code is named
    as unsafe and a file that cannot be unpickled as damaged, not torch's traceback mid-resume. Checksums
    match such a file if it was written that way, or rewritten to match."""
    import pickle

    import torch

    try:
        from transformers.trainer_pt_utils import safe_globals
    except ImportError:  # an older transformers: weights_only's own allow-list
        from contextlib import nullcontext as safe_globals

    for pattern in STATE_FILES:
        for path in sorted(folder.glob(pattern)):
            try:
                with safe_globals():
                    torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            except pickle.UnpicklingError as error:
                reason = " ".join(str(error).split())[:160]
                if "weights only" in reason.lower() or "weights_only" in reason.lower():
                    return (
                        f"{path.name} is unsafe: it holds a pickle that would run code, which torch.load "
                        "refuses to run (weights_only)"
                    )
                return f"{path.name} is damaged and cannot be unpickled ({reason})"
            except (RuntimeError, EOFError, ValueError, OSError) as error:
                reason = " ".join(str(error).split())[:160]
                return f"{path.name} is damaged and cannot be read ({type(error).__name__}: {reason})"
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
