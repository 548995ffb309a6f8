"""Sentence classification as a task of the one run (``train/run.py``): the encoder alone with a classifier
head, trained with ``transformers.Trainer``, chosen on validation texts, the test file scored once.

The task's hooks: its checks (data paths, ``init_from``), the labelled texts and their validation split,
the tokenizer (the parent's, or one trained on the texts and kept in ``output_dir/tokenizer``), the
classifier (``finetune.build_classifier``), its Trainer with validation scored per text (a text read as
several windows counts once), and its end: ``output_dir/model``, the validation and test scores, the card.
It shares a run folder with the pre-training tasks (stage ``train``; theirs is ``pretrain``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from transformers import DataCollatorWithPadding

from ...classification_pipeline import average_logits
from ...data.classification import DATA_SETTINGS, check_data_paths, label_maps, training_and_validation
from ...fast_dropout import use_fast_dropout
from ...metrics import classification_metrics
from ..common.budget import BudgetedTrainer
from ..common.checkpoints import checkpoint_dirs
from ..tasks import Task
from .arguments import ClassificationArguments, load_classification_arguments
from .data import encode_texts, subset
from .finetune import build_classifier, check_init_from, classifier_card, test_scores
from .setup import classification_tokenizer, data_paths, run_budgets, run_settings

# Each stage's outputs in a shared run folder, beside its checkpoints (checkpoints/<stage>/).
STAGE_OUTPUTS = {"pretrain": ("mlm", "discriminator"), "train": ("model",)}


class EncoderTask(Task):
    """What the encoder's tasks (classification, masked LM, ELECTRA) share: their arguments, the run folder
    they may share (each stage owns its checkpoints and outputs; the trained tokenizer belongs to the stage
    that finds no other stage's run there), and the tokenizer."""

    staged_checkpoints = True

    def load_arguments(self, recipe, overrides) -> ClassificationArguments:
        args = load_classification_arguments(recipe, overrides, self.stage)
        args.task = self.name
        return args

    def settings(self, args) -> dict:
        return run_settings(args, self.stage)

    def budgets(self, args) -> dict:
        return run_budgets(args)

    def reads(self, args) -> dict:
        return {**data_paths(args), "init_from": args.init_from}

    def stage_holds_run(self, args, folder: Path, stage: str) -> bool:
        checkpoints = Path(args.output_dir) / "checkpoints" / stage
        results = "results.json" if stage == "train" else f"{stage}_results.json"
        outputs = (*STAGE_OUTPUTS[stage], results)
        return bool(checkpoint_dirs(checkpoints)) or any((folder / name).exists() for name in outputs)

    def own_files(self, args, folder: Path) -> list[Path]:
        other = next(stage for stage in STAGE_OUTPUTS if stage != self.stage)
        tokenizer = folder / "tokenizer"
        keeps_tokenizer = self.stage_holds_run(args, folder, other) or args.init_from
        return super().own_files(args, folder) + ([] if keeps_tokenizer else [tokenizer])


class ClassificationTask(EncoderTask):
    name = "classification"
    stage = "train"
    outputs = STAGE_OUTPUTS["train"]

    def check(self, args: ClassificationArguments) -> None:
        check_data_paths(args)
        check_init_from(args)

    def setup(self, args: ClassificationArguments, folder) -> dict:
        train, validation = training_and_validation(args, args.seed)
        train = subset(train, args.max_train_examples, args.seed)
        id2label, label2id = label_maps(
            args, list(train[args.label_column]) + list(validation[args.label_column])
        )
        return {"train": train, "validation": validation, "id2label": id2label, "label2id": label2id}

    def build_model(self, args: ClassificationArguments, setup: dict, checkpoint):
        texts = list(setup["train"][args.text_column])
        tokenizer = classification_tokenizer(args, texts, checkpoint)
        tokenizer.model_max_length = args.max_length  # a pre-trained model's tokenizer may say otherwise
        # The reading (long_text, max_length, ...) goes into the saved config: the pipeline reads as training did.
        extra = {
            "num_labels": len(setup["id2label"]),
            "id2label": setup["id2label"],
            "label2id": setup["label2id"],
            **args.reading_config(),
        }
        model = build_classifier(args, tokenizer, extra, checkpoint)
        use_fast_dropout(model, args.device)
        setup["tokenizer"] = tokenizer
        reading, vocab = args.reading(), model.config.vocab_size  # ids checked against it where they enter
        setup["train_dataset"] = encode_texts(setup["train"], tokenizer, args, reading, True, vocab)
        setup["train_dataset"] = setup["train_dataset"].remove_columns("owner")
        setup["eval_dataset"] = encode_texts(setup["validation"], tokenizer, args, reading, True, vocab)
        return model

    def trainer(self, args: ClassificationArguments, setup: dict, model, clock) -> BudgetedTrainer:
        validation, labels = setup["validation"], len(setup["id2label"])
        # Validation scores texts, not rows: a text read as several windows counts once, with the mean of its
        # windows' logits. ``owner`` travels with each row as a second label (the eval order may be by length).
        args.label_names = ["labels", "owner"]

        def compute_metrics(prediction) -> dict:
            _, owners = prediction.label_ids
            logits = average_logits(torch.as_tensor(prediction.predictions), owners.tolist(), len(validation))
            truth = np.asarray(validation[args.label_column])
            metrics = classification_metrics(logits.argmax(-1).numpy(), truth, labels)
            metrics.pop("confusion_matrix")
            return metrics

        return BudgetedTrainer(
            model=model,
            args=args,
            train_dataset=setup["train_dataset"],
            eval_dataset=setup["eval_dataset"],
            data_collator=DataCollatorWithPadding(setup["tokenizer"]),
            processing_class=setup["tokenizer"],
            compute_metrics=compute_metrics,
        )

    def describe(self, args, setup: dict, trainer) -> list[str]:
        return [
            f"Model: {trainer.model.num_parameters():,} parameters; {len(setup['train']):,} training and "
            f"{len(setup['validation']):,} validation texts; labels {list(setup['id2label'].values())}; "
            f"{args.per_device_train_batch_size} x {args.gradient_accumulation_steps} x {args.world_size} "
            "texts per update."
        ]

    def epochs_over(self, args, state) -> bool:
        return False  # the Trainer's own num_train_epochs sets max_steps

    def finish(self, args: ClassificationArguments, setup: dict, trainer, precision: dict, clock) -> dict:
        output = Path(args.output_dir) / "model"
        trainer.save_model(str(output))
        results = {"model": str(output), "validation": trainer.evaluate()}
        if trainer.is_world_process_zero():  # scored and written once, by the main process
            if args.test_file:
                results["test"] = test_scores(output, args)
            card = results | {"mixed_precision": precision}
            classifier_card(args, trainer, card, output, len(setup["train"]))
        trainer.accelerator.wait_for_everyone()
        return results


__all__ = ["ClassificationTask", "EncoderTask", "STAGE_OUTPUTS", "DATA_SETTINGS"]
