"""Train a Transformer for translation the paper's way (§5), on Accelerate.

Read top to bottom: ``train`` sets the run up (Accelerate, data and the shared BPE vocabulary, the
model of the recipe's ``model:`` block, batches by token budget, Adam with Eq. 3, resume), runs the
updates (``run_epoch``: ``train_step`` for every batch, ``after_update`` for logging, validation loss
and beam-search BLEU, atomic checkpoints) and finishes (the last or averaged weights, the test BLEU,
``results.json``, the model card and the BLEU plot).

Accelerate's own mechanisms carry everything that must stay right on N processes: ``accumulate()``
for gradient accumulation, ``gather_for_metrics`` for the validation loss, ``save_state`` /
``load_state`` inside the checkpoints, ``ProjectConfiguration`` for the run folder. The same code runs
on one CPU, under ``accelerate launch --multi_gpu --num_processes N`` (gloo on CPU, NCCL on GPUs) and
in bf16 mixed precision (``mixed_precision: auto | no | bf16``; the weights stay fp32).
"""

from __future__ import annotations

import itertools
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from accelerate.utils import GradientAccumulationPlugin, ProjectConfiguration, set_seed
from datasets import Dataset, DatasetDict
from torch.utils.data import DataLoader
from transformers import DataCollatorForSeq2Seq

from ...configuration_vanilla_transformer import VanillaTransformerConfig
from ...model_card import Result, write_model_card
from ...modeling_vanilla_transformer import (
    PAPER_LENGTH_PENALTY,
    PAPER_NUM_BEAMS,
    VanillaTransformerForConditionalGeneration,
)
from ...precision import use_fast_bf16_kernels
from ..common.budget import TrainingProgress
from ..common.data import data_path, load_or_train_tokenizer
from ..common.plots import plot_history
from ..common.precision_record import describe_precision, mixed_precision_record
from ..common.recipes import build_config
from .arguments import TranslationTrainingArguments
from .batching import TokenBudgetBatchSampler
from .checkpoints import (
    STATE_FILE,
    average_checkpoints,
    latest_checkpoint,
    save_checkpoint,
    spaced_checkpoints,
)
from .data import load_translation_splits, tokenize_pairs
from .evaluation import bleu_scores, evaluate_split, set_decoding, translate
from .schedule import transformer_lr_scheduler


@dataclass
class RunState:
    """Where the run is: a checkpoint's ``trainer_state.json`` (Accelerate's ``state/`` holds the rest)."""

    step: int = 0  # optimizer updates done
    epoch: int = 0
    batches_in_epoch: int = 0  # batches of this epoch this process has taken
    elapsed_seconds: float = 0.0  # training time of all sessions so far
    history: list[dict] = field(default_factory=list)  # one row per validation


@dataclass
class BudgetSpent:
    """The fraction of the run's budget spent, as the cool-down (``lr_cooldown``) reads it: the loop sets it
    after each update, before the scheduler sets the next update's rate."""

    fraction: float = 0.0


@dataclass
class Run:
    """What the update loop works with, after ``accelerator.prepare``."""

    args: TranslationTrainingArguments
    accelerator: Accelerator
    precision: dict  # mixed_precision_record: setting, what it resolved to, the hardware
    tokenizer: Any
    splits: DatasetDict  # raw text: "source", "target"
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    train_loader: DataLoader
    train_sampler: TokenBudgetBatchSampler
    valid_loader: DataLoader | None
    valid_batches: int  # batches of the whole validation split, before Accelerate shards it
    spent: BudgetSpent = field(default_factory=BudgetSpent)

    @property
    def output_dir(self) -> Path:
        return Path(self.args.output_dir)

    @property
    def checkpoints(self) -> Path:
        return self.output_dir / "checkpoints"


def train(args: TranslationTrainingArguments) -> dict:
    """Run the whole job; returns the final metrics (also written to ``output_dir/results.json``)."""
    run = set_up(args)
    state = resume(run)
    start_logging(run)
    clock = Clock(args, state)
    update_loop(run, state, clock)
    if not clock.out_of_budget(state):  # session_minutes ended this invocation, not the run
        return stop_session(run, state, clock)
    return finish(run, state, clock.minutes())


