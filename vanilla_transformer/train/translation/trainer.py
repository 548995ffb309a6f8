"""``TranslationTrainer``: transformers' ``Seq2SeqTrainer`` with what the paper's recipe (§5) needs beyond
it, each on the trainer's public hooks, and the translation task's set-up and end (``task.py`` plugs them
into the one run, ``train/run.py``):

* §5.1's batches of about ``max_tokens`` source and target tokens (``get_train_dataloader``: a
  ``TokenBudgetBatchSampler`` that Accelerate shards across processes, one batch per process per step);
* §5.3's Adam (β1 0.9, β2 0.98, ε 1e-9, fp32 state) and Eq. 3 as the scheduler, times the optional
  cool-down over the last ``lr_cooldown`` of the budget (``create_optimizer``, ``create_scheduler``);
* §5.4's label smoothing, computed by the model (the trainer passes it the update's token count, so
  each token of an accumulated update weighs the same);
* validation loss on the whole split and BLEU from ``generate()`` (beam 4, α 0.6: the saved generation
  config) on its first ``eval_bleu_samples`` sentences, both through the trainer's evaluation loop, so
  both are computed on every process's share of the split (``evaluate``: the task's validation hook);
* the run core's crash-safe checkpoints and loss guard (``common/run_trainer.py``).

Everything else is the trainer's: gradient accumulation (``tokens_per_update``), bf16 autocast, clipping,
logging to TensorBoard, resume, and ``accelerate launch`` on several processes (gloo on CPU, NCCL on GPUs)
or with FSDP / DeepSpeed configurations, whose full weights ``Trainer.save_model`` gathers for the final
folder.
"""

from __future__ import annotations

import copy
import math
import time
from pathlib import Path

import numpy as np
import torch
from datasets import Dataset
from torch.utils.data import DataLoader
from transformers import (
    Seq2SeqTrainer,
)
from transformers.utils import logging

from ...averaging import average_checkpoints
from ...configuration_vanilla_transformer import VanillaTransformerConfig
from ...data.files import data_path
from ...data.translation import LOCAL_DATASETS
from ...evaluation import evaluate_split
from ...loading import is_hub_id
from ...metrics import bleu_scores
from ...model_card import Result, write_model_card
from ...modeling_vanilla_transformer import (
    PAPER_LENGTH_PENALTY,
    PAPER_NUM_BEAMS,
    UNSET_MAX_LENGTH,
    VanillaTransformerForConditionalGeneration,
    sequence_losses,
)
from ...plots import plot_history
from ..common.budget import TrainingClock, fraction_spent
from ..common.init_from import (
    check_recipe_agrees,
    continues_from_checkpoint,
    load_parent_weights,
    parent_config,
    regularisation,
)
from ..common.positions import check_lengths
from ..common.precision_record import describe_precision
from ..common.recipes import build_config
from ..common.run_trainer import RunTrainer
from .arguments import TranslationTrainingArguments
from .averaging import spaced_checkpoints
from .batching import TokenBudgetBatchSampler
from .schedule import transformer_lr_scheduler

logger = logging.get_logger(__name__)

# The translations of the latest validation's BLEU sample, one a line in the split's order.
VALIDATION_HYPOTHESES = "validation_hypotheses.txt"
# torch's fused Adam runs on these devices (fp32 parameters and state, as the paper's Adam).
FUSED_ADAM_DEVICES = ("cpu", "cuda")


# -- set-up ------------------------------------------------------------------------------------------------


def checkpoints_folder(args: TranslationTrainingArguments) -> Path:
    """The run's checkpoints: ``output_dir/checkpoints/checkpoint-N``."""
    return Path(args.output_dir) / "checkpoints"


