"""What every trainer of the package adds to ``transformers.Trainer`` so that a run never loses a user's work
(``RunTrainer``, a mixin placed before the Trainer class), and the pieces the one run (``train/run.py``)
calls around ``Trainer.train``, for every task's trainer alike:

* checkpoints written whole or not at all: ``_save_checkpoint`` stages the Trainer's own save under
  ``.tmp-checkpoint-N/``, adds the run's settings and the files' checksums, and renames it into place
  (``checkpoints.py``); any error while saving (a full disk, as torch and safetensors really raise it)
  removes the staging folder and is one line naming the disk, with the last good checkpoint intact;
* resume from the newest intact checkpoint, after comparing its settings with the run's
  (``resume_checkpoint``);
* an update whose loss is not finite is skipped, and a run of them stops the run before any checkpoint
  holds what they did (``guard_update``);
* the run folder's lock and record, and a stop on SIGTERM / SIGINT / SIGUSR1 with a checkpoint
  (``run_folder.py``, ``preemption.py``).
"""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import torch
from transformers.utils import logging

from ...averaging import SETTINGS_FILE
from .checkpoints import (
    checkpoint_dirs,
    damage,
    latest_checkpoint,
    publish_checkpoint,
    staging_dir,
    tidy_up,
    write_checksums,
)
from .preemption import Preemption
from .run_folder import RunFolder, RunFolderError, changed_settings

logger = logging.get_logger(__name__)

# A checkpoint's record of the run's settings (compared on resume).
# Updates in a row whose loss is not finite before the run stops (each one is skipped).
NONFINITE_UPDATES_ALLOWED = 5


