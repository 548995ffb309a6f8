"""Translation data: ``source`` / ``target`` pairs from JSON Lines, parallel text files, a Hub data set or
the built-in synthetic task (``prepare_data`` reads a recipe's), the shared vocabulary, and their
tokenization."""

from __future__ import annotations

import functools
import itertools
from pathlib import Path
from typing import TYPE_CHECKING

from datasets import Dataset, DatasetDict, load_dataset

from ...configuration_vanilla_transformer import check_token_ids
from ...data_files import FILE_FORMATS, check_data_file, data_path, read_data_file, refuse_missing
from ..common.data import check_tokenizer_folder, load_or_train_tokenizer
from ..common.init_from import parent_tokenizer
from .synthetic import synthetic_pairs

if TYPE_CHECKING:
    from .arguments import TranslationTrainingArguments

SPLITS = ("train", "validation", "test")
# The datasets a recipe names by local paths: a file a split (either row layout: ``translation`` dicts or
# flat columns), or parallel text files.
LOCAL_DATASETS = (*FILE_FORMATS, "text")


def load_translation_splits(
    dataset: str,
    source_lang: str,
    target_lang: str,
    files: dict[str, str] | None = None,
    dataset_config: str | None = None,
    synthetic_sizes: dict[str, int] | None = None,
    seed: int = 0,
    columns: tuple[str | None, str | None] = (None, None),
) -> DatasetDict:
    """Return a ``DatasetDict`` with splits of ``{"source": str, "target": str}`` rows.

    Args:
        dataset: ``"synthetic"`` (the built-in task, English -> German), ``"json"`` (JSON Lines files,
            optionally gzipped), ``"csv"`` / ``"parquet"`` (a file a split, flat columns; parquet also
            ``translation`` dicts), ``"text"`` (parallel files, one sentence a line), or a Hub data set
            id (or a local folder of data files, which ``load_dataset`` reads the same way).
        source_lang, target_lang: language keys, e.g. ``"de"`` and ``"en"``.
        files: split -> path for ``"json"`` / ``"csv"`` / ``"parquet"``; split -> the prefix of ``<prefix>.<lang>`` for ``"text"``.
        dataset_config: the Hub data set's configuration name (e.g. ``"de-en"`` for ``wmt/wmt14``).
        synthetic_sizes: split -> number of examples for ``"synthetic"``.
        columns: the source and target columns of flat rows (default: the columns named by the languages).

    Rows come in either layout real data sets use: ``{"translation": {lang: text}}`` (WMT14, Multi30k's
    JSON Lines) or flat ``{lang: text}`` columns (``bentrevett/multi30k``).
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
    if dataset in FILE_FORMATS:
        return DatasetDict(
            {
                split: _read_file_split(dataset, Path(path), source_lang, target_lang, columns)
                for split, path in (files or {}).items()
            }
        )
    if dataset == "text":
        return _read_text_splits(files or {}, source_lang, target_lang)
    hub = load_dataset(dataset, dataset_config)  # a Hub id (network) or a local folder of data files
    return DatasetDict(
        {
            split: _select_languages(data, f"{dataset} ({split})", source_lang, target_lang, columns)
            for split, data in hub.items()
        }
    )


def _read_file_split(
    kind: str, path: Path, source_lang: str, target_lang: str, columns=(None, None)
) -> Dataset:
    """One split's pairs from a JSON Lines (each row checked first), CSV/TSV or parquet file."""
    problem = functools.partial(_pair_problem, languages=(source_lang, target_lang), columns=columns)
    data = read_data_file(kind, path, problem)
    return _select_languages(data, str(path), source_lang, target_lang, columns)