# -- set-up ------------------------------------------------------------------------------------------------


def set_up(args: TranslationTrainingArguments) -> Run:
    """Accelerate, data, the shared vocabulary, the model, batches, Adam (§5.3) with Eq. 3; all prepared."""
    accelerator, precision = make_accelerator(args)
    set_seed(args.seed)
    splits = prepare_data(args)
    if "train" not in splits:
        raise ValueError("The data has no 'train' split.")
    references = data_path(args.tokenized_test_references, args.data_dir)
    if references is not None and not Path(references).is_file():  # found now, not after the training
        raise FileNotFoundError(f"No such file (tokenized_test_references): {references}")
    with accelerator.main_process_first():
        tokenizer = translation_tokenizer(args, splits["train"])
    encoded = {
        name: tokenize_pairs(split, tokenizer, args.max_source_length, args.max_target_length)
        for name, split in splits.items()
    }
    # The data is good: make the folder now, since the log is written from the first update, before any save.
    if accelerator.is_main_process:
        Path(args.output_dir).mkdir(parents=True, exist_ok=True)
    model = VanillaTransformerForConditionalGeneration(build_model_config(args, tokenizer))
    set_decoding(model.generation_config, args.num_beams, args.length_penalty)
    collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100, return_tensors="pt")
    train_loader, train_sampler = make_loader(args, encoded["train"], collator, shuffle=True)
    valid_loader, valid_sampler = None, None
    if "validation" in encoded:
        valid_loader, valid_sampler = make_loader(args, encoded["validation"], collator, shuffle=False)
    accelerator.gradient_accumulation_steps = accumulation_steps(
        args, encoded["train"], train_sampler, accelerator.num_processes
    )
    use_fast_bf16_kernels(model, precision, accelerator.device)
    optimizer = torch.optim.Adam(
        model.parameters(),
        lr=1.0,
        betas=(args.adam_beta1, args.adam_beta2),
        eps=args.adam_epsilon,
        fused=accelerator.device.type in FUSED_ADAM_DEVICES,  # one kernel for all parameters, fp32 state
    )
    spent = BudgetSpent()
    scheduler = transformer_lr_scheduler(
        optimizer,
        model.config.d_model,
        args.warmup_steps,
        args.lr_scale,
        cooldown=args.lr_cooldown,
        progress=lambda: spent.fraction,
    )
    model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
    if valid_loader is not None:
        valid_loader = accelerator.prepare(valid_loader)
    accelerator.register_for_checkpointing(scheduler)  # stepped per update by the loop, saved with the state
    return Run(
        args=args,
        accelerator=accelerator,
        precision=precision,
        tokenizer=tokenizer,
        splits=splits,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        train_loader=train_loader,
        train_sampler=train_sampler,
        valid_loader=valid_loader,
        valid_batches=len(valid_sampler) if valid_sampler is not None else 0,
        spent=spent,
    )


# torch's fused Adam runs on these devices (fp32 parameters and state, as the paper's Adam).
FUSED_ADAM_DEVICES = ("cpu", "cuda")


def make_accelerator(args: TranslationTrainingArguments) -> tuple[Accelerator, dict]:
    """The run's Accelerator: its precision, its folder and trackers, and gradient accumulation (one
    batch per update until ``set_up`` knows the batches)."""
    device = (
        torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
    )
    precision = mixed_precision_record(args.mixed_precision, device)
    # One run, one Accelerator: an earlier run in this process (a notebook, the tests) may have left its
    # precision in Accelerate's shared state, which a new Accelerator may not change. transformers'
    # TrainingArguments clears it the same way; the process group (PartialState) stays.
    AcceleratorState._reset_state(reset_partial_state=False)
    accelerator = Accelerator(
        # Without an accelerator, processes started by `accelerate launch` / torchrun join over gloo.
        cpu=not torch.accelerator.is_available(),
        mixed_precision=precision["used"],
        # An update may span the end of an epoch: its batches are the next N, wherever they come from.
        gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=1, sync_with_dataloader=False),
        log_with=None if args.report_to == "none" else args.report_to,
        project_config=ProjectConfiguration(project_dir=args.output_dir, logging_dir=args.output_dir),
        step_scheduler_with_optimizer=False,  # Eq. 3 counts optimizer updates, whatever the process count
    )
    return accelerator, precision