def check_init_from(args: TranslationTrainingArguments) -> None:
    """With ``init_from``: the parent is an encoder-decoder model (a ``train`` run's ``model/``) whose config
    the recipe agrees with (its ``model:`` block, ``vocab_size``, languages: ``common/init_from.py``). A run
    that continues from its own checkpoint needs nothing of the parent. With or without one,
    ``max_source_length`` and ``max_target_length`` must fit the model's learned positions
    (``common/positions.py``)."""
    lengths = {"max_source_length": args.max_source_length, "max_target_length": args.max_target_length}
    if not args.init_from:
        check_lengths(lengths, args.model)
        return
    inside = Path(args.init_from).resolve().is_relative_to(Path(args.output_dir).resolve())
    if inside and not is_hub_id(args.init_from):
        raise ValueError(
            f"`init_from`: {args.init_from} lies inside output_dir ({args.output_dir}), whose files are the run's "
            "(overwrite moves them aside): copy the model elsewhere, or choose another output_dir."
        )
    if continues_from_checkpoint(args.resume, checkpoints_folder(args)):
        return
    parent = parent_config(args.init_from)
    if not parent.is_encoder_decoder:
        kind = "decoder-only" if parent.is_decoder else "encoder-only"
        raise ValueError(
            f"`init_from`: {args.init_from} is an {kind} model ({', '.join(parent.architectures or [])}); "
            "translation starts from an encoder-decoder model, such as a `train` run's model/ folder."
        )
    languages = {"source_lang": args.source_lang, "target_lang": args.target_lang}
    check_recipe_agrees(args.init_from, parent, args.model, {"vocab_size": args.vocab_size, **languages})
    check_lengths(lengths, args.model, args.init_from, parent)


def build_model(args: TranslationTrainingArguments, tokenizer, checkpoint: Path | None):
    """The model the run trains: the recipe's, initialised at random; with ``init_from`` the parent's
    weights and architecture (the recipe's dropout and label smoothing in its config), or, for a run that
    continues from a checkpoint, that checkpoint's model (the trainer then restores its weights and
    optimiser state)."""
    if not args.init_from:
        return VanillaTransformerForConditionalGeneration(build_model_config(args, tokenizer))
    if checkpoint is not None:
        return VanillaTransformerForConditionalGeneration.from_pretrained(checkpoint, dtype=torch.float32)
    model, _ = load_parent_weights(
        VanillaTransformerForConditionalGeneration, args.init_from, **regularisation(args.model)
    )
    if args.process_index == 0:
        print(f"Starting from {args.init_from}: its weights, architecture and tokenizer.")
    return model


def build_model_config(args: TranslationTrainingArguments, tokenizer) -> VanillaTransformerConfig:
    """The recipe's model block (a Table 3 preset and/or fields) with the run's vocabulary, special tokens,
    tokenizer fingerprint and language pair; a model too large for the machine is refused here."""
    return build_config(
        args.model,
        defaults={"max_position_embeddings": max(args.max_source_length, args.max_target_length) + 64},
        tokenizer=tokenizer,
        source_lang=args.source_lang,
        target_lang=args.target_lang,
    )


def accumulation_steps(
    args: TranslationTrainingArguments, train_data: Dataset, sampler: TokenBudgetBatchSampler
) -> int:
    """Batches per process per update: enough for about ``tokens_per_update`` target tokens over all
    processes where that is set, else ``gradient_accumulation_steps``."""
    if not args.tokens_per_update:
        return args.gradient_accumulation_steps
    tokens_per_batch = sum(len(x) for x in train_data["labels"]) / max(len(sampler), 1)
    return max(1, round(args.tokens_per_update / (tokens_per_batch * args.world_size)))


# -- the trainer -------------------------------------------------------------------------------------------


