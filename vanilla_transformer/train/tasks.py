"""Tasks as plug-ins of the one run (``run.py``): what a task is, and the registry of the package's tasks.

A task owns what differs between kinds of training (fairseq's ``load_dataset`` / ``build_model`` /
``valid_step``): its arguments (one dataclass on ``RunArguments`` and the Trainer's arguments), its checks,
its data and tokenizer, its model, its Trainer (collator, metrics and its validation hook), what ends it
early (epochs) and what it writes at the end. The run owns the rest: the folder, precision, budgets,
signals, ``Trainer.train`` and the records. Adding a task touches its own module, one line of ``TASKS``
and its recipe.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from .common.checkpoints import checkpoint_dirs

# The recipe's ``task:`` -> the module and class of its plug-in (imported when the task runs).
TASKS = {
    "translation": "vanilla_transformer.train.translation.task:TranslationTask",
    "classification": "vanilla_transformer.train.classification.task:ClassificationTask",
    "masked-lm": "vanilla_transformer.train.classification.pretraining_task:MaskedLMTask",
    "electra": "vanilla_transformer.train.classification.pretraining_task:ElectraTask",
    "causal-lm": "vanilla_transformer.train.causal_lm:CausalLMTask",
}
DEFAULT_TASK = "translation"  # a recipe without `task:` (every recipe written before tasks were named)


def get_task(name: str | None) -> Task:
    """The plug-in of the recipe's ``task`` (None: translation)."""
    name = name or DEFAULT_TASK
    if name not in TASKS:
        raise ValueError(f"`task`: {name!r} is not a task; the tasks are {' | '.join(TASKS)}.")
    module, _, cls = TASKS[name].partition(":")
    return getattr(importlib.import_module(module), cls)()


class Task:
    """The hooks of one kind of training; each has the meaning ``run.run`` gives it, in its order."""

    name: str = ""
    stage: str = "train"  # the run folder's record key, and the checkpoints' subfolder of staged tasks
    outputs: tuple[str, ...] = ("model",)  # what the task writes in output_dir besides the run's files
    staged_checkpoints = False  # checkpoints in output_dir/checkpoints/<stage>/ (tasks that share a folder)

    @property
    def results_file(self) -> str:
        """The run's results (the ``train`` stage's ``results.json``; another stage's ``<stage>_results.json``)."""
        return "results.json" if self.stage == "train" else f"{self.stage}_results.json"

    @property
    def log_file(self) -> str:
        """One row per training log (``train_log.jsonl``; another stage's ``<stage>_log.jsonl``)."""
        return f"{self.stage}_log.jsonl"

    # -- arguments --------------------------------------------------------------------------------------

    def load_arguments(self, recipe: str | None, overrides: dict | None):
        """The recipe and ``--set`` overrides as the task's arguments; an unknown key names the file."""
        raise NotImplementedError

    def settings(self, args) -> dict:
        """What a resumed run must share with its checkpoint: what an update is."""
        raise NotImplementedError

    def budgets(self, args) -> dict:
        """The budgets a finished run may raise to train further."""
        return {"max_steps": args.max_steps, "run_minutes": args.run_minutes}

    # -- 1. checks, before the run folder is touched -----------------------------------------------------

    def check(self, args) -> None:
        """Everything that can be checked without writing: data paths, ``init_from``, the model block."""

    def reads(self, args) -> dict[str, str | None]:
        """The local paths the run reads, by setting (data files, tokenizer, ``init_from``)."""
        return {"init_from": args.init_from}

    # -- 2. the run folder ------------------------------------------------------------------------------

    def checkpoints_folder(self, args) -> Path:
        root = Path(args.output_dir) / "checkpoints"
        return root / self.stage if self.staged_checkpoints else root

    def own_files(self, args, folder: Path) -> list[Path]:
        """What ``overwrite`` moves aside or deletes: the files this task's run writes, never anything else."""
        names = (*self.outputs, self.results_file, self.log_file)
        # TensorBoard's files (output_dir/runs), where the folder is the task's alone: stages that share a
        # folder share them too, and leave them in place.
        logs = [] if self.staged_checkpoints else [folder / "runs"]
        return [self.checkpoints_folder(args), *logs] + [folder / name for name in names]

    def holds_run(self, args, folder: Path) -> bool:
        """Whether the folder holds a run of this task without a record (``run.json`` lost, or written before
        it was kept): its checkpoints. A model or results alone may be anybody's, and are not taken for one."""
        return bool(checkpoint_dirs(self.checkpoints_folder(args)))

    # -- 3. data, tokenizer, model, trainer ---------------------------------------------------------------

    def setup(self, args, folder) -> dict:
        """Data and tokenizer (and what the Trainer needs of them), in a dict the other hooks read."""
        raise NotImplementedError

    def build_model(self, args, setup: dict, checkpoint: Path | None):
        raise NotImplementedError

    def trainer(self, args, setup: dict, model, clock):
        """The task's ``transformers.Trainer`` (with ``RunTrainer``), ready to train."""
        raise NotImplementedError

    def describe(self, args, setup: dict, trainer) -> list[str]:
        """Lines that say what is trained, on what."""
        return [f"Model: {trainer.model.num_parameters():,} parameters; {args.world_size} process(es)."]

    def evaluates(self, args, setup: dict) -> bool:
        """Whether the run validates (then its last update is validated too)."""
        return setup.get("eval_dataset") is not None and args.eval_strategy != "no"

    # -- the end ----------------------------------------------------------------------------------------

    def epochs_over(self, args, state) -> bool:
        return False

    def run_over(self, args, state, clock) -> bool:
        """The run's updates, epochs or minutes used up (``session_minutes`` ends only an invocation)."""
        over_time = clock.budget_minutes is not None and clock.last_progress >= 1
        return state.global_step >= state.max_steps or over_time or self.epochs_over(args, state)

    def finish(self, args, setup: dict, trainer, precision: dict, clock) -> dict:
        """The final model (``output_dir/model``), its scores, its card: the task's part of results.json."""
        raise NotImplementedError


__all__ = ["Task", "TASKS", "DEFAULT_TASK", "get_task"]