def _pair_problem(row: dict, languages: tuple[str, str], columns=(None, None)) -> str | None:
    """What is wrong with one JSON Lines row of a pair (None: nothing): in ``{"translation": {lang:
    text}}`` a language key missing, in flat rows a column (``columns``, else the languages) missing; or
    either holding something other than text."""
    if "translation" in row and not any(columns):
        pair, keys, what = row["translation"], languages, "language key"
        if not isinstance(pair, dict):
            return f"'translation' is {pair!r}, not an object of language keys"
    else:
        pair, keys, what = row, (columns[0] or languages[0], columns[1] or languages[1]), "column"
    missing = [key for key in keys if key not in pair]
    if missing and pair is row and not any(columns):
        return (
            f"expected a 'translation' object or columns {keys[0]!r} and {keys[1]!r} (name others with "
            f"source_column / target_column); the row has {sorted(row)}"
        )
    if missing:
        return f"{what} {missing[0]!r} is missing; the row has {sorted(pair)}"
    wrong = [key for key in keys if not isinstance(pair[key], str)]
    return f"{what} {wrong[0]!r} is {pair[wrong[0]]!r}, not text" if wrong else None


def _select_languages(
    data: Dataset, where: str, source_lang: str, target_lang: str, columns=(None, None)
) -> Dataset:
    """``source`` / ``target`` rows from a ``translation`` dict column or from two flat columns."""
    source_column, target_column = columns
    flat = (source_column or source_lang, target_column or target_lang)
    if any(columns) or ("translation" not in data.column_names and set(flat) <= set(data.column_names)):
        missing = [column for column in flat if column not in data.column_names]
        if missing:
            raise ValueError(
                f"{where}: column(s) {', '.join(map(repr, missing))} missing; the rows have {data.column_names}."
            )
        return data.map(
            lambda row: {"source": row[flat[0]], "target": row[flat[1]]},
            remove_columns=data.column_names,
            desc=f"Selecting {flat[0]}->{flat[1]}",
        )
    if "translation" not in data.column_names:
        raise ValueError(
            f"{where}: expected a 'translation' column or columns {source_lang!r} and {target_lang!r}, found "
            f"{data.column_names}; name others with source_column / target_column."
        )
    first = data[0]["translation"]
    for lang in (source_lang, target_lang):
        if lang not in first:
            raise ValueError(f"{where}: language key {lang!r} is missing; the rows have {sorted(first)}.")
    return data.map(
        lambda row: {"source": row["translation"][source_lang], "target": row["translation"][target_lang]},
        remove_columns=data.column_names,
        desc=f"Selecting {source_lang}->{target_lang}",
    )


def _read_text_splits(prefixes: dict[str, str], source_lang: str, target_lang: str) -> DatasetDict:
    """Parallel text files: split -> ``prefix``, read from ``<prefix>.<source_lang>`` and
    ``<prefix>.<target_lang>``, which must align line by line."""
    splits, files = {}, {}
    for split, prefix in prefixes.items():
        sides = {}
        for lang in (source_lang, target_lang):
            path = Path(f"{prefix}.{lang}")
            files[f"{split}.{lang}"] = str(path)
            check_data_file(path, json_lines=False)
            sides[lang] = path.read_text(encoding="utf-8").splitlines()
        if len(sides[source_lang]) != len(sides[target_lang]):
            raise ValueError(
                f"{files[f'{split}.{source_lang}']} has {len(sides[source_lang])} lines but "
                f"{files[f'{split}.{target_lang}']} has {len(sides[target_lang])}: parallel files must align line by line."
            )
        splits[split] = Dataset.from_dict({"source": sides[source_lang], "target": sides[target_lang]})
    return DatasetDict(splits)


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


def check_data_paths(args: TranslationTrainingArguments) -> None:
    """Every path a translation recipe names, checked at once before any work (``prepare_data`` calls it
    first): the data files (``train_file`` / ``validation_file`` / ``test_file``; for ``dataset: text`` both
    ``<prefix>.<lang>`` files), ``tokenized_test_references`` and ``tokenizer_path``. A missing one is one
    ``FileNotFoundError`` naming each setting and its path."""
    refuse_missing(data_paths(args), args.data_dir)
    if args.tokenizer_path:
        check_tokenizer_folder(args.tokenizer_path, "tokenizer_path")


