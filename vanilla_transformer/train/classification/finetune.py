"""``classify train``: fine-tune a trained model as a classifier (or train one from scratch) with
``transformers.Trainer``, choosing on the validation texts, then score the test file once.

The model a run starts from (``init_from``, ``common/init_from.py``) may be a pre-trained encoder (masked LM,
ELECTRA discriminator), a translation model (its encoder) or a classifier; the classifier head is the
parent's where the parent classifies the run's labels, else a new one (a warning says so)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from transformers import DataCollatorWithPadding, TrainingArguments, set_seed
from transformers.utils import logging

from ...classification_pipeline import LongText, average_logits
from ...configuration_vanilla_transformer import VanillaTransformerConfig
from ...fast_dropout import use_fast_dropout
from ...loading import is_hub_id
from ...model_card import Result, write_model_card
from ...modeling_vanilla_transformer import VanillaTransformerForSequenceClassification
from ..common.budget import BudgetedTrainer, TimeBudget, TrainingClock
from ..common.init_from import (
    check_recipe_agrees,
    continues_from_checkpoint,
    load_parent_weights,
    parent_config,
    regularisation,
)
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

logger = logging.get_logger(__name__)


def train_classifier(args: ClassificationArguments, training: TrainingArguments) -> dict:
    """Fine-tune (or train from scratch) the classifier; evaluates on the test file when given. The run owns
    ``run_dir`` (the run core: lock, ``resume``, a stop on SIGTERM / SIGINT / SIGUSR1 with a checkpoint)."""
    check_data_paths(args)  # a misspelt path is named before the run folder is touched
    check_init_from(args, training)  # so is a model to start from that the recipe disagrees with
    folder = run_folder(args, training, "train")
    with folder, preemption_for("`--set resume=true`") as preemption:
        folder.open(args.resume, args.overwrite, run_budgets(args, training), training)
        return _train_classifier(args, training, folder, preemption)


def _train_classifier(
    args: ClassificationArguments, training: TrainingArguments, folder: RunFolder, preemption
):
    precision = precision_record(args, training)
    print(f"Precision: {describe_precision(precision)}.")
    settings = run_settings(args, training, "train")
    checkpoint = (
        resume_checkpoint(folder, Path(training.output_dir), settings, training)
        if folder.continuing
        else None
    )
    set_seed(training.seed)  # the model's initial weights too (the Trainer seeds only once it is built)
    train, validation = training_and_validation(args, training.seed)
    train = subset(train, args.max_train_examples, training.seed)
    id2label, label2id = label_maps(
        args, list(train[args.label_column]) + list(validation[args.label_column])
    )
    tokenizer = classification_tokenizer(args, list(train[args.text_column]), checkpoint)
    tokenizer.model_max_length = args.max_length  # a pre-trained model's tokenizer may say otherwise
    # The reading (long_text, max_length, ...) goes into the saved config: the pipeline reads as training did.
    extra = {"num_labels": len(id2label), "id2label": id2label, "label2id": label2id, **args.reading_config()}
    model = build_classifier(args, tokenizer, extra, checkpoint)
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


# The classifier head: the tensors a model that classifies other labels (or none) does not give the run.
HEAD = ("classifier.weight", "classifier.bias")


def check_init_from(args: ClassificationArguments, training: TrainingArguments) -> None:
    """The model the run starts from (``init_from``), before any work: a folder is checked
    (``loading.check_model_folder``) and must hold a tokenizer; a decoder-only model, which has no encoder,
    is refused; the recipe's model block and ``vocab_size`` must agree with its config
    (``common/init_from.py``). A run that
    continues from its own checkpoint needs nothing of it."""
    parent = args.init_from
    if not parent or continues_from_checkpoint(args.resume, Path(training.output_dir)):
        return
    config = parent_config(parent)
    if config.is_decoder and not config.is_encoder_decoder:
        raise ValueError(
            f"`init_from`: {parent} is a decoder-only model ({', '.join(config.architectures or [])}); a "
            "classifier starts from an encoder: a translation model, a pre-trained encoder or a classifier."
        )
    check_recipe_agrees(parent, config, args.model, {"vocab_size": args.vocab_size})
    # The run's reading of long texts must fit the parent's positions (learned ones are a hard limit).
    VanillaTransformerConfig.from_dict({**config.to_dict(), **args.reading_config()})


def build_classifier(args: ClassificationArguments, tokenizer, extra: dict, checkpoint: Path | None):
    """The classifier the run trains, its config carrying ``extra`` (labels, long-text reading): the recipe's
    encoder at random; or the parent's encoder (with the recipe's regularisation fields: pre-training
    may have run without dropout) with the parent's head where it classifies the same labels, else a new head; or,
    for a run that continues from a checkpoint, that checkpoint's model (the Trainer restores its state)."""
    parent = args.init_from
    if not parent:
        return VanillaTransformerForSequenceClassification(model_config(args, tokenizer, **extra))
    if checkpoint is not None:
        return VanillaTransformerForSequenceClassification.from_pretrained(checkpoint, dtype=torch.float32)
    changes = regularisation(args.model)
    before = VanillaTransformerConfig.from_pretrained(parent)
    classifies = "VanillaTransformerForSequenceClassification" in (before.architectures or [])
    model, fresh = load_parent_weights(
        VanillaTransformerForSequenceClassification,
        parent,
        allowed_missing=HEAD,
        # the encoder alone: a translation model's decoder is left behind
        num_decoder_layers=0,
        is_encoder_decoder=False,
        is_decoder=False,
        **extra,
        **changes,
    )
    keeps_head = classifies and before.id2label == extra["id2label"]
    if classifies and not keeps_head:
        if not fresh:  # as many labels, other names: the parent's head would answer for its own labels
            torch.nn.init.xavier_uniform_(model.classifier.weight)  # as _init_weights initialises a Linear
            torch.nn.init.zeros_(model.classifier.bias)
        logger.warning(
            f"init_from: {parent} classifies {list(before.id2label.values())}; this run's labels are "
            f"{list(extra['id2label'].values())}: its classifier head starts anew (the encoder keeps the "
            "model's weights)."
        )
    print(
        f"Starting from {parent}: its encoder{' and classifier head' if keeps_head else ''}, and its tokenizer."
    )
    return model


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
    parent = args.init_from
    start = f"fine-tuned from {parent}" if parent else "trained from scratch"
    return write_model_card(
        folder,
        model,
        task="text-classification",
        name=Path(args.run_dir).name,
        base_model=parent,
        summary=f"The Transformer's encoder alone as a text classifier, {start} with `transformers.Trainer` "
        f"(labels: {', '.join(model.config.id2label.values())}). Values in percent.",
        results=scores,
        datasets=[name] if is_hub_id(name) else [],  # the Hub refuses a card naming a local path
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
