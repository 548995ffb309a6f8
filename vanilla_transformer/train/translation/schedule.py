"""The learning-rate schedule of §5.3, Eq. 3, as a pure function and a torch scheduler, and the opt-in
cool-down that takes it to zero at the end of a run's budget."""

from __future__ import annotations

from collections.abc import Callable

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR


def transformer_learning_rate(step: int, d_model: int, warmup_steps: int, scale: float = 1.0) -> float:
    """Eq. 3: lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5).

    Rises linearly for the first ``warmup_steps`` updates, then decays with the inverse square root of
    the step. ``step`` counts optimizer updates from 1; the paper uses warmup 4000 and scale 1.
    """
    if warmup_steps < 1:
        raise ValueError(f"`warmup_steps` must be at least 1, got {warmup_steps}.")
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def cooldown_factor(progress: float, cooldown: float) -> float:
    """A departure from Eq. 3 for runs with a fixed budget (``lr_cooldown``): 1 until the last ``cooldown``
    fraction of the budget, then a linear fall to 0 when the budget is spent (``progress`` = the fraction
    spent). Eq. 3's own decay, proportional to step^-0.5, is still at 45 % of its peak after 5x the warmup;
    ending a short run at a rate near zero is what warmup-stable-decay schedules do (Hu et al., 2024,
    MiniCPM; Hägele et al., 2024). ``cooldown`` 0 is the paper's schedule."""
    if cooldown <= 0 or progress <= 1 - cooldown:
        return 1.0
    return max(0.0, (1.0 - progress) / cooldown)


def transformer_lr_scheduler(
    optimizer: Optimizer,
    d_model: int,
    warmup_steps: int,
    scale: float = 1.0,
    cooldown: float = 0.0,
    progress: Callable[[], float] | None = None,
) -> LambdaLR:
    """A ``LambdaLR`` that gives update k (1-based) the rate of Eq. 3 at step k, times
    ``cooldown_factor(progress(), cooldown)`` when a cool-down is asked for: ``progress`` reports the
    fraction of the budget spent when the scheduler sets the next update's rate (it is asked at every
    update where given, so a budget it keeps can end the run whether or not the rate cools down).

    The optimizer's own ``lr`` must be 1.0: LambdaLR multiplies it by the returned factor.
    """
    for group in optimizer.param_groups:
        if group.get("initial_lr", group["lr"]) != 1.0:
            raise ValueError("Create the optimizer with lr=1.0; Eq. 3 gives the absolute learning rate.")
    if cooldown and progress is None:
        raise ValueError("A cool-down needs `progress`, the fraction of the budget spent.")

    def factor(index: int) -> float:
        rate = transformer_learning_rate(index + 1, d_model, warmup_steps, scale)
        return rate * cooldown_factor(progress(), cooldown) if progress is not None else rate

    return LambdaLR(optimizer, factor)


__all__ = ["cooldown_factor", "transformer_learning_rate", "transformer_lr_scheduler"]