def prepare_data(args: TranslationTrainingArguments) -> DatasetDict:
    """The splits of the recipe's data, as ``source`` / ``target`` text."""
    files = {
        split: data_path(getattr(args, f"{split}_file"), args.data_dir)
        for split in ("train", "validation", "test")
        if getattr(args, f"{split}_file") is not None
    }
    return load_translation_splits(
        args.dataset,
        args.source_lang,
        args.target_lang,
        files=files,
        dataset_config=args.dataset_config,
        columns=(args.source_column, args.target_column),
        synthetic_sizes={
            "train": args.synthetic_train_size,
            "validation": args.synthetic_eval_size,
            "test": args.synthetic_eval_size,
        },
        seed=args.seed,
    )


def translation_tokenizer(args: TranslationTrainingArguments, train_split: Dataset):
    """§5.1: one BPE vocabulary for both languages: ``tokenizer_path`` or a resumed run's, else trained on
    the training pairs (sources, then targets) and saved in the run folder."""
    saved = Path(args.tokenizer_path) if args.tokenizer_path else Path(args.output_dir) / "tokenizer"
    return load_or_train_tokenizer(
        [saved],
        itertools.chain(train_split["source"], train_split["target"]),
        save_to=saved,
        vocab_size=args.vocab_size,
        model_max_length=max(args.max_source_length, args.max_target_length),
    )


def build_model_config(args: TranslationTrainingArguments, tokenizer) -> VanillaTransformerConfig:
    """The recipe's model block (a Table 3 preset and/or fields) with the run's vocabulary, special tokens
    and language pair."""
    return build_config(
        args.model,
        defaults={"max_position_embeddings": max(args.max_source_length, args.max_target_length) + 64},
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        source_lang=args.source_lang,
        target_lang=args.target_lang,
    )


def make_loader(
    args: TranslationTrainingArguments, data: Dataset, collator, shuffle: bool
) -> tuple[DataLoader, TokenBudgetBatchSampler]:
    """Batches of at most ``max_tokens`` source and target tokens (§5.1), and their sampler."""
    sampler = TokenBudgetBatchSampler(
        [len(x) for x in data["input_ids"]],
        [len(x) for x in data["labels"]],
        args.max_tokens,
        shuffle,
        args.seed,
    )
    # A private generator: starting an epoch must not draw from the global RNG that dropout uses,
    # or a resumed run (which starts its epoch mid-way) would see different dropout masks.
    generator = torch.Generator().manual_seed(args.seed)
    return DataLoader(data, batch_sampler=sampler, collate_fn=collator, generator=generator), sampler


def accumulation_steps(
    args: TranslationTrainingArguments, train_data: Dataset, sampler: TokenBudgetBatchSampler, processes: int
) -> int:
    """Batches per process per update: ``gradient_accumulation_steps``, else enough batches for about
    ``tokens_per_update`` target tokens over all processes, else 1."""
    if args.gradient_accumulation_steps:
        return args.gradient_accumulation_steps
    tokens_per_batch = sum(len(x) for x in train_data["labels"]) / max(len(sampler), 1)
    return max(1, round((args.tokens_per_update or 0) / (tokens_per_batch * processes)))


def resume(run: Run) -> RunState:
    """A fresh state, or (with ``resume``) the latest checkpoint's, Accelerate's state loaded with it."""
    state = RunState()
    checkpoint = latest_checkpoint(run.checkpoints) if run.args.resume else None
    if checkpoint is not None:
        run.accelerator.load_state(str(checkpoint / "state"))
        state = RunState(**json.loads((checkpoint / STATE_FILE).read_text()))
        run.accelerator.print(f"Resuming from {checkpoint} (update {state.step}).")
    elif run.args.resume:
        run.accelerator.print(f"No checkpoint under {run.checkpoints}: starting from scratch.")
    return state