class TranslationTrainer(RunTrainer, Seq2SeqTrainer):
    """``Seq2SeqTrainer`` with §5's batches, optimizer and schedule, the validation BLEU of §6.1's beam
    search, and the run core's crash-safe checkpoints and loss guard (``RunTrainer``)."""

    nonfinite_advice = (
        "Lower `lr_scale` or `max_grad_norm`, or set `mixed_precision: no` if this is a bf16 overflow."
    )

    args: TranslationTrainingArguments

    def __init__(
        self,
        *,
        sampler: TokenBudgetBatchSampler,
        clock: TrainingClock,
        bleu_references: list[str] | None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.sampler, self.clock = sampler, clock
        self.bleu_references = bleu_references
        self.tokens_since_log, self.log_started = 0, time.monotonic()
        self.scoring_tokens = False  # prediction_step's mode: the validation loss's sums, or Seq2SeqTrainer's

    # -- batches --------------------------------------------------------------------------------------

    def get_train_dataloader(self) -> DataLoader:
        """Batches of at most ``max_tokens`` source and target tokens (§5.1). Accelerate shards them:
        process p of P takes batches p, p + P, ... of the epoch. A private generator: starting an epoch
        must not draw from the global RNG that dropout uses, or a resumed run (which starts its epoch
        mid-way) would see different dropout masks."""
        loader = DataLoader(
            self.train_dataset,
            batch_sampler=self.sampler,
            collate_fn=self.data_collator,
            generator=torch.Generator().manual_seed(self.args.seed),
            num_workers=self.args.dataloader_num_workers,
        )
        return self.accelerator.prepare(loader)

    def get_eval_dataloader(self, eval_dataset=None) -> DataLoader:
        """The validation split longest first (similar lengths batch with little padding), in batches of
        ``per_device_eval_batch_size``: a fixed size, so the evaluation loop's gather drops the repeats that even
        out the last batches across processes."""
        return self._sorted_loader(eval_dataset if eval_dataset is not None else self.eval_dataset)

    def _sorted_loader(self, data: Dataset) -> DataLoader:
        order = np.argsort([-len(x) for x in data["input_ids"]], kind="stable")
        loader = DataLoader(
            data.select(order),
            batch_size=self.args.per_device_eval_batch_size,
            collate_fn=self.data_collator,
            shuffle=False,
        )
        prepared = self.accelerator.prepare(loader)
        prepared.order = order  # the split's index of each row, for the references
        return prepared

    # -- optimizer and schedule (§5.3) --------------------------------------------------------------------

    def create_optimizer(self, model=None):
        """Adam with the recipe's betas and epsilon (§5.3: 0.9, 0.98, 1e-9), no weight decay; ``lr`` 1.0,
        which the scheduler multiplies by Eq. 3's rate."""
        if self.optimizer is None:
            parameters = [p for p in (model or self.model).parameters() if p.requires_grad]
            self.optimizer = torch.optim.Adam(
                parameters,
                lr=1.0,
                betas=(self.args.adam_beta1, self.args.adam_beta2),
                eps=self.args.adam_epsilon,
                # One kernel for all parameters; FSDP and DeepSpeed keep their own (sharded) tensors.
                fused=self.args.device.type in FUSED_ADAM_DEVICES
                and not (self.is_fsdp_enabled or self.is_deepspeed_enabled),
            )
        return self.optimizer

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        """Eq. 3 at every update, times the cool-down of ``lr_cooldown`` (``budget_spent``)."""
        if self.lr_scheduler is None:
            self.lr_scheduler = transformer_lr_scheduler(
                optimizer or self.optimizer,
                self.model.config.d_model,
                self.args.warmup_steps,
                self.args.lr_scale,
                cooldown=self.args.lr_cooldown,
                progress=self.budget_spent,
            )
        return self.lr_scheduler

    def budget_spent(self) -> float:
        """The fraction of the run's budget spent when the scheduler sets the next update's rate: of
        ``max_steps``, or of ``run_minutes`` if that is further along. The same on every process (the
        largest), so their learning rates, and the update the clock stops at, agree."""
        steps = (self.state.global_step + 1) / max(self.state.max_steps or self.args.max_steps, 1)
        return fraction_spent(self, steps, self.clock)

    # -- training steps and logs --------------------------------------------------------------------------

    def training_step(self, model, inputs, *args, **kwargs):
        """The run core's step (``RunTrainer``: the trainer's, guarded against a loss that is not finite),
        counting the batch's real source and target tokens for the throughput."""
        self.tokens_since_log += count_tokens(inputs) * self.args.world_size
        return super().training_step(model, inputs, *args, **kwargs)

    def describe_batch(self, inputs) -> str:
        return f"{len(inputs['input_ids'])} sentences ({count_tokens(inputs)} tokens)"

    def log(self, logs: dict[str, float], *args, **kwargs) -> None:
        """The trainer's log, with the training throughput in tokens per second since the last row."""
        if "loss" in logs:
            now = time.monotonic()
            logs["tokens_per_second"] = self.tokens_since_log / max(now - self.log_started, 1e-9)
            self.tokens_since_log, self.log_started = 0, now
        super().log(logs, *args, **kwargs)

    # -- validation -----------------------------------------------------------------------------------

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval", **gen_kwargs):
        """Validation loss over the whole split and beam-search BLEU (the saved generation config) on its
        first ``eval_bleu_samples`` sentences, both with the trainer's evaluation loop on every process;
        logged as ``eval_loss``, ``eval_perplexity``, ``eval_sacrebleu``, ``eval_bleu_lc_tok``.

        The loss is §5.4's label-smoothed loss per target token of the whole split, each sentence counted
        once (``prediction_step`` returns per-sentence sums, which the loop gathers row by row and cuts
        to the split's length, so the repeats that even out the last batches across processes drop out);
        the perplexity is exp of the unsmoothed negative log-likelihood per token, as Table 3's (``ablate``).
        Runs in a forked RNG, so that evaluating never changes the training run's random stream."""
        data = eval_dataset if eval_dataset is not None else self.eval_dataset
        started = time.monotonic()
        # Seq2SeqTrainer fills the model's generation config with every default (max_length 20, ...),
        # which the saved folders would carry: it gets a copy to fill.
        saved_config = self.model.generation_config
        self.model.generation_config = copy.deepcopy(saved_config)
        try:
            with torch.random.fork_rng(devices=[]):
                self.scoring_tokens = True
                totals = self.evaluation_loop(
                    self.get_eval_dataloader(data),
                    description="Validation loss",
                    prediction_loss_only=False,
                    ignore_keys=ignore_keys,
                    metric_key_prefix=metric_key_prefix,
                ).predictions  # (sentences, 2): each one's loss summed over its tokens, its tokens
                self.scoring_tokens = False
                tokens = max(float(totals[:, 2].sum()), 1.0)
                loss, nll = float(totals[:, 0].sum()) / tokens, float(totals[:, 1].sum()) / tokens
                sample = data.select(range(min(self.args.eval_bleu_samples, len(data))))
                loader = self._sorted_loader(sample)
                generated = self.evaluation_loop(
                    loader,
                    description="Validation BLEU",
                    prediction_loss_only=False,
                    ignore_keys=ignore_keys,
                    metric_key_prefix=metric_key_prefix,
                )
        finally:
            self.model.generation_config = saved_config
            self.scoring_tokens = False
        hypotheses = self.decode(generated.predictions)
        references = [self.bleu_references[i] for i in loader.order]
        if self.is_world_process_zero():  # the sample's translations in the split's order, latest validation
            in_order = [hypotheses[rank] for rank in np.argsort(loader.order, kind="stable")]
            (Path(self.args.output_dir) / VALIDATION_HYPOTHESES).write_text("\n".join(in_order) + "\n")
        scores = bleu_scores(hypotheses, references, self.args.target_lang)
        metrics = {
            "loss": loss,
            "perplexity": math.exp(min(nll, 50)),
            **scores,
            "bleu_sentences": len(sample),
            "elapsed_minutes": self.clock.elapsed_seconds / 60,
            "runtime": time.monotonic() - started,
        }
        metrics = {f"{metric_key_prefix}_{key}": value for key, value in metrics.items()}
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None, **gen_kwargs):
        """Seq2SeqTrainer's step (generation for BLEU); for the validation loss, each sentence's
        ``sequence_losses`` (the model's §5.4 loss and its plain negative log-likelihood, summed over its
        target tokens) and its token count, as the "logits"."""
        if not self.scoring_tokens:
            step = super().prediction_step(model, inputs, prediction_loss_only, ignore_keys, **gen_kwargs)
            # After each batch Seq2SeqTrainer fills the generation config (evaluate()'s copy) with
            # transformers' defaults, max_length 20 among them: no bound of ours (the next batch is bounded
            # by its source + 50, see generate()), but generate() would warn on every later batch that both
            # max_length and that bound are set. The default goes; the step has padded its tokens with it.
            config = self.model.generation_config
            if config.max_length == UNSET_MAX_LENGTH and config.max_new_tokens is None:
                config.max_length = None
            return step
        inputs = self._prepare_inputs(inputs)
        labels = inputs["labels"]
        with torch.no_grad(), self.compute_loss_context_manager():
            logits = model(**inputs).logits
        smoothed, tokens = sequence_losses(logits, labels, self.model.config.label_smoothing)
        nll, _ = sequence_losses(logits, labels, 0.0)
        return None, torch.stack([smoothed, nll, tokens.float()], dim=-1), None  # (B, 3)

    def decode(self, predictions: np.ndarray) -> list[str]:
        """Generated ids (padded with -100 by the evaluation loop's gather) as detokenized text."""
        pad = self.processing_class.pad_token_id
        ids = np.where(predictions == -100, pad, predictions)
        return [text.strip() for text in self.processing_class.batch_decode(ids, skip_special_tokens=True)]


