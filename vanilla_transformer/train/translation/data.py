"""A translation run's data, as the model trains on it: §5.1's one vocabulary for both languages and the
pairs tokenized with it. Reading a recipe's splits is ``vanilla_transformer/data/translation.py``'s
(``prepare_data``), shared with ``evaluate``."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import TYPE_CHECKING

from datasets import Dataset

from ...configuration_vanilla_transformer import check_token_ids
from ..common.data import check_tokenizer_folder, load_or_train_tokenizer
from ..common.init_from import parent_tokenizer

if TYPE_CHECKING:
    from .arguments import TranslationTrainingArguments


def tokenize_pairs(
    data: Dataset, tokenizer, max_source_length: int, max_target_length: int, vocab_size: int | None = None
) -> Dataset:
    """Source -> ``input_ids``; target -> ``labels``; both end in ``</s>`` and are truncated. Every id must
    lie in ``[0, vocab_size)`` (``len(tokenizer)`` unless given): checked here, where the data enters, so
    that the model's forward need not read them back from the device (``check_token_ids``)."""
    vocab_size = len(tokenizer) if vocab_size is None else vocab_size

    def encode(batch):
        source = tokenizer(batch["source"], truncation=True, max_length=max_source_length)
        target = tokenizer(batch["target"], truncation=True, max_length=max_target_length)
        check_token_ids(source["input_ids"], vocab_size, "source input_ids")
        check_token_ids(target["input_ids"], vocab_size, "target labels")
        return {"input_ids": source["input_ids"], "labels": target["input_ids"]}

    return data.map(encode, batched=True, remove_columns=data.column_names, desc="Tokenizing")


def translation_tokenizer(args: TranslationTrainingArguments, train_split: Dataset):
    """§5.1: one BPE vocabulary for both languages: ``init_from``'s (copied into the run folder),
    ``tokenizer_path`` or a resumed run's, else trained on the training pairs (sources, then targets) and
    saved in the run folder. A ``tokenizer_path`` that holds no tokenizer is refused, not filled with a new
    one."""
    if args.init_from:
        return parent_tokenizer(args.init_from, Path(args.output_dir) / "tokenizer")
    if args.tokenizer_path:
        check_tokenizer_folder(args.tokenizer_path, "tokenizer_path")
    saved = Path(args.tokenizer_path) if args.tokenizer_path else Path(args.output_dir) / "tokenizer"
    return load_or_train_tokenizer(
        [saved],
        itertools.chain(train_split["source"], train_split["target"]),
        save_to=saved,
        vocab_size=args.vocab_size,
        model_max_length=max(args.max_source_length, args.max_target_length),
    )


__all__ = ["tokenize_pairs", "translation_tokenizer"]