def start_logging(run: Run) -> None:
    """Start the trackers (TensorBoard) with the run's settings; say what is trained, how and in what precision."""
    args, accelerator = run.args, run.accelerator
    if args.report_to != "none":
        settings = {key: value for key, value in asdict(args).items() if value is not None and key != "model"}
        settings |= {f"model.{key}": value for key, value in args.model.items()}  # trackers take scalars
        accelerator.init_trackers(
            "translation", config=settings | {"mixed_precision_used": run.precision["used"]}
        )
    accelerator.print(
        f"Model: {accelerator.unwrap_model(run.model).num_parameters():,} parameters; vocabulary "
        f"{len(run.tokenizer)}; {len(run.splits['train']):,} training pairs in {len(run.train_sampler)} batches "
        f"of <= {args.max_tokens} tokens; {accelerator.gradient_accumulation_steps} batch(es) x "
        f"{accelerator.num_processes} process(es) per update."
    )
    accelerator.print(f"Precision: {describe_precision(run.precision)}.")


# -- the update loop -------------------------------------------------------------------------------------


class Clock:
    """The run's wall-clock time (a resumed run counts its earlier sessions) and its budgets: the run's
    (``max_steps``, ``max_epochs``, ``run_minutes`` over all invocations) and this invocation's
    (``session_minutes``)."""

    def __init__(self, args: TranslationTrainingArguments, state: RunState):
        self.args = args
        self.start = time.time() - state.elapsed_seconds
        self.session_start, self.session_first_step = time.time(), state.step

    def elapsed(self) -> float:
        return time.time() - self.start

    def minutes(self) -> float:
        return self.elapsed() / 60

    def out_of_budget(self, state: RunState) -> bool:
        """The run's updates, epochs or minutes used up."""
        args = self.args
        over_time = args.run_minutes is not None and self.elapsed() > 60 * args.run_minutes
        over_epochs = args.max_epochs is not None and state.epoch >= args.max_epochs
        return state.step >= args.max_steps or over_time or over_epochs

    def session_over(self) -> bool:
        """This invocation's ``session_minutes`` used up."""
        minutes = self.args.session_minutes
        return minutes is not None and time.time() - self.session_start > 60 * minutes

    def spent(self, steps: int, accelerator: Accelerator) -> float:
        """The fraction of the budget spent after ``steps`` updates: of max_steps, or of run_minutes if
        that is further along. The same on every process (the largest), so their learning rates agree."""
        fraction = steps / self.args.max_steps
        if self.args.run_minutes is not None:
            fraction = max(fraction, self.elapsed() / (60 * self.args.run_minutes))
        if accelerator.num_processes > 1:
            fraction = accelerator.reduce(torch.tensor(fraction, device=accelerator.device), "max").item()
        return fraction

    def eta(self, state: RunState) -> str:
        """Time left until whichever budget ends first: updates (at this session's rate) or minutes."""
        rate = (state.step - self.session_first_step) / max(time.time() - self.session_start, 1e-9)
        left = (self.args.max_steps - state.step) / max(rate, 1e-9)
        if self.args.run_minutes is not None:
            left = min(left, 60 * self.args.run_minutes - self.elapsed())
        if self.args.session_minutes is not None:
            left = min(left, 60 * self.args.session_minutes - (time.time() - self.session_start))
        return f"{max(left, 0) / 60:.1f}min"


