"""A training run's life, written once for every task (fairseq's split: one trainer, tasks as hooks).

``run(task, args)`` owns every ``train`` run, whatever its task (``tasks.py``), in one fixed order:

1. **check** everything that can be checked without writing: the recipe's values (the arguments'
   ``__post_init__``), the model's size and fields, the data paths, ``init_from``, the tokenizer's source
   (``Task.check``), and that nothing the run reads lies among the files ``overwrite`` would move or
   delete. Nothing is created in the run folder before every check has passed: a refused run leaves the
   folder as it found it;
2. **open** the run folder (``output_dir``): lock it, decide to start or continue (``resume``) or replace the
   run's own files (``overwrite``), and keep its record ``run.json`` (``run_folder.py``);
3. **build** the data (``Task.setup``), the settings a resumed run must keep and the checkpoint it
   continues from (``run_trainer.resume_checkpoint``), then the tokenizer and the model
   (``Task.build_model``);
4. **precision** once, with one record (``precision_record``), printed and carried into results and card;
5. **clock and session budget** (``run_minutes`` over every invocation, ``session_minutes`` for this one);
6. **signals**: SIGTERM / SIGINT / SIGUSR1 stop after the update in flight, with a checkpoint
   (``preemption.py``);
7. ``Trainer.train``, called here and nowhere else in the package;
8. **one meaning of the end** for every task: *interrupted* (a signal: the checkpoint, exit status 128 + n),
   *stopped* (``session_minutes`` before the run's end: the checkpoint, no model), *trained* (every update
   done; a stop from here on, during scoring or saving, leaves a run that ``resume: true`` finishes without
   another update), *finished*;
9. **results**: the task's final model, scores and card (``Task.finish``), ``results.json``, ``run.json``,
   and one JSON line on stdout.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import TrainerCallback, TrainerState, set_seed
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_callback import ProgressCallback

from ..recipes import read_recipe
from .common.budget import TimeBudget, TrainingClock, TrainingProgressCallback
from .common.checkpoints import latest_checkpoint
from .common.precision_record import describe_precision, precision_record
from .common.run_folder import RunFolder, RunFolderError, agree, inside, raised_budgets
from .common.run_trainer import preemption_for, resume_checkpoint, stop_if_interrupted
from .tasks import Task, get_task

# run.json's statuses, one meaning for every task.
RUNNING, STOPPED, INTERRUPTED, TRAINED, FINISHED = "running", "stopped", "interrupted", "trained", "finished"


def run(task: Task, args) -> dict:
    """Train ``task`` as ``args`` says, from the first check to the last record; the run's results (also in
    ``output_dir/results.json``)."""
    say = print if args.process_index == 0 else (lambda *a, **k: None)
    task.check(args)
    folder = RunFolder(
        args.output_dir,
        task.stage,
        own_files=lambda path: task.own_files(args, path),
        holds_run=lambda path: task.holds_run(args, path),
        is_main=args.process_index == 0,
        task=task.name,
    )
    if args.overwrite != "false":
        refuse_reads_among_own_files(task, args, folder)
    precision = precision_record(args)
    with folder, preemption_for("`--set resume=true`") as preemption:
        folder.open(args.resume, args.overwrite, task.budgets(args), args, other_files=args.other_files)
        set_seed(args.seed)  # the model's initial weights too (the Trainer seeds only once it is built)
        setup = task.setup(args, folder)
        setup["precision"] = precision
        settings = task.settings(args)
        checkpoints = task.checkpoints_folder(args)
        checkpoint = resume_checkpoint(folder, checkpoints, settings, args) if folder.continuing else None
        # The record as the run found it, read by the main process for all: the others may read run.json
        # only after the main one has rewritten it below, and would take another path.
        previous = agree(lambda: folder.previous() if folder.continuing else None, args)
        model = task.build_model(args, setup, checkpoint)
        say(f"Precision: {describe_precision(precision)}.")
        folder.record(
            status=RUNNING, task=task.name, settings=settings, budgets=task.budgets(args), updates_done=False
        )
        clock = TrainingClock.resuming(
            args.run_minutes, checkpoint, evaluate_at_end=task.evaluates(args, setup)
        )
        session = TimeBudget(args.session_minutes) if args.session_minutes is not None else None
        trainer = task.trainer(args, setup, model, clock)
        trainer.run_settings, trainer.checkpoints = settings, checkpoints
        log = Path(args.output_dir) / task.log_file
        for callback in (clock, session, RunEnd(task, setup, clock), TrainLog(log)):
            if callback is not None:
                trainer.add_callback(callback)
        trainer.remove_callback(ProgressCallback)
        trainer.add_callback(TrainingProgressCallback(clock, session))
        trainer.add_callback(preemption)  # last: a stop on a signal overrides what the others asked
        for line in task.describe(args, setup, trainer):
            say(line)
        if all_updates_done(previous, checkpoint, task, args):
            say(f"The updates of this run are done ({checkpoint.name}): finishing it without another update.")
            trainer.state = TrainerState.load_from_json(str(checkpoint / TRAINER_STATE_NAME))
            trainer._load_from_checkpoint(str(checkpoint))  # the Trainer's own loader: FSDP, DeepSpeed too
        else:
            trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
            if preemption.received is not None and task.run_over(args, trainer.state, clock):
                # Stopped during the last update's validation or save: its checkpoint is written, every
                # update is done, and resume finishes the run without another one.
                folder.record(updates=trainer.state.global_step, updates_done=True)
            stop_if_interrupted(trainer, folder, preemption)
            if session is not None and session.ended and not task.run_over(args, trainer.state, clock):
                folder.record(status=STOPPED, updates=trainer.state.global_step)
                return stop_session(trainer, clock, checkpoints)
        folder.record(status=TRAINED, updates=trainer.state.global_step, updates_done=True)
        results = {
            "task": task.name,
            "updates": trainer.state.global_step,
            "training_minutes": clock.elapsed_seconds / 60,
            "mixed_precision": precision,
            **task.finish(args, setup, trainer, precision, clock),
        }
        if trainer.is_world_process_zero():
            (Path(args.output_dir) / task.results_file).write_text(json.dumps(results, indent=2, default=str))
        folder.record(status=FINISHED, updates=trainer.state.global_step, budgets=task.budgets(args))
        trainer.accelerator.wait_for_everyone()
        return results


def refuse_reads_among_own_files(task: Task, args, folder: RunFolder) -> None:
    """With ``overwrite``: a path the run reads (data, tokenizer, ``init_from``) inside a file or folder that
    ``overwrite`` would move or delete is refused before anything is moved or deleted."""
    own = [path for path in task.own_files(args, folder.path) if path.exists()]
    for setting, value in task.reads(args).items():
        if value is None or not Path(value).exists():
            continue
        for path in own:
            if inside(Path(value), path):
                raise RunFolderError(
                    f"`{setting}`: {value} lies in {path}, which overwrite: {args.overwrite} would "
                    f"{'delete' if args.overwrite == 'delete' else 'move aside'}: copy it out of the run folder "
                    "first, or choose another output_dir."
                )


def all_updates_done(previous: dict | None, checkpoint: Path | None, task: Task, args) -> bool:
    """Whether the run being continued had done every update (``trained``, or stopped in its final stage)
    and its checkpoint is that last update's: then it is finished without another update."""
    if not previous or checkpoint is None or not previous.get("updates_done"):
        return False
    raised = raised_budgets(previous.get("budgets", {}), task.budgets(args))
    return checkpoint.name == f"checkpoint-{previous['updates']}" and not raised