def data_paths(args: TranslationTrainingArguments) -> dict[str, str | None]:
    """The local files a translation recipe reads, by setting (a Hub data set's are not local)."""
    paths = {}
    if args.dataset in LOCAL_DATASETS:
        for split in SPLITS:
            path = data_path(getattr(args, f"{split}_file"), args.data_dir)
            if path is not None and args.dataset in FILE_FORMATS:
                paths[f"{split}_file"] = path
            elif path is not None:
                for lang in (args.source_lang, args.target_lang):
                    paths[f"{split}_file ({lang})"] = f"{path}.{lang}"
    paths["tokenized_test_references"] = data_path(args.tokenized_test_references, args.data_dir)
    return paths


def split_names(args: TranslationTrainingArguments) -> list[str] | None:
    """The splits the recipe's data has: the built-in task's three, the splits a file is named for, or a
    Hub data set's (None where they cannot be listed without reading the data, e.g. offline)."""
    if args.dataset == "synthetic":
        return list(SPLITS)
    if args.dataset in LOCAL_DATASETS:
        return [split for split in SPLITS if getattr(args, f"{split}_file") is not None]
    from datasets import get_dataset_split_names

    try:
        return list(get_dataset_split_names(args.dataset, args.dataset_config))
    except Exception:  # noqa: BLE001 - offline, or a data set that must be read to be listed: checked later
        return None


def check_split(args: TranslationTrainingArguments, split: str, splits=None) -> None:
    """Refuse a split the data does not have (``evaluate --split tset``), listing those it has. ``splits``:
    the data once read (else the names :func:`split_names` finds without reading it)."""
    names = list(splits) if splits is not None else split_names(args)
    if names is not None and split not in names:
        raise ValueError(
            f"--split {split!r}: the data ({args.dataset}) has no such split; it has {', '.join(names) or 'none'}."
        )


def check_reference_count(args: TranslationTrainingArguments, splits: DatasetDict) -> None:
    """Refuse a ``tokenized_test_references`` file whose lines do not match the test split's sentences one
    for one: BLEU over fewer references would be reported as the test score."""
    path = data_path(args.tokenized_test_references, args.data_dir)
    if path is None or "test" not in splits:
        return
    count = len(Path(path).read_text(encoding="utf-8").splitlines())
    if count != len(splits["test"]):
        raise ValueError(
            f"tokenized_test_references: {path} has {count} lines but the test split has "
            f"{len(splits['test'])} sentences; they must match line for line. Name the references of this "
            "test split."
        )


def prepare_data(args: TranslationTrainingArguments) -> DatasetDict:
    """The splits of the recipe's data, as ``source`` / ``target`` text. Every path the recipe names is
    checked first (:func:`check_data_paths`), and ``tokenized_test_references`` against the test split
    (:func:`check_reference_count`), before any model is built."""
    check_data_paths(args)
    files = {
        split: data_path(getattr(args, f"{split}_file"), args.data_dir)
        for split in SPLITS
        if getattr(args, f"{split}_file") is not None
    }
    splits = load_translation_splits(
        args.dataset,
        args.source_lang,
        args.target_lang,
        files=files,
        dataset_config=args.dataset_config,
        columns=(args.source_column, args.target_column),
        synthetic_sizes={
            "train": args.synthetic_train_size,
            "validation": args.synthetic_eval_size,
            "test": args.synthetic_eval_size,
        },
        seed=args.seed,
    )
    check_reference_count(args, splits)
    return splits


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


__all__ = [
    "load_translation_splits",
    "tokenize_pairs",
    "check_data_paths",
    "split_names",
    "check_split",
    "check_reference_count",
    "prepare_data",
    "translation_tokenizer",
]
