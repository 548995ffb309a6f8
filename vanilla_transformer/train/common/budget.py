"""Time budgets of a Trainer run, as callbacks: ``TimeBudget`` ends this invocation after its minutes;
``TrainingClock`` counts the minutes of every invocation of a run and ends it when the run's budget is
spent, and ``budget_schedule`` is the learning-rate factor that reaches zero there (``BudgetedTrainer``
applies it to a ``transformers.Trainer``); ``TrainingProgressCallback`` shows either budget. The one run
(``train/run.py``) adds them to every task's trainer."""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
from torch.optim.lr_scheduler import LambdaLR
from tqdm.auto import tqdm
from transformers import Trainer, TrainerCallback
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_callback import ExportableState, ProgressCallback

from .run_trainer import RunTrainer


class TimeBudget(TrainerCallback):
    """Ends training after ``minutes`` of this invocation (``session_minutes``), saving a checkpoint first, so a
    budgeted run stops cleanly and the same command with ``resume: true`` (or ``auto``) continues it."""

    def __init__(self, minutes: float):
        self.minutes = minutes
        self.start = time.monotonic()
        self.ended = False  # True once it has stopped this invocation

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        if time.monotonic() - self.start >= 60 * self.minutes:
            self.ended = True
            control.should_training_stop = True
            control.should_save = True
        return control


class TrainingClock(TrainerCallback, ExportableState):
    """Minutes of training summed over every invocation of a run (checkpoints keep them, in
    ``trainer_state.json``), logged with each loss as ``elapsed_minutes``. Counted from the first update
    of an invocation, so evaluation and checkpointing between updates count too.

    With ``budget_minutes`` the time-budget schedule asks it for ``scheduled_progress`` (the fraction of
    the budget spent when the next update's learning rate is set), and training ends, with a checkpoint,
    after the update that set it to zero."""

    def __init__(
        self,
        budget_minutes: float | None = None,
        elapsed_seconds: float = 0.0,
        evaluate_at_end: bool = False,
    ):
        self.budget_minutes = budget_minutes
        self.elapsed_seconds = elapsed_seconds
        self.evaluate_at_end = evaluate_at_end  # validate the update that spends the budget (its last)
        self.last_progress = self._fraction(elapsed_seconds)
        self._tick = None

    @classmethod
    def resuming(
        cls, budget_minutes: float | None, checkpoint: str | None, evaluate_at_end: bool = False
    ) -> TrainingClock:
        """A clock that goes on from the minutes recorded in ``checkpoint`` (none: from zero), with this
        invocation's budget (a resumed run may be given more time)."""
        elapsed = 0.0
        if checkpoint is not None:
            state = json.loads((Path(checkpoint) / TRAINER_STATE_NAME).read_text(encoding="utf-8"))
            recorded = state.get("stateful_callbacks", {}).get(cls.__name__, {})
            elapsed = float(recorded.get("attributes", {}).get("elapsed_seconds", 0.0))
        return cls(budget_minutes, elapsed, evaluate_at_end)

    def state(self) -> dict:
        return {
            "args": {"budget_minutes": self.budget_minutes, "evaluate_at_end": self.evaluate_at_end},
            "attributes": {"elapsed_seconds": self.elapsed_seconds},
        }

    def _fraction(self, seconds: float) -> float:
        return seconds / (60 * self.budget_minutes) if self.budget_minutes else 0.0

    def scheduled_progress(self) -> float:
        """The fraction of the budget spent by now (remembered: training stops once it reaches 1)."""
        running = time.monotonic() - self._tick if self._tick is not None else 0.0
        self.last_progress = self._fraction(self.elapsed_seconds + running)
        return self.last_progress

    def on_step_begin(self, args, state, control, **kwargs):
        if self._tick is None:
            self._tick = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        now = time.monotonic()
        self.elapsed_seconds += now - self._tick
        self._tick = now
        # The schedule set the next update's rate to zero (or, a safety net, the budget is 1 % overdrawn).
        if (
            self.budget_minutes is not None
            and max(self.last_progress, self._fraction(self.elapsed_seconds) - 0.01) >= 1
        ):
            control.should_training_stop = True
            control.should_save = True
            control.should_evaluate = control.should_evaluate or self.evaluate_at_end
        return control


def fraction_spent(trainer: Trainer, steps: float, clock: TrainingClock) -> float:
    """The fraction of a run's budget spent when the scheduler sets the next update's rate: ``steps`` (of
    ``max_steps``), or the clock's minutes of its budget if that is further along. The same on every
    process (the largest), so their learning rates, and the update the clock stops at, agree."""
    minutes = clock.scheduled_progress()
    if trainer.args.world_size > 1:
        both = torch.tensor([steps, minutes], device=trainer.args.device)
        steps, minutes = trainer.accelerator.reduce(both, "max").tolist()
        clock.last_progress = minutes
    return max(steps, minutes)