def count_tokens(batch) -> int:
    """Real (non-padding) source and target tokens in a batch."""
    return int(batch["attention_mask"].sum()) + int((batch["labels"] != -100).sum())


# -- the end of the run ------------------------------------------------------------------------------------


def validation_history(trainer: TranslationTrainer) -> list[dict]:
    """One row per validation of the run (earlier invocations' too: the checkpoint carries them)."""
    return [
        {"step": row["step"]}
        | {key.removeprefix("eval_"): value for key, value in row.items() if key.startswith("eval_")}
        for row in trainer.state.log_history
        if "eval_sacrebleu" in row
    ]


def finish(trainer: TranslationTrainer, splits, precision: dict, training_minutes: float) -> dict:
    """The final model (last weights, or §6.1's average), its test BLEU, the card, the plot; the results."""
    args = trainer.args
    output = Path(args.output_dir)
    results = {
        "updates": trainer.state.global_step,
        "training_minutes": training_minutes,
        "mixed_precision": precision,
    }
    final = save_final_model(trainer, args, results)
    if trainer.is_world_process_zero():
        results["parameters"] = final.num_parameters()
        results["peak_memory_mib"] = peak_memory_mib(trainer.args.device)
        results["history"] = validation_history(trainer)
        if "test" in splits:
            results["test"] = evaluate_test_split(trainer, args, final, splits["test"])
        write_translation_card(args, final, results, output / "model")
        plot = plot_history(
            results["history"], output / "bleu_curve.png", f"{args.source_lang} -> {args.target_lang}"
        )
        if plot is not None:
            print(f"Validation curve: {plot}")
        print(f"Model saved to {output / 'model'} after {training_minutes:.1f} minutes of training.")
    trainer.accelerator.wait_for_everyone()
    return results


