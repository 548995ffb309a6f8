"""The sample an export is checked on: the user's ``--check-file`` (plain lines, or a data file whose references
or labels are scored too), a recipe's split (``--recipe``), or the validation split of the training run a model
folder belongs to."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

DATA_SUFFIXES = (".jsonl", ".json", ".csv", ".tsv", ".parquet")


@dataclass
class Sample:
    """What both sides run on: ``inputs`` (sentences or texts), their line numbers in ``name``'s file,
    and the ``references`` (translations) or ``labels`` where the sample has them."""

    name: str
    inputs: list[str]
    lines: list[int]
    references: list[str] | None = None
    labels: list[int] | None = None


# -- the sample ------------------------------------------------------------------------------------------------


def _is_data_file(path: Path) -> bool:
    name = path.name.removesuffix(".gz")
    return any(name.endswith(suffix) for suffix in DATA_SUFFIXES)


def _kind(path: Path) -> str:
    name = path.name.removesuffix(".gz")
    return "json" if name.endswith((".jsonl", ".json")) else "parquet" if name.endswith(".parquet") else "csv"


def _row_lines(path: Path, count: int) -> list[int]:
    """The line of ``path`` each of its ``count`` data rows starts on, as the user's editor numbers them: a
    JSON Lines file's lines that hold a row (blank ones hold none), a CSV / TSV file's records after its
    header line (a quoted field may span lines; a blank line is no row). Where the file is read otherwise
    (parquet, a JSON array) or the count differs from what was read, the rows' own numbers, 1 to ``count``."""
    import csv
    import gzip

    from ..data.files import _delimited_options, _is_gzip, read_lines

    rows = list(range(1, count + 1))
    kind = _kind(path)
    try:
        if kind == "json":
            found = [number for number, text in enumerate(read_lines(path), 1) if text.strip(" \t\r")]
        elif kind == "csv":
            options = _delimited_options(path)
            dialect = {key: options[key] for key in ("delimiter", "quoting") if key in options}
            opener = gzip.open if _is_gzip(path) else open
            with opener(path, "rt", encoding="utf-8-sig", newline="") as handle:
                reader = csv.reader(handle, **dialect)
                next(reader, None)  # the header line
                found, end = [], reader.line_num
                for record in reader:
                    if record:
                        found.append(end + 1)
                    end = reader.line_num
        else:
            return rows
    except (OSError, ValueError, csv.Error):
        return rows
    return found if len(found) == count else rows


def _missing(path: Path) -> OSError:
    if path.is_dir():
        return IsADirectoryError(
            f"--check-file: {path} is a folder; name a file of sentences (or pairs) in it."
        )
    return FileNotFoundError(f"--check-file: {path} does not exist.")


def _plain_lines(path: Path) -> Sample:
    from ..data.files import read_lines

    lines = read_lines(path)
    kept = [(number, text) for number, text in enumerate(lines, 1) if text.strip()]
    if not kept:
        raise ValueError(f"--check-file: {path} has no line with text to check the export on.")
    return Sample(f"{path.name}", [text for _, text in kept], [number for number, _ in kept])


def translation_sample(
    check_file: str | None,
    recipe: str | None,
    split: str,
    source_lang: str | None,
    target_lang: str | None,
    overrides: dict | None = None,
    limit: int | None = None,
    model_dir: str | Path | None = None,
) -> Sample:
    """The sentences to check on: ``check_file`` (one sentence a line; or a JSON Lines / CSV / TSV / parquet
    file of pairs in the model's languages, whose targets become the references), else ``split`` of
    ``recipe``'s data (``overrides``: its ``--set`` data settings), else the validation split of the run
    ``model_dir`` came from, where it records one (:func:`recorded_run`: the model's own held-out data, read
    from where training read it, nothing copied). At most ``limit`` sentences, the first."""
    if check_file:
        path = Path(check_file)
        if not path.is_file():
            raise _missing(path)
        if not _is_data_file(path):
            sample = _plain_lines(path)
        else:
            from ..data.translation import load_translation_splits

            if not (source_lang and target_lang):
                raise ValueError(
                    f"--check-file: {path} is a data file of pairs, but the model's config names no "
                    "source_lang / target_lang to read it with: give the sentences as plain lines."
                )
            pairs = load_translation_splits(_kind(path), source_lang, target_lang, {"check": str(path)})[
                "check"
            ]
            lines = _row_lines(path, len(pairs))
            # A pair with an empty source is no check (both sides give ""), as a blank plain line is none.
            kept = [index for index, source in enumerate(pairs["source"]) if source.strip()]
            if not kept:
                raise ValueError(f"--check-file: {path} has no pair with a source sentence to check on.")
            sample = Sample(
                path.name,
                [pairs["source"][index] for index in kept],
                [lines[index] for index in kept],
                [pairs["target"][index] for index in kept],
            )
    elif recipe:
        from ..data.translation import TranslationData, check_split, prepare_data
        from ..recipes import find_recipe

        args = TranslationData.from_recipe(find_recipe(recipe), overrides)
        if source_lang and target_lang and (args.source_lang, args.target_lang) != (source_lang, target_lang):
            raise ValueError(
                f"--recipe {recipe}: its data is {args.source_lang} -> {args.target_lang}, but the model "
                f"translates {source_lang} -> {target_lang}: name a recipe in the model's direction (or "
                f"--set source_lang={source_lang} --set target_lang={target_lang}), or give --check-file."
            )
        check_split(args, split)
        data = prepare_data(args)
        check_split(args, split, data)
        pairs = data[split]
        sample = Sample(
            f"{recipe} {split}", list(pairs["source"]), list(range(1, len(pairs) + 1)), list(pairs["target"])
        )
    elif model_dir is not None and recorded_run(model_dir, "translation") is not None:
        from ..data.translation import TranslationData, prepare_data

        run, settings = recorded_run(model_dir, "translation")
        data = prepare_data(TranslationData(**settings))
        if "validation" not in data:
            raise ValueError(f"{run}: the run's data has no validation split to check on: {NO_SAMPLE}")
        pairs = data["validation"]
        sample = Sample(
            f"validation split of {run.parent.name}",
            list(pairs["source"]),
            list(range(1, len(pairs) + 1)),
            list(pairs["target"]),
        )
    else:
        raise ValueError(NO_SAMPLE)
    return _first(sample, limit)