def stop_session(trainer, clock: TrainingClock, checkpoints: Path) -> dict:
    """The end of an invocation that ``session_minutes`` stopped before the run's end: its checkpoint; the
    same command with ``resume: true`` continues the run from it."""
    args = trainer.args
    latest = latest_checkpoint(checkpoints)
    if trainer.is_world_process_zero():
        print(
            f"Stopped after session_minutes={args.session_minutes} at update {trainer.state.global_step} "
            f"({clock.elapsed_seconds / 60:.1f} minutes of the run so far); the checkpoint is "
            f"{latest or checkpoints}. Run the same command with `--set resume=true` to continue."
        )
    trainer.accelerator.wait_for_everyone()
    return {
        "updates": trainer.state.global_step,
        "training_minutes": clock.elapsed_seconds / 60,
        "stopped": "session_minutes",
        "checkpoint": str(latest) if latest else None,
    }


class RunEnd(TrainerCallback):
    """The end of a run or an invocation: the task's own end (epochs) ends the run too; the last update is
    always saved (a resumable checkpoint, and one that §6.1's average can take), and, at the run's end,
    validated where the task validates, for the curve's last point."""

    def __init__(self, task: Task, setup, clock: TrainingClock):
        self.task, self.setup, self.clock = task, setup, clock

    def on_step_end(self, args, state, control, **kwargs):
        if self.task.epochs_over(args, state):
            control.should_training_stop = True
        if control.should_training_stop:
            control.should_save = True
            if self.task.evaluates(args, self.setup) and self.task.run_over(args, state, self.clock):
                control.should_evaluate = True
        return control


