"""Stopping a run when asked: SIGTERM (what SLURM, Kubernetes and spot instances send before they kill a
job), SIGINT (Ctrl-C) and SIGUSR1 (SLURM's ``--signal``).

During the updates the first signal is a request: the update in flight finishes, a checkpoint is written,
and the run ends with ``RunInterrupted`` (exit status 128 + the signal's number, one line saying how to
resume). A second signal stops the process at once: the checkpoints already published are complete (they
are renamed into place only when whole), so nothing but the update in flight is lost. Outside the updates
(setting up, the final model and test scores), a signal stops the run at once, with the same line.

Under several processes (``accelerate launch`` forwards the signal to every worker; a signal to one of them
is enough) the processes agree after each update, so that all stop at the same one.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

import torch
from transformers import TrainerCallback

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


class RunInterrupted(Exception):
    """The run stopped on a signal. ``exit_status`` is the shell's 128 + the signal's number."""

    def __init__(self, signum: int, message: str):
        super().__init__(message)
        self.signum = signum
        self.exit_status = 128 + signum


def signal_name(signum: int) -> str:
    return signal.Signals(signum).name


class Preemption(TrainerCallback):
    """Signal handlers for the life of a run (a context manager), and the callback that turns a signal
    received during the updates into a stop after the update in flight, with a checkpoint."""

    def __init__(self, resume_hint: str):
        self.resume_hint = resume_hint  # what to run to continue, for the messages
        self.received: int | None = None
        self.stopped_at: int | None = None  # the update after which training stopped on the signal
        self.in_updates = False
        self._previous: dict[int, object] = {}

    # -- handlers --------------------------------------------------------------------------------------

    def __enter__(self) -> Preemption:
        if threading.current_thread() is threading.main_thread():  # handlers can be set there only
            for signum in SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame) -> None:
        name = signal_name(signum)
        if self.received is not None:  # asked twice: no more waiting
            print(
                f"\n{name} again: stopping now, without finishing the update or its checkpoint; the checkpoints "
                f"written before are intact. {self.resume_hint}",
                file=sys.stderr,
                flush=True,
            )
            os._exit(128 + signum)
        self.received = signum
        if self.in_updates:
            print(
                f"\n{name} received: finishing the update in flight and writing a checkpoint, then stopping "
                "(send it again to stop at once).",
                file=sys.stderr,
                flush=True,
            )
            return
        raise RunInterrupted(
            signum, f"Stopped by {name} before the first update or after the last one. {self.resume_hint}"
        )

    # -- the callback ----------------------------------------------------------------------------------

    def on_train_begin(self, args, state, control, **kwargs):
        self.in_updates = True
        if self.received is not None:  # a signal between set-up and the first update
            control.should_training_stop = True

    def on_step_end(self, args, state, control, **kwargs):
        signum = self.received or 0
        if args.world_size > 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
            flag = torch.tensor([signum], device=args.device)
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
            signum = int(flag.item())
        if signum:
            self.received = self.received or signum
            self.stopped_at = state.global_step
            control.should_training_stop = True
            control.should_save = True
            control.should_evaluate = False  # the grace period is short: validation waits for the resume
        return control

    def on_train_end(self, args, state, control, **kwargs):
        self.in_updates = False

    def interrupted(self, checkpoint: str | None) -> RunInterrupted:
        """The error that ends a run stopped by a signal after update ``stopped_at``."""
        saved = f"checkpoint written: {checkpoint}" if checkpoint else "no checkpoint yet"
        return RunInterrupted(
            self.received,
            f"Stopped by {signal_name(self.received)} after update {self.stopped_at} ({saved}). {self.resume_hint}",
        )


__all__ = ["Preemption", "RunInterrupted", "SIGNALS"]
