"""§6.1: which of a run's checkpoints are averaged. "For the base models, we used a single model obtained by
averaging the last 5 checkpoints, which were written at 10-minute intervals": ``spaced_checkpoints`` picks a
run's last checkpoints at regular intervals (``average_last`` at the end of a run, and
``training/choose_on_validation.py``); ``vanilla_transformer.averaging.average_checkpoints`` averages them."""

from __future__ import annotations

from pathlib import Path

from ...averaging import checkpoint_dirs, checkpoint_step


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


__all__ = ["spaced_checkpoints"]
