"""``classify train``: fine-tune a pre-trained encoder as a classifier (or train one from scratch) with
``transformers.Trainer``, choosing on the validation texts, then score the test file once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from transformers import DataCollatorWithPadding, TrainingArguments, set_seed

from ...classification_pipeline import LongText, average_logits
from ...fast_dropout import use_fast_dropout
from ...loading import check_model_folder
from ...model_card import Result, write_model_card
from ...modeling_vanilla_transformer import VanillaTransformerForSequenceClassification
from ..common.budget import BudgetedTrainer, TimeBudget, TrainingClock
from ..common.precision_record import describe_precision
from ..common.run_folder import RunFolder
from ..common.run_trainer import preemption_for, resume_checkpoint, stop_if_interrupted
from .arguments import ClassificationArguments
from .data import check_data_paths, encode_texts, label_maps, subset, training_and_validation
from .evaluate import classification_metrics, evaluate_classifier
from .setup import (
    budget_callbacks,
    classification_tokenizer,
    data_name,
    model_config,
    precision_record,
    run_budgets,
    run_folder,
    run_settings,
    show_minutes,
    write_json,
)


def train_classifier(args: ClassificationArguments, training: TrainingArguments) -> dict:
    """Fine-tune (or train from scratch) the classifier; evaluates on the test file when given. The run owns
    ``run_dir`` (the run core: lock, ``resume``, a stop on SIGTERM / SIGINT / SIGUSR1 with a checkpoint)."""
    check_data_paths(args)  # a misspelt path is named before the run folder is touched
    if args.pretrained_model and Path(args.pretrained_model).is_dir():
        check_model_folder(
            args.pretrained_model
        )  # its memory, tokenizer and generation files, before any work
    folder = run_folder(args, training, "train")
    with folder, preemption_for("`--set resume=true`") as preemption:
        folder.open(args.resume, args.overwrite, run_budgets(args, training), training)
        return _train_classifier(args, training, folder, preemption)


def _train_classifier(
    args: ClassificationArguments, training: TrainingArguments, folder: RunFolder, preemption
):
    precision = precision_record(args, training)
    print(f"Precision: {describe_precision(precision)}.")
    set_seed(training.seed)  # the model's initial weights too (the Trainer seeds only once it is built)
    train, validation = training_and_validation(args, training.seed)
    train = subset(train, args.max_train_examples, training.seed)
    id2label, label2id = label_maps(
        args, list(train[args.label_column]) + list(validation[args.label_column])
    )
    tokenizer = classification_tokenizer(args, list(train[args.text_column]))
    tokenizer.model_max_length = args.max_length  # a pre-trained model's tokenizer may say otherwise
    # The reading (long_text, max_length, ...) goes into the saved config: the pipeline reads as training did.
    extra = {"num_labels": len(id2label), "id2label": id2label, "label2id": label2id, **args.reading_config()}
    if args.pretrained_model:
        if args.finetune_dropout is not None:  # pre-training may have run without dropout
            extra["dropout"] = args.finetune_dropout
        model = VanillaTransformerForSequenceClassification.from_pretrained(args.pretrained_model, **extra)
    else:
        model = VanillaTransformerForSequenceClassification(model_config(args, tokenizer, **extra))
    use_fast_dropout(model, training.device)

    # Validation scores texts, not rows: a text read as several windows counts once, with the mean of its
    # windows' logits. ``owner`` travels with each row as a second label (the eval order may be by length).
    training.label_names = ["labels", "owner"]

    def compute_metrics(prediction) -> dict:
        _, owners = prediction.label_ids
        logits = average_logits(torch.as_tensor(prediction.predictions), owners.tolist(), len(validation))
        metrics = classification_metrics(
            logits.argmax(-1).numpy(), np.asarray(validation[args.label_column]), len(id2label)
        )
        metrics.pop("confusion_matrix")
        return metrics

    reading = args.reading()
    vocab = model.config.vocab_size  # the ids are checked against the model's vocabulary where they enter
    settings = run_settings(args, training, "train")
    checkpoint = (
        resume_checkpoint(folder, Path(training.output_dir), settings, training)
        if folder.continuing
        else None
    )
    folder.record(status="running", settings=settings, budgets=run_budgets(args, training))
    # ``run_minutes``: the learning rate reaches zero at the recipe's last update or at the budget, whichever
    # comes first, and the update that spends the budget is validated (it may be the best).
    clock = TrainingClock.resuming(
        args.run_minutes, checkpoint, evaluate_at_end=training.eval_strategy != "no"
    )
    trainer = BudgetedTrainer(
        model=model,
        args=training,
        train_dataset=encode_texts(train, tokenizer, args, reading, True, vocab).remove_columns("owner"),
        eval_dataset=encode_texts(validation, tokenizer, args, reading, True, vocab),
        data_collator=DataCollatorWithPadding(tokenizer),
        processing_class=tokenizer,
        compute_metrics=compute_metrics,
        callbacks=[*budget_callbacks(args), clock],
    )
    trainer.run_settings = settings
    show_minutes(trainer, args, training)
    trainer.add_callback(preemption)  # last: a stop on a signal overrides what the others asked
    train_output = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    stop_if_interrupted(trainer, folder, preemption)
    output = Path(args.run_dir) / "model"
    trainer.save_model(output)
    results = {
        "train": train_output.metrics,
        "validation": trainer.evaluate(),
        "mixed_precision": precision,
    }
    if args.test_file:
        results["test"] = evaluate_classifier(output, args, args.test_file)
    write_json(Path(args.run_dir) / "results.json", results)
    _classifier_card(args, training, model, results, output, len(train))
    # A session stopped by session_minutes leaves its model and scores, and a run the same command continues.
    stopped = any(isinstance(cb, TimeBudget) and cb.ended for cb in trainer.callback_handler.callbacks)
    folder.record(
        status="stopped" if stopped else "finished",
        updates=trainer.state.global_step,
        budgets=run_budgets(args, training),
    )
    return results


def _classifier_card(args, training, model, results: dict, folder: Path, examples: int) -> Path:
    name, kind = data_name(args)
    scores = []
    for split, file in (("validation", args.validation_file or args.train_file), ("test", args.test_file)):
        metrics = results.get(split)
        if not metrics:
            continue
        prefix = "eval_" if split == "validation" else ""
        split_name = Path(file).name.split(".")[0] + (" (held out)" if split == "validation" else "")
        for metric in ("accuracy", "f1"):
            if f"{prefix}{metric}" in metrics:
                value = 100 * metrics[f"{prefix}{metric}"]
                scores.append(Result("text-classification", metric, metric, value, name, kind, split_name))
    start = f"fine-tuned from {args.pretrained_model}" if args.pretrained_model else "trained from scratch"
    return write_model_card(
        folder,
        model,
        task="text-classification",
        name=Path(args.run_dir).name,
        summary=f"The Transformer's encoder alone as a text classifier, {start} with `transformers.Trainer` "
        f"(labels: {', '.join(model.config.id2label.values())}). Values in percent.",
        results=scores,
        datasets=[] if kind == "json" else [name],
        training={
            "data": f"{name}: {examples:,} training examples",
            "epochs": training.num_train_epochs,
            "batch size": training.per_device_train_batch_size,
            "learning rate": training.learning_rate,
            "training time": f"{results['train'].get('train_runtime', 0) / 60:.1f} min (this session)",
            "long texts": LongText.from_config(model.config).describe(),
            "precision": describe_precision(results["mixed_precision"]),
        },
    )


__all__ = ["train_classifier"]