def recorded_run(model_dir: str | Path, task: str) -> tuple[Path, dict] | None:
    """``(run.json, its data settings)`` of the training run a model folder is the ``model/`` of, where the
    run trained ``task`` on data with a validation split (a data file, a Hub data set, or the built-in
    synthetic task); None otherwise (a folder from the Hub, an averaged checkpoint elsewhere)."""
    import os

    from ..data.translation import TranslationData

    run = Path(model_dir).resolve().parent / "run.json"
    try:
        train = json.loads(run.read_text(encoding="utf-8")).get("train", {})
    except (OSError, ValueError, AttributeError):
        return None
    settings = train.get("settings") or {}
    local = settings.get("dataset") in ("json", "csv", "parquet", "text")  # files named by *_file settings
    if train.get("task") != task or (local and not settings.get("validation_file")):
        return None
    names = {field.name for field in dataclasses.fields(TranslationData)}
    chosen = {key: value for key, value in settings.items() if key in names}
    if (
        chosen.get("data_dir") is None
        and os.environ.get("VT_DATA_DIR") is None
        and chosen.get("dataset") != "synthetic"
    ):
        relative = [chosen.get(key) for key in ("validation_file",) if chosen.get(key)]
        if any(not Path(value).is_absolute() and not Path(value).exists() for value in relative):
            return None  # read relative to a data folder this machine does not name
    return run, chosen


def classification_sample(
    check_file: str | None,
    recipe: str | None,
    split: str,
    overrides: dict | None = None,
    limit: int | None = None,
) -> Sample:
    """The texts to check a classifier on: ``check_file`` (one text a line, or a labelled data file read
    with the recipe's columns), else the recipe's ``test_file`` (``split`` must be ``test``)."""
    if check_file and not _is_data_file(Path(check_file)):
        if not Path(check_file).is_file():
            raise _missing(Path(check_file))
        return _first(_plain_lines(Path(check_file)), limit)
    if not (check_file or recipe):
        raise ValueError(NO_SAMPLE)
    from ..data.classification import ClassificationData, load_labelled
    from ..data.files import FILE_FORMATS, data_path
    from ..recipes import find_recipe

    args = ClassificationData.from_recipe(find_recipe(recipe) if recipe else None, overrides)
    if not check_file and split != "test":
        raise ValueError(
            f"--split {split}: a classifier is checked on its recipe's test_file (--split test)."
        )
    if check_file:  # read as its name says (not as the recipe's data set), from where the user named it
        path = Path(check_file)
        if not path.is_file():
            raise _missing(path)
        args = dataclasses.replace(args, dataset=_kind(path), dataset_revision=None)
        source = str(path.resolve())
    else:
        source = args.test_file
    if not source:
        raise ValueError(f"the recipe {recipe} names no test_file to check on: give --check-file.")
    data = load_labelled(args, source)
    texts, labels = list(data[args.text_column]), [int(label) for label in data[args.label_column]]
    # A local file's rows by the lines they are on (a recipe's file read from its data folder); a Hub split's
    # by their numbers. Where rows were dropped (drop_empty_texts) the counts part, and the numbers are used.
    local = data_path(source, args.data_dir) if args.dataset in FILE_FORMATS else None
    numbers = _row_lines(Path(local), len(texts)) if local else list(range(1, len(texts) + 1))
    return _first(Sample(Path(source).name, texts, numbers, labels=labels), limit)


NO_SAMPLE = (
    "nothing to check the export on: give --check-file FILE (one sentence a line, or a data file with "
    "references) or --recipe NAME (its test split); --no-check skips the check. (A model in a training run's "
    "folder is checked on the run's validation split.)"
)


def _first(sample: Sample, limit: int | None) -> Sample:
    if limit is None or len(sample.inputs) <= limit:
        return sample
    cut = slice(0, limit)
    return Sample(
        sample.name,
        sample.inputs[cut],
        sample.lines[cut],
        sample.references[cut] if sample.references is not None else None,
        sample.labels[cut] if sample.labels is not None else None,
    )
