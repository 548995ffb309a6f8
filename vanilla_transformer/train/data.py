"""Parallel text through ``datasets``: the built-in synthetic task, local JSON Lines or text files, or a
Hub data set, normalised to one layout: columns ``source`` and ``target``. Also what both tasks share:
where relative data files are read from, and the saved-or-trained BPE tokenizer.

Bad input fails early with the file and the problem named, before anything is written.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from datasets import Dataset, DatasetDict, load_dataset
from transformers import AutoTokenizer

from ..tokenization import train_bpe_tokenizer
from .synthetic import synthetic_pairs

SPLITS = ("train", "validation", "test")


def data_dir(flag: str | None = None) -> Path | None:
    """The shared data folder: a flag, else ``$VT_DATA_DIR``, else None."""
    value = flag or os.environ.get("VT_DATA_DIR")
    return Path(value) if value else None


def data_path(value: str | None, folder: str | None = None) -> str | None:
    """A data file's path: absolute, or relative to ``folder`` (a recipe's ``data_dir``) or
    ``$VT_DATA_DIR`` when either is set."""
    if value is None:
        return None
    root = data_dir(folder)
    return str(root / value) if root is not None and not Path(value).is_absolute() else value


def load_or_train_tokenizer(
    saved: Sequence[str | Path | None],
    texts: Iterable[str],
    save_to: str | Path,
    vocab_size: int,
    model_max_length: int,
    extra_special_tokens: tuple[str, ...] = (),
    lowercase: bool = False,
):
    """The tokenizer of the first folder in ``saved`` that holds one (a resumed run, a pre-trained
    model), else a BPE tokenizer trained on ``texts`` (read only then) and saved to ``save_to``."""
    for folder in saved:
        if folder is not None and (Path(folder) / "tokenizer.json").is_file():
            return AutoTokenizer.from_pretrained(folder)
    tokenizer = train_bpe_tokenizer(
        texts,
        vocab_size=vocab_size,
        model_max_length=model_max_length,
        extra_special_tokens=extra_special_tokens,
        lowercase=lowercase,
    )
    tokenizer.save_pretrained(save_to)
    return tokenizer


def load_translation_splits(
    dataset: str,
    source_lang: str,
    target_lang: str,
    files: dict[str, str] | None = None,
    dataset_config: str | None = None,
    synthetic_sizes: dict[str, int] | None = None,
    seed: int = 0,
) -> DatasetDict:
    """Return a ``DatasetDict`` with splits of ``{"source": str, "target": str}`` rows.

    Args:
        dataset: ``"synthetic"`` (the built-in task, English -> German), ``"json"`` (JSON Lines files
            with ``{"translation": {lang: text}}`` rows, optionally gzipped), ``"text"`` (one
            sentence a line: ``files`` maps ``"<split>.<lang>"`` to a path), or a Hub data set id.
        source_lang, target_lang: language keys, e.g. ``"de"`` and ``"en"``.
        files: split -> path for ``"json"``; ``"<split>.<lang>"`` -> path for ``"text"``.
        dataset_config: the Hub data set's configuration name (e.g. ``"de-en"``).
        synthetic_sizes: split -> number of examples for ``"synthetic"``.
    """
    if dataset == "synthetic":
        if {source_lang, target_lang} != {"en", "de"}:
            raise ValueError(
                f"The synthetic task translates between 'en' and 'de', not {source_lang!r} -> {target_lang!r}."
            )
        sizes = {"train": 20000, "validation": 500, "test": 500} | (synthetic_sizes or {})
        splits = {}
        for offset, split in enumerate(SPLITS):
            pairs = synthetic_pairs(sizes[split], seed=seed * 1000 + offset)
            splits[split] = Dataset.from_dict(
                {"source": [p[source_lang] for p in pairs], "target": [p[target_lang] for p in pairs]}
            )
        return DatasetDict(splits)
    if dataset == "json":
        return DatasetDict(
            {
                split: _read_json_split(Path(path), source_lang, target_lang)
                for split, path in (files or {}).items()
            }
        )
    if dataset == "text":
        return _read_text_splits(files or {}, source_lang, target_lang)
    hub = load_dataset(dataset, dataset_config)  # the path users with network take; not exercised in tests
    return DatasetDict(
        {split: _select_languages(data, split, source_lang, target_lang) for split, data in hub.items()}
    )


def _read_json_split(path: Path, source_lang: str, target_lang: str) -> Dataset:
    if not path.is_file():
        raise FileNotFoundError(f"No such data file: {path}")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        if not any(line.strip() for line in handle):
            raise ValueError(f"{path} is empty: no translation pairs to read.")
    data = load_dataset("json", data_files=str(path), split="train")
    return _select_languages(data, str(path), source_lang, target_lang)


def _select_languages(data: Dataset, where: str, source_lang: str, target_lang: str) -> Dataset:
    if "translation" not in data.column_names:
        raise ValueError(f"{where}: expected a 'translation' column, found {data.column_names}.")
    first = data[0]["translation"]
    for lang in (source_lang, target_lang):
        if lang not in first:
            raise ValueError(f"{where}: language key {lang!r} is missing; the rows have {sorted(first)}.")
    return data.map(
        lambda row: {"source": row["translation"][source_lang], "target": row["translation"][target_lang]},
        remove_columns=data.column_names,
        desc=f"Selecting {source_lang}->{target_lang}",
    )


def _read_text_splits(files: dict[str, str], source_lang: str, target_lang: str) -> DatasetDict:
    splits = {}
    for split in sorted({key.split(".")[0] for key in files}):
        sides = {}
        for lang in (source_lang, target_lang):
            key = f"{split}.{lang}"
            if key not in files:
                raise ValueError(f"Text data for split {split!r} needs a file for {key!r}.")
            path = Path(files[key])
            if not path.is_file():
                raise FileNotFoundError(f"No such data file: {path}")
            sides[lang] = path.read_text(encoding="utf-8").splitlines()
            if not sides[lang]:
                raise ValueError(f"{path} is empty: no sentences to read.")
        if len(sides[source_lang]) != len(sides[target_lang]):
            raise ValueError(
                f"{files[f'{split}.{source_lang}']} has {len(sides[source_lang])} lines but "
                f"{files[f'{split}.{target_lang}']} has {len(sides[target_lang])}: parallel files must align line by line."
            )
        splits[split] = Dataset.from_dict({"source": sides[source_lang], "target": sides[target_lang]})
    return DatasetDict(splits)


def tokenize_pairs(data: Dataset, tokenizer, max_source_length: int, max_target_length: int) -> Dataset:
    """Source -> ``input_ids``; target -> ``labels``; both end in ``</s>`` and are truncated."""

    def encode(batch):
        source = tokenizer(batch["source"], truncation=True, max_length=max_source_length)
        target = tokenizer(batch["target"], truncation=True, max_length=max_target_length)
        return {"input_ids": source["input_ids"], "labels": target["input_ids"]}

    return data.map(encode, batched=True, remove_columns=data.column_names, desc="Tokenizing")


__all__ = [
    "load_translation_splits",
    "tokenize_pairs",
    "data_dir",
    "data_path",
    "load_or_train_tokenizer",
    "SPLITS",
]