class TrainLog(TrainerCallback):
    """``train_log.jsonl``: one row per training log, for every task. A row labelled step k reports update k:
    ``train/lr`` is the rate it stepped with, ``train/grad_norm`` the norm of its gradient before clipping,
    ``train/loss`` the loss of its batches (means over the updates since the previous row when
    ``logging_steps`` > 1); a task's own values (ELECTRA's two losses, ``elapsed_minutes``) keep their names."""

    NAMES = {
        "loss": "train/loss",
        "learning_rate": "train/lr",
        "grad_norm": "train/grad_norm",
        "tokens_per_second": "train/tokens_per_second",
    }

    def __init__(self, path: Path):
        self.path = path

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or "loss" not in (logs or {}):
            return
        row = {"step": state.global_step} | {self.NAMES.get(key, key): value for key, value in logs.items()}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as log:
            log.write(json.dumps(row) + "\n")


def train_recipe(
    recipe: str | None, overrides: dict | None = None, task: str | None = None, device: str | None = None
) -> dict:
    """``vanilla-transformer train``: the run of the recipe's ``task`` (``--set task=...`` too; none:
    translation). ``task`` names it for the ``classify`` aliases: ``classification``, or ``pretraining`` (the
    recipe's ``objective``: masked-lm or electra); a recipe that names another task is refused. ``device``
    (``--device``): the device the run must train on, refused where it would train elsewhere."""
    from .classification.pretraining_task import PRETRAINING_TASKS

    values = {**(read_recipe(recipe) if recipe else {}), **(overrides or {})}
    named = values.get("task")
    if task == "pretraining" and named in PRETRAINING_TASKS.values():
        task = named
    elif task == "pretraining":
        objective = values.get("objective", "mlm")
        if objective not in PRETRAINING_TASKS:
            raise ValueError(
                f"`objective` must be one of {' | '.join(PRETRAINING_TASKS)}, got {objective!r}."
            )
        task = PRETRAINING_TASKS[objective]
    if task and named and named != task:
        raise ValueError(f"The recipe's task is {named}; this command trains {task}: run `train --recipe`.")
    plug_in = get_task(named or task)
    args = plug_in.load_arguments(recipe, overrides)
    if device is not None and torch.device(device).type != args.device.type:
        raise ValueError(
            f"--device {device}: this run trains on {args.device} (the accelerator torch finds, or the CPU with "
            "--device cpu / use_cpu: true); choose among several GPUs with CUDA_VISIBLE_DEVICES."
        )
    results = run(plug_in, args)
    return {"output_dir": args.output_dir, **results}


def train(args) -> dict:
    """The run of the task ``args`` were read for (``Task.load_arguments`` sets ``args.task``)."""
    return run(get_task(args.task), args)


__all__ = ["run", "train", "train_recipe", "RunEnd", "TrainLog"]
