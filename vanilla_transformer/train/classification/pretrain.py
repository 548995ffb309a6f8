"""``classify pretrain``: the encoder pre-trained on the task's own text, as BERT's masked LM or as ELECTRA's
discriminator (``electra.py``), with ``transformers.Trainer``; resumable, on a time budget if asked."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import (
    DataCollatorForLanguageModeling,
    DataCollatorWithPadding,
    TrainingArguments,
    set_seed,
)

from ...fast_dropout import use_fast_dropout
from ...loading import is_hub_id
from ...model_card import write_model_card
from ...modeling_vanilla_transformer import VanillaTransformerForMaskedLM
from ..common.budget import BudgetedTrainer, TimeBudget, TrainingClock
from ..common.precision_record import describe_precision
from ..common.run_folder import RunFolder
from ..common.run_trainer import preemption_for, resume_checkpoint, stop_if_interrupted
from . import setup as stage
from .arguments import ClassificationArguments
from .data import check_data_paths, pretraining_dataset, pretraining_texts
from .electra import ElectraForPreTraining


class PretrainingTrainer(BudgetedTrainer):
    """``transformers.Trainer`` for ``classify pretrain``. Each logged loss also gets ``elapsed_minutes``
    (``TrainingClock``) and, for ELECTRA, its two parts (``mlm_loss``, ``discriminator_loss``) and the
    ``replaced_fraction``, averaged over the updates since the last log, so that runs of different
    objectives plot against wall-clock time. With a time budget the learning rate follows
    ``budget_schedule``."""

    PARTS = ("mlm_loss", "discriminator_loss", "replaced_fraction")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._parts = {name: [] for name in self.PARTS}

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss, outputs = super().compute_loss(
            model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch
        )
        if model.training:
            for name in self.PARTS:
                if isinstance(outputs, dict) and outputs.get(name) is not None:
                    self._parts[name].append(outputs[name])
        return (loss, outputs) if return_outputs else loss

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs:
            for name, values in self._parts.items():
                if values:
                    logs[name] = round(torch.stack(values).float().mean().item(), 4)
                    values.clear()
        clock = self.clock
        if clock is not None:
            logs["elapsed_minutes"] = round(clock.elapsed_seconds / 60, 4)
        super().log(logs, start_time)


def pretrain(args: ClassificationArguments, training: TrainingArguments) -> Path:
    """``classify pretrain``: pre-train the encoder on the task's own text (``pretraining_texts``) with
    ``objective: mlm`` (BERT's masked LM) or ``objective: electra`` (replaced-token detection, ``electra.py``).

    Resumable: the same command continues from the last Trainer checkpoint in ``output_dir`` (weights,
    optimizer, schedule, data position, random state and the minutes already trained). With
    ``run_minutes`` the learning rate decays to zero when that many minutes of training (over
    all invocations) are spent, and training stops there. Returns the folder of the encoder to fine-tune
    (``run_dir/mlm`` or ``run_dir/discriminator``), with its tokenizer and card."""
    check_data_paths(args)  # a misspelt path is named before the run folder is touched
    folder = stage.run_folder(args, training, "pretrain")
    with folder, preemption_for("`--set resume=true`") as preemption:
        folder.open(args.resume, args.overwrite, stage.run_budgets(args, training), training)
        return _pretrain(args, training, folder, preemption)


def _pretrain(
    args: ClassificationArguments, training: TrainingArguments, folder: RunFolder, preemption
) -> Path:
    precision = stage.precision_record(args, training)
    print(f"Precision: {describe_precision(precision)}.")
    set_seed(training.seed)  # the model's initial weights too (the Trainer seeds only once it is built)
    texts, held_out = pretraining_texts(args, training.seed)
    tokenizer = stage.classification_tokenizer(args, texts)
    corpus = pretraining_dataset(texts, tokenizer, args)
    evaluate = training.eval_strategy != "no"
    settings = stage.run_settings(args, training, "pretrain")
    checkpoint = (
        resume_checkpoint(folder, Path(training.output_dir), settings, training)
        if folder.continuing
        else None
    )
    folder.record(status="running", settings=settings, budgets=stage.run_budgets(args, training))
    electra = args.objective == "electra"
    if electra:
        if tokenizer.mask_token_id is None:
            raise ValueError(
                f"ELECTRA needs a tokenizer with a mask token; {tokenizer.name_or_path} has none."
            )
        model = ElectraForPreTraining(
            stage.model_config(args, tokenizer),
            mask_token_id=tokenizer.mask_token_id,
            special_token_ids=tokenizer.all_special_ids,
            mask_probability=args.mlm_probability,
            generator_size=args.generator_size,
            discriminator_weight=args.discriminator_weight,
        )
        collator = DataCollatorWithPadding(tokenizer)  # the model masks and samples (§2)
    else:
        # The head runs only at the masked positions (sparse_prediction): the loss is the same, and the
        # (batch, length, vocabulary) logits that would dominate a small encoder's step are never built.
        model = VanillaTransformerForMaskedLM(stage.model_config(args, tokenizer, sparse_prediction=True))
        collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=args.mlm_probability)
    use_fast_dropout(model, training.device)
    clock = TrainingClock.resuming(args.run_minutes, checkpoint)
    trainer = PretrainingTrainer(
        model=model,
        args=training,
        train_dataset=corpus,
        eval_dataset=pretraining_dataset(held_out, tokenizer, args) if evaluate else None,
        data_collator=collator,
        callbacks=[*stage.budget_callbacks(args), clock],
    )
    trainer.run_settings = settings
    stage.show_minutes(trainer, args, training)
    trainer.add_callback(preemption)  # last: a stop on a signal overrides what the others asked
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    stop_if_interrupted(trainer, folder, preemption)
    # Every logged loss of the run (earlier invocations included), for training/plot_pretraining.py.
    log = {"objective": args.objective, "log_history": trainer.state.log_history}
    stage.write_json(Path(args.run_dir) / "pretraining_log.json", log)
    output = Path(args.run_dir) / ("discriminator" if electra else "mlm")
    kept = model.discriminator() if electra else model
    kept.save_pretrained(output)
    tokenizer.save_pretrained(output)
    _pretraining_card(args, training, trainer, kept, output, len(corpus), precision)
    stopped = any(isinstance(cb, TimeBudget) and cb.ended for cb in trainer.callback_handler.callbacks)
    folder.record(
        status="stopped" if stopped else "finished",
        updates=trainer.state.global_step,
        budgets=stage.run_budgets(args, training),
    )
    return output


def _pretraining_card(args, training, trainer, model, folder: Path, rows: int, precision: dict) -> Path:
    name, kind = stage.data_name(args)
    clock = trainer.clock
    settings = {
        "data": f"{name}: {rows:,} sequences"
        + (f" of {args.pack_length} packed tokens" if args.pack_length else ""),
        "updates": trainer.state.global_step,
        "batch size": training.per_device_train_batch_size * training.gradient_accumulation_steps,
        "learning rate": training.learning_rate,
        "masking": f"{args.mlm_probability:.0%} of tokens",
        "training time": f"{clock.elapsed_seconds / 60:.1f} min" if clock else "",
        "precision": describe_precision(precision),
    }
    if args.objective == "electra":
        settings["generator"] = (
            f"{args.generator_size:g} of the discriminator's width; lambda {args.discriminator_weight:g}"
        )
        summary = (
            "The Transformer's encoder pre-trained as ELECTRA's discriminator (replaced-token detection, Clark et "
            "al., 2020) on the task's own text, to be fine-tuned as a classifier "
            "(`VanillaTransformerForSequenceClassification.from_pretrained`)."
        )
        task, suffix = "feature-extraction", "-electra"
    else:
        summary = (
            "The Transformer's encoder pre-trained as a BERT-style masked language model on the task's own text, "
            "to be fine-tuned as a classifier."
        )
        task, suffix = "fill-mask", "-mlm"
    return write_model_card(
        folder,
        model,
        task=task,
        name=Path(args.run_dir).name + suffix,
        summary=summary,
        results=[],
        datasets=[name] if is_hub_id(name) else [],  # the Hub refuses a card naming a local path
        training=settings,
    )


__all__ = ["PretrainingTrainer", "pretrain"]
