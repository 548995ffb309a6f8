"""Reading a data file of one split, for training and for scoring a saved model alike: where relative paths
are read from (``--data-dir`` / a recipe's ``data_dir`` / ``$VT_DATA_DIR``), the check that every path named
exists (all at once, before any work), the one check every file passes before ``datasets`` reads it, and
the reader of a JSON Lines, CSV/TSV or parquet file (``FILE_FORMATS``). Training (``train/``) and serving
(``translate`` reads its input with :func:`decode_line`; ``evaluate`` and ``classify evaluate`` read their
files) import these from here."""

from __future__ import annotations

import csv
import gzip
import json
import os
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

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


def check_data_file(
    path: str | Path, json_lines: bool = True, row_problem: Callable[[dict], str | None] | None = None
) -> None:
    """Read a data file once, a line at a time, before ``datasets`` reads it, so that a damaged file is
    one error naming the file and line (not a ``DatasetGenerationError`` traceback, or a ``TypeError``
    from the tokenizer later): a missing file, a ``.gz`` that is not gzip (or is cut short), a line that
    is not UTF-8, a file with no non-blank line, and for ``json_lines`` a line that is not a JSON
    object or that ``row_problem`` (given the row, it returns what is wrong, or None) finds fault with.
    Blank lines are allowed (``datasets`` skips them)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No such data file: {path}")
    with open(path, "rb") as handle:
        start = handle.read(2)
    gzipped = start == b"\x1f\x8b"  # read as gzip by its content, whatever the name, as ``datasets`` does
    if start and path.suffix == ".gz" and not gzipped:
        raise ValueError(f"{path} is named .gz but is not gzip")
    rows = 0
    try:
        with (gzip.open if gzipped else open)(path, "rb") as handle:
            for number, raw in enumerate(handle, 1):
                text = decode_line(raw.rstrip(b"\r\n"), str(path), number)
                if not text.strip():
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
    rows are the caller's to check), a parquet file for existence."""
    from datasets import load_dataset

    if kind == "json":
        check_data_file(path, row_problem=row_problem)
        return load_dataset("json", data_files=str(path), split="train")
    if kind == "csv":
        check_data_file(path, json_lines=False)
        return load_dataset("csv", data_files=str(path), split="train", **_delimited_options(path))
    if kind == "parquet":
        if not Path(path).is_file():
            raise FileNotFoundError(f"No such data file: {path}")
        return load_dataset("parquet", data_files=str(path), split="train")
    raise ValueError(f"`dataset: {kind}` is not a file format ({', '.join(FILE_FORMATS)}).")


def _delimited_options(path: str | Path) -> dict:
    """How ``datasets``' csv builder (pandas) reads a file, from its header line: with a tab in it, tab-
    separated without quoting (a ``"`` is part of the text: NSMC's files quote nothing, and a text that
    opens with a quote would otherwise lose it, or swallow the lines up to the next one); else
    comma-separated with CSV's quoting. Every field is kept as written (an empty one is
    ``""``, and a text that reads "NA" or "null" stays text: pandas would make both missing)."""
    with open(path, "rb") as handle:
        gzipped = handle.read(2) == b"\x1f\x8b"
    with (gzip.open if gzipped else open)(path, "rb") as handle:
        header = handle.readline()
    tabbed = {"delimiter": "\t", "quoting": csv.QUOTE_NONE} if b"\t" in header else {}
    return {**tabbed, "keep_default_na": False}


__all__ = [
    "FILE_FORMATS",
    "read_data_file",
    "data_dir",
    "data_path",
    "refuse_missing",
    "decode_line",
    "check_data_file",
]
