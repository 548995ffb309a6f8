"""Issue 56 item 8: a fuzz test per data reader. Each reader either reads a file exactly as a reference parse
does (the same examples, in the same order and number) or refuses it with one line that names the file and,
where a line or row is the cause, that line or row; never a traceback, never another exception type.

* ``read_lines`` (parallel text, references) and ``translate --input``'s ``line_chunks``: arbitrary bytes
  against the reference split (at ``\\n``, one ``\\r`` before it removed, no line after a final ``\\n``).
* ``load_translation_splits`` for json / csv / parquet / text, and ``load_labelled`` for json / csv /
  parquet: sentences full of what other programs end lines at (U+2028, U+0085, ``\\v``, ``\\f``, ``\\x1c``,
  ``\\r``), quotes, commas, tabs, emoji and combining marks, and words pandas would read as numbers or
  missing values, written as a user's tool writes them (``json.dumps`` a line, ``csv.writer``, tab-joined
  lines, ``pyarrow.parquet``, ``"\\n".join``; gzipped or not), must come back unchanged; the same files,
  damaged (cut short, a byte flipped or dropped, a comma, quote, tab, newline or non-UTF-8 byte inserted,
  rows of another layout), must come back as the reference parse reads them or as one line.

The examples are derandomized (``derandomize=True``, no example database): CI runs the same examples on
every run, so a red test points at the change under test, not at the draw. To search further on a
workstation, set ``VT_FUZZ_EXPLORE=1``: random draws, ten times as many.

``datasets.load_dataset`` fingerprints a data file by its path, time and size, so every example writes a
new path, and the cache lives in this module's own temporary folder."""

import csv
import gzip
import io
import itertools
import json
import os
import re
import zlib
from unittest import mock

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from vanilla_transformer import inference
from vanilla_transformer.data.classification import ClassificationData, load_labelled
from vanilla_transformer.data.files import read_lines
from vanilla_transformer.data.translation import load_translation_splits

EXPLORE = bool(os.environ.get("VT_FUZZ_EXPLORE"))


