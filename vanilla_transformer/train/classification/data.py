"""A classification run's data as its models read it: each text as the classifier's rows of token ids, and
pre-training's corpus and rows. Reading the labelled files, the validation split and the label names is
``vanilla_transformer/data/classification.py``'s, shared with ``classify evaluate``."""

from __future__ import annotations

from datasets import Dataset

from ...classification_pipeline import LongText, clean_text, encode_long_texts
from ...configuration_vanilla_transformer import check_token_ids
from ...data.classification import text_corpus, training_and_validation
from .arguments import ClassificationArguments


def encode_texts(
    dataset: Dataset,
    tokenizer,
    args: ClassificationArguments,
    reading: LongText,
    with_labels: bool,
    vocab_size: int | None = None,
):
    """Each text as the rows the classifier reads (one, or one per window), with ``owner``: the index of
    the row's text, so a text's views can be averaged (``average_logits``). Every id must lie in
    ``[0, vocab_size)`` (``len(tokenizer)`` unless given), checked here rather than in the model's forward
    (``check_token_ids``); labels were checked when the split was read (``load_labelled``)."""
    vocab_size = len(tokenizer) if vocab_size is None else vocab_size

    def encode(batch, indices):
        out = {"input_ids": [], "owner": []} | ({"labels": []} if with_labels else {})
        texts_views = encode_long_texts(tokenizer, batch[args.text_column], reading)
        for views in texts_views:
            check_token_ids(views, vocab_size, "input_ids")
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


def subset(dataset: Dataset, limit: int | None, seed: int) -> Dataset:
    dataset = dataset.shuffle(seed=seed)  # IMDB rows are grouped by label
    return dataset.select(range(min(limit, len(dataset)))) if limit else dataset


def pretraining_texts(args: ClassificationArguments, seed: int) -> tuple[list[str], list[str]]:
    """``(corpus, validation)``: the texts pre-training learns from and the held-out ones it may report on.

    The corpus is the training file without its validation texts (``training_and_validation``, the split
    fine-tuning validates on with the same ``validation_size`` and seed), plus ``unlabelled_files``, less
    any validation or test text (``text_corpus``), so fine-tuning's choices and the final score stay on text
    pre-training never saw."""
    train, validation = training_and_validation(args, seed)
    held_out = list(validation[args.text_column])
    return text_corpus(args, list(train[args.text_column]), held_out), held_out


def pretraining_dataset(texts: list[str], tokenizer, args: ClassificationArguments) -> Dataset:
    """The rows pre-training reads. With ``pack_length``: the texts, each ending in ``</s>``, run together
    and cut into sequences of exactly that many tokens, so no step computes on padding (what the
    cramming recipe and ELECTRA do; the remainder of every 1,000 texts is dropped). Without: each text
    as the classifier reads it (``long_text``, ``max_length``)."""
    data = Dataset.from_dict({args.text_column: texts})
    if not args.pack_length:
        return encode_texts(data, tokenizer, args, args.reading(), with_labels=False).remove_columns("owner")
    length, eos = args.pack_length, tokenizer.eos_token_id

    def pack(batch):
        cleaned = [clean_text(text) for text in batch[args.text_column]]
        encoded = tokenizer(cleaned, add_special_tokens=False, verbose=False)["input_ids"]
        stream = [token for ids in encoded for token in (*ids, eos)]
        return {"input_ids": [stream[i : i + length] for i in range(0, len(stream) - length + 1, length)]}

    return data.map(pack, batched=True, batch_size=1000, remove_columns=data.column_names, desc="Packing")


__all__ = ["encode_texts", "subset", "pretraining_texts", "pretraining_dataset"]