class RunTrainer:
    """Mixin for a ``transformers.Trainer`` subclass: staged, checksummed checkpoints that carry the run's
    settings (``run_settings``), and the non-finite loss guard. ``checkpoints`` is where the checkpoints
    go (``output_dir/checkpoints`` as the run sets it; the Trainer's ``output_dir`` where nothing sets it)."""

    run_settings: dict | None = None
    checkpoints: Path | None = (
        None  # where the run keeps the checkpoints (the run sets it: Task.checkpoints_folder)
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.args.fp16 and self.args.device.type == "cpu":
            self._fp16_on_cpu()

    def _fp16_on_cpu(self) -> None:
        """``mixed_precision: fp16`` on a CPU: Accelerate leaves fp16 to GPUs (no autocast, no loss scaler on a
        CPU), so the run would silently train in fp32. torch runs both on the CPU: its fp16 autocast and
        ``GradScaler("cpu")``, which Accelerate's backward, clipping and optimizer step then use as on a GPU.
        Slow (CPUs multiply fp16 no faster than fp32), but the same numerics as a T4's: the fp16 path is
        tested where no GPU is."""
        self.accelerator.native_amp = True
        self.accelerator.scaler = torch.amp.GradScaler("cpu")

    nonfinite_advice = (
        "Lower the learning rate or `max_grad_norm`, or set `mixed_precision: no` if this is a bf16 overflow."
    )

    def checkpoints_folder(self) -> Path:
        return self.checkpoints if self.checkpoints is not None else Path(self.args.output_dir)

    def describe_batch(self, inputs) -> str:
        """A batch, as the loss guard's warning names it."""
        rows = len(inputs["input_ids"]) if "input_ids" in inputs else 0
        return f"{rows} rows"

    # -- the non-finite loss guard ----------------------------------------------------------------------

    # The guard's flags stay on the device and are read back at every log, save and evaluation and at the
    # end of the updates (where the trainer waits for the device anyway), and at least this often.
    guard_reads_every = 32

    def training_step(self, model, inputs, *args, **kwargs):
        """The trainer's step, guarding the update against a loss that is not finite. The loss is kept, not
        read: whether it was finite is decided on the device (``guard_update``) and read back later."""
        loss = super().training_step(model, inputs, *args, **kwargs)
        guard = self._loss_guard()
        guard.losses.append(loss.detach().float().mean())
        guard.batches.append(inputs)  # described only if its loss turns out not to be finite
        if self.accelerator.sync_gradients:  # the update's last batch: the optimizer steps next
            self.guard_update(model)
        return loss

    def guard_update(self, model) -> None:
        """Skip an update any of whose batches had a NaN or infinite loss (too high a rate, a bad batch, a
        bf16 overflow): the optimizer leaves the weights and its state as they were; the skip is logged.
        After ``NONFINITE_UPDATES_ALLOWED`` in a row the run stops with an error, before any checkpoint holds
        what such updates did. Every process takes the same decision.

        Decided on the device, without waiting for it: the fused optimizers (the translation recipe's Adam,
        the Trainer's default AdamW) skip a step whose ``found_inf`` is 1, as under a ``GradScaler``; with a
        loss scaler, one gradient made NaN makes the scaler skip the step (and lower its scale, as after an
        overflow). Once a run of skipped updates reaches the limit, every update after it is skipped too,
        so the weights stay those of the last good update until ``read_guard`` stops the run, at the next
        log, save or evaluation. Other optimizers cannot skip on the device: there the flag is read at once
        and the gradients dropped, so that the optimizer passes over every parameter."""
        guard = self._loss_guard()
        losses = torch.stack(guard.losses)  # (batches of the update,)
        not_finite = ~torch.isfinite(losses)
        first = not_finite.int().argmax()  # the update's first batch whose loss is not finite (0: none)
        bad = not_finite.any().float()
        if self.args.world_size > 1 and torch.distributed.is_initialized():
            torch.distributed.all_reduce(bad, op=torch.distributed.ReduceOp.MAX)  # on the device, no wait
        value = losses.gather(0, first.view(1))[0]  # its loss (gather: indexing by a tensor reads it back)
        guard.rows.append(torch.stack([bad, first.float(), value]))
        rate = self.lr_scheduler.get_last_lr()[0] if self.lr_scheduler is not None else float("nan")
        guard.updates.append((self.state.global_step + 1, rate, guard.batches))
        guard.losses, guard.batches = [], []
        if guard.in_a_row_on_device is None:
            guard.in_a_row_on_device = torch.zeros((), device=bad.device)
            guard.limit_reached = torch.zeros((), device=bad.device)
        guard.in_a_row_on_device = (guard.in_a_row_on_device + 1) * bad
        guard.limit_reached = torch.maximum(
            guard.limit_reached, (guard.in_a_row_on_device >= NONFINITE_UPDATES_ALLOWED).float()
        )
        skip = torch.maximum(bad, guard.limit_reached)  # 1: the optimizer leaves this update out
        optimizer = self.optimizer
        while hasattr(optimizer, "optimizer"):  # Accelerate's wrapper
            optimizer = optimizer.optimizer
        if self.accelerator.scaler is not None:
            # The scaler checks every gradient before the step: one NaN gradient (the smallest) skips it.
            grads = [p.grad for p in model.parameters() if p.grad is not None]
            if grads:
                min(grads, key=torch.Tensor.numel).add_(torch.where(skip > 0, float("nan"), 0.0))
        elif getattr(optimizer, "_step_supports_amp_scaling", False):
            optimizer.found_inf = skip  # read by the fused step, on the device
        elif self.state.global_step + 1 in self.read_guard():
            model.zero_grad(set_to_none=True)

    def read_guard(self) -> list[int]:
        """Read back the guard's flags of the updates since the last read (one wait for the device), log each
        skipped update, and stop the run (``ValueError``) at the one that made ``NONFINITE_UPDATES_ALLOWED``
        in a row. Returns the updates that were skipped."""
        guard = self._loss_guard()
        if not guard.rows:
            return []
        rows = torch.stack(guard.rows).tolist()
        updates, guard.rows, guard.updates = guard.updates, [], []
        skipped = []
        for (bad, first, value), (step, rate, batches) in zip(rows, updates, strict=True):
            if not bad:
                guard.in_a_row = 0
                continue
            guard.in_a_row += 1
            skipped.append(step)
            where = (
                f"({value}) on a batch of {self.describe_batch(batches[int(first)])}"
                if not math.isfinite(value)
                else "on another process's batch"
            )
            logger.warning(
                f"Update {step} skipped: the loss is not finite {where}; {guard.in_a_row} such update(s) in a row."
            )
            if guard.in_a_row >= NONFINITE_UPDATES_ALLOWED:
                raise ValueError(
                    f"The loss was not finite for {guard.in_a_row} updates in a row (the last: update {step}, "
                    f"learning rate {rate:.3g}); the run stops. {self.nonfinite_advice} The last good checkpoint "
                    f"is in {self.checkpoints_folder()}."
                )
        return skipped

    def _loss_guard(self) -> SimpleNamespace:
        """The guard's state: this update's batch losses and batches, and the updates not read back yet."""
        if "_guard" not in self.__dict__:
            self._guard = SimpleNamespace(
                losses=[],
                batches=[],
                rows=[],
                updates=[],
                in_a_row=0,
                in_a_row_on_device=None,
                limit_reached=None,
            )
        return self._guard

    def _maybe_log_save_evaluate(self, *args, **kwargs):
        """The trainer's log, save and evaluation after an update, after reading the loss guard's flags
        where one of them is due (so no checkpoint is written after updates the guard would stop the run
        at), at the end of the updates, or after ``guard_reads_every`` updates."""
        control, pending = self.control, len(self._loss_guard().rows)
        due = control.should_log or control.should_save or control.should_evaluate
        if pending and (due or control.should_training_stop or pending >= self.guard_reads_every):
            self.read_guard()
        return super()._maybe_log_save_evaluate(*args, **kwargs)

    # -- checkpoints ------------------------------------------------------------------------------------

    def _save_checkpoint(self, model, trial, *args, **kwargs):
        """The trainer's checkpoint, written under ``.tmp-checkpoint-N/`` and renamed into place once every
        process has written its part (see ``checkpoints.py``): never a partial ``checkpoint-N``. An error
        while writing removes the staging folder and stops the run with one line."""
        run_output = self.args.output_dir
        root = self.checkpoints_folder()
        step = self.state.global_step
        staged = staging_dir(root, step)
        if self.args.should_save:
            root.mkdir(parents=True, exist_ok=True)
            tidy_up(root)
        self.accelerator.wait_for_everyone()
        self.args.output_dir = str(staged)
        try:
            super()._save_checkpoint(model, trial, *args, **kwargs)
            staged_checkpoint = staged / f"checkpoint-{step}"
            if self.args.should_save:
                self._fix_best_checkpoint(staged_checkpoint, root / staged_checkpoint.name)
                if self.run_settings is not None:
                    (staged_checkpoint / SETTINGS_FILE).write_text(json.dumps(self.run_settings, indent=2))
                write_checksums(staged_checkpoint)  # last: the record of a complete checkpoint
        except Exception as error:
            shutil.rmtree(staged, ignore_errors=True)
            raise save_error(error, root, step) from error
        finally:
            self.args.output_dir = run_output
        self.accelerator.wait_for_everyone()
        if self.args.should_save:
            best = self.state.best_model_checkpoint
            publish_checkpoint(
                staged_checkpoint, root, self.args.save_total_limit, Path(best) if best else None
            )
        self.accelerator.wait_for_everyone()

    def _fix_best_checkpoint(self, staged: Path, final: Path) -> None:
        """The Trainer names the best checkpoint by the folder it wrote (here the staging one): the name it
        will have once published, in the state and in the checkpoint's own trainer_state.json."""
        best = self.state.best_model_checkpoint
        if best and Path(best).resolve().is_relative_to(staged.parent.resolve()):
            self.state.best_model_checkpoint = str(final)
            state_file = staged / "trainer_state.json"
            if state_file.is_file():
                state = json.loads(state_file.read_text())
                state["best_model_checkpoint"] = str(final)
                state_file.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")


def _mount_point(path: Path) -> Path:
    path = path.resolve()
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
    return path


def disk_full(error: BaseException) -> bool:
    """Whether ``error`` (or one it came from) says the disk is full: ``OSError(ENOSPC)``, torch.save's
    ``RuntimeError`` or safetensors' ``Exception`` whose text carries the OS's message."""
    while error is not None:
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        text = str(error)
        if "No space left on device" in text or "os error 28" in text or "Disk quota exceeded" in text:
            return True
        error = error.__cause__ or error.__context__
    return False


def save_error(error: BaseException, root: Path, step: int) -> OSError:
    """One line for an error while writing checkpoint ``step`` under ``root``: a full disk is named with its
    mount point and free space; the last good checkpoint is named either way."""
    latest = latest_checkpoint(root)
    kept = f"the checkpoints before it are intact (the latest: {latest.name if latest else 'none yet'})"
    if disk_full(error):
        mount = _mount_point(root)
        free = shutil.disk_usage(mount).free if mount.exists() else 0
        full = OSError(
            f"No space left on the disk mounted at {mount} ({free / 2**20:.1f} MiB free) while writing checkpoint "
            f"{step} under {root}; its unfinished folder was removed and {kept}. Free some space and run the "
            "same command with resume: true."
        )
        full.errno = errno.ENOSPC  # for callers; the text stays one line without the "[Errno 28]" prefix
        return full
    detail = str(error).splitlines()[0] if str(error) else type(error).__name__
    return OSError(
        f"Writing checkpoint {step} under {root} failed ({type(error).__name__}: {detail}); {kept}."
    )


def resume_checkpoint(folder: RunFolder, root: Path, settings: dict, args) -> Path | None:
    """Where a continued run resumes: the newest intact checkpoint under ``root``. A damaged one (a file
    missing, truncated or changed since its save, against its checksums) is named and passed over for the
    one before; if every one is damaged, or the run's settings differ from the checkpoint's (or, without a
    checkpoint yet, from those the run started with), the run is refused rather than started again."""
    found = checkpoint_dirs(root)
    say = print if args.process_index == 0 else (lambda *a, **k: None)
    checkpoint, problems = None, []
    for candidate in reversed(found):
        problem = damage(candidate)
        if problem is None:
            checkpoint = candidate
            break
        problems.append(f"{candidate.name}: {problem}")
        say(f"Checkpoint {candidate} cannot be resumed from ({problem}); trying the one before it.")
    if found and checkpoint is None:
        raise RunFolderError(
            f"resume: no intact checkpoint under {root} ({'; '.join(problems)}). Restore them, or start a new run "
            "with overwrite: true."
        )
    record = checkpoint / SETTINGS_FILE if checkpoint else None
    if record is not None and record.is_file():
        recorded, where = json.loads(record.read_text()), str(checkpoint)
    else:  # no checkpoint yet (or one another tool wrote): the settings the run started with, if recorded
        recorded, where = (folder.previous() or {}).get("settings") or {}, f"the run in {folder.path}"
    changes = changed_settings(recorded, settings)
    if changes:
        raise RunFolderError(
            f"resume: the run's settings differ from those of {where} ({'; '.join(changes)}). Continue it with "
            "the settings it started with, or start a new run (overwrite: true, or another run folder)."
        )
    if checkpoint is None:
        say(f"No checkpoint under {root} yet: starting the run from its first update.")
    else:
        say(f"Resuming from {checkpoint}.")
    return checkpoint


def preemption_for(command_hint: str) -> Preemption:
    """The signal handling of a run whose continuation is ``command_hint``."""
    return Preemption(f"To continue, run the same command with resume: true ({command_hint}).")


def stop_if_interrupted(trainer, folder: RunFolder, preemption: Preemption) -> None:
    """After ``Trainer.train``: a run stopped by a signal records it and ends with ``RunInterrupted``."""
    if preemption.received is None:
        return
    if preemption.stopped_at is None:
        preemption.stopped_at = trainer.state.global_step
    latest = latest_checkpoint(trainer.checkpoints_folder())
    folder.record(
        status="interrupted", updates=trainer.state.global_step, reason=f"signal {preemption.received}"
    )
    raise preemption.interrupted(str(latest) if latest else None)


__all__ = [
    "RunTrainer",
    "SETTINGS_FILE",
    "NONFINITE_UPDATES_ALLOWED",
    "resume_checkpoint",
    "preemption_for",
    "stop_if_interrupted",
    "disk_full",
    "save_error",
]