@dataclass
class LossWindow:
    """What the log line of ``state.step`` reports about the updates since the previous one: the training
    loss (mean over the batches of every process), the gradient norm (mean over updates), the learning rate
    of the last update and the throughput."""

    loss: float = 0.0
    batches: int = 0
    tokens: int = 0
    grad_norm: float = 0.0
    updates: int = 0
    learning_rate: float = 0.0
    start: float = field(default_factory=time.time)

    def add_batch(self, loss: float, tokens: int) -> None:
        self.loss, self.batches, self.tokens = self.loss + loss, self.batches + 1, self.tokens + tokens

    def add_update(self, grad_norm: float, learning_rate: float) -> None:
        """An update's gradient norm (before clipping) and the rate Adam stepped with."""
        self.grad_norm, self.updates = self.grad_norm + grad_norm, self.updates + 1
        self.learning_rate = learning_rate

    def take(self, accelerator: Accelerator) -> dict:
        """The window's metrics; the window starts again. Every process must call it (the loss is averaged
        over processes: each one holds only the losses of its own batches)."""
        local = torch.tensor([self.loss / max(self.batches, 1)], device=accelerator.device)
        metrics = {
            "train/loss": accelerator.reduce(local, reduction="mean").item(),
            "train/lr": self.learning_rate,
            # Gradients are all-reduced before the norm is taken: every process sees the same norm.
            "train/grad_norm": self.grad_norm / max(self.updates, 1),
            "train/tokens_per_second": self.tokens / max(time.time() - self.start, 1e-9),
        }
        self.loss, self.batches, self.tokens, self.start = 0.0, 0, 0, time.time()
        self.grad_norm, self.updates = 0.0, 0
        return metrics


def update_loop(run: Run, state: RunState, clock: Clock) -> None:
    """Epochs of updates until a budget (updates, epochs, minutes) ends the run."""
    run.model.train()
    progress = TrainingProgress(
        run.args.max_steps,
        state.step,
        run.args.run_minutes,
        clock.minutes(),
        disable=not run.accelerator.is_main_process,
    )
    window = LossWindow()
    done = state.step >= run.args.max_steps
    while not done:
        done = run_epoch(run, state, clock, window, progress)
        if not done:
            state.epoch += 1
            state.batches_in_epoch = 0
            done = clock.out_of_budget(state) or clock.session_over()
    progress.close()


def run_epoch(run: Run, state: RunState, clock: Clock, window: LossWindow, progress) -> bool:
    """The rest of the current epoch (all of it unless resuming mid-epoch); True when the run is over."""
    accelerator = run.accelerator
    run.train_sampler.set_epoch(state.epoch)
    batches = run.train_loader
    if state.batches_in_epoch:
        batches = accelerator.skip_first_batches(run.train_loader, state.batches_in_epoch)
    for batch in batches:
        state.batches_in_epoch += 1
        loss, grad_norm = train_step(run, batch)
        window.add_batch(loss, count_tokens(batch) * accelerator.num_processes)
        if not accelerator.sync_gradients:
            continue  # more batches of this update to come
        # Update state.step + 1 stepped with Eq. 3's rate at that step (times the cool-down, if any); the
        # scheduler moves on to the next update's rate.
        window.add_update(grad_norm, run.scheduler.get_last_lr()[0])
        if run.args.lr_cooldown:
            run.spent.fraction = clock.spent(state.step + 1, accelerator)
        run.scheduler.step()
        state.step += 1
        progress.advance(state.step, clock.minutes())
        if after_update(run, state, clock, window, progress):
            return True
    return False


def train_step(run: Run, batch: dict) -> tuple[float, float | None]:
    """Forward and backward of one batch; on the last batch of an update, clip and step Adam. Returns the
    batch's loss and, on an update's last batch, the gradient norm before clipping (else None).

    Each batch's loss is label-smoothed and averaged over its target tokens; ``accelerator.backward``
    divides it by the batches per update, so every batch of an update weighs the same, as every
    process's batch does in DDP's gradient average (one process accumulating two batches computes the
    gradient of two processes taking one each). Outside an update's last batch ``accumulate()`` skips
    the gradient all-reduce and the prepared optimizer skips ``step`` and ``zero_grad``.
    """
    accelerator, model = run.accelerator, run.model
    grad_norm = None
    with accelerator.accumulate(model):
        loss = model(**batch).loss
        accelerator.backward(loss)
        if accelerator.sync_gradients:
            # The norm of the update's (all-reduced) gradient, measured before clipping; without
            # max_grad_norm only measured (an infinite bound scales by 1).
            max_norm = run.args.max_grad_norm or math.inf
            grad_norm = accelerator.clip_grad_norm_(model.parameters(), max_norm).item()
        run.optimizer.step()
        run.optimizer.zero_grad(set_to_none=True)
    return loss.item(), grad_norm


