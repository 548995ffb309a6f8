"""Classification data: labelled files checked row by row (JSON Lines, comma- or tab-separated or parquet
files, or a Hub data set's splits), the validation texts held out of the training file, and label names.
``ClassificationData`` holds a recipe's data settings (the classification run's arguments inherit it;
``classify evaluate`` reads them alone, ``ClassificationData.from_recipe``). How the classifier and
pre-training read the texts as tokens is ``train/classification/data.py``'s.

Data are ``datasets`` JSON Lines with a text and a label column (the layout of ``../shared/data/imdb``),
comma- or tab-separated files with a header line (``dataset: csv``; NSMC's ``ratings_train.txt``), parquet
files (``dataset: parquet``), or a Hub data set (at ``dataset_revision``, e.g. its Parquet conversion);
``text_column`` / ``label_column`` name other columns, and ``drop_empty_texts`` drops the rows without
text. Validation texts are held out of the training file (``split_validation``); the test file is only
scored."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

import numpy as np
from datasets import Dataset, Value, load_dataset

from ..classification_pipeline import clean_text
from ..configuration_vanilla_transformer import LONG_TEXT_STRATEGIES
from .files import FILE_FORMATS, DataSettings, data_path, read_data_file, refuse_missing


@dataclass
class ClassificationData(DataSettings):
    """A classification recipe's data settings: where its labelled splits (and pre-training's unlabelled
    files) come from, their columns and label names, the validation texts held out of the training file,
    and how much of a split evaluation scores and how it reads long texts."""

    describes = "a data setting of a classification recipe"

    dataset: str = field(
        default="json",
        metadata={
            "help": "'json' (local JSON Lines files), 'csv' (local files, comma- or tab-separated as their "
            "header line is: a tab-separated file is read without quoting, a '\"' being part of the text, "
            "as in NSMC's ratings_train.txt), 'parquet' (local parquet files), or a Hub data set id (e.g. "
            "stanfordnlp/imdb) or a local folder laid out as one, whose split names train_file / test_file / "
            "unlabelled_files then give (train, test, unsupervised)."
        },
    )
    dataset_revision: str | None = field(
        default=None,
        metadata={
            "help": "A Hub data set's branch, tag or commit. refs/convert/parquet is the Hub's Parquet "
            "conversion: the data of a data set whose main branch holds a loading script (e9t/nsmc), which "
            "datasets >= 4 no longer runs."
        },
    )
    train_file: str | None = "imdb/train.jsonl.gz"
    validation_file: str | None = None
    test_file: str | None = "imdb/test.jsonl.gz"
    unlabelled_files: list[str] = field(
        default_factory=list, metadata={"help": "Extra text for masked-LM pre-training."}
    )
    text_column: str = field(
        default="text", metadata={"help": "The column that holds the text (NSMC: document)."}
    )
    label_column: str = field(
        default="label", metadata={"help": "The column that holds the class id (0, 1, ...)."}
    )
    drop_empty_texts: bool = field(
        default=False,
        metadata={
            "help": "Drop the labelled rows whose text is empty, blank or missing (null), printing how many "
            "of each split (NSMC has a few); false: such a row is an error that names it."
        },
    )
    class_names: list[str] | None = field(
        default=None, metadata={"help": "Names of labels 0, 1, ... (default: from the data)."}
    )
    validation_size: float = field(
        default=0.04,
        metadata={
            "help": "Without validation_file: training texts held out for validation (and out of pre-training), "
            "a count (>= 1) or a fraction (< 1) of the distinct texts, chosen by `seed`."
        },
    )
    validation_runs: int = field(
        default=0,
        metadata={
            "help": "Hold the validation texts out as this many runs of neighbouring rows of the training file, "
            "for files whose neighbours share a subject (IMDB as released: reviews grouped by movie), so that "
            "validation's subjects are unseen in training as the test file's are; 0: drawn one by one."
        },
    )
    max_eval_examples: int | None = None
    eval_long_text: str | None = field(
        default=None,
        metadata={
            "help": "evaluate: read long texts this way instead of the model's own (to compare readings)."
        },
    )
    seed: int = field(
        default=42,
        metadata={
            "help": "The random seed: training's, and the draw of the validation texts held out of the training "
            "file (validation_size)."
        },
    )

    def __post_init__(self):
        if self.validation_runs < 0:
            raise ValueError(
                f"`validation_runs` must be >= 0 (0: texts drawn one by one), got {self.validation_runs}."
            )
        if not self.validation_size > 0:
            raise ValueError(
                f"`validation_size` must be a count >= 1 or a fraction in (0, 1), got {self.validation_size!r}."
            )
        if self.eval_long_text is not None and self.eval_long_text not in LONG_TEXT_STRATEGIES:
            raise ValueError(
                f"`eval_long_text` must be one of {list(LONG_TEXT_STRATEGIES)}, got {self.eval_long_text!r}."
            )
        if self.max_eval_examples is not None and self.max_eval_examples < 1:
            raise ValueError(
                f"`max_eval_examples` must be at least 1 (or null: all), got {self.max_eval_examples!r}."
            )
        super().__post_init__()  # a run's arguments go on with their own checks


# The settings that name a run's data: files (``dataset: json``, ``csv``, ``parquet``) or a Hub data set's
# splits.
DATA_SETTINGS = ("train_file", "validation_file", "test_file", "unlabelled_files")


def check_data_paths(args: ClassificationData, settings: tuple[str, ...] = DATA_SETTINGS) -> None:
    """Every data path of a classification recipe, checked at once before any work (``training_and_
    validation`` calls it first; a trainer may call it before anything else): for ``dataset: json``,
    ``csv`` or ``parquet`` the files ``settings`` name (a missing one is a ``FileNotFoundError`` naming each
    setting and path), for a Hub data set the split names (a ``ValueError`` listing the splits it has). (A run's
    ``init_from`` is checked with the model: ``train/classification/finetune.check_init_from``.)"""
    named = {}  # setting -> the file or split it names
    for setting in settings:
        value = getattr(args, setting)
        if isinstance(value, list):
            named |= {f"{setting}[{index}]": item for index, item in enumerate(value)}
        elif value is not None:
            named[setting] = value
    if args.dataset in FILE_FORMATS:
        refuse_missing(
            {setting: data_path(file, args.data_dir) for setting, file in named.items()}, args.data_dir
        )
    elif named:
        _check_split_names(args.dataset, named, args.dataset_revision)


def _check_split_names(dataset: str, named: dict[str, str], revision: str | None = None) -> None:
    from datasets import get_dataset_split_names

    try:
        splits = list(get_dataset_split_names(dataset, revision=revision))
    except Exception:  # noqa: BLE001 - offline, or splits only known once read: load_dataset names them
        return
    wrong = [f"{setting}={split!r}" for setting, split in named.items() if split not in splits]
    if wrong:
        raise ValueError(
            f"{dataset} has no split {'; '.join(wrong)}: its splits are {', '.join(splits)} (with a Hub data "
            "set, train_file / validation_file / test_file / unlabelled_files name its splits)."
        )


def load_split(args: ClassificationData, file: str, labelled: bool = True) -> tuple[Dataset, str]:
    """A split and the name errors give it: a JSON Lines file (``dataset: json``; every row checked first,
    an error naming the line of the first bad one), a comma- or tab-separated file with a header line
    (``dataset: csv``) or a parquet file (``dataset: parquet``; the rows of both are checked by
    ``load_labelled``), or the split named ``file`` of a Hub data set at ``dataset_revision``
    (``stanfordnlp/imdb``: ``train``, ``test``, ``unsupervised``; a local folder of data files reads the
    same way)."""
    if args.dataset not in FILE_FORMATS:
        data = load_dataset(args.dataset, split=file, revision=args.dataset_revision)
        return data, f"{args.dataset} ({file})"
    path = data_path(file, args.data_dir)
    row_problem = functools.partial(_row_problem, args=args, labelled=labelled)
    return read_data_file(args.dataset, path, row_problem), path


def _row_problem(row: dict, args: ClassificationData, labelled: bool = True) -> str | None:
    """What is wrong with one row (None: nothing): its text missing or not text; if ``labelled``, its
    text empty (both allowed with ``drop_empty_texts``: ``load_labelled`` drops the row) or its label
    missing or not an integer."""
    columns = (args.text_column, args.label_column) if labelled else (args.text_column,)
    missing = [column for column in columns if column not in row]
    if missing:
        return f"column {missing[0]!r} is missing; the row has {sorted(row)}"
    text = row[args.text_column]
    dropped = labelled and args.drop_empty_texts and _is_empty(text)
    hint = " (`drop_empty_texts: true` drops such rows)" if labelled else ""
    if not isinstance(text, str) and not dropped:
        return f"{args.text_column!r} is {text!r}, not text{hint}"
    if labelled and not dropped and not text.strip():
        return f"{args.text_column!r} is empty{hint}"
    return _label_problem(row.get(args.label_column), args) if labelled else None


# The most digits a label may have: more is no class id (and pyarrow's int64 would overflow past 18).
LABEL_DIGITS = 18


def _label_problem(label, args: ClassificationData) -> str | None:
    """What is wrong with one label (None: nothing), and what to do: a class id is an integer from 0, and
    below the number of ``class_names`` where those are given."""
    column = args.label_column
    if isinstance(label, str) and re.fullmatch(r"-?([0-9]+\.[0-9]*|\.[0-9]+)", label.strip()):
        label = float(label)  # a CSV file's "1.0" (every field is text there) is JSON's 1.0
    if isinstance(label, bool):
        word = str(label).lower()  # as JSON writes it
        return f"{column!r} is {word}: write class ids as integers ({int(label)}, not {word})"
    if isinstance(label, float) and label.is_integer():
        return f"{column!r} is {label!r}: write class ids as whole numbers ({int(label)}, not {label!r})"
    if isinstance(label, float):
        return (
            f"{column!r} is {label!r}, not a class id: labels are the class ids 0, 1, ... (a score or a "
            "probability is none: turn the scores into classes first, and name them with `class_names`)"
        )
    if isinstance(label, str) and re.fullmatch(r"-?[0-9]+", label.strip()):
        if len(label.strip().lstrip("-")) > LABEL_DIGITS:
            return _too_large(label.strip(), column)
        return f"{column!r} is {label!r}, a number written as text: write it without quotes ({int(label)})"
    if not isinstance(label, int) or isinstance(label, bool):
        return (
            f"{column!r} is {label!r}; labels must be integers, the class ids 0, 1, ...: map "
            "each class to its id and name the classes with `class_names`"
        )
    if label < 0:
        return (
            f"{column!r} is {label}; labels are the class ids 0, 1, ...: drop the rows that have no class "
            "(-1 often marks them; pre-training reads such texts through `unlabelled_files`), or renumber "
            "the classes from 0"
        )
    if len(str(label)) > LABEL_DIGITS:
        return _too_large(str(label), column)
    names = args.class_names
    if names is not None and label >= len(names):
        return (
            f"{column!r} is {label}, outside `class_names` ({len(names)} names: labels 0 to "
            f"{len(names) - 1}): name every class in `class_names`, or correct the label"
        )
    return None


def _too_large(label: str, column: str) -> str:
    return (
        f"{column!r} is {label}, {len(label)} digits: no class id is that large. Labels are the class ids "
        "0, 1, ..., one per class: renumber the classes from 0"
    )


def load_labelled(args: ClassificationData, file: str) -> Dataset:
    """Read a labelled split and check it: both columns present, no empty text, integer labels (a JSON
    Lines file's rows are checked line by line as ``load_split`` reads it; a csv or parquet file's or a Hub
    split's here, an error naming the row, counted from 0 among the data rows). With ``drop_empty_texts``
    the rows whose text is empty, blank or missing are dropped instead, and their count printed."""
    data, path = load_split(args, file)
    if args.dataset != "json":
        for column in (args.text_column, args.label_column):
            if column not in data.column_names:
                raise ValueError(f"{path}: column {column!r} is missing; the rows have {data.column_names}.")
        labels = data[args.label_column]
        if args.dataset == "csv":  # read as written (files._delimited_options): the integers they spell
            labels = [
                int(x) if isinstance(x, str) and re.fullmatch(r"-?[0-9]{1,18}", x) else x for x in labels
            ]
        rows = zip(data[args.text_column], labels, strict=True)
        for index, (text, label) in enumerate(rows):
            problem = _row_problem({args.text_column: text, args.label_column: label}, args)
            if problem:
                raise ValueError(f"{path}: row {index}: {problem}.")
        if args.dataset == "csv":
            data = data.cast_column(args.label_column, Value("int64"))
    if not args.drop_empty_texts:
        return data
    keep = [index for index, text in enumerate(data[args.text_column]) if not _is_empty(text)]
    if len(keep) < len(data):
        print(
            f"{path}: {len(data) - len(keep):,} of {len(data):,} rows dropped: their {args.text_column!r} "
            "is empty (drop_empty_texts)."
        )
        data = data.select(keep)
    return data


def _is_empty(text) -> bool:
    """A missing (null) text, or one of white space only: what ``drop_empty_texts`` drops."""
    return text is None or (isinstance(text, str) and not text.strip())


def split_validation(
    data: Dataset, size: float, seed: int, text_column: str, runs: int = 0, label_column: str = "label"
) -> tuple[Dataset, Dataset]:
    """Hold out part of a training file for validation: ``(train, validation)``, the same for the same
    ``seed``. ``size`` counts distinct texts (>= 1) or is a fraction of them (< 1). A text that occurs
    more than once (IMDB's train file repeats 96 reviews) lies on one side only, so no validation text is
    ever trained on; the test file is not read.

    ``runs`` > 0 holds the texts out as that many runs of neighbouring rows instead of one by one: each
    label's texts, in file order, are cut into runs of ``ceil(count / runs)``, and each label gives its
    share of the ``runs`` (drawn by ``seed``), so validation keeps the file's label balance. For files whose
    neighbours share a subject, IMDB's reviews grouped by movie, validation's subjects are then unseen in
    training, as the test file's are, except where a run's two ends cut a group."""
    texts = [clean_text(text) for text in data[text_column]]
    index = {}
    for row, text in enumerate(texts):
        index.setdefault(text, row)  # first-seen order: deterministic
    distinct = list(index)
    count = int(size) if size >= 1 else round(size * len(distinct))
    if not 0 < count < len(distinct):
        raise ValueError(
            f"`validation_size`={size!r} holds out {count} of {len(distinct)} distinct training texts; "
            "it must leave at least one on each side."
        )
    rng = np.random.default_rng(seed)
    if runs:
        order = _runs_of_neighbours(list(data[label_column]), list(index.values()), count, runs, rng)
    else:
        order = rng.permutation(len(distinct))
    held_out = {distinct[i] for i in order[:count]}
    inside = np.fromiter((text in held_out for text in texts), dtype=bool, count=len(texts))
    return data.select(np.flatnonzero(~inside)), data.select(np.flatnonzero(inside))


def _runs_of_neighbours(labels, first_rows: list[int], count: int, runs: int, rng) -> np.ndarray:
    """Indices into the distinct texts (``first_rows``: each one's first row): ``runs`` runs of
    ``ceil(count / runs)`` neighbours, cut within each label and shared out among labels by frequency."""
    length = -(-count // runs)
    by_label: dict = {}
    for position, row in enumerate(first_rows):
        by_label.setdefault(labels[row], []).append(position)
    chosen = []
    shares = {label: runs * len(members) / len(first_rows) for label, members in by_label.items()}
    counts = {label: int(share) for label, share in shares.items()}
    for label in sorted(shares, key=lambda label: shares[label] - counts[label], reverse=True):
        if sum(counts.values()) == runs:
            break
        counts[label] += 1  # largest remainders first
    for label, members in by_label.items():
        available = len(members) // length
        if counts[label] >= available:
            raise ValueError(
                f"`validation_runs`={runs}: label {label!r} would give {counts[label]} runs of {length} texts "
                f"but has {len(members)} distinct texts, too few to keep any for training; use fewer runs "
                "or a smaller `validation_size`."
            )
        for start in rng.permutation(available)[: counts[label]] * length:
            chosen.append(members[start : start + length])
    chosen.sort(key=lambda run: run[0])
    return np.concatenate(chosen) if chosen else np.arange(0)


def label_maps(args: ClassificationData, labels: list[int]) -> tuple[dict[int, str], dict[str, int]]:
    """id2label/label2id: the given names, else NEGATIVE/POSITIVE for 0/1 data, else LABEL_i. Data of fewer
    than two classes is refused: it would train a one-label regression that reports accuracy 1.0."""
    classes = sorted(set(labels))
    if len(classes) < 2:
        found = f"every row has label {classes[0]}" if classes else "there are no rows"
        raise ValueError(
            f"{args.train_file}: {found} (`{args.label_column}`): a classifier needs at least two classes "
            "in its training data."
        )
    count = max(labels) + 1
    if min(labels) < 0:
        raise ValueError(
            f"{args.train_file}: label {min(labels)} (`{args.label_column}`) is no class id: labels are the "
            "class ids 0, 1, ...: drop the rows that have no class, or renumber the classes from 0."
        )
    if args.class_names is not None:
        if count > len(args.class_names):
            raise ValueError(
                f"{args.train_file}: label {count - 1} has no name: `class_names` lists "
                f"{len(args.class_names)}. Name every class in `class_names`, or correct the labels."
            )
        count = len(args.class_names)
    # Counted, not listed: a label of 10**12 would make a list of every class id below it.
    unseen = count - len(classes)
    if unseen:
        first = next(label for label in range(len(classes) + 1) if label not in set(classes))
        shown = ", ".join(map(str, classes[:6])) + (", ..." if len(classes) > 6 else "")
        if args.class_names is not None:
            named = f"class {first} ({args.class_names[first]!r} in `class_names`)"
        else:
            named = f"class {first}"
        fix = (
            f"renumber them from 0 ({', '.join(f'{old} -> {new}' for new, old in enumerate(classes[:3]))}"
            f"{', ...' if len(classes) > 3 else ''})"
        )
        raise ValueError(
            f"{args.train_file}: the labels (`{args.label_column}`: {shown}) leave {named} without an example, "
            f"so the model would learn {count} classes and never see {'that one' if unseen == 1 else f'{unseen} of them'}. "
            f"Labels are class ids counted from 0: {fix}"
            + (", or drop the unused name from `class_names`." if args.class_names is not None else ".")
        )
    if args.class_names is not None:
        names = list(args.class_names)
    elif count == 2:
        names = ["NEGATIVE", "POSITIVE"]
    else:
        names = [f"LABEL_{i}" for i in range(count)]
    return dict(enumerate(names)), {name: i for i, name in enumerate(names)}


def training_and_validation(
    args: ClassificationData, seed: int, check_paths: bool = True
) -> tuple[Dataset, Dataset]:
    """``(train, validation)``: ``validation_file``, or the ``validation_size`` texts held out of the
    training file by ``seed``. The one split every stage uses: pre-training leaves these texts out,
    fine-tuning validates on them and ``classify evaluate --split validation`` scores them (the split is
    drawn from the file as it is, before any shuffling, so all three agree). Every data path of the recipe
    is checked first (:func:`check_data_paths`; ``check_paths``: only the training and validation files)."""
    check_data_paths(args, DATA_SETTINGS if check_paths else ("train_file", "validation_file"))
    train = load_labelled(args, args.train_file)
    if args.validation_file:
        return train, load_labelled(args, args.validation_file)
    return split_validation(
        train, args.validation_size, seed, args.text_column, args.validation_runs, args.label_column
    )


def read_texts(args: ClassificationData, file: str) -> tuple[list[str], str]:
    """The texts of one file or Hub split (``text_column``; labels, if any, are not read) and its name."""
    data, where = load_split(args, file, labelled=False)
    if args.text_column not in data.column_names:
        raise ValueError(
            f"{where}: column {args.text_column!r} is missing; the rows have {data.column_names}."
        )
    return list(data[args.text_column]), where


def text_corpus(args: ClassificationData, texts: list[str], held_out: list[str]) -> list[str]:
    """``texts`` and the ``unlabelled_files``' texts, less any that is also a held-out (validation) or test
    text: IMDB's unlabelled file repeats 266 test reviews word for word. Prints what it kept and dropped."""
    texts = texts + [text for file in args.unlabelled_files for text in read_texts(args, file)[0]]
    excluded = {clean_text(text) for text in held_out}
    if args.test_file:
        excluded |= {clean_text(text) for text in read_texts(args, args.test_file)[0]}
    corpus = [text for text in texts if clean_text(text) not in excluded]
    print(
        f"Training on {len(corpus):,} texts ({len(texts) - len(corpus):,} dropped: validation or test text); "
        f"{len(held_out):,} held out."
    )
    return corpus


__all__ = [
    "ClassificationData",
    "DATA_SETTINGS",
    "check_data_paths",
    "load_split",
    "load_labelled",
    "split_validation",
    "label_maps",
    "training_and_validation",
    "read_texts",
    "text_corpus",
]
