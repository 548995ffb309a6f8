"""Where a command may write: outputs that never destroy a user's work.

Every command that writes (``average``, ``export-onnx``, ``export-ct2``, ``attention``, ``translate
--output``, ``evaluate``) checks its output before any work, and refuses with one line that names the path
and why (a ``ValueError`` or an ``OSError``, which the CLI prints as ``error: ...``, exit status 1):

- **writable**: missing parent folders are created (as ``mkdir -p`` would), so the nearest existing one
  must be a folder this process may write; a file in the way, or a read-only folder, is refused;
- **not an input**: the output is none of the command's inputs; a folder output is neither inside one nor
  around one; a file output may go into an input folder (``evaluate``'s default: beside the model) but
  never replaces one of its files;
- **a folder output** is new or empty, or holds an earlier output of the *same* command, recognised by the
  marker it leaves there (:data:`MARKER`: the command, the time and the files it wrote). That earlier output
  is replaced only with ``--force``, and only if the folder holds nothing but what the command wrote. A
  folder holding a training run (``checkpoints/``, ``checkpoint-N``, ``results.json``, ``trainer_state.json``,
  ``run.json``, ``.lock``, a ``model/`` ...), a model (``config.json``, weights) or anything else is never
  replaced, ``--force`` or not; nor does an output go inside a model or checkpoint folder, into a run's
  ``checkpoints/`` or under a checkpoint's name beside checkpoints;
- **a file output** (hypotheses, scores) that exists is replaced only with ``--force``; a file that is an
  input, or one of the files a model or a run is made of, never.

The new output is written beside its place (a hidden staging folder or file in the same folder) and
renamed into place only when complete (an earlier output steps aside first and is deleted after), as
checkpoints are published: a crash or an error mid-way leaves the earlier output as it was and removes
what the command had written.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path

MARKER = ".vanilla-transformer-output.json"
CHECKPOINT = re.compile(r"^checkpoint-\d+$")
# What a training run's folder holds (translation and classification runs, the run core's lock and record).
RUN_MARKERS = ("checkpoints", "results.json", "trainer_state.json", "run.json", ".lock", "train_log.jsonl")
MODEL_MARKERS = ("config.json", "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
# The files a model folder, a checkpoint or a run is made of: a file output never replaces one of these
# where it sits in such a folder or in an input, --force or not.
PROTECTED_NAMES = {
    *MODEL_MARKERS,
    *RUN_MARKERS,
    MARKER,
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "README.md",
    "checksums.json",
    "training_args.bin",
}
PROTECTED_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".py", ".onnx")


# -- the checks ---------------------------------------------------------------------------------------------


def check_writable(path: str | Path) -> None:
    """``path`` can be written: its nearest existing ancestor folder is a folder this process may write
    (missing folders in between are created when the output is written)."""
    path = Path(path)
    ancestor = path.absolute().parent
    while not ancestor.exists() and not ancestor.is_symlink():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise NotADirectoryError(f"Cannot write {path}: {ancestor} is a file, not a folder.")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise PermissionError(f"Cannot write {path}: {ancestor} is not writable.")


def check_folder_output(
    path: str | Path, command: str, inputs: Iterable[str | Path] = (), force: bool = False
) -> Path:
    """Whether ``command`` may write the folder ``path`` (see the module docstring); returns it as a Path.

    Raises ``FileExistsError`` for an earlier output of the same command without ``force``, a ``ValueError``
    (or an ``OSError`` for a folder that cannot be written) for everything that is never replaced."""
    path, inputs = Path(path), [i for i in inputs if i is not None]
    check_writable(path)
    _check_not_an_input(path, inputs, folder=True)
    parent = path.resolve().parent
    if (parent.name == "checkpoints" or CHECKPOINT.match(path.name)) and _checkpoints(parent):
        raise ValueError(f"{path} would go among the checkpoints in {parent}; choose another --output.")
    for ancestor in path.resolve().parents:
        if ancestor.is_dir() and (CHECKPOINT.match(ancestor.name) or _model_files(ancestor)):
            kind = "checkpoint" if CHECKPOINT.match(ancestor.name) else "model"
            raise ValueError(f"{path} would go inside the {kind} folder {ancestor}; choose another --output.")
    if not path.exists():
        return path
    if not path.is_dir():
        raise ValueError(f"{path} is a file, not a folder; choose another --output.")
    if not any(path.iterdir()):
        return path
    own = f"(--force replaces only an earlier `{command}` output)"
    record = _read_marker(path)
    if record is None:
        run, model = _run_markers(path), _model_files(path)
        if run:
            raise ValueError(f"{path} holds a training run ({run[0]}); choose another --output {own}.")
        if model:
            raise ValueError(
                f"{path} holds a model ({', '.join(model)}) that `{command}` did not write; choose another "
                f"--output {own}."
            )
        first = sorted(entry.name for entry in path.iterdir())[0]
        raise ValueError(
            f"{path} is not empty (it holds {first}) and was not written by `{command}`; choose another "
            f"--output {own}."
        )
    if record.get("command") != command:
        raise ValueError(
            f"{path} was written by `{record.get('command')}`, not `{command}`; choose another --output."
        )
    written = set(record.get("files", []))
    foreign = sorted(name for name in _files(path) if name not in written and name != MARKER)
    if foreign:
        raise ValueError(
            f"{path} holds files `{command}` did not write ({', '.join(foreign[:3])}); move them out or choose "
            "another --output."
        )
    if not force:
        raise FileExistsError(
            f"{path} holds an earlier `{command}` output (written {record.get('written', '?')}); pass --force "
            "to replace it."
        )
    return path


def check_file_output(
    path: str | Path, command: str, inputs: Iterable[str | Path] = (), force: bool = False
) -> Path:
    """Whether ``command`` may write the file ``path``; returns it as a Path. A file that is an input, or is
    one of the files of a model, checkpoint, run or input folder (:data:`PROTECTED_NAMES`), is never
    replaced (``ValueError``); any other existing file only with ``force`` (``FileExistsError``). A device or
    a pipe (``/dev/stdout``) is written in place."""
    path, inputs = Path(path), [i for i in inputs if i is not None]
    if path.exists() and not path.is_dir() and not path.is_file():  # a device or a pipe
        return path
    check_writable(path)
    if path.is_dir():
        raise ValueError(f"{path} is a folder; --output names a file.")
    _check_not_an_input(path, inputs, folder=False)
    if not path.exists():
        return path
    parent, resolved_inputs = path.resolve().parent, [Path(i).resolve() for i in inputs]
    in_a_model = parent in resolved_inputs or _model_files(parent) or _run_markers(parent)
    if in_a_model and (path.name in PROTECTED_NAMES or path.name.endswith(PROTECTED_SUFFIXES)):
        raise ValueError(f"{path} is a file of the model or run in {parent}; choose another --output.")
    if not force:
        raise FileExistsError(f"{path} already exists; pass --force to replace it.")
    return path


def _check_not_an_input(path: Path, inputs: Iterable[str | Path], folder: bool) -> None:
    target = path.resolve()
    for given in inputs:
        source = Path(given).resolve()
        same_file = source.is_file() and path.is_file() and os.path.samefile(path, source)  # a hard link too
        if target == source or same_file:
            raise ValueError(f"{path} is an input of this command; choose another --output.")
        if target.is_relative_to(source) and source.is_dir() and folder:
            raise ValueError(f"{path} is inside the input {given}; choose another --output.")
        if source.is_relative_to(target) and folder:
            raise ValueError(f"{path} holds the input {given}; choose another --output.")


def _checkpoints(folder: Path) -> list[Path]:
    """The ``checkpoint-N`` folders in ``folder`` (none where it cannot be listed)."""
    try:
        return [entry for entry in folder.iterdir() if CHECKPOINT.match(entry.name) and entry.is_dir()]
    except OSError:
        return []


def _model_files(folder: Path) -> list[str]:
    return [name for name in MODEL_MARKERS if (folder / name).is_file()]


def _run_markers(folder: Path) -> list[str]:
    found = [name + "/" * (folder / name).is_dir() for name in RUN_MARKERS if (folder / name).exists()]
    found += [f"{entry.name}/" for entry in _checkpoints(folder)][:1]
    if (folder / "model").is_dir():
        found.append("model/")
    return found


def _read_marker(folder: Path) -> dict | None:
    try:
        record = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if not p.is_dir())


# -- writing ------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def folder_output(
    path: str | Path, command: str, inputs: Iterable[str | Path] = (), force: bool = False
) -> Iterator[Path]:
    """Check ``path`` (:func:`check_folder_output`), then give the command an empty staging folder beside
    it to fill. When the block ends, the marker goes in and the staging folder takes ``path``'s place by
    rename; on an error it is removed, with the parent folders made for it, and ``path`` is as it was."""
    inputs = [i for i in inputs if i is not None]
    path = check_folder_output(path, command, inputs, force)
    made = _make_parents(path)
    staging = path.parent / f".{path.name}.staging-{uuid.uuid4().hex[:8]}"
    staging.mkdir()
    try:
        yield staging
        files = _files(staging)
        record = {"command": command, "written": _now(), "inputs": [str(i) for i in inputs], "files": files}
        (staging / MARKER).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        check_folder_output(path, command, inputs, force)  # again: it may have changed while the command ran
        _publish(staging, path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        _remove_empty(made)
        raise


@contextlib.contextmanager
def file_output(
    path: str | Path, command: str, inputs: Iterable[str | Path] = (), force: bool = False
) -> Iterator[Path]:
    """Check ``path`` (:func:`check_file_output`), then give the command a staging file beside it to write;
    it is renamed into place when the block ends, and removed on an error (``path`` untouched)."""
    inputs = [i for i in inputs if i is not None]
    path = check_file_output(path, command, inputs, force)
    if path.exists() and not path.is_file():  # a device or a pipe: nothing to replace
        yield path
        return
    made = _make_parents(path)
    staging = path.parent / f".{path.name}.staging-{uuid.uuid4().hex[:8]}"
    try:
        yield staging
        check_file_output(path, command, inputs, force)
        if not staging.exists():
            staging.touch()
        os.replace(staging, path)
    except BaseException:
        staging.unlink(missing_ok=True)
        _remove_empty(made)
        raise


def _publish(staging: Path, path: Path) -> None:
    """Rename ``staging`` to ``path``; an earlier ``path`` steps aside first and is deleted after, so at no
    moment is neither on disk."""
    if not path.exists():
        os.replace(staging, path)
        return
    aside = path.parent / f".{path.name}.replaced-{uuid.uuid4().hex[:8]}"
    os.replace(path, aside)
    try:
        os.replace(staging, path)
    except BaseException:
        os.replace(aside, path)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def _make_parents(path: Path) -> list[Path]:
    """Create ``path``'s missing parent folders; returns them, deepest first."""
    missing = []
    parent = path.absolute().parent
    while not parent.exists():
        missing.append(parent)
        parent = parent.parent
    path.absolute().parent.mkdir(parents=True, exist_ok=True)
    return missing


def _remove_empty(folders: list[Path]) -> None:
    for folder in folders:
        with contextlib.suppress(OSError):
            folder.rmdir()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


__all__ = [
    "MARKER",
    "check_writable",
    "check_folder_output",
    "check_file_output",
    "folder_output",
    "file_output",
]
