"""Stopping a run when asked: SIGTERM (what SLURM, Kubernetes and spot instances send before they kill a
job), SIGINT (Ctrl-C) and SIGUSR1 (SLURM's ``--signal``).

During the updates the first signal is a request: the update in flight finishes, a checkpoint is written,
and the run ends with ``RunInterrupted`` (``interruption.py``: exit status 128 + the signal's number, one
line saying how to resume). A second signal stops the process at once: the checkpoints already published
are complete (they are renamed into place only when whole), so nothing but the update in flight is lost.
Outside the updates (setting up, the final model and test scores), a signal stops the run at once, with the
same line.

Under several processes (``accelerate launch`` forwards the signal to every worker; a signal to one of them
is enough) the processes agree on the update to stop after without waiting for a device or for each other
at every update: after update k each process starts an all-reduce of the signal it holds over a CPU
(gloo) process group of its own, and reads its result after update k + 1. A signal that arrives during
update k therefore stops every process after update k + 1: the same update on all of them, whatever the
timing, since all read the same all-reduce. During the last update, and once the updates are over, they
agree at once. A process's own copy of a signal that reached it first through the agreement (the launcher
forwards the signal to one worker after the other) is its first signal, not a second one.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

import torch
from transformers import TrainerCallback

from ...interruption import RunInterrupted

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


def signal_name(signum: int) -> str:
    return signal.Signals(signum).name


def several_processes(args) -> bool:
    """Whether the run is one of several processes that must agree (``torch.distributed`` set up)."""
    return args.world_size > 1 and torch.distributed.is_available() and torch.distributed.is_initialized()


class Preemption(TrainerCallback):
    """Signal handlers for the life of a run (a context manager), and the callback that turns a signal
    received during the updates into a stop after the update in flight (one update later under several
    processes), with a checkpoint."""

    def __init__(self, resume_hint: str):
        self.resume_hint = resume_hint  # what to run to continue, for the messages
        self.received: int | None = None  # the signal the run stops on: this process's, or one agreed on
        self.stopped_at: int | None = None  # the update after which training stopped on the signal
        self.in_updates = False
        self._own: int | None = None  # the first signal this process itself received
        self._previous: dict[int, object] = {}
        self._group = None  # several processes: the gloo group they agree in (CPU tensors, no device)
        self._in_flight = None  # (work, flag): the all-reduce started after the previous update

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
        self._in_flight = None

    def _handle(self, signum: int, frame) -> None:
        name = signal_name(signum)
        if self._own is not None:  # asked twice: no more waiting
            print(
                f"\n{name} again: stopping now, without finishing the update or its checkpoint; the checkpoints "
                f"written before are intact. {self.resume_hint}",
                file=sys.stderr,
                flush=True,
            )
            os._exit(128 + signum)
        self._own = signum
        # Already stopping on another process's signal (the processes agreed on it before this one's own copy
        # came): that stop, with its checkpoint, goes on. Not a second signal, and not a stop at once.
        stopping = self.received is not None
        self.received = self.received or signum
        if self.in_updates or stopping:
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

    # -- agreeing, under several processes -------------------------------------------------------------

    def _all_reduce(self, signum: int, wait: bool) -> int:
        """The largest signal number any process holds (0: none), over the gloo group: CPU tensors, so no
        process waits for its device. ``wait=False`` starts it and returns 0; ``_wait`` reads it."""
        flag = torch.tensor([signum], dtype=torch.int32)
        work = torch.distributed.all_reduce(
            flag, op=torch.distributed.ReduceOp.MAX, group=self._group, async_op=True
        )
        self._in_flight = (work, flag)
        return self._wait() if wait else 0

    def _wait(self) -> int:
        """The result of the all-reduce in flight (0 if none is)."""
        if self._in_flight is None:
            return 0
        (work, flag), self._in_flight = self._in_flight, None
        work.wait()
        return int(flag[0])  # a CPU tensor: no device to wait for

    def _agreed(self, last: bool) -> int:
        """The signal every process stops on after this update (0: none). One process: its own. Several: the
        all-reduce of the signals they held after the previous update, and the next one started; where the run
        ends after this update anyway (``last``), this update's signals, at once."""
        if self._group is None:
            return self.received or 0
        held = self.received or 0
        signum = self._wait()
        if not signum:
            signum = self._all_reduce(held, wait=last)
        return signum

    # -- the callback ----------------------------------------------------------------------------------

    def on_train_begin(self, args, state, control, **kwargs):
        self.in_updates = True
        if self._group is None and several_processes(args):
            self._group = torch.distributed.new_group(backend="gloo")  # once: every process creates it
        # a signal between set-up and the first update, to any process: all stop
        signum = self._all_reduce(self.received or 0, wait=True) if self._group is not None else self.received
        if signum:
            self.received = self.received or signum
            control.should_training_stop = True

    def on_step_end(self, args, state, control, **kwargs):
        signum = self._agreed(last=control.should_training_stop)
        if signum:
            self.received = self.received or signum
            self.stopped_at = state.global_step
            control.should_training_stop = True
            control.should_save = True
            control.should_evaluate = False  # the grace period is short: validation waits for the resume
        return control

    def on_train_end(self, args, state, control, **kwargs):
        if self._group is not None:
            # The updates are over: the all-reduce still in flight, or one of the signals held now (one that
            # came during the last update's save or validation), so that every process stops, or none does.
            signum = self._wait() or self._all_reduce(self.received or 0, wait=True)
            self.received = self.received or signum or None
        self.in_updates = False

    def interrupted(self, checkpoint: str | None) -> RunInterrupted:
        """The error that ends a run stopped by a signal after update ``stopped_at``."""
        saved = f"checkpoint written: {checkpoint}" if checkpoint else "no checkpoint yet"
        return RunInterrupted(
            self.received,
            f"Stopped by {signal_name(self.received)} after update {self.stopped_at} ({saved}). {self.resume_hint}",
        )


__all__ = ["Preemption", "RunInterrupted", "SIGNALS"]
