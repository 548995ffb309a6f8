"""A run stopped by a signal, as the command line reports it: ``RunInterrupted`` carries the shell's exit
status, 128 + the signal's number. ``train/common/preemption.py`` raises it once the run's checkpoint is
written; ``cli.main`` prints its line and exits with that status. It lives outside ``train/`` so that the
command line knows it without importing the training code."""

from __future__ import annotations


class RunInterrupted(Exception):
    """The run stopped on a signal. ``exit_status`` is the shell's 128 + the signal's number."""

    def __init__(self, signum: int, message: str):
        super().__init__(message)
        self.signum = signum
        self.exit_status = 128 + signum


__all__ = ["RunInterrupted"]