class BudgetedTrainer(RunTrainer, Trainer):
    """A ``transformers.Trainer`` with the run core's checkpoints and loss guard (``RunTrainer``), whose
    callbacks may hold a ``TrainingClock`` with a budget: then each
    update's learning rate is ``budget_schedule`` of the larger of updates / ``max_steps`` (the plain
    linear schedule) and minutes / budget, so it reaches zero at whichever the run spends first: the
    recipe's epochs on a fast machine, its minutes on a slow one. Without a budget: the Trainer's own
    scheduler."""

    @property
    def clock(self) -> TrainingClock | None:
        return next((cb for cb in self.callback_handler.callbacks if isinstance(cb, TrainingClock)), None)

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        clock = self.clock
        if clock is None or clock.budget_minutes is None:
            return super().create_scheduler(num_training_steps, optimizer)
        if self.lr_scheduler is None:
            warmup, steps = self.args.warmup_steps, max(num_training_steps, 1)
            # LambdaLR asks once per parameter group (the Trainer's decayed and undecayed ones): the budget
            # is read once an update, so both groups get the same rate and several processes reduce once.
            rates: dict[int, float] = {}

            def factor(step: int) -> float:
                if step not in rates:
                    # self.clock, not the clock of now: restore_callback_states_from_checkpoint replaces it.
                    spent = fraction_spent(self, step / steps, self.clock)
                    rates.clear()
                    rates[step] = budget_schedule(step, spent, warmup)
                return rates[step]

            self.lr_scheduler = LambdaLR(optimizer or self.optimizer, factor)
            self._created_lr_scheduler = True
        return self.lr_scheduler


class TrainingProgress:
    """The progress bar of a run: it counts updates towards ``max_steps``, or, for a run whose end is a
    minutes budget (``run_minutes`` or ``session_minutes``), minutes towards that budget, with the updates
    done beside them."""

    def __init__(
        self, max_steps: int, step: int, budget_minutes: float | None, minutes: float, disable: bool
    ):
        self.in_minutes = budget_minutes is not None
        total, initial = (
            (round(budget_minutes, 1), round(minutes, 1)) if self.in_minutes else (max_steps, step)
        )
        self.bar = tqdm(
            total=total,
            initial=min(initial, total),
            desc="Training",
            unit="min" if self.in_minutes else "it",
            bar_format="{l_bar}{bar}| {n:.1f}/{total:.1f} min [{elapsed}{postfix}]"
            if self.in_minutes
            else None,
            disable=disable,
        )
        self.step, self.postfix = step, {}

    def advance(self, step: int, minutes: float) -> None:
        """After update ``step``, ``minutes`` into the run."""
        self.step = step
        if self.in_minutes:
            self.bar.n = min(round(minutes, 1), self.bar.total)
            self.set_postfix(**self.postfix)
        else:
            self.bar.update(step - self.bar.n)

    def set_postfix(self, **values) -> None:
        """Values shown after the bar (the update count too, where the bar counts minutes)."""
        self.postfix = values
        self.bar.set_postfix({"update": self.step, **values} if self.in_minutes else values)

    def close(self) -> None:
        self.bar.close()


class TrainingProgressCallback(ProgressCallback):
    """The Trainer's progress bar as ``TrainingProgress`` draws it: in minutes where a time budget ends the
    run (then ``max_steps`` is only a bound): the run's (``TrainingClock``), or this invocation's
    (``TimeBudget``, ``session_minutes``) where that one ends first; else in updates. The last logged loss,
    rate and throughput stand beside it instead of a printed line per log."""

    def __init__(self, clock: TrainingClock, session: TimeBudget | None = None):
        super().__init__()
        self.clock, self.session = clock, session
        self.progress = None
        self.counts_session = False

    def _minutes_done(self) -> float:
        if self.counts_session:
            return (time.monotonic() - self.session.start) / 60
        return self.clock.elapsed_seconds / 60

    def on_train_begin(self, args, state, control, **kwargs):
        run_left = None
        if self.clock.budget_minutes is not None:
            run_left = self.clock.budget_minutes - self.clock.elapsed_seconds / 60
        self.counts_session = self.session is not None and (
            run_left is None or self.session.minutes < run_left
        )
        budget = self.session.minutes if self.counts_session else self.clock.budget_minutes
        disable = not state.is_world_process_zero or args.disable_tqdm
        self.progress = TrainingProgress(
            state.max_steps, state.global_step, budget, self._minutes_done(), disable
        )

    def on_step_end(self, args, state, control, **kwargs):
        self.progress.advance(state.global_step, self._minutes_done())

    def on_log(self, args, state, control, logs=None, **kwargs):
        shown = {"loss": "{:.3f}", "learning_rate": "{:.2e}", "tokens_per_second": "{:,.0f}"}
        values = {key: form.format(logs[key]) for key, form in shown.items() if key in (logs or {})}
        if self.progress is not None and values:
            self.progress.set_postfix(**values)

    def on_train_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.close()


def budget_schedule(step: int, progress: float, warmup: float) -> float:
    """The learning-rate factor of a run with a time budget: linear warm-up (``warmup`` < 1: over that
    fraction of the budget; >= 1: over that many updates, as ``TrainingArguments.warmup_steps`` reads),
    then linear decay that reaches zero when the budget is spent (``progress`` = minutes trained /
    budget): the budget-aware schedule of "Cramming" (Geiping & Goldstein, 2023)."""
    decay = max(0.0, 1.0 - progress)
    if warmup >= 1:
        return min(1.0, step / warmup) * decay
    if progress < warmup:
        return progress / warmup
    return decay / (1.0 - warmup)


__all__ = [
    "BudgetedTrainer",
    "TimeBudget",
    "TrainingClock",
    "budget_schedule",
    "fraction_spent",
    "TrainingProgress",
    "TrainingProgressCallback",
]
