"""The classifier of the classification task (``task.py``): the model it trains (fine-tuned from a trained
model, or from scratch), the checks of the model it starts from, its test scores and its card.

The model a run starts from (``init_from``, ``common/init_from.py``) may be a pre-trained encoder (masked LM,
ELECTRA discriminator), a translation model (its encoder) or a classifier; the classifier head is the
parent's where the parent classifies the run's labels, else a new one (a warning says so)."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers.utils import logging

from ...classification_pipeline import LongText
from ...configuration_vanilla_transformer import VanillaTransformerConfig
from ...evaluation import evaluate_on_recipe_data
from ...loading import is_hub_id
from ...model_card import Result, write_model_card
from ...modeling_vanilla_transformer import VanillaTransformerForSequenceClassification
from ..common.init_from import (
    check_recipe_agrees,
    continues_from_checkpoint,
    load_parent_weights,
    parent_config,
    regularisation,
)
from ..common.positions import check_lengths
from ..common.precision_record import describe_precision
from .arguments import ClassificationArguments
from .setup import (
    data_name,
    model_config,
)

logger = logging.get_logger(__name__)


# The classifier head: the tensors a model that classifies other labels (or none) does not give the run.
HEAD = ("classifier.weight", "classifier.bias")


def check_init_from(args: ClassificationArguments) -> None:
    """The model the run starts from (``init_from``), before any work: a folder is checked
    (``loading.check_model_folder``) and must hold a tokenizer; a decoder-only model, which has no encoder,
    is refused; the recipe's model block and ``vocab_size`` must agree with its config
    (``common/init_from.py``). A run that
    continues from its own checkpoint needs nothing of it. With or without one, ``max_length`` must fit the
    model's learned positions (``common/positions.py``)."""
    parent = args.init_from
    lengths = {"max_length": args.max_length}
    if not parent:
        check_lengths(lengths, args.model)
        return
    if continues_from_checkpoint(args.resume, Path(args.output_dir) / "checkpoints" / "train"):
        return
    config = parent_config(parent)
    if config.is_decoder and not config.is_encoder_decoder:
        raise ValueError(
            f"`init_from`: {parent} is a decoder-only model ({', '.join(config.architectures or [])}); a "
            "classifier starts from an encoder: a translation model, a pre-trained encoder or a classifier."
        )
    check_recipe_agrees(parent, config, args.model, {"vocab_size": args.vocab_size})
    check_lengths(lengths, args.model, parent, config)
    # The run's reading of long texts must fit the parent's positions (learned ones are a hard limit).
    VanillaTransformerConfig.from_dict({**config.to_dict(), **args.reading_config()})


def check_labels_agree(parent: str, config: VanillaTransformerConfig, id2label: dict[int, str]) -> None:
    """A classifier parent's labels against the run's (``class_names``, or the names the run gives labels
    0, 1, ...): the same classes in the same order keep the parent's head; wholly other classes (other
    names, or another number of them) are a new task, whose head starts anew (``build_classifier`` warns).
    Between the two, as many classes with a name in common but not every one at the same id (names in
    another order, one renamed or misspelt), is refused, naming the first label that differs: the run would
    throw the trained head away, or, with the data numbered the model's way, name every class wrongly. So is
    a parent whose own ``label2id`` disagrees with its ``id2label``."""
    theirs = {int(index): name for index, name in config.id2label.items()}
    wrong = [name for name, index in (config.label2id or {}).items() if theirs.get(int(index)) != name]
    if wrong:
        name = wrong[0]
        raise ValueError(
            f"{parent}/config.json: label2id gives {name!r} id {config.label2id[name]}, but id2label names id "
            f"{config.label2id[name]} {theirs.get(int(config.label2id[name]))!r}: correct one of the two in its "
            "config.json (id2label is what the model's predictions are named by)."
        )
    if (
        theirs == id2label
        or len(theirs) != len(id2label)
        or not set(theirs.values()) & set(id2label.values())
    ):
        return
    first = next(index for index in sorted(id2label) if theirs.get(index) != id2label[index])
    model_order = ", ".join(theirs[index] for index in sorted(theirs))
    raise ValueError(
        f"`class_names`: label {first} is {id2label[first]!r} in this run but {theirs.get(first)!r} in "
        f"{parent} (its labels: {model_order}), whose classifier head the run would start from. Set "
        f"`class_names: [{model_order}]` and number the data's labels that way; or, to train other classes, "
        "give them names the model does not use (the head then starts anew)."
    )


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
    if classifies:
        check_labels_agree(parent, before, extra["id2label"])
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


def test_scores(model_folder: Path, args: ClassificationArguments) -> dict:
    """The saved classifier's scores on the recipe's test file, read as the run reads its texts, on the
    run's device."""
    return evaluate_on_recipe_data(model_folder, args, args.test_file, device=args.device)


def classifier_card(args, trainer, results: dict, folder: Path, examples: int) -> Path:
    """The filled model card of a classification run: validation and test scores, data, training."""
    name, kind = data_name(args)
    model = trainer.accelerator.unwrap_model(trainer.model)
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
    clock = trainer.clock
    return write_model_card(
        folder,
        model,
        task="text-classification",
        name=Path(args.output_dir).name,
        base_model=parent,
        summary=f"The Transformer's encoder alone as a text classifier, {start} with `transformers.Trainer` "
        f"(labels: {', '.join(model.config.id2label.values())}). Values in percent.",
        results=scores,
        datasets=[name] if is_hub_id(name) else [],  # the Hub refuses a card naming a local path
        training={
            "data": f"{name}: {examples:,} training examples",
            "updates": trainer.state.global_step,
            "epochs": args.num_train_epochs,
            "batch size": args.per_device_train_batch_size,
            "learning rate": args.learning_rate,
            "training time": f"{clock.elapsed_seconds / 60:.1f} min" if clock else "",
            "long texts": LongText.from_config(model.config).describe(),
            "precision": describe_precision(results["mixed_precision"]),
        },
    )


__all__ = ["build_classifier", "check_init_from", "check_labels_agree", "classifier_card", "test_scores"]
