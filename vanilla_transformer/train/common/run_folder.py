"""The run folder and its owner: one run writes a folder at a time, runs never mix, and a run touches only
its own files.

A training run owns its folder (``output_dir``, for every task) from the first thing it does to the last
(``train/run.py`` opens it once every check has passed):

* **a lock.** ``.lock`` in the folder, held with ``flock`` by the run's main process for as long as the run
  lives (the operating system releases it when the process dies, however it dies). A second run on the
  folder is refused at once, naming the process that holds it (its host, pid, command and start).
* **a record.** ``run.json`` says, for each stage of the folder (``train``; the encoder's pre-training
  ``pretrain``, which may share a folder with classification's ``train``), whether its run is ``running``,
  ``stopped`` (``session_minutes``), ``interrupted`` (a signal, an error), ``trained`` (every update done,
  ``updates_done``) or ``finished``, at which update, and with which budgets.
* **runs never mix.** A folder that holds a run of the stage (its record, its checkpoints or its final
  outputs) is continued only when the recipe asks: ``resume: true`` continues it (a fresh start if it has
  no checkpoint yet); ``resume: auto`` continues it too and starts a new run where the folder holds none,
  so that a job a scheduler requeues with the same command picks up where it stopped. Either way the
  checkpoint's settings must be the run's (``changed_settings``: what an update is may not change; budgets,
  logging and evaluation may). A finished run is continued only when a budget was raised. Without
  ``resume`` the run is refused, naming what the folder holds, unless ``overwrite: true`` (the run's own
  files are moved aside to ``<folder>.replaced-<time>/``) or ``overwrite: delete`` (they are deleted).
* **only its own files.** What ``overwrite`` moves or deletes is what the task says its run writes
  (``Task.own_files``: checkpoints, model, logs, scores, plots, a tokenizer it trained); anything else in
  the folder is left alone and named. A folder that holds files but no run is refused, naming them, unless
  the recipe says ``other_files: true``. A run that ends before its record is written (refused, or failed
  on its data or model) removes what it added, so the folder is as it found it.

Every process of a multi-process run takes the same decision: the main process decides, the others are
told (``agree``).
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import shutil
import socket
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import torch

LOCK_FILE = ".lock"
RECORD_FILE = "run.json"
RESUME_CHOICES = ("false", "true", "auto")
OVERWRITE_CHOICES = ("false", "true", "delete")


class RunFolderError(ValueError):
    """A run folder the run may not use as asked: held by another run, holding a run the recipe did not ask
    to continue, or holding one whose settings differ."""


def normalise_choice(name: str, value, choices: tuple[str, ...]) -> str:
    """A ``true | false | <word>`` setting (YAML gives true/false as booleans) as one of ``choices``."""
    if isinstance(value, bool):
        value = "true" if value else "false"
    if not isinstance(value, str) or value.lower() not in choices:
        raise ValueError(f"`{name}` must be one of {' | '.join(choices)}, got {value!r}.")
    return value.lower()


def _now() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def agree(decide: Callable[[], object], args) -> object:
    """``decide()`` on the main process, its result (or its ``RunFolderError``/``OSError``, as a message) on every
    process: the others raise the same error instead of waiting at the next barrier forever."""
    world_size = getattr(args, "world_size", 1)
    if world_size <= 1 or not torch.distributed.is_available() or not torch.distributed.is_initialized():
        return decide()
    outcome: list = [None]
    if args.process_index == 0:
        try:
            outcome[0] = ("ok", decide())
        except (RunFolderError, OSError) as error:
            outcome[0] = ("error", f"{error}")
            torch.distributed.broadcast_object_list(outcome, src=0)
            raise
    torch.distributed.broadcast_object_list(outcome, src=0)
    kind, value = outcome[0]
    if kind == "error":
        raise RunFolderError(value)
    return value


class RunFolder:
    """A stage's hold on its run folder: ``open`` locks it and decides whether the run starts or continues;
    ``record`` keeps ``run.json`` current; ``close`` releases the lock. Only the main process touches the
    folder (``is_main``); the others follow its decisions (``agree``).

    ``own_files(folder)`` lists what belongs to the stage's run in the folder (moved aside or deleted by
    ``overwrite``); ``holds_run(folder)`` says whether the stage's outputs or checkpoints are there, for
    folders written before ``run.json`` was kept."""

    def __init__(
        self,
        path: str | Path,
        stage: str,
        own_files: Callable[[Path], Iterable[Path]],
        holds_run: Callable[[Path], bool],
        is_main: bool = True,
        task: str | None = None,
    ):
        self.path, self.stage, self.task = Path(path), stage, task
        self.own_files, self.holds_run = own_files, holds_run
        self.is_main = is_main
        self._lock = None
        self.created = False
        self.continuing = False  # a run that was in the folder goes on
        self.started = False  # this run's record is written: an error from now on is recorded in it

    # -- the lock ---------------------------------------------------------------------------------------

    def lock(self) -> None:
        """Hold ``.lock`` (main process). Another holder: refused, naming it."""
        if not self.is_main or self._lock is not None:
            return
        self.created = not self.path.exists()  # a run refused before it wrote anything leaves no folder
        # What the folder held before this run: a run that fails before its record is written (a refused
        # recipe value, data that cannot be read) removes what it added, and leaves the folder as found.
        self.found = {entry.name for entry in self.path.iterdir()} if self.path.is_dir() else set()
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise OSError(f"Cannot create the run folder {self.path}: {error.strerror or error}") from error
        if not os.access(self.path, os.W_OK):
            raise OSError(f"The run folder {self.path} is not writable.")
        handle = open(self.path / LOCK_FILE, "a+", encoding="utf-8")  # noqa: SIM115 - held for the run
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = ""
            for _ in range(100):  # the holder writes its line just after taking the lock: wait up to 1 s
                handle.seek(0)
                holder = handle.read().strip()
                if holder:
                    break
                time.sleep(0.01)
            holder = holder or "another process"
            handle.close()
            raise RunFolderError(
                f"{self.path} is in use by another run ({holder}); wait for it to end, stop it, or choose another "
                "run folder."
            ) from None
        handle.seek(0)
        handle.truncate()
        command = " ".join(Path(sys.argv[0]).name.split() + sys.argv[1:])[:200]
        handle.write(f"pid {os.getpid()} on {socket.gethostname()}, since {_now()}: {command}\n")
        handle.flush()
        self._lock = handle

    def close(self) -> None:
        """Release the lock (the file stays: a later run takes it). A run that ends before its record was
        written (refused, or failed on its data or model before its first update) removes what it added to
        the folder, its lock included, and the folder itself if it made it: a refused run leaves the folder
        as it found it, and the corrected command starts there."""
        if self._lock is None:
            return
        if not self.started:
            self._restore_replaced()
            self._remove_what_this_run_added()
        fcntl.flock(self._lock, fcntl.LOCK_UN)
        self._lock.close()
        self._lock = None

    def _remove_what_this_run_added(self) -> None:
        """The run's own files that were not there before it (a user's file dropped in meanwhile stays)."""
        own = {path.relative_to(self.path).parts[0] for path in self.own_files(self.path)}
        for entry in self.path.iterdir():
            if entry.name not in self.found and entry.name in own:
                _remove(entry)
        if LOCK_FILE not in self.found:
            (self.path / LOCK_FILE).unlink(missing_ok=True)
        if self.created and not any(self.path.iterdir()):
            self.path.rmdir()

    def __enter__(self) -> RunFolder:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        if error is not None and self.started and self._lock is not None:
            try:  # best effort: on a full disk the record may not be writable, and the error says more
                self.record(status="interrupted", reason=f"{kind.__name__}: {error}"[:300])
            except OSError:
                pass
        self.close()

    # -- the record -------------------------------------------------------------------------------------

    def _records(self) -> dict:
        try:
            records = json.loads((self.path / RECORD_FILE).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (ValueError, UnicodeDecodeError) as error:
            raise RunFolderError(
                f"{self.path / RECORD_FILE} is unreadable ({error}). Delete it to continue the run from the "
                "folder's checkpoints (their own settings are still compared), or restore it."
            ) from error
        return records if isinstance(records, dict) else {}

    def previous(self) -> dict | None:
        """The stage's record, or a stand-in for a folder that holds the stage's run without one."""
        record = self._records().get(self.stage)
        if record is None and self.holds_run(self.path):
            record = {"status": "unknown (no run.json)"}
        return record

    def record(self, **values) -> None:
        """Update the stage's record (main process; atomic: written aside, then renamed)."""
        if not self.is_main:
            return
        self.started = True
        self._finish_replacing()
        records = self._records()
        records[self.stage] = {**records.get(self.stage, {}), **values, "updated": _now()}
        staged = self.path / f".{RECORD_FILE}.tmp"
        staged.write_text(json.dumps(records, indent=2, default=str), encoding="utf-8")
        os.replace(staged, self.path / RECORD_FILE)

    # -- the decision -----------------------------------------------------------------------------------

    def open(self, resume: str, overwrite: str, budgets: dict, args, other_files: bool = False) -> bool:
        """Lock the folder and decide, on every process alike: start a new run (False) or continue the one
        the folder holds (True). Refuses (``RunFolderError``) a folder held by another run, a run the recipe
        did not ask to continue, a finished run whose budgets were not raised, and a folder that holds files
        but no run's record, unless ``other_files`` (they are then left alone)."""

        def decide() -> bool:
            self.lock()
            previous = self.previous()
            if previous is None and not other_files and not self._records():
                others = self.other_files()
                if others:
                    raise RunFolderError(
                        f"{self.path} is not empty and holds no run ({', '.join(others)}). Choose an empty or "
                        "new output_dir, or set other_files: true to run there and leave those files alone."
                    )
            if previous is None:  # no run of the stage: files where it writes are somebody else's
                clashes = [
                    p.relative_to(self.path).as_posix() for p in self.own_files(self.path) if p.exists()
                ]
                if clashes:
                    raise RunFolderError(
                        f"{self.path} holds {', '.join(clashes)}, where this run writes, but no run of it wrote "
                        "them (run.json has none): move them, or choose another output_dir."
                    )
            if previous is None:
                if resume == "true":
                    print(f"No run in {self.path} yet: starting from scratch.")
                return False
            if overwrite != "false":
                self._clear(overwrite)
                return False
            recorded = previous.get("task")
            if recorded is not None and self.task is not None and recorded != self.task:
                raise RunFolderError(
                    f"{self.path} holds a {recorded} run ({describe(previous)}); this run is {self.task}, which "
                    "cannot continue it. Choose another output_dir, or set overwrite: true to replace it (resume "
                    "unset)."
                )
            if resume == "false":
                raise RunFolderError(
                    f"{self.path} already holds a run ({describe(previous)}). Set resume: true to continue it, "
                    "overwrite: true to start a new one (the old run is moved aside) or overwrite: delete (it is "
                    "deleted), or choose another run folder."
                )
            if previous.get("status") == "finished":
                raised = raised_budgets(previous.get("budgets", {}), budgets)
                if not raised:
                    raise RunFolderError(
                        f"{self.path} holds a finished run ({describe(previous)}): nothing is left to train. Raise "
                        f"a budget ({', '.join(sorted(budgets))}) to train it further, or set overwrite: true to "
                        "start a new run."
                    )
                print(f"Continuing the finished run in {self.path}: {', '.join(raised)}.")
            return True

        self.continuing = bool(agree(decide, args))
        return self.continuing

    def _clear(self, how: str) -> None:
        """``overwrite``: the stage's own files out of the folder, at once and whole, into a folder beside it
        (``true``: ``<folder>.replaced-<time>/``, kept) or inside it (``delete``: ``.overwritten-<time>/``,
        deleted once the new run has started). A run that fails before it starts (its data unreadable, its
        model refused) puts them back, with the stage's record: nothing is lost to a typo."""
        files = [path for path in self.own_files(self.path) if path.exists()]
        owned = {path.resolve() for path in files}
        left = [
            entry.name + ("/" if entry.is_dir() else "")
            for entry in sorted(self.path.iterdir())
            if entry.name not in (LOCK_FILE, RECORD_FILE)
            and entry.resolve() not in owned
            and not any(path.is_relative_to(entry.resolve()) for path in owned)
        ]
        if left:
            print(f"Left in place in {self.path} (not this run's): {', '.join(left)}.")
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        aside = (
            self.path / f".overwritten-{stamp}"
            if how == "delete"
            else self.path.with_name(f"{self.path.name}.replaced-{stamp}")
        )
        aside.mkdir(parents=True, exist_ok=False)
        moved = []
        for path in files:
            target = aside / path.relative_to(self.path)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, target)
            moved.append(path.relative_to(self.path))
        records = self._records()
        self._replaced = (how, aside, moved, records.pop(self.stage, None))
        (self.path / RECORD_FILE).write_text(json.dumps(records, indent=2, default=str), encoding="utf-8")
        if how == "delete":
            print(
                f"overwrite: delete: the earlier run's {len(files)} files and folders in {self.path} are deleted "
                "once the new run starts (put back if it fails before)."
            )
        else:
            print(f"overwrite: the earlier run in {self.path} was moved to {aside}.")

    def _finish_replacing(self) -> None:
        """The new run has started: what ``overwrite: delete`` put aside goes (``true`` keeps it aside)."""
        replaced, self._replaced = getattr(self, "_replaced", None), None
        if replaced is not None and replaced[0] == "delete":
            shutil.rmtree(replaced[1], ignore_errors=True)

    def _restore_replaced(self) -> None:
        """The run ended before it started: the files ``overwrite`` put aside, and the stage's record, back."""
        replaced, self._replaced = getattr(self, "_replaced", None), None
        if replaced is None:
            return
        how, aside, moved, record = replaced
        for relative in moved:
            target = self.path / relative
            if target.exists() or target.is_symlink():
                _remove(target)  # this run's own new copy (a tokenizer it trained before failing)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(aside / relative, target)
        shutil.rmtree(aside, ignore_errors=True)
        if record is not None:
            records = self._records()
            records[self.stage] = record
            (self.path / RECORD_FILE).write_text(json.dumps(records, indent=2, default=str), encoding="utf-8")
        print(f"The run did not start: the earlier run's files are back in {self.path}.")

    def other_files(self) -> list[str]:
        """The folder's entries that are not a run's own (its lock and record aside)."""
        if not self.path.is_dir():
            return []
        return sorted(
            entry.name + ("/" if entry.is_dir() else "")
            for entry in self.path.iterdir()
            if entry.name not in (LOCK_FILE, RECORD_FILE, f".{RECORD_FILE}.tmp")
        )