def fuzz(examples: int):
    """The settings of one fuzz test: ``examples`` fixed examples (random ones, ten times as many, under
    ``VT_FUZZ_EXPLORE``), no deadline (``datasets``' time to read a file varies with the runner's load)."""
    return settings(
        max_examples=examples * (10 if EXPLORE else 1),
        deadline=None,
        derandomize=not EXPLORE,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


PURE = fuzz(200)  # pure Python: read_lines, line_chunks, parallel text files
LOADED = fuzz(50)  # each example one datasets.load_dataset (0.02-0.1 s for these small files)

# What other programs end a line at, what CSV quotes, what a tokenizer may trip on.
SPECIALS = "\u2028\u2029\x85\x0b\x0c\x1c\x1d\x1e\r\n\t\"',;\\ \u00a0\ufeff\u200b😀\u0301#"
# Whole sentences that pandas would read as a number, a boolean or a missing value.
WORDS = [
    "0",
    "01",
    "1",
    "-1",
    "1.5",
    "1e3",
    "nan",
    "NaN",
    "NA",
    "null",
    "None",
    "inf",
    "-inf",
    "True",
    "false",
]


def sentences(exclude: str = "", max_size: int = 12):
    """A sentence: any characters (``exclude`` left out), often the special ones above, or a tricky word."""
    character = st.one_of(
        st.sampled_from([c for c in SPECIALS if c not in exclude]),
        st.characters(exclude_categories=("Cs",), exclude_characters=exclude),
    )
    words = [word for word in WORDS if not set(word) & set(exclude)]
    return st.one_of(st.text(character, max_size=max_size), st.sampled_from(words))


# Parallel text: a line holds anything but "\n", and does not end in the "\r" of a "\r\n" ending.
LINE = sentences(exclude="\n").filter(lambda s: not s.endswith("\r"))
TSV_FIELD = sentences(exclude="\t\n\r")  # a tab-separated file is read without quoting
LABELS = st.integers(0, 3)

_names = itertools.count()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """This module's files, and ``datasets``' cache of them (not the user's)."""
    import datasets

    root = tmp_path_factory.mktemp("fuzz")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(datasets.config, "HF_DATASETS_CACHE", root / "cache")
        yield root


def new_file(folder, suffix: str, data: bytes):
    """``data`` at a path no example used before (``datasets`` would reuse its cache of an older file)."""
    path = folder / f"f{next(_names)}{suffix}"
    path.write_bytes(data)
    return path


def outcome(read):
    """``(result, None)`` or ``(None, error)`` for the errors a reader may raise; any other propagates."""
    try:
        return read(), None
    except (ValueError, FileNotFoundError) as error:
        return None, error


def assert_one_line(error, path, line: int | None = None, row: int | None = None):
    """A refusal the user can act on: one line, naming the file and the line (1-based) or row (0-based)."""
    assert error is not None, "read, where the reference parse refuses"
    event(f"refused{' naming the line' if line else ''}{' naming the row' if row is not None else ''}")
    message = str(error)
    assert "\n" not in message and "\r" not in message, message
    assert str(path) in message, message
    if line is not None:
        assert re.search(rf"\bline {line}\b", message), f"line {line} not named: {message}"
    if row is not None:
        assert re.search(rf"\brow {row}\b", message), f"row {row} not named: {message}"


def _gzip(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


# How a file is stored: the readers read gzip by its content, whatever the name; a .gz name on other bytes
# is refused. STORED: the ways a well-formed file comes; MISSTORED adds the refused one.
STORED = st.sampled_from(["plain", "gzip", "gzip, plain name"])
MISSTORED = st.sampled_from(["plain", "gzip", "gzip, plain name", "plain, .gz name"])


def _store(data: bytes, suffix: str, how: str) -> tuple[bytes, str]:
    """The bytes on disk and the file's suffix."""
    on_disk = _gzip(data) if how.startswith("gzip") else data
    return on_disk, suffix + (".gz" if how in ("gzip", "plain, .gz name") else "")


# ---------------------------------------------------------------------------------------------------------
# The reference parses.


class Refused(Exception):
    """What a reference parse refuses: ``line`` (1-based) / ``row`` (0-based) where one is the cause."""

    def __init__(self, line: int | None = None, row: int | None = None):
        super().__init__(line, row)
        self.line, self.row = line, row


def reference_body(data: bytes, suffix: str) -> bytes:
    """A file's bytes as the readers see them: gzip by content; a ``.gz`` name on other bytes refused."""
    if data[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(data)
        except (EOFError, zlib.error, OSError) as error:
            raise Refused() from error
    if suffix.endswith(".gz") and data:
        raise Refused()
    return data


def iter_lines(body: bytes):
    """Split at ``\\n`` only, one ``\\r`` before it removed, no line after a final ``\\n``; a line that is
    not UTF-8 refused by its number once it is reached (a reader stops at the first problem)."""
    pieces = body.split(b"\n")
    if pieces[-1] == b"":
        pieces.pop()
    for number, piece in enumerate(pieces, 1):
        try:
            yield piece.removesuffix(b"\r").decode("utf-8")
        except UnicodeDecodeError as error:
            raise Refused(line=number) from error


def reference_lines(body: bytes) -> list[str]:
    return list(iter_lines(body))


def lines_before_refusal(body: bytes) -> list[str]:
    """The reference lines before the first that is refused."""
    lines = []
    try:
        lines.extend(iter_lines(body))
    except Refused:
        pass
    return lines


def reference_pairs_json(lines) -> list[tuple[str, str]]:
    """Translation pairs of JSON Lines: blank lines (JSON's white space) skipped; every other line one
    object with a ``translation`` object or flat ``de`` / ``en`` text, all rows in one layout."""
    pairs, layout = [], None
    for number, line in enumerate(lines, 1):
        if not line.strip(" \t\r"):
            continue
        try:
            row = json.loads(line)
        except ValueError as error:
            raise Refused(line=number) from error
        if not isinstance(row, dict):
            raise Refused(line=number)
        this = "translation" if "translation" in row else "flat"
        pair = row["translation"] if this == "translation" else row
        if layout not in (None, this) or not isinstance(pair, dict):
            raise Refused(line=number)
        layout = this
        if not all(isinstance(pair.get(lang), str) for lang in ("de", "en")):
            raise Refused(line=number)
        pairs.append((pair["de"], pair["en"]))
    if not pairs:
        raise Refused()
    return pairs


def reference_rows_delimited(body: bytes) -> tuple[list[str], list[dict]]:
    """The header and rows of a CSV (quoted) or TSV (a tab in the header line: unquoted) file as the ``csv``
    module reads them: every field text as written, blank lines skipped, a row of another field count
    refused."""
    lines = reference_lines(body)  # UTF-8, line by line
    if not any(line.strip() for line in lines):
        raise Refused()
    text = body.decode("utf-8").removeprefix("\ufeff")  # pandas drops a byte-order mark
    tabbed = "\t" in text.split("\n", 1)[0]
    options = {"delimiter": "\t", "quoting": csv.QUOTE_NONE} if tabbed else {}
    reader = csv.reader(io.StringIO(text, newline=""), strict=True, **options)
    try:
        header = next(reader, [])  # a blank first line is a header of no fields: every row is refused
        rows = []
        for row in reader:
            if row and len(row) != len(header):
                raise Refused(line=reader.line_num)
            if row:
                rows.append(dict(zip(header, row, strict=True)))
    except csv.Error as error:
        raise Refused(line=reader.line_num) from error
    return header, rows


def lone_carriage_return(data: bytes) -> bool:
    """Whether a CSV file has a ``\\r`` not followed by ``\\n``: where pandas and CSV's rules (the ``csv``
    module) part ways (pandas reads no row of empty fields after a blank line ended by one). The reader
    counts the rows both find, and refuses the file where they differ: a refusal is then a right answer."""
    return re.search(rb"\r(?!\n)", gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data) is not None


def read_pairs(kind: str, path) -> list[tuple[str, str]]:
    data = load_translation_splits(kind, "de", "en", files={"train": str(path)})["train"]
    return list(zip(data["source"], data["target"], strict=True))


def read_labelled(kind: str, path, drop_empty_texts: bool = False) -> list[tuple[str, int]]:
    args = ClassificationData(
        dataset=kind, train_file=str(path), test_file=None, drop_empty_texts=drop_empty_texts
    )
    data = load_labelled(args, str(path))
    return list(zip(data["text"], data["label"], strict=True))


# ---------------------------------------------------------------------------------------------------------
# read_lines: any bytes, gzipped or not, cut short, under any name.

LINE_BYTES = st.lists(
    st.one_of(
        st.sampled_from(
            [b"\n", b"\r\n", b"\r", b"\xe2\x80\xa8", b"\xc2\x85", b"\x0b", b"\xff", b"\xc3", b"\xe2\x80"]
        ),
        LINE.map(lambda s: s.encode("utf-8")),
    ),
    max_size=12,
).map(b"".join)
ANY_BYTES = st.one_of(LINE_BYTES, st.binary(max_size=40))


@PURE
@given(
    content=ANY_BYTES,
    gzipped=st.booleans(),
    cut=st.none() | st.integers(0, 60),
    suffix=st.sampled_from([".txt", ".de", ".gz", ".de.gz"]),
)
def test_read_lines_reads_any_bytes_as_the_reference_split_or_names_the_line(
    folder, content, gzipped, cut, suffix
):
    data = _gzip(content) if gzipped else content
    if cut is not None:
        data = data[:cut]
    path = new_file(folder, suffix, data)
    lines, error = outcome(lambda: read_lines(path))
    try:
        expected = reference_lines(reference_body(data, suffix))
    except Refused as refused:
        assert_one_line(error, path, line=refused.line)
    else:
        event("read")
        assert error is None, error
        assert lines == expected


# ---------------------------------------------------------------------------------------------------------
# line_chunks: any bytes, arriving in pieces of any size, with or without more waiting.


class Trickle(io.BufferedIOBase):
    """A binary stream that hands out its bytes in the given piece sizes (a pipe, a slow terminal); it has
    no file descriptor, so ``more_ready`` cannot select on it (the test decides what it answers)."""

    def __init__(self, data: bytes, sizes: list[int]):
        self.data, self.sizes, self.position = data, itertools.cycle(sizes), 0

    def readable(self):
        return True

    def read1(self, size=-1):
        piece = self.data[
            self.position : self.position + min(next(self.sizes), size if size > 0 else 1 << 30)
        ]
        self.position += len(piece)
        return piece


@PURE
@given(
    data=ANY_BYTES,
    sizes=st.lists(st.integers(1, 9), min_size=1, max_size=6),
    ready=st.lists(st.booleans(), min_size=1, max_size=6),
    size=st.integers(1, 4),
)
def test_line_chunks_of_any_stream_are_the_reference_lines_in_order(data, sizes, ready, size):
    chunks = []
    with mock.patch.object(inference, "more_ready", side_effect=itertools.cycle(ready)):
        _, error = outcome(
            lambda: chunks.extend(inference.line_chunks(Trickle(data, sizes), "<stdin>", size))
        )
    assert all(1 <= len(chunk) <= size for chunk in chunks), chunks
    read = [line for chunk in chunks for line in chunk]
    try:
        expected = reference_lines(data)
    except Refused as refused:
        assert_one_line(error, "<stdin>", line=refused.line)
        assert "not valid UTF-8" in str(error), error
        assert read == lines_before_refusal(data)[: len(read)]  # the lines before the bad one, unchanged
    else:
        event("read")
        assert error is None, error
        assert read == expected


# ---------------------------------------------------------------------------------------------------------
# Translation, parallel text files: two files written as "\n".join(lines) + ending.


@PURE
@given(
    pairs=st.lists(st.tuples(LINE, LINE), min_size=1, max_size=8),
    ending=st.sampled_from(["\n", "\r\n"]),
    final=st.booleans(),
    gzipped=st.booleans(),
)
def test_parallel_text_files_read_back_line_for_line(folder, pairs, ending, final, gzipped):
    prefix = folder / f"f{next(_names)}"
    for index, lang in enumerate(("de", "en")):
        lines = [pair[index] for pair in pairs]
        # Without a final line ending, an empty last line is no line: write one there.
        text = ending.join(lines) + (ending if final or lines[-1] == "" else "")
        data = text.encode("utf-8")
        (folder / f"{prefix.name}.{lang}").write_bytes(_gzip(data) if gzipped else data)
    result, error = outcome(lambda: read_pairs("text", prefix))
    if any(all(not pair[side].strip() for pair in pairs) for side in (0, 1)):
        assert_one_line(error, prefix)  # a file of blank lines only is refused as empty
    else:
        event("read")
        assert error is None, error
        assert result == pairs


@PURE
@given(
    source=ANY_BYTES,
    target=ANY_BYTES,
    gzipped=st.booleans(),
)
def test_damaged_parallel_text_files_read_as_the_reference_or_are_named(folder, source, target, gzipped):
    prefix = folder / f"f{next(_names)}"
    paths, written = {}, {}
    for lang, content in (("de", source), ("en", target)):
        paths[lang] = folder / f"{prefix.name}.{lang}"
        written[lang] = _gzip(content) if gzipped else content
        paths[lang].write_bytes(written[lang])
    result, error = outcome(lambda: read_pairs("text", prefix))
    try:
        sides = {}
        for lang in ("de", "en"):
            sides[lang] = reference_lines(reference_body(written[lang], f".{lang}"))
            if not any(line.strip() for line in sides[lang]):
                raise Refused()
        if len(sides["de"]) != len(sides["en"]):
            raise Refused()
    except Refused as refused:
        assert error is not None, f"read {result}, where the reference parse refuses"
        named = [path for path in paths.values() if str(path) in str(error)]
        assert named, error
        assert_one_line(error, named[0], line=refused.line)
    else:
        event("read")
        assert error is None, error
        assert result == list(zip(sides["de"], sides["en"], strict=True))


# ---------------------------------------------------------------------------------------------------------
# Translation and classification, JSON Lines.


def _json_file(rows: list[str], ending: str, final: bool, how: str) -> tuple[bytes, str]:
    return _store((ending.join(rows) + (ending if final else "")).encode("utf-8"), ".jsonl", how)


@LOADED
@given(
    pairs=st.lists(st.tuples(sentences(), sentences()), min_size=1, max_size=6),
    layout=st.sampled_from(["translation", "flat"]),
    extra=st.lists(st.booleans(), min_size=1),
    ensure_ascii=st.booleans(),
    ending=st.sampled_from(["\n", "\r\n"]),
    final=st.booleans(),
    how=STORED,
)
def test_translation_json_lines_read_back_unchanged(
    folder, pairs, layout, extra, ensure_ascii, ending, final, how
):
    rows = []
    for index, (de, en) in enumerate(pairs):
        pair = {"de": de, "en": en} | ({"fr": de} if extra[index % len(extra)] else {})  # keys differ by row
        row = {"translation": pair} if layout == "translation" else pair
        rows.append(json.dumps(row, ensure_ascii=ensure_ascii))
    data, suffix = _json_file(rows, ending, final, how)
    path = new_file(folder, suffix, data)
    assert read_pairs("json", path) == pairs


JSON_LINES = st.one_of(
    st.builds(lambda de, en: json.dumps({"translation": {"de": de, "en": en}}), sentences(), sentences()),
    st.builds(lambda de, en: json.dumps({"de": de, "en": en}, ensure_ascii=False), sentences(), sentences()),
    st.sampled_from(
        [
            "",
            "  ",
            "\t",
            "\u2028",
            "\x0b",
            "\x1c",
            "[]",
            "1",
            '"de"',
            "null",
            "{",
            '{"de": "a"}',
            '{"de": "a", "en": 1}',
            '{"translation": "a"}',
            '{"translation": {"de": "a", "en": null}}',
            '{"de": "a", "en": "b", "translation": {"de": "c", "en": "d"}}',
            '{"de": "a", "en": "b"} x',
        ]
    ),
    sentences(),
)


@LOADED
@given(
    lines=st.lists(JSON_LINES, min_size=1, max_size=6),
    ending=st.sampled_from(["\n", "\r\n"]),
    final=st.booleans(),
    how=MISSTORED,
    cut=st.none() | st.integers(0, 200),
)
def test_damaged_translation_json_lines_read_as_the_reference_or_name_the_line(
    folder, lines, ending, final, how, cut
):
    data, suffix = _json_file(lines, ending, final, how)
    if cut is not None:
        data = data[:cut]
    path = new_file(folder, suffix, data)
    result, error = outcome(lambda: read_pairs("json", path))
    try:
        expected = reference_pairs_json(iter_lines(reference_body(data, suffix)))
    except Refused as refused:
        assert_one_line(error, path, line=refused.line)
    else:
        event("read")
        assert error is None, error
        assert result == expected


@LOADED
@given(
    rows=st.lists(
        st.tuples(sentences(), st.one_of(LABELS, LABELS, st.sampled_from([-1, 1.5, "1", True, None]))),
        min_size=1,
        max_size=6,
    ),
    blank=st.lists(st.sampled_from(["", " ", "\t"]), max_size=2),
    drop_empty_texts=st.booleans(),
    how=STORED,
)
def test_labelled_json_lines_read_back_or_name_the_line_of_a_bad_row(
    folder, rows, blank, drop_empty_texts, how
):
    lines = [json.dumps({"text": text, "label": label}) for text, label in rows]
    lines[1:1] = blank  # blank lines (JSON's white space) are skipped: the rows' lines move down
    data, suffix = _json_file(lines, "\n", True, how)
    path = new_file(folder, suffix, data)
    result, error = outcome(lambda: read_labelled("json", path, drop_empty_texts))

    def bad(text, label) -> bool:  # a label that is no class id; an empty text, unless such rows are dropped
        no_id = not isinstance(label, int) or isinstance(label, bool) or label < 0
        return no_id or (not drop_empty_texts and not text.strip())

    first = next((index for index, row in enumerate(rows) if bad(*row)), None)
    if first is not None:
        assert_one_line(error, path, line=first + 1 + (len(blank) if first >= 1 else 0))
    else:
        event("read")
        assert error is None, error
        assert result == [row for row in rows if row[0].strip() or not drop_empty_texts]


# ---------------------------------------------------------------------------------------------------------
# Translation and classification, CSV and TSV.


def _delimited(header: list[str], rows: list[list[str]], tabbed: bool, options: dict) -> bytes:
    if tabbed:
        text = "".join("\t".join(row) + options["ending"] for row in [header, *rows])
        return text.encode("utf-8")
    quoting = options["quoting"]
    if options["ending"] == "\n" and any("\r" in field for row in rows for field in row):
        quoting = csv.QUOTE_ALL  # csv.writer quotes a lone "\r" only where lines end in one: no reader could
    buffer = io.StringIO(newline="")
    csv.writer(buffer, lineterminator=options["ending"], quoting=quoting).writerows([header, *rows])
    return buffer.getvalue().encode("utf-8-sig" if options["bom"] else "utf-8")


DELIMITED_OPTIONS = st.fixed_dictionaries(
    {
        "ending": st.sampled_from(["\r\n", "\n"]),
        "quoting": st.sampled_from([csv.QUOTE_MINIMAL, csv.QUOTE_ALL]),
        "bom": st.booleans(),  # Excel's "CSV UTF-8"
        "suffix": st.sampled_from([".csv", ".tsv", ".txt"]),
    }
)


@LOADED
@given(
    pairs=st.data(),
    tabbed=st.booleans(),
    order=st.permutations(["de", "en", "id"]),
    options=DELIMITED_OPTIONS,
    how=STORED,
)
def test_translation_csv_and_tsv_read_back_unchanged(folder, pairs, tabbed, order, options, how):
    field = TSV_FIELD if tabbed else sentences()
    pairs = pairs.draw(st.lists(st.tuples(field, field), min_size=1, max_size=6))
    rows = [
        [{"de": de, "en": en, "id": str(i)}[column] for column in order] for i, (de, en) in enumerate(pairs)
    ]
    data, suffix = _store(_delimited(order, rows, tabbed, options), options["suffix"], how)
    assert read_pairs("csv", new_file(folder, suffix, data)) == pairs


def _mutate(data: bytes, edits: list[tuple[str, int, bytes]]) -> bytes:
    for operation, position, byte in edits:
        at = position % (len(data) + 1)
        if operation == "insert":
            data = data[:at] + byte + data[at:]
        elif operation == "delete":
            data = data[:at] + data[at + 1 :]
        elif operation == "cut":
            data = data[:at]
        else:  # flip
            data = data[:at] + bytes([data[at] ^ 0x55]) + data[at + 1 :] if at < len(data) else data
    return data


EDITS = st.lists(
    st.tuples(
        st.sampled_from(["insert", "insert", "delete", "cut", "flip"]),
        st.integers(0, 1 << 16),
        st.sampled_from([b",", b'"', b"\t", b"\n", b"\r", b"\xff", b"\xc3", b" ", b"x", b"1"]),
    ),
    min_size=1,
    max_size=3,
)


@LOADED
@given(
    pairs=st.data(),
    tabbed=st.booleans(),
    edits=EDITS,
    options=DELIMITED_OPTIONS,
    how=MISSTORED,
)
def test_damaged_translation_csv_reads_as_the_reference_or_names_the_line(
    folder, pairs, tabbed, edits, options, how
):
    field = TSV_FIELD if tabbed else sentences()
    pairs = pairs.draw(st.lists(st.tuples(field, field), min_size=1, max_size=5))
    data, suffix = _store(
        _mutate(_delimited(["de", "en"], [list(p) for p in pairs], tabbed, options), edits),
        options["suffix"],
        how,
    )
    path = new_file(folder, suffix, data)
    result, error = outcome(lambda: read_pairs("csv", path))
    try:
        header, rows = reference_rows_delimited(reference_body(data, suffix))
        if not {"de", "en"} <= set(header) or not rows:
            raise Refused()  # a column's name damaged, or a header line alone
    except Refused as refused:
        assert_one_line(error, path, line=refused.line)
    else:
        if error is not None and lone_carriage_return(data):
            assert_one_line(error, path)
            return
        event("read")
        assert error is None, error
        assert result == [(row["de"], row["en"]) for row in rows]


@LOADED
@given(
    rows=st.data(),
    tabbed=st.booleans(),
    labels_first=st.booleans(),
    edits=st.none() | EDITS,
    options=DELIMITED_OPTIONS,
)
def test_labelled_csv_and_tsv_read_back_or_name_the_row(folder, rows, tabbed, labels_first, edits, options):
    rows = rows.draw(
        st.lists(st.tuples(TSV_FIELD if tabbed else sentences(), LABELS), min_size=1, max_size=6)
    )
    header = ["label", "text"] if labels_first else ["text", "label"]
    written = [[str(label), text] if labels_first else [text, str(label)] for text, label in rows]
    data = _delimited(header, written, tabbed, options)
    if edits is not None:
        data = _mutate(data, edits)
    path = new_file(folder, ".csv", data)
    result, error = outcome(lambda: read_labelled("csv", path))
    try:
        header, parsed = reference_rows_delimited(data)
        if not {"text", "label"} <= set(header) or not parsed:
            raise Refused()  # a column's name damaged, or a header line alone
        expected = []
        for index, row in enumerate(parsed):
            if not row["text"].strip() or not re.fullmatch(r"[0-9]{1,18}", row["label"]):
                raise Refused(row=index)
            expected.append((row["text"], int(row["label"])))
    except Refused as refused:
        assert_one_line(error, path, line=refused.line, row=refused.row)
    else:
        if error is not None and lone_carriage_return(data):
            assert_one_line(error, path)
            return
        event("read")
        assert error is None, error
        assert result == expected


# ---------------------------------------------------------------------------------------------------------
# Parquet: written by pyarrow, then damaged.


def _parquet(table: pa.Table) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


@LOADED
@given(
    pairs=st.lists(st.tuples(sentences(), sentences()), min_size=1, max_size=6),
    layout=st.sampled_from(["translation", "flat"]),
)
def test_translation_parquet_reads_back_unchanged(folder, pairs, layout):
    de, en = [pair[0] for pair in pairs], [pair[1] for pair in pairs]
    if layout == "flat":
        table = pa.table({"en": en, "de": de})
    else:
        table = pa.table({"translation": [{"de": d, "en": e} for d, e in pairs]})
    path = new_file(folder, ".parquet", _parquet(table))
    assert read_pairs("parquet", path) == pairs


PARQUET_EDITS = st.lists(
    st.tuples(st.sampled_from(["flip", "delete", "cut"]), st.integers(0, 1 << 16), st.just(b"")), max_size=2
)


@LOADED
@given(
    rows=st.lists(st.tuples(sentences(), sentences(), LABELS), min_size=1, max_size=6),
    nulls=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 2)), max_size=3),  # (row, column) -> null
    layout=st.sampled_from(["flat", "translation", "labelled"]),
    edits=PARQUET_EDITS,
)
def test_parquet_with_nulls_or_damage_reads_as_pyarrow_does_or_names_the_row(
    folder, rows, nulls, layout, edits
):
    rows = [list(row) for row in rows]
    for row, column in nulls:
        rows[row % len(rows)][column] = None
    first, second, labels = ([row[index] for row in rows] for index in range(3))
    if layout == "flat":
        table = pa.table({"de": first, "en": second})
    elif layout == "translation":  # a null pair where both sides are
        pairs = [
            None if de is None and en is None else {"de": de, "en": en}
            for de, en in zip(first, second, strict=True)
        ]
        table = pa.table(
            {"translation": pa.array(pairs, pa.struct([("de", pa.string()), ("en", pa.string())]))}
        )
    else:
        table = pa.table({"text": first, "label": pa.array(labels, pa.int64())})
    data = _mutate(_parquet(table), edits)
    path = new_file(folder, ".parquet", data)
    if layout == "labelled":
        result, error = outcome(lambda: read_labelled("parquet", path))
    else:
        result, error = outcome(lambda: read_pairs("parquet", path))
    try:
        if len(data) < 12 or data[:4] != b"PAR1" or data[-4:] != b"PAR1":
            raise Refused()  # parquet's marks at both ends (pyarrow itself reads past a damaged first one)
        try:
            read = pq.read_table(path)
            if not set(table.column_names) <= set(read.column_names) or not read.num_rows:
                raise Refused()  # a column's name damaged, or no rows left
            read = read.to_pylist()
        except (pa.ArrowException, OSError, UnicodeDecodeError) as broken:
            raise Refused() from broken
        expected = []
        for index, row in enumerate(read):
            if layout == "labelled":
                text, label = row.get("text"), row.get("label")
                if not isinstance(text, str) or not text.strip() or not isinstance(label, int):
                    raise Refused(row=index)
                expected.append((text, label))
            else:
                pair = row.get("translation") if layout == "translation" else row
                if not isinstance(pair, dict) or not all(
                    isinstance(pair.get(lang), str) for lang in ("de", "en")
                ):
                    raise Refused(row=index)
                expected.append((pair["de"], pair["en"]))
    except Refused as refused:
        assert_one_line(error, path, row=refused.row)
    else:
        if edits and error is not None:  # a damaged file pyarrow reads past may still be refused, in one line
            assert_one_line(error, path)
            return
        event("read")
        assert error is None, error
        assert result == expected