def count_tokens(batch) -> int:
    """Real (non-padding) source and target tokens in a batch."""
    return int(batch["attention_mask"].sum()) + int((batch["labels"] != -100).sum())


def after_update(run: Run, state: RunState, clock: Clock, window: LossWindow, progress) -> bool:
    """Logging, validation and a checkpoint, as update ``state.step`` calls for; True when the run is over."""
    args = run.args
    if state.step % args.log_every == 0:
        log_training(run, state, window.take(run.accelerator), progress, clock)
    finished = clock.out_of_budget(state)
    stopping = finished or clock.session_over()  # the run's end, or this invocation's (session_minutes)
    if run.valid_loader is not None and (state.step % args.eval_every == 0 or finished):
        validate(run, state, clock)
    if state.step % args.save_every == 0 or stopping:
        state.elapsed_seconds = clock.elapsed()
        save_checkpoint(
            run.accelerator,
            run.model,
            run.tokenizer,
            run.checkpoints,
            state.step,
            asdict(state),
            args.keep_last,
        )
    return stopping


def log_training(run: Run, state: RunState, metrics: dict, progress, clock: Clock) -> None:
    """The progress bar, the trackers and ``train_log.jsonl``. A row labelled step k reports update k:
    ``train/lr`` is the rate it stepped with (Eq. 3 at step k, counting from 1), ``train/grad_norm`` the
    norm of its gradient before clipping, ``train/loss`` the loss of its batches (means over the updates
    since the previous row when ``log_every`` > 1)."""
    progress.set_postfix(
        loss=f"{metrics['train/loss']:.3f}",
        lr=f"{metrics['train/lr']:.2e}",
        tok_s=f"{metrics['train/tokens_per_second']:,.0f}",
        eta=clock.eta(state),
    )
    run.accelerator.log(metrics, step=state.step)
    if run.accelerator.is_main_process:
        with open(run.output_dir / "train_log.jsonl", "a", encoding="utf-8") as log:
            log.write(json.dumps({"step": state.step, **metrics}) + "\n")


# -- validation --------------------------------------------------------------------------------------------


def validate(run: Run, state: RunState, clock: Clock) -> None:
    """Validation loss and BLEU at this update, into the run's history, the trackers and the log."""
    metrics = evaluate_during_training(run)
    metrics["elapsed_minutes"] = clock.minutes()
    state.history.append({"step": state.step, **metrics})
    run.accelerator.log({f"valid/{key}": value for key, value in metrics.items()}, step=state.step)
    run.accelerator.print(
        f"update {state.step}: valid loss {metrics['loss']:.3f}, "
        f"BLEU {metrics['sacrebleu']:.2f} ({metrics['elapsed_minutes']:.1f} min)"
    )


def evaluate_during_training(run: Run) -> dict:
    """Validation loss on the whole split, BLEU from beam search on its first ``eval_bleu_samples``.

    Runs in a forked RNG so that evaluating never changes the training run's random stream."""
    with torch.random.fork_rng(devices=[]):
        metrics = {"loss": validation_loss(run.model, run.valid_loader, run.accelerator, run.valid_batches)}
        metrics["perplexity"] = math.exp(min(metrics["loss"], 50))
        metrics |= validation_bleu(run)
    run.model.train()
    return metrics


