"""Fine-tune a saved vanilla-transformer model with transformers' own Trainer classes, with or without LoRA.

    # translation, a new domain: JSON Lines of {"translation": {"de": ..., "en": ...}}
    python examples/fine_tune.py --model runs/multi30k-de-en/model --task translation \
        --train-file path/to/data/news.jsonl --eval-file path/to/data/news-valid.jsonl --output runs/news-de-en

    # a classifier with new labels: JSON Lines of {"text": ..., "label": ...} (label: a name or 0, 1, ...)
    python examples/fine_tune.py --model runs/imdb-electra-finetuned/model --task classification \
        --train-file path/to/data/topics.jsonl --output runs/topics --lora

``--model`` is a saved folder or a Hub id. The run keeps the model's tokenizer and architecture; a
classifier whose labels differ from the data's gets a new head. With ``--lora`` only low-rank adapters on
the attention projections (W^Q, W^K, W^V, W^O of §3.2.2; and a classifier's head) train; they are merged
into the weights before saving, so ``--output`` is a plain model folder either way: it loads with
``from_pretrained``, carries its tokenizer and a model card (``base_model``: ``--model``), and uploads with
``vanilla-transformer push`` or ``--push-to``. Nothing here needs the network when ``--model`` and
``--train-file`` are local.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from datasets import load_dataset
from transformers import (
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    DataCollatorWithPadding,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    Trainer,
    TrainingArguments,
)

from vanilla_transformer import (
    VanillaTransformerConfig,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerForSequenceClassification,
)
from vanilla_transformer.metrics import accuracy_metric, bleu_metric
from vanilla_transformer.model_card import Result, write_model_card

ATTENTION_PROJECTIONS = ["q_proj", "k_proj", "v_proj", "out_proj"]  # the PEFT targets (tests/test_peft.py)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a saved model folder or a Hub id")
    parser.add_argument("--task", required=True, choices=["translation", "classification"])
    parser.add_argument("--train-file", required=True, help="JSON Lines (optionally .gz)")
    parser.add_argument("--output", required=True, help="the fine-tuned model's folder")
    parser.add_argument(
        "--eval-file",
        help="JSON Lines like --train-file, scored after training: BLEU (translation, beam search with the "
        "model's generation config) or accuracy and F1 (classification)",
    )
    parser.add_argument("--lora", action="store_true", help="train LoRA adapters (merged before saving)")
    parser.add_argument("--lora-rank", type=int, default=8)
    parser.add_argument("--push-to", metavar="REPO_ID", help="upload the saved folder to this Hub repository")
    parser.add_argument("--max-steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument(
        "--learning-rate", type=float, default=None, help="default: 1e-4, or 1e-3 with --lora"
    )
    parser.add_argument("--max-length", type=int, default=128, help="tokens per text")
    parser.add_argument("--source-lang", help="translation: default the model's config.source_lang")
    parser.add_argument("--target-lang", help="translation: default the model's config.target_lang")
    parser.add_argument("--text-column", default="text")
    parser.add_argument("--label-column", default="label")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


# -- data --------------------------------------------------------------------------------------------------


def files(options) -> dict[str, str]:
    """The splits' files: train, and eval where --eval-file names one."""
    return {"train": options.train_file} | ({"eval": options.eval_file} if options.eval_file else {})


def translation_data(options, config, tokenizer):
    """Rows of {"translation": {src: ..., tgt: ...}} or flat {src: ..., tgt: ...} columns, tokenized as the
    package's training does: source -> input_ids, target -> labels, both ending in </s>."""
    source = options.source_lang or config.source_lang
    target = options.target_lang or config.target_lang
    if not (source and target):
        raise SystemExit("The model's config names no languages: pass --source-lang and --target-lang.")
    data = load_dataset("json", data_files=files(options), split=None)

    def encode(batch):
        pairs = batch["translation"] if "translation" in batch else None
        sources = [p[source] for p in pairs] if pairs else batch[source]
        targets = [p[target] for p in pairs] if pairs else batch[target]
        inputs = tokenizer(sources, truncation=True, max_length=options.max_length)
        labels = tokenizer(targets, truncation=True, max_length=options.max_length)
        return {"input_ids": inputs["input_ids"], "labels": labels["input_ids"]}

    return data.map(encode, batched=True, remove_columns=data["train"].column_names), (source, target)


def classification_data(options, tokenizer):
    """Rows of {text, label}; labels are names (sorted into ids) or ids 0..n-1."""
    data = load_dataset("json", data_files=files(options), split=None)
    values = sorted(set(data["train"][options.label_column]))
    if all(isinstance(value, int) for value in values):
        id2label = {value: f"LABEL_{value}" for value in range(max(values) + 1)}
        to_id = {value: value for value in values}
    else:
        id2label = dict(enumerate(str(value) for value in values))
        to_id = {value: index for index, value in enumerate(values)}

    def encode(batch):
        encoded = tokenizer(batch[options.text_column], truncation=True, max_length=options.max_length)
        return {**encoded, "labels": [to_id[label] for label in batch[options.label_column]]}

    return data.map(encode, batched=True, remove_columns=data["train"].column_names), id2label


# -- the model ---------------------------------------------------------------------------------------------