def peak_memory_mib(device: torch.device) -> dict[str, float]:
    """This process's peak resident memory (the host's, training included), and on a GPU the peak that
    torch allocated there, in MiB."""
    import resource

    peaks = {"host": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}  # Linux reports KiB
    if device.type == "cuda":
        peaks["cuda"] = torch.cuda.max_memory_allocated(device) / 2**20
    return {name: round(value, 1) for name, value in peaks.items()}


def save_final_model(trainer: TranslationTrainer, args, results: dict):
    """``output_dir/model``: the average of the last ``average_last`` checkpoints (§6.1), else the last
    weights (fp32: mixed precision computes in bf16, it never casts the weights). ``save_model`` gathers
    the full weights where FSDP or DeepSpeed ZeRO-3 shard them; every process calls it."""
    folder = Path(args.output_dir) / "model"
    final = trainer.accelerator.unwrap_model(trainer.model)
    averaged = spaced_checkpoints(trainer.checkpoints_folder(), args.average_last, args.save_steps)
    if len(averaged) > 1:
        if trainer.is_world_process_zero():
            average_checkpoints(averaged, folder)
            results["averaged_checkpoints"] = [checkpoint.name for checkpoint in averaged]
            print(f"Final model: the average of {', '.join(results['averaged_checkpoints'])}.")
        trainer.accelerator.wait_for_everyone()
        return type(final).from_pretrained(folder).to(trainer.args.device)
    trainer.save_model(str(folder))
    return final


def evaluate_test_split(trainer: TranslationTrainer, args, model, split) -> dict:
    """Translate the test split in the run's precision; print three samples; both BLEUs."""
    references = data_path(args.tokenized_test_references, args.data_dir)
    hypotheses_file = Path(args.output_dir) / "test_hypotheses.txt"
    with trainer.accelerator.autocast():
        scores, samples = evaluate_split(
            model,
            trainer.processing_class,
            split,
            hypotheses_file,
            target_lang=args.target_lang,
            batch_size=args.per_device_eval_batch_size,
            tokenized_references=references,
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
    if args.dataset in LOCAL_DATASETS:
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
    start = f"fine-tuned from {args.init_from}" if args.init_from else "trained from scratch"
    training = {
        **({"initial weights": f"{args.init_from} (fine-tuned)"} if args.init_from else {}),
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
        summary=f"A Transformer {start} with vanilla-transformer to translate {pair} (beam {args.num_beams}, "
        f"length penalty {args.length_penalty}).",
        results=scores,
        datasets=[name] if is_hub_id(name) else [],  # the Hub refuses a card naming a local path
        training=training,
        language=[args.source_lang, args.target_lang],
        base_model=args.init_from,
    )


def describe_decoding(num_beams: int, length_penalty: float) -> str:
    """The card's decoding row: §6.1's beam 4 and alpha 0.6, or the recipe's departure from them."""
    paper = f"beam {PAPER_NUM_BEAMS}, length penalty {PAPER_LENGTH_PENALTY}"
    if (num_beams, length_penalty) == (PAPER_NUM_BEAMS, PAPER_LENGTH_PENALTY):
        return f"{paper} (§6.1)"
    search = "greedy search" if num_beams == 1 else f"beam {num_beams}, length penalty {length_penalty}"
    return f"{search}: the recipe's choice, departing from §6.1's {paper}"


__all__ = ["TranslationTrainer", "build_model", "build_model_config", "check_init_from", "finish"]
