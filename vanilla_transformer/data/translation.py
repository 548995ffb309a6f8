"""Translation data: ``source`` / ``target`` pairs from JSON Lines, parallel text files, a Hub data set or
the built-in synthetic task (``data.synthetic``). ``TranslationData`` holds a recipe's data settings (the
translation run's arguments inherit it; ``evaluate`` reads them alone, ``TranslationData.from_recipe``) and
``prepare_data`` reads its splits. The run's vocabulary and tokenization are ``train/translation/data.py``'s."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
from datasets import Dataset, DatasetDict, load_dataset

from .files import (
    FILE_FORMATS,
    DataSettings,
    check_data_file,
    data_path,
    read_data_file,
    read_lines,
    refuse_missing,
)
from .synthetic import synthetic_pairs

SPLITS = ("train", "validation", "test")
# The datasets a recipe names by local paths: a file a split (either row layout: ``translation`` dicts or
# flat columns), or parallel text files.
LOCAL_DATASETS = (*FILE_FORMATS, "text")


@dataclass
class TranslationData(DataSettings):
    """A translation recipe's data settings: where its splits come from, their languages and columns, the
    test split's official references, the synthetic task's sizes and seed, and the batch size a split is
    translated in for scoring."""

    describes = "a data setting of a translation recipe"

    dataset: str = field(
        default="synthetic",
        metadata={
            "help": "'synthetic' (built in); 'json', 'csv', 'parquet' or 'text' (local files named by "
            "train_file / validation_file / test_file); or a Hub data set id (or a local folder of data files)."
        },
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Hub data set configuration name."})
    train_file: str | None = field(
        default=None,
        metadata={
            "help": "The training split: a JSON Lines file (dataset: json, optionally .gz), or the common "
            "prefix of two parallel text files <prefix>.<source_lang> and <prefix>.<target_lang> (dataset: text)."
        },
    )
    validation_file: str | None = field(
        default=None, metadata={"help": "The validation split, as train_file names it."}
    )
    test_file: str | None = field(default=None, metadata={"help": "The test split, as train_file names it."})
    source_column: str | None = field(
        default=None,
        metadata={
            "help": "The column of source sentences where the rows are flat (default: the one named "
            "source_lang, as in bentrevett/multi30k); rows with a `translation` dict need none."
        },
    )
    target_column: str | None = field(
        default=None,
        metadata={"help": "The column of target sentences (default: the one named target_lang)."},
    )
    tokenized_test_references: str | None = field(
        default=None,
        metadata={"help": "Official lowercased tokenized references of the test split (Multi30k tok/)."},
    )
    source_lang: str = "en"
    target_lang: str = "de"
    synthetic_train_size: int = 20000
    synthetic_eval_size: int = 500
    seed: int = field(
        default=0,
        metadata={"help": "The random seed: training's, and the built-in synthetic task's sentences."},
    )
    per_device_eval_batch_size: int = field(
        default=100,
        metadata={
            "help": "Sentences a batch when a split is translated for scoring (validation, test, evaluate)."
        },
    )

    def __post_init__(self):
        for name in ("synthetic_train_size", "per_device_eval_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be at least 1, got {getattr(self, name)}.")
        super().__post_init__()  # a run's arguments go on with their own checks


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
    """One split's pairs from a JSON Lines (each row checked first, all in the first row's layout: the
    rows of another would read as null), CSV/TSV or parquet file."""
    layouts: dict[str, str] = {}  # the first row's
    problem = functools.partial(
        _pair_problem, languages=(source_lang, target_lang), columns=columns, layouts=layouts
    )
    data = read_data_file(kind, path, problem)
    return _select_languages(data, str(path), source_lang, target_lang, columns)


def _pair_problem(row: dict, languages: tuple[str, str], columns=(None, None), layouts=None) -> str | None:
    """What is wrong with one JSON Lines row of a pair (None: nothing): in ``{"translation": {lang:
    text}}`` a language key missing, in flat rows a column (``columns``, else the languages) missing;
    either holding something other than text; or (``layouts``: the first row's, filled in) a row in the
    other layout than the rows before it."""
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
    if wrong:
        return f"{what} {wrong[0]!r} is {pair[wrong[0]]!r}, not text"
    layout = "a 'translation' object" if pair is not row else f"columns {keys[0]!r} and {keys[1]!r}"
    if layouts is not None and layouts.setdefault("first", layout) != layout:
        return (
            f"the row has {layout} where the rows before it have {layouts['first']}: write every row in "
            "one layout"
        )
    return None


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
        pairs = data.map(
            lambda row: {"source": row[flat[0]], "target": row[flat[1]]},
            remove_columns=data.column_names,
            desc=f"Selecting {flat[0]}->{flat[1]}",
        )
        return _refuse_non_text(pairs, where, flat)
    if "translation" not in data.column_names:
        raise ValueError(
            f"{where}: expected a 'translation' column or columns {source_lang!r} and {target_lang!r}, found "
            f"{data.column_names}; name others with source_column / target_column."
        )
    first = data[0]["translation"] if len(data) else None
    for lang in (source_lang, target_lang) if first is not None else ():
        if lang not in first:
            raise ValueError(f"{where}: language key {lang!r} is missing; the rows have {sorted(first)}.")
    pairs = data.map(
        lambda row: {  # a null pair (parquet) reads as nulls, refused below naming its row
            "source": (row["translation"] or {}).get(source_lang),
            "target": (row["translation"] or {}).get(target_lang),
        },
        remove_columns=data.column_names,
        desc=f"Selecting {source_lang}->{target_lang}",
    )
    return _refuse_non_text(pairs, where, (source_lang, target_lang))


def _refuse_non_text(pairs: Dataset, where: str, names: tuple[str, str]) -> Dataset:
    """``pairs`` if every source and target is text; else an error naming the first row that is not (a
    parquet file's or a Hub data set's null or number), not a ``TypeError`` in the tokenizer later."""
    columns = [pairs.data.column(column) for column in ("source", "target")]
    is_text = (pa.types.is_string, pa.types.is_large_string)
    if all(not column.null_count and any(test(column.type) for test in is_text) for column in columns):
        return pairs
    for row, pair in enumerate(zip(pairs["source"], pairs["target"], strict=True)):
        for name, value in zip(names, pair, strict=True):
            if not isinstance(value, str):
                raise ValueError(
                    f"{where}: row {row}: {name!r} is {value!r}, not text; every pair needs both sentences: "
                    "fill it in or drop the row."
                )
    return pairs


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
            sides[lang] = read_lines(path)  # split at "\n" only: line N is the user's line N on both sides
        if len(sides[source_lang]) != len(sides[target_lang]):
            raise ValueError(
                f"{files[f'{split}.{source_lang}']} has {len(sides[source_lang])} lines but "
                f"{files[f'{split}.{target_lang}']} has {len(sides[target_lang])}: parallel files must align line by line."
            )
        splits[split] = Dataset.from_dict({"source": sides[source_lang], "target": sides[target_lang]})
    return DatasetDict(splits)


def check_data_paths(args: TranslationData) -> None:
    """Every data path a translation recipe names, checked at once before any work (``prepare_data`` calls
    it first): the data files (``train_file`` / ``validation_file`` / ``test_file``; for ``dataset: text``
    both ``<prefix>.<lang>`` files) and ``tokenized_test_references``. A missing one is one
    ``FileNotFoundError`` naming each setting and its path. (A run's ``tokenizer_path`` is checked with
    them by the translation task.)"""
    refuse_missing(data_paths(args), args.data_dir)


def data_paths(args: TranslationData) -> dict[str, str | None]:
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


def split_names(args: TranslationData) -> list[str] | None:
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


def check_split(args: TranslationData, split: str, splits=None) -> None:
    """Refuse a split the data does not have (``evaluate --split tset``), listing those it has. ``splits``:
    the data once read (else the names :func:`split_names` finds without reading it)."""
    names = list(splits) if splits is not None else split_names(args)
    if names is not None and split not in names:
        raise ValueError(
            f"--split {split!r}: the data ({args.dataset}) has no such split; it has {', '.join(names) or 'none'}."
        )


def check_reference_count(args: TranslationData, splits: DatasetDict) -> None:
    """Refuse a ``tokenized_test_references`` file whose lines do not match the test split's sentences one
    for one: BLEU over fewer references would be reported as the test score."""
    path = data_path(args.tokenized_test_references, args.data_dir)
    if path is None or "test" not in splits:
        return
    count = len(read_lines(path))
    if count != len(splits["test"]):
        raise ValueError(
            f"tokenized_test_references: {path} has {count} lines but the test split has "
            f"{len(splits['test'])} sentences; they must match line for line. Name the references of this "
            "test split."
        )


def prepare_data(args: TranslationData) -> DatasetDict:
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


__all__ = [
    "TranslationData",
    "LOCAL_DATASETS",
    "load_translation_splits",
    "check_data_paths",
    "data_paths",
    "split_names",
    "check_split",
    "check_reference_count",
    "prepare_data",
]