@torch.no_grad()
def validation_loss(model, loader, accelerator: Accelerator, num_batches: int) -> float:
    """The label-smoothed loss over every target token of the validation split, each batch counted once.

    With ``even_batches`` (Accelerate's default) a process that runs out of batches repeats the split's
    first ones, so that all processes take the same number of steps. ``gather_for_metrics`` can drop
    such repeats only for batches of one fixed size; ours vary (a token budget), so they are left out
    here: the k-th batch of process p is batch k * P + p of the split, and the repeats lie past its end.
    Every process still runs every forward (DDP's forward may synchronise buffers).
    """
    model.eval()
    totals = torch.zeros(1, 2, device=accelerator.device)  # sum of loss x tokens, tokens
    for index, batch in enumerate(loader):
        tokens = (batch["labels"] != -100).sum()
        loss = model(**batch).loss
        if index * accelerator.num_processes + accelerator.process_index < num_batches:
            totals += torch.stack([loss.float() * tokens, tokens.float()])
    totals = accelerator.gather_for_metrics(totals).sum(dim=0)  # (P, 2) -> (2,)
    return (totals[0] / totals[1].clamp(min=1)).item()


def validation_bleu(run: Run) -> dict:
    """Beam-search BLEU on the first ``eval_bleu_samples`` validation sentences (the main process's
    numbers; NaN on the others)."""
    if not run.accelerator.is_main_process:
        return {"sacrebleu": float("nan"), "bleu_lc_tok": float("nan")}
    validation = run.splits["validation"]
    sample = validation.select(range(min(run.args.eval_bleu_samples, len(validation))))
    model = run.accelerator.unwrap_model(run.model)
    hypotheses = translate(model, run.tokenizer, sample["source"], run.args.eval_batch_size)
    return bleu_scores(hypotheses, sample["target"], run.args.target_lang)


# -- the end of the run ------------------------------------------------------------------------------------


def finish(run: Run, state: RunState, training_minutes: float) -> dict:
    """The final model (last weights, or §6.1's average), its test BLEU, results.json, the card, the plot."""
    accelerator = run.accelerator
    results = {"updates": state.step, "training_minutes": training_minutes, "mixed_precision": run.precision}
    if accelerator.is_main_process:
        final = save_final_model(run, results)
        results["parameters"] = final.num_parameters()
        results["peak_memory_mib"] = peak_memory_mib(accelerator.device)
        results["history"] = state.history
        if "test" in run.splits:
            results["test"] = evaluate_test_split(run, final)
        (run.output_dir / "results.json").write_text(json.dumps(results, indent=2))
        write_translation_card(run.args, final, results, run.output_dir / "model")
        pair = f"{run.args.source_lang} -> {run.args.target_lang}"
        plot = plot_history(state.history, run.output_dir / "bleu_curve.png", pair)
        if plot is not None:
            print(f"Validation curve: {plot}")
        print(f"Model saved to {run.output_dir / 'model'} after {training_minutes:.1f} minutes of training.")
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return results


def stop_session(run: Run, state: RunState, clock: Clock) -> dict:
    """The end of an invocation that ``session_minutes`` stopped before the run's end: its checkpoint is
    saved; the same command with ``resume=true`` continues the run from it."""
    run.accelerator.print(
        f"Stopped after session_minutes={run.args.session_minutes} at update {state.step} "
        f"({clock.minutes():.1f} minutes of the run so far); the checkpoint is in {run.checkpoints}. "
        "Run the same command with `--set resume=true` to continue."
    )
    run.accelerator.wait_for_everyone()
    run.accelerator.end_training()
    return {"updates": state.step, "training_minutes": clock.minutes(), "stopped": "session_minutes"}


def peak_memory_mib(device: torch.device) -> dict[str, float]:
    """This process's peak resident memory (the host's, training included), and on a GPU the peak that
    torch allocated there, in MiB."""
    import resource

    peaks = {"host": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}  # Linux reports KiB
    if device.type == "cuda":
        peaks["cuda"] = torch.cuda.max_memory_allocated(device) / 2**20
    return {name: round(value, 1) for name, value in peaks.items()}


def save_final_model(run: Run, results: dict):
    """``output_dir/model``: the average of the last ``average_last`` checkpoints (§6.1), else the last
    weights (fp32: mixed precision computes in bf16, it never casts the weights)."""
    final = run.accelerator.unwrap_model(run.model)
    averaged = spaced_checkpoints(run.checkpoints, run.args.average_last, run.args.save_every)
    if len(averaged) > 1:
        average_checkpoints(averaged, run.output_dir / "model")
        results["averaged_checkpoints"] = [folder.name for folder in averaged]
        print(f"Final model: the average of {', '.join(results['averaged_checkpoints'])}.")
        return type(final).from_pretrained(run.output_dir / "model").to(final.device)
    final.save_pretrained(run.output_dir / "model")
    run.tokenizer.save_pretrained(run.output_dir / "model")
    return final


