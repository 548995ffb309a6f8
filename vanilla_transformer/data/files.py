"""Reading a data file of one split, for training and for scoring a saved model alike: where relative paths
are read from (``--data-dir`` / a recipe's ``data_dir`` / ``$VT_DATA_DIR``), the check that every path named
exists (all at once, before any work), the one check every file passes before ``datasets`` reads it, and
the reader of a JSON Lines, CSV/TSV or parquet file (``FILE_FORMATS``). Training (``train/``) and serving
(``translate`` reads its input with :func:`decode_line`; ``evaluate`` and ``classify evaluate`` read their
files) import these from here.

``DataSettings`` is what every task's data settings share (``data_dir``) and how a serving command reads
them from a recipe without the training arguments (:meth:`DataSettings.from_recipe`)."""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from datasets import Dataset

# The ``dataset`` values that name local files, a split each (``datasets``' builders of those names); any
# other value (but translation's ``text`` and ``synthetic``) is a Hub id or a local folder laid out as one.
FILE_FORMATS = ("json", "csv", "parquet")


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


@dataclass
class DataSettings:
    """A recipe's data settings (a task's subclass adds its own): the one the tasks share is where relative
    paths are read from. A task's training arguments inherit its subclass, so each setting is declared once."""

    describes: ClassVar[str] = "a data setting"  # one of the fields, as a refused `--set` names it

    data_dir: str | None = field(
        default=None,
        metadata={"help": "Folder that relative data files are read from (default: $VT_DATA_DIR)."},
    )

    def __post_init__(self):  # the end of every data class's checks: the training arguments' go on from here
        parent = getattr(super(), "__post_init__", None)
        if parent is not None:
            parent()

    @classmethod
    def from_recipe(cls, recipe: str | None = None, overrides: Mapping | None = None):
        """This class's settings from a recipe file (None: the defaults) and ``--set`` overrides, without the
        training arguments (no device picked, no precision resolved, no model block read): what the serving
        commands read a recipe's data with. A key of the file that is no data setting is left to the
        training command; a ``--set`` key that is none is refused, naming the closest
        (``recipes.read_settings``)."""
        from ..recipes import read_settings

        return read_settings(cls, recipe, overrides, cls.describes)


def refuse_missing(paths: dict[str, str | Path | None], data_folder: str | None = None) -> None:
    """Raise one ``FileNotFoundError`` naming every setting of ``paths`` (setting -> the file it names; None:
    unset) whose file does not exist, so that a misspelt path is found before any work, all of them at once.
    ``data_folder``: the recipe's ``data_dir``, named in the message where relative paths are read from it."""
    missing = [f"{setting}={path}" for setting, path in paths.items() if path and not Path(path).is_file()]
    if missing:
        root = data_dir(data_folder)
        where = f" (relative paths are read from data_dir / $VT_DATA_DIR: {root})" if root is not None else ""
        raise FileNotFoundError(f"No such file: {'; '.join(missing)}{where}. Check the recipe's paths.")


def decode_line(raw: bytes, where: str, number: int) -> str:
    """One line of bytes as UTF-8 text; a byte that is not UTF-8 is an error naming the file (``where``),
    the line ``number`` and the column (1-based, in characters)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        column = len(raw[: error.start].decode("utf-8", errors="replace")) + 1
        raise ValueError(
            f"{where} line {number}: not valid UTF-8 (byte 0x{raw[error.start]:02x} at column {column})"
        ) from None


def _is_gzip(path: Path) -> bool:
    """Whether a file is gzip by its content, whatever its name (as ``datasets`` reads it); a ``.gz`` name
    on a file that is not gzip is refused."""
    with open(path, "rb") as handle:
        start = handle.read(2)
    if start and path.suffix == ".gz" and start != b"\x1f\x8b":
        raise ValueError(f"{path} is named .gz but is not gzip")
    return start == b"\x1f\x8b"


def read_lines(path: str | Path) -> list[str]:
    """The lines of a text file (gzip read by its content), for every reader of line-aligned text (parallel
    files, references, tokenized references): split only at ``\n`` (a ``\r\n`` ending counts as ``\n``),
    so that line N of every message is the user's line N; characters other programs also end lines at
    (U+2028, U+0085, \\v, \\f, a lone \\r, ...: ``tokenization.LINE_BREAKS``) stay inside their line, and
    the tokenizer reads each as a space. A missing file, a byte that is not UTF-8 (naming the line and
    column) or a damaged gzip file is one error naming the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No such file: {path}")
    lines = []
    try:
        with (gzip.open if _is_gzip(path) else open)(path, "rb") as handle:
            for number, raw in enumerate(handle, 1):
                lines.append(decode_line(raw.removesuffix(b"\n").removesuffix(b"\r"), str(path), number))
    except (EOFError, zlib.error, gzip.BadGzipFile) as error:
        raise ValueError(f"{path} is a damaged or cut-short gzip file ({error})") from None
    return lines