def _remove(path: Path) -> None:
    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()


def inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` is ``folder`` or lies inside it (symbolic links resolved)."""
    return path.resolve().is_relative_to(folder.resolve())


def describe(record: dict) -> str:
    """``finished at update 800, 2026-11-27T13:02:11+00:00``-style summary of a stage's record."""
    parts = [record.get("status", "unknown")]
    if record.get("updates") is not None:
        parts.append(f"at update {record['updates']}")
    if record.get("updated"):
        parts.append(f"last written {record['updated']}")
    return ", ".join(parts)


def raised_budgets(before: dict, now: dict) -> list[str]:
    """``name: before -> now`` for each budget that grew (None: no limit, the largest)."""
    raised = []
    for name, value in now.items():
        old = before.get(name)
        if old == value:
            continue
        if value is None or (old is not None and value > old):
            raised.append(f"{name}: {old!r} -> {value!r}")
    return raised


def changed_settings(recorded: dict, now: dict) -> list[str]:
    """``name: recorded -> now`` for each recorded setting that differs (a mapping's fields as
    ``name.field``). Settings a record lacks (one written before they were recorded) are not compared."""
    now = json.loads(json.dumps(now, default=str))  # as a record holds it: tuples as lists, paths as text
    changes = []
    for name in sorted(recorded):
        before, after = recorded.get(name), now.get(name)
        if isinstance(before, dict) or isinstance(after, dict):
            before, after = before or {}, after or {}
            for key in sorted(set(before) | set(after)):
                if before.get(key) != after.get(key):
                    changes.append(f"{name}.{key}: {before.get(key)!r} -> {after.get(key)!r}")
        elif before != after:
            changes.append(f"{name}: {before!r} -> {after!r}")
    return changes


__all__ = [
    "RunFolder",
    "RunFolderError",
    "RESUME_CHOICES",
    "OVERWRITE_CHOICES",
    "normalise_choice",
    "changed_settings",
    "agree",
    "inside",
    "raised_budgets",
]