def load_classifier(name: str, id2label: dict[int, str], max_length: int):
    """The saved model as a classifier of ``id2label``: a translation model or a pre-trained encoder gives its
    encoder; a classifier of the same labels also its head; any other head starts anew. ``max_length`` goes
    into the config, so that the saved model's pipeline reads texts as training did."""
    parent = VanillaTransformerConfig.from_pretrained(name)
    model = VanillaTransformerForSequenceClassification.from_pretrained(
        name,
        num_labels=len(id2label),
        id2label=id2label,
        label2id={label: i for i, label in id2label.items()},
        classifier_max_length=max_length,
        num_decoder_layers=0,  # the encoder alone: a translation model's decoder is left behind
        is_encoder_decoder=False,
        ignore_mismatched_sizes=True,  # another number of labels: a new head
        dtype=torch.float32,
    )
    if "VanillaTransformerForSequenceClassification" in (parent.architectures or []):
        if parent.id2label != id2label:
            torch.nn.init.xavier_uniform_(model.classifier.weight)  # new labels: a new head
            torch.nn.init.zeros_(model.classifier.bias)
            print(
                f"New labels {list(id2label.values())} (the model's: {list(parent.id2label.values())}): a new head."
            )
    return model


def with_lora(model, task: str, rank: int):
    """LoRA adapters on the attention projections; a classifier's head trains in full (PEFT's SEQ_CLS)."""
    from peft import LoraConfig, get_peft_model

    task_type = "SEQ_2_SEQ_LM" if task == "translation" else "SEQ_CLS"
    config = LoraConfig(
        r=rank, lora_alpha=2 * rank, target_modules=ATTENTION_PROJECTIONS, task_type=task_type
    )
    model = get_peft_model(model, config)
    model.print_trainable_parameters()
    return model


# -- the run -----------------------------------------------------------------------------------------------


def card_results(options, scores: dict) -> list[Result]:
    """The --eval-file scores as the card's model-index results."""
    task = options.task if options.task == "translation" else "text-classification"
    metrics = (
        [("bleu", "sacreBLEU (cased, 13a)", "eval_sacrebleu")]
        if options.task == "translation"
        else [("accuracy", "accuracy", "eval_accuracy"), ("f1", "F1", "eval_f1")]
    )
    name = Path(options.eval_file).name if options.eval_file else ""
    return [
        Result(task, metric, label, scores[key], name, "json", "eval")
        for metric, label, key in metrics
        if key in scores
    ]


def main(argv=None) -> list[dict]:
    """Fine-tune and save; returns the Trainer's log history (one row per logged step)."""
    options = parse_args(argv)
    tokenizer = AutoTokenizer.from_pretrained(options.model)  # the model's own: its ids mean what they did
    config = VanillaTransformerConfig.from_pretrained(options.model)
    learning_rate = options.learning_rate or (1e-3 if options.lora else 1e-4)
    common = dict(
        output_dir=options.output,
        max_steps=options.max_steps,
        per_device_train_batch_size=options.batch_size,
        learning_rate=learning_rate,
        warmup_steps=0.1,
        lr_scheduler_type="linear",
        logging_steps=max(1, options.max_steps // 20),
        save_strategy="no",  # the final model is saved below
        report_to="none",
        seed=options.seed,
    )
    if options.task == "translation":
        data, languages = translation_data(options, config, tokenizer)
        model = VanillaTransformerForConditionalGeneration.from_pretrained(options.model, dtype=torch.float32)
        collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)
        # Scored as `vanilla-transformer evaluate` scores: generate() with the saved decoding, both BLEUs.
        trainer_class, arguments = (
            Seq2SeqTrainer,
            Seq2SeqTrainingArguments(**common, predict_with_generate=True),
        )
        metric = bleu_metric(tokenizer, languages[1])
    else:
        data, id2label = classification_data(options, tokenizer)
        model = load_classifier(options.model, id2label, options.max_length)
        collator = DataCollatorWithPadding(tokenizer)
        trainer_class, arguments = Trainer, TrainingArguments(**common)
        metric = accuracy_metric(len(id2label))
    if options.lora:
        model = with_lora(model, options.task, options.lora_rank)
    trainer = trainer_class(
        model=model,
        args=arguments,
        train_dataset=data["train"],
        eval_dataset=data.get("eval"),
        data_collator=collator,
        processing_class=tokenizer,
        compute_metrics=metric if options.eval_file else None,
    )
    trainer.train()
    scores = trainer.evaluate() if options.eval_file else {}
    if scores:
        print(f"{Path(options.eval_file).name}: {json.dumps(scores)}")

    if options.lora:
        model = model.merge_and_unload()  # the adapters folded into the weights: a plain model again
    model.save_pretrained(options.output)
    tokenizer.save_pretrained(options.output)
    losses = [row["loss"] for row in trainer.state.log_history if "loss" in row]
    write_model_card(
        options.output,
        model,
        task=options.task if options.task == "translation" else "text-classification",
        summary=f"Fine-tuned from {options.model} on {Path(options.train_file).name}"
        + (f" with LoRA (rank {options.lora_rank}, merged)." if options.lora else "."),
        results=card_results(options, scores),
        datasets=[],
        training={
            "data": Path(options.train_file).name,
            "updates": trainer.state.global_step,
            "learning rate": learning_rate,
            "training loss": f"{losses[0]:.3f} -> {losses[-1]:.3f}" if losses else "not logged",
        },
        language=list(languages) if options.task == "translation" else None,
        base_model=options.model,
    )
    print(f"Saved {options.output} (training loss {json.dumps(losses[:1] + losses[-1:])}).")
    if options.push_to:
        from vanilla_transformer.hub import push_folder

        print(f"Pushed: {push_folder(options.output, options.push_to).commit_url}")
    return trainer.state.log_history


if __name__ == "__main__":
    main()