def check_data_file(
    path: str | Path, json_lines: bool = True, row_problem: Callable[[dict], str | None] | None = None
) -> None:
    """Read a data file once, a line at a time, before ``datasets`` reads it, so that a damaged file is
    one error naming the file and line (not a ``DatasetGenerationError`` traceback, or a ``TypeError``
    from the tokenizer later): a missing file, a ``.gz`` that is not gzip (or is cut short), a line that
    is not UTF-8, a file with no non-blank line, and for ``json_lines`` a line that is not a JSON
    object or that ``row_problem`` (given the row, it returns what is wrong, or None) finds fault with.
    Blank lines are allowed (``datasets`` skips them; in JSON Lines, those of JSON's white space only)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No such data file: {path}")
    gzipped = _is_gzip(path)
    rows = 0
    try:
        with (gzip.open if gzipped else open)(path, "rb") as handle:
            for number, raw in enumerate(handle, 1):
                text = decode_line(raw.rstrip(b"\r\n"), str(path), number)
                if not (text.strip(" \t\r") if json_lines else text.strip()):
                    continue
                rows += 1
                if json_lines:
                    _check_json_line(text, f"{path} line {number}", row_problem)
    except (EOFError, zlib.error, gzip.BadGzipFile) as error:
        raise ValueError(f"{path} is a damaged or cut-short gzip file ({error})") from None
    if not rows:
        raise ValueError(f"{path} is empty: no rows to read.")


def _check_json_line(text: str, where: str, row_problem: Callable[[dict], str | None] | None) -> None:
    try:
        row = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{where}: not valid JSON ({error.msg} at column {error.colno})") from None
    if not isinstance(row, dict):
        raise ValueError(
            f"{where}: {text.strip()[:40]!r} is not a JSON object (JSON Lines: one object a line)"
        )
    problem = row_problem(row) if row_problem is not None else None
    if problem:
        raise ValueError(f"{where}: {problem}")


def read_data_file(
    kind: str, path: str | Path, row_problem: Callable[[dict], str | None] | None = None
) -> Dataset:
    """One split from a local file of ``kind`` (``FILE_FORMATS``), checked before ``datasets`` reads it
    (:func:`check_data_file`): JSON Lines row by row (``row_problem``), a CSV or TSV file line by line (its
    rows are the caller's to check; pandas must read as many as CSV's rules find), a parquet file for
    existence."""
    if kind == "json":
        check_data_file(path, row_problem=row_problem)
        return _load("json", path)
    if kind == "csv":
        check_data_file(path, json_lines=False)
        options = _delimited_options(path)
        rows = _check_delimited(Path(path), options)
        if not rows:
            raise ValueError(f"{path} is empty: a header line and no rows to read.")
        data = _load("csv", path, **options)
        if len(data) != rows:  # pandas reads no row at a line of white space, or after a lone "\r"
            raise ValueError(
                f"{path} has {rows} rows by CSV's rules but pandas reads {len(data)}: a line of white space "
                "only, or one ended by a lone carriage return (\\r), loses its row. Remove such lines, or end "
                "every line with \\n."
            )
        return data
    if kind == "parquet":
        _check_parquet(Path(path))
        return _load("parquet", path)
    raise ValueError(f"`dataset: {kind}` is not a file format ({', '.join(FILE_FORMATS)}).")


def _load(kind: str, path: str | Path, **options) -> Dataset:
    """``datasets``' reader of ``kind`` on one checked file. What the checks before it cannot see
    (``pyarrow``'s or ``pandas``' own limits) still comes out as one line naming the file and the first
    cause, not a ``DatasetGenerationError`` traceback."""
    from datasets import load_dataset

    try:
        return load_dataset(kind, data_files=str(path), split="train", **options)
    except Exception as error:  # noqa: BLE001 - re-raised as one line with its innermost cause
        cause = error
        while cause.__cause__ is not None or cause.__context__ is not None:
            cause = cause.__cause__ or cause.__context__
        reason = " ".join(str(cause).split())[:300] or type(cause).__name__
        raise ValueError(f"{path} cannot be read as {kind} ({reason}). Check the file's format.") from error


def _check_delimited(path: Path, options: dict) -> int:
    """A comma- or tab-separated file, parsed with the options ``datasets`` will read it with: every row has
    as many fields as the header line, and a quoted field is closed. The first row that is not is one error
    naming its line, the counts and the likely cause (an unquoted comma, a stray tab). Returns the number of
    rows (blank lines are none)."""
    delimiter = options.get("delimiter", ",")
    quoting = options.get("quoting", csv.QUOTE_MINIMAL)
    opener = gzip.open if _is_gzip(path) else open
    # utf-8-sig: a byte-order mark is no part of the header line, as pandas reads it
    with opener(path, "rt", encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle, delimiter=delimiter, quoting=quoting, strict=True)
        rows = 0
        try:
            header = next(reader, None)
            if header is not None and not any(name.strip() for name in header):
                blank = len(header) <= 1  # "" or white space; "," names two columns, both empty
                what = (
                    "blank" if blank else f"a header line that names no column ({delimiter.join(header)!r})"
                )
                raise ValueError(
                    f"{path} line 1 is {what}: a CSV file's first line names its columns (e.g. text,label or "
                    "en,de). Delete the blank line(s) above the header, or write one."
                )
            for row in reader:
                rows += bool(row)
                if row and len(row) != len(header):
                    name = "tab" if delimiter == "\t" else "comma"
                    hint = (
                        'a text holding a comma must be quoted ("..."), or the file written tab-separated'
                        if name == "comma"
                        else "a tab inside a text splits it: replace it with a space"
                    )
                    raise ValueError(
                        f"{path} line {reader.line_num}: {len(row)} fields where the header line has "
                        f"{len(header)} ({', '.join(header)}): {hint}."
                    )
        except csv.Error as error:
            raise ValueError(
                f"{path} line {reader.line_num}: {error} (a quoted field left open? close its quote)."
            ) from None
    return rows


def _check_parquet(path: Path) -> None:
    """A parquet file exists, has parquet's marks at both ends (``PAR1``) and holds a row: a file of another
    format, one cut short, or one of no rows is one error naming it."""
    if not path.is_file():
        raise FileNotFoundError(f"No such data file: {path}")
    size = path.stat().st_size
    with open(path, "rb") as handle:
        start = handle.read(4)
        handle.seek(max(size - 4, 0))
        end = handle.read(4)
    if size < 12 or start != b"PAR1" or end != b"PAR1":
        what = "is cut short" if start == b"PAR1" else "is not a parquet file"
        raise ValueError(f"{path} {what} (parquet files begin and end with PAR1). Write it again.")
    import pyarrow.parquet as pq

    try:
        metadata = pq.read_metadata(path)  # the footer alone: no row is read
    except Exception:  # noqa: BLE001 - a damaged footer: datasets' reader names the cause (_load)
        return
    if metadata.num_rows == 0:  # pyarrow's own message would be "BatchSize must be greater than 0"
        columns = ", ".join(metadata.schema.names)
        raise ValueError(
            f"{path} is empty: its columns ({columns}) hold no rows. Write the rows into it, or name another file."
        )


def _delimited_options(path: str | Path) -> dict:
    """How ``datasets``' csv builder (pandas) reads a file, from its header line: with a tab in it, tab-
    separated without quoting (a ``"`` is part of the text: NSMC's files quote nothing, and a text that
    opens with a quote would otherwise lose it, or swallow the lines up to the next one); else
    comma-separated with CSV's quoting. Every field is kept as written (an empty one is
    ``""``, and a text that reads "NA" or "null" stays text: pandas would make both missing; one that
    reads "01" or "1.5" stays text too, where pandas would make a column of them numbers: a reader of
    labels turns them into integers itself)."""
    with open(path, "rb") as handle:
        gzipped = handle.read(2) == b"\x1f\x8b"
    with (gzip.open if gzipped else open)(path, "rb") as handle:
        header = handle.readline()
    tabbed = {"delimiter": "\t", "quoting": csv.QUOTE_NONE} if b"\t" in header else {}
    try:
        names = next(csv.reader(io.StringIO(header.decode("utf-8-sig", "replace"), newline=""), **tabbed), [])
    except csv.Error:  # a damaged header line: _check_delimited names it
        names = []
    return {**tabbed, "keep_default_na": False, "converters": dict.fromkeys(names, str)}


__all__ = [
    "FILE_FORMATS",
    "DataSettings",
    "read_data_file",
    "data_dir",
    "data_path",
    "refuse_missing",
    "decode_line",
    "check_data_file",
    "read_lines",
]