def evaluate_test_split(run: Run, model) -> dict:
    """Translate the test split in the run's precision; print three samples; both BLEUs."""
    args = run.args
    references = data_path(args.tokenized_test_references, args.data_dir)
    hypotheses_file = run.output_dir / "test_hypotheses.txt"
    with run.accelerator.autocast():
        scores, samples = evaluate_split(
            model, run.tokenizer, run.splits["test"], args, hypotheses_file, references
        )
    print("\nSample translations (test):")
    for source, hypothesis, reference in samples:
        print(f"  source:     {source}\n  hypothesis: {hypothesis}\n  reference:  {reference}\n")
    print(
        f"Test BLEU: sacreBLEU (cased, 13a) {scores['sacrebleu']:.2f}; "
        f"lowercased tokenized {scores['bleu_lc_tok']:.2f}"
    )
    return scores


def write_translation_card(args, model, results: dict, folder: Path) -> Path:
    """The filled model card of this run: its test BLEU (both conventions), data, length and recipe."""
    if args.dataset in ("json", "text"):
        name, kind = Path(args.train_file).parent.name or "local", args.dataset
    else:
        name, kind = args.dataset, args.dataset
    split = Path(args.test_file).name.split(".")[0] if args.test_file else "test"
    pair = f"{args.source_lang}-{args.target_lang}"
    scores = [
        Result("translation", "bleu", "sacreBLEU (cased, 13a)", value, name, kind, split)
        for value in [results.get("test", {}).get("sacrebleu")]
        if value is not None
    ] + [
        Result("translation", "bleu", "BLEU (lowercased, tokenized)", value, name, kind, split)
        for value in [results.get("test", {}).get("bleu_lc_tok")]
        if value is not None
    ]
    training = {
        "data": f"{name} ({pair})",
        "updates": results["updates"],
        "training time": f"{results['training_minutes']:.1f} min",
        "tokens per batch": args.max_tokens,
        "optimizer": f"Adam({args.adam_beta1}, {args.adam_beta2}, eps={args.adam_epsilon}), Eq. 3 "
        f"(warmup {args.warmup_steps}, scale {args.lr_scale})"
        + (
            f", linear cool-down to 0 over the last {args.lr_cooldown:.0%} of the budget"
            if args.lr_cooldown
            else ""
        ),
        "label smoothing": model.config.label_smoothing,
        "precision": describe_precision(results["mixed_precision"]),
        "final model": ", ".join(results.get("averaged_checkpoints", [])) or "last weights",
        "decoding (saved generation config)": describe_decoding(args.num_beams, args.length_penalty),
    }
    return write_model_card(
        folder,
        model,
        task="translation",
        name=Path(args.output_dir).name,
        summary=f"A Transformer trained from scratch with vanilla-transformer to translate {pair} "
        f"(beam {args.num_beams}, length penalty {args.length_penalty}).",
        results=scores,
        datasets=[name] if kind not in ("json", "text", "synthetic") else [],
        training=training,
        language=[args.source_lang, args.target_lang],
    )


def describe_decoding(num_beams: int, length_penalty: float) -> str:
    """The card's decoding row: §6.1's beam 4 and alpha 0.6, or the recipe's departure from them."""
    paper = f"beam {PAPER_NUM_BEAMS}, length penalty {PAPER_LENGTH_PENALTY}"
    if (num_beams, length_penalty) == (PAPER_NUM_BEAMS, PAPER_LENGTH_PENALTY):
        return f"{paper} (§6.1)"
    search = "greedy search" if num_beams == 1 else f"beam {num_beams}, length penalty {length_penalty}"
    return f"{search}: the recipe's choice, departing from §6.1's {paper}"


__all__ = ["train", "build_model_config", "prepare_data"]
