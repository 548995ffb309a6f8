"""Run the classification recipe with ``transformers.Trainer``: pre-training the encoder on the task's own
text (BERT's masked LM, or ELECTRA's replaced-token detection: ``electra.py``), fine-tuning a classifier
(choices on reviews held out of the training file), and evaluating one on a labelled file, reading long
texts with the functions the saved model's pipeline uses (``classification_pipeline.py``)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch
from datasets import Dataset, load_dataset
from torch.optim.lr_scheduler import LambdaLR
from transformers import (
    AutoTokenizer,
    DataCollatorForLanguageModeling,
    DataCollatorWithPadding,
    Trainer,
    TrainerCallback,
    TrainingArguments,
    set_seed,
)
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_callback import ExportableState
from transformers.trainer_utils import get_last_checkpoint

from ..classification_pipeline import LongText, average_logits, encode_long_texts
from ..configuration_vanilla_transformer import VanillaTransformerConfig
from ..loading import load_saved_model
from ..model_card import Result, write_model_card
from ..modeling_vanilla_transformer import (
    VanillaTransformerForMaskedLM,
    VanillaTransformerForSequenceClassification,
)
from ..precision import bf16_hardware
from ..tokenization import MASK_TOKEN
from .classification import (
    ClassificationArguments,
    classification_metrics,
    clean_text,
    label_maps,
    load_labelled,
    plot_confusion_matrix,
    split_validation,
    write_json,
)
from .data import data_path, load_or_train_tokenizer
from .electra import ElectraForPreTraining
from .recipes import build_config, describe_precision


class TimeBudget(TrainerCallback):
    """Ends training after ``max_minutes`` of this invocation, saving a checkpoint first, so a budgeted
    run stops cleanly and ``--resume``-style continuation (the Trainer's last checkpoint) picks it up."""

    def __init__(self, max_minutes: float):
        self.max_minutes = max_minutes
        self.start = time.monotonic()

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        if time.monotonic() - self.start >= 60 * self.max_minutes:
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

    def __init__(self, budget_minutes: float | None = None, elapsed_seconds: float = 0.0):
        self.budget_minutes = budget_minutes
        self.elapsed_seconds = elapsed_seconds
        self.last_progress = self._fraction(elapsed_seconds)
        self._tick = None

    @classmethod
    def resuming(cls, budget_minutes: float | None, checkpoint: str | None) -> TrainingClock:
        """A clock that goes on from the minutes recorded in ``checkpoint`` (none: from zero), with this
        invocation's budget (a resumed run may be given more time)."""
        elapsed = 0.0
        if checkpoint is not None:
            state = json.loads((Path(checkpoint) / TRAINER_STATE_NAME).read_text(encoding="utf-8"))
            recorded = state.get("stateful_callbacks", {}).get(cls.__name__, {})
            elapsed = float(recorded.get("attributes", {}).get("elapsed_seconds", 0.0))
        return cls(budget_minutes, elapsed)

    def state(self) -> dict:
        return {
            "args": {"budget_minutes": self.budget_minutes},
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
        return control


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


class PretrainingTrainer(Trainer):
    """``transformers.Trainer`` for ``classify pretrain``. Each logged loss also gets ``elapsed_minutes``
    (``TrainingClock``) and, for ELECTRA, its two parts (``mlm_loss``, ``discriminator_loss``) and the
    ``replaced_fraction``, averaged over the updates since the last log, so that runs of different
    objectives plot against wall-clock time. With a time budget the learning rate follows
    ``budget_schedule``."""

    PARTS = ("mlm_loss", "discriminator_loss", "replaced_fraction")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._parts = {name: [] for name in self.PARTS}

    @property
    def clock(self) -> TrainingClock | None:
        return next((cb for cb in self.callback_handler.callbacks if isinstance(cb, TrainingClock)), None)

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        clock = self.clock
        if clock is None or clock.budget_minutes is None:
            return super().create_scheduler(num_training_steps, optimizer)
        if self.lr_scheduler is None:
            warmup = self.args.warmup_steps
            self.lr_scheduler = LambdaLR(
                optimizer or self.optimizer,
                lambda step: budget_schedule(step, self.clock.scheduled_progress(), warmup),
            )
            self._created_lr_scheduler = True
        return self.lr_scheduler

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


def _callbacks(args: ClassificationArguments) -> list[TrainerCallback]:
    return [TimeBudget(args.max_minutes)] if args.max_minutes is not None else []


def classification_tokenizer(args: ClassificationArguments, texts: list[str]):
    """The tokenizer of ``pretrained_model`` or of an earlier run, else one trained on ``texts`` (with
    ``<mask>``, for masked-LM pre-training) and saved in ``run_dir/tokenizer``."""
    return load_or_train_tokenizer(
        [args.pretrained_model, Path(args.run_dir) / "tokenizer"],
        (clean_text(t) for t in texts),
        save_to=Path(args.run_dir) / "tokenizer",
        vocab_size=args.vocab_size,
        model_max_length=args.max_length,
        extra_special_tokens=(MASK_TOKEN,),
        lowercase=args.lowercase,
    )


def model_config(args: ClassificationArguments, tokenizer, **extra) -> VanillaTransformerConfig:
    """The encoder of the recipe's model block, with the run's vocabulary and special tokens."""
    return build_config(
        args.model,
        defaults={"max_position_embeddings": max(args.max_length, args.pack_length or 0)},
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        num_decoder_layers=0,
        is_encoder_decoder=False,
        **extra,
    )


def precision_record(args: ClassificationArguments, training: TrainingArguments) -> dict:
    """``mixed_precision`` and what it became (the Trainer's ``bf16``), on which hardware."""
    used = "bf16" if training.bf16 else "no"
    return {"setting": args.mixed_precision, "used": used, "hardware": bf16_hardware(training.device)}


def _encode(dataset: Dataset, tokenizer, args: ClassificationArguments, reading: LongText, with_labels: bool):
    """Each text as the rows the classifier reads (one, or one per window), with ``owner``: the index of
    the row's text, so a text's views can be averaged (``average_logits``)."""

    def encode(batch, indices):
        out = {"input_ids": [], "owner": []} | ({"labels": []} if with_labels else {})
        texts_views = encode_long_texts(tokenizer, batch[args.text_column], reading)
        for row, (index, views) in enumerate(zip(indices, texts_views, strict=True)):
            out["input_ids"] += views
            out["owner"] += [index] * len(views)
            if with_labels:
                out["labels"] += [batch[args.label_column][row]] * len(views)
        out["attention_mask"] = [[1] * len(ids) for ids in out["input_ids"]]
        return out

    return dataset.map(
        encode, batched=True, with_indices=True, remove_columns=dataset.column_names, desc="Tokenizing"
    )


def _subset(dataset: Dataset, limit: int | None, seed: int) -> Dataset:
    dataset = dataset.shuffle(seed=seed)  # IMDB rows are grouped by label
    return dataset.select(range(min(limit, len(dataset)))) if limit else dataset


def training_and_validation(args: ClassificationArguments, seed: int) -> tuple[Dataset, Dataset]:
    """``(train, validation)``: ``validation_file``, or the ``validation_size`` texts held out of the
    training file by ``seed``. The one split every stage uses: pre-training leaves these texts out,
    fine-tuning validates on them and ``classify evaluate --split validation`` scores them (the split is
    drawn from the file as it is, before any shuffling, so all three agree)."""
    train = load_labelled(args, args.train_file)
    if args.validation_file:
        return train, load_labelled(args, args.validation_file)
    return split_validation(train, args.validation_size, seed, args.text_column)


def pretraining_texts(args: ClassificationArguments, seed: int) -> tuple[list[str], list[str]]:
    """``(corpus, validation)``: the texts pre-training learns from and the held-out ones it may report on.

    The corpus is the training file without its validation texts (``training_and_validation``, the split
    fine-tuning validates on with the same ``validation_size`` and seed), plus ``unlabelled_files``; any
    text that is also a validation or test text is dropped (IMDB's unlabelled file repeats 266 test
    reviews word for word), so fine-tuning's choices and the final score stay on text pre-training never
    saw."""
    train, validation = training_and_validation(args, seed)
    texts = list(train[args.text_column])
    for file in args.unlabelled_files:
        texts += list(
            load_dataset("json", data_files=data_path(file, args.data_dir), split="train")[args.text_column]
        )
    held_out = list(validation[args.text_column])
    excluded = {clean_text(text) for text in held_out}
    if args.test_file:
        excluded |= {clean_text(text) for text in load_labelled(args, args.test_file)[args.text_column]}
    corpus = [text for text in texts if clean_text(text) not in excluded]
    print(
        f"Pre-training on {len(corpus):,} texts ({len(texts) - len(corpus):,} dropped: validation or test text); "
        f"{len(held_out):,} held out."
    )
    return corpus, held_out


def pretraining_dataset(texts: list[str], tokenizer, args: ClassificationArguments) -> Dataset:
    """The rows pre-training reads. With ``pack_length``: the texts, each ending in ``</s>``, run together
    and cut into sequences of exactly that many tokens, so no step computes on padding (what the
    cramming recipe and ELECTRA do; the remainder of every 1,000 texts is dropped). Without: each text
    as the classifier reads it (``long_text``, ``max_length``)."""
    data = Dataset.from_dict({args.text_column: texts})
    if not args.pack_length:
        return _encode(data, tokenizer, args, args.reading(), with_labels=False).remove_columns("owner")
    length, eos = args.pack_length, tokenizer.eos_token_id

    def pack(batch):
        cleaned = [clean_text(text) for text in batch[args.text_column]]
        encoded = tokenizer(cleaned, add_special_tokens=False, verbose=False)["input_ids"]
        stream = [token for ids in encoded for token in (*ids, eos)]
        return {"input_ids": [stream[i : i + length] for i in range(0, len(stream) - length + 1, length)]}

    return data.map(pack, batched=True, batch_size=1000, remove_columns=data.column_names, desc="Packing")


def pretrain(args: ClassificationArguments, training: TrainingArguments) -> Path:
    """``classify pretrain``: pre-train the encoder on the task's own text (``pretraining_texts``) with
    ``objective: mlm`` (BERT's masked LM) or ``objective: electra`` (replaced-token detection, ``electra.py``).

    Resumable: the same command continues from the last Trainer checkpoint in ``output_dir`` (weights,
    optimizer, schedule, data position, random state and the minutes already trained). With
    ``time_budget_minutes`` the learning rate decays to zero when that many minutes of training (over
    all invocations) are spent, and training stops there. Returns the folder of the encoder to fine-tune
    (``run_dir/mlm`` or ``run_dir/discriminator``), with its tokenizer and card."""
    precision = precision_record(args, training)
    print(f"Precision: {describe_precision(precision)}.")
    set_seed(training.seed)  # the model's initial weights too (the Trainer seeds only once it is built)
    texts, held_out = pretraining_texts(args, training.seed)
    tokenizer = classification_tokenizer(args, texts)
    corpus = pretraining_dataset(texts, tokenizer, args)
    evaluate = training.eval_strategy != "no"
    checkpoint = _last_checkpoint(training.output_dir)
    electra = args.objective == "electra"
    if electra:
        if tokenizer.mask_token_id is None:
            raise ValueError(
                f"ELECTRA needs a tokenizer with a mask token; {tokenizer.name_or_path} has none."
            )
        model = ElectraForPreTraining(
            model_config(args, tokenizer),
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
        model = VanillaTransformerForMaskedLM(model_config(args, tokenizer, sparse_prediction=True))
        collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=args.mlm_probability)
    trainer = PretrainingTrainer(
        model=model,
        args=training,
        train_dataset=corpus,
        eval_dataset=pretraining_dataset(held_out, tokenizer, args) if evaluate else None,
        data_collator=collator,
        callbacks=[*_callbacks(args), TrainingClock.resuming(args.time_budget_minutes, checkpoint)],
    )
    trainer.train(resume_from_checkpoint=checkpoint)
    # Every logged loss of the run (earlier invocations included), for training/plot_pretraining.py.
    log = {"objective": args.objective, "log_history": trainer.state.log_history}
    write_json(Path(args.run_dir) / "pretraining_log.json", log)
    output = Path(args.run_dir) / ("discriminator" if electra else "mlm")
    kept = model.discriminator() if electra else model
    kept.save_pretrained(output)
    tokenizer.save_pretrained(output)
    _pretraining_card(args, training, trainer, kept, output, len(corpus), precision)
    return output


def pretrain_mlm(args: ClassificationArguments, training: TrainingArguments) -> Path:
    """Masked-LM pre-training (``pretrain`` with ``objective: mlm``)."""
    return pretrain(replace(args, objective="mlm"), training)


def _pretraining_card(args, training, trainer, model, folder: Path, rows: int, precision: dict) -> Path:
    name, kind = _data_name(args)
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
        datasets=[] if kind == "json" else [name],
        training=settings,
    )


def train_classifier(args: ClassificationArguments, training: TrainingArguments) -> dict:
    """Fine-tune (or train from scratch) the classifier; evaluates on the test file when given."""
    precision = precision_record(args, training)
    print(f"Precision: {describe_precision(precision)}.")
    set_seed(training.seed)  # the model's initial weights too (the Trainer seeds only once it is built)
    train, validation = training_and_validation(args, training.seed)
    train = _subset(train, args.max_train_examples, training.seed)
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
    trainer = Trainer(
        model=model,
        args=training,
        train_dataset=_encode(train, tokenizer, args, reading, with_labels=True).remove_columns("owner"),
        eval_dataset=_encode(validation, tokenizer, args, reading, with_labels=True),
        data_collator=DataCollatorWithPadding(tokenizer),
        processing_class=tokenizer,
        compute_metrics=compute_metrics,
        callbacks=_callbacks(args),
    )
    train_output = trainer.train(resume_from_checkpoint=_last_checkpoint(training.output_dir))
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
    return results


def _classifier_card(args, training, model, results: dict, folder: Path, examples: int) -> Path:
    name, kind = _data_name(args)
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


def _data_name(args: ClassificationArguments) -> tuple[str, str]:
    if args.dataset == "json":
        return Path(args.train_file).parent.name or "local", "json"
    return args.dataset, args.dataset


def evaluate_classifier(
    model_dir: str | Path,
    args: ClassificationArguments,
    file: str | None = None,
    split: str = "test",
    seed: int = 0,
) -> dict:
    """Accuracy, F1 and a confusion-matrix PNG (next to the model) on a labelled file: ``file``, else the
    recipe's ``test_file``; with ``split="validation"`` the texts ``training_and_validation`` holds out
    for ``seed`` (what training validated on: choices such as the long-text reading are made there).

    Texts are read as the model's config says (``classifier_long_text`` and its lengths), with the
    functions the model's text-classification pipeline calls, so the pipeline predicts what is scored
    here; ``eval_long_text`` reads them another way (written to ``eval_results-<reading>.json``, and
    validation scores to ``eval_results-validation*.json``)."""
    if split not in ("test", "validation"):
        raise ValueError(f"`split` must be 'test' or 'validation', got {split!r}.")
    if split == "validation":
        if file is not None:
            raise ValueError("Pass a labelled `file` or `split='validation'`, not both.")
        file = (
            args.validation_file or f"{args.train_file} (validation_size {args.validation_size}, seed {seed})"
        )
        title = f"validation ({Path(args.validation_file or args.train_file).name})"
        data = training_and_validation(args, seed)[1]
    else:
        file = file or args.test_file
        if not file:
            raise ValueError("Nothing to evaluate on: give a labelled file or set the recipe's `test_file`.")
        title = Path(file).name
        data = load_labelled(args, file)
    model = load_saved_model(model_dir, VanillaTransformerForSequenceClassification).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    data = _subset(data, args.max_eval_examples, 0)
    num_labels = model.config.num_labels
    bad = [label for label in set(data[args.label_column]) if not 0 <= label < num_labels]
    if bad:
        raise ValueError(f"{file}: labels {sorted(bad)} are outside the model's num_labels={num_labels}.")
    reading = LongText.from_config(model.config, args.eval_long_text)
    logits = predict_texts(model, tokenizer, data[args.text_column], reading, Path(model_dir) / "eval")
    labels = np.asarray(data[args.label_column])
    metrics = classification_metrics(logits.argmax(-1).numpy(), labels, num_labels)
    names = [model.config.id2label[i] for i in range(num_labels)]
    suffix = "-validation" if split == "validation" else ""
    suffix += f"-{args.eval_long_text}" if args.eval_long_text else ""
    image = plot_confusion_matrix(
        metrics["confusion_matrix"],
        names,
        Path(model_dir) / f"confusion_matrix{suffix}.png",
        f"{title}: accuracy {metrics['accuracy']:.2%}",
    )
    metrics |= {
        "data": str(file),  # the labelled file, or which texts of the training file were held out
        "examples": len(data),
        "long_text": asdict(reading),
        "confusion_matrix_png": str(image),
    }
    write_json(Path(model_dir) / f"eval_results{suffix}.json", metrics)
    return metrics


def predict_texts(model, tokenizer, texts: list[str], reading: LongText, output_dir: Path) -> torch.Tensor:
    """(texts, labels) logits: each text read as ``reading`` says, a text's windows averaged."""
    views = encode_long_texts(tokenizer, texts, reading)
    rows = [ids for text_views in views for ids in text_views]
    owners = [index for index, text_views in enumerate(views) for _ in text_views]
    encoded = Dataset.from_dict({"input_ids": rows, "attention_mask": [[1] * len(ids) for ids in rows]})
    # Shortest first: batches of similar lengths pad little. The Trainer keeps this order (sequential).
    order = np.argsort([len(ids) for ids in rows], kind="stable")
    trainer = Trainer(
        model=model,
        args=TrainingArguments(output_dir=str(output_dir), report_to=[], per_device_eval_batch_size=64),
        data_collator=DataCollatorWithPadding(tokenizer),
    )
    predictions = trainer.predict(encoded.select(order)).predictions  # (rows, labels), in `order`
    return average_logits(torch.as_tensor(predictions), [owners[i] for i in order], len(texts))


def _last_checkpoint(output_dir: str) -> str | None:
    return get_last_checkpoint(output_dir) if Path(output_dir).is_dir() else None


__all__ = [
    "pretrain",
    "pretrain_mlm",
    "pretraining_texts",
    "pretraining_dataset",
    "train_classifier",
    "evaluate_classifier",
    "predict_texts",
    "TrainingClock",
    "budget_schedule",
    "PretrainingTrainer",
]
