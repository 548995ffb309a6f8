"""The learning-rate schedule of §5.3, Eq. 3, as a pure function and a torch scheduler."""

from __future__ import annotations

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


def transformer_lr_scheduler(
    optimizer: Optimizer, d_model: int, warmup_steps: int, scale: float = 1.0
) -> LambdaLR:
    """A ``LambdaLR`` that gives update k (1-based) the rate of Eq. 3 at step k.

    The optimizer's own ``lr`` must be 1.0: LambdaLR multiplies it by the returned factor.
    """
    for group in optimizer.param_groups:
        if group.get("initial_lr", group["lr"]) != 1.0:
            raise ValueError("Create the optimizer with lr=1.0; Eq. 3 gives the absolute learning rate.")
    return LambdaLR(
        optimizer, lambda index: transformer_learning_rate(index + 1, d_model, warmup_steps, scale)
    )


__all__ = ["transformer_learning_rate", "transformer_lr_scheduler"]
