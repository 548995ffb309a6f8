"""Translation data: ``source`` / ``target`` pairs from JSON Lines, parallel text files, a Hub data set or
the built-in synthetic task, and their tokenization."""

from __future__ import annotations

import gzip
from pathlib import Path

from datasets import Dataset, DatasetDict, load_dataset

from .synthetic import synthetic_pairs

SPLITS = ("train", "validation", "test")


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


__all__ = ["load_translation_splits", "tokenize_pairs"]
