"""Inputs longer than a model reads: one policy for every command and engine that runs a model on user text.

**Cut, warn once, never refuse.** A text longer than the model's limit is cut to its first ``limit`` tokens
(the tokenizer's own truncation, so the end-of-sequence token stays last) and the model runs on that. One
warning per input, not per chunk or batch, names the limit and the input's lines that were cut: 1-based and
counted over the whole input as the user numbers them, a long list abbreviated (``lines 3, 100 and 12
more``). It is this module's ``logging`` warning, which goes to stderr unless the program routes logging
elsewhere. A file is never refused for one long line, and the output stays line for line with the input.

The limit (:func:`reading_limit`) is the smaller of the model's positions (``max_position_embeddings``:
learned positions end there, and so does the table CTranslate2 is exported with) and the longest input its
tokenizer records (``model_max_length``, the longest source its training read; transformers writes "no
limit" as a huge number, which is not a limit).

Who follows it: ``inference.translate`` (the ``translate`` command's pytorch engine, and ``evaluate``),
``ctranslate2_export.CTranslate2Translator`` (``translate --engine ctranslate2``),
``onnx_export.OnnxTranslator`` (``translate --engine onnx``), ``attention``
(``attention_maps.plot_attention``), the demo page (which says so on the page) and the translation pipeline
(``translation_pipeline.py``, one text at a time). A classifier reads a long text its own trained way
instead (``classifier_long_text``: head, head and tail, or windows; ``classification_pipeline.py``). The ``translate`` command
reads its input in chunks: it gives each engine call the number of the chunk's first line and one
:class:`CutLines`, and warns once when the input ends. (``onnx_export.OnnxSeq2Seq`` under ``OnnxTranslator``
takes token ids, not text: used alone, cutting is its caller's.)

Plain Python that imports nothing of the package: a Space's ``app.py`` (the demo) imports it uploaded
beside it, and a saved model folder carries it as remote code, beside the translation pipeline that
imports it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

logger = logging.getLogger(__name__)

NO_LIMIT = 10**6  # a tokenizer's model_max_length at or above this is transformers' "no limit" (int(1e30))
SHOWN_LINES = 2  # a warning names this many cut lines, then how many more


def reading_limit(
    max_position_embeddings: float | None, model_max_length: int | None
) -> tuple[int | None, str]:
    """``(limit, its name)``: the most tokens the model reads, the smaller of its positions and the longest
    input its tokenizer records; ``(None, "")`` where neither is known (nothing is cut)."""
    known = [  # on a tie, the positions are named: they are the model's own
        (int(value), name)
        for value, name in (
            (max_position_embeddings, "max_position_embeddings"),
            (model_max_length, "the tokenizer's model_max_length"),
        )
        if value is not None and value < NO_LIMIT
    ]
    return min(known, key=lambda pair: pair[0], default=(None, ""))


def encode_within(
    tokenizer, texts: Sequence[str], limit: int | None, as_target: bool = False
) -> tuple[list[list[int]], dict[int, int]]:
    """``(ids, cut)``: each text's token ids as the model reads them (those longer than ``limit`` cut to their
    first ``limit``, as the tokenizer truncates), and for each text cut, its index and its length before.
    ``as_target``: tokenize as a target (``tokenizer(text_target=...)``)."""
    if not texts:
        return [], {}

    def encode(chosen: list[str], **options) -> list[list[int]]:
        return tokenizer(**{"text_target" if as_target else "text": chosen}, **options)["input_ids"]

    # verbose=False: the cut is said once, by the caller (the policy's warning), not also by transformers.
    ids = encode(list(texts), verbose=False)
    cut = {index: len(row) for index, row in enumerate(ids) if limit is not None and len(row) > limit}
    shortened = encode([texts[index] for index in cut], truncation=True, max_length=limit) if cut else []
    for index, row in zip(cut, shortened, strict=True):
        ids[index] = row
    return ids, cut


def numbered(lines: Sequence[int]) -> str:
    """``line 100``, ``lines 3 and 100``, ``lines 3, 100 and 12 more``."""
    if len(lines) == 1:
        return f"line {lines[0]}"
    shown = ", ".join(str(line) for line in lines[:SHOWN_LINES])
    if len(lines) <= SHOWN_LINES:
        return f"lines {shown.replace(', ', ' and ')}"
    return f"lines {shown} and {len(lines) - SHOWN_LINES} more"


def lines_cut_warning(lines: Sequence[int], limit: int, limit_name: str) -> str:
    """The warning for lines of an input that were cut (their numbers, 1-based, in order)."""
    its, covers = (
        ("its", "its translation covers") if len(lines) == 1 else ("their", "their translations cover")
    )
    return (
        f"Cut {numbered(lines)} to {its} first {limit} tokens, the most this model reads ({limit_name}): "
        f"{covers} only that part. Split long lines into sentences."
    )


def text_cut_warning(
    length: int,
    limit: int,
    limit_name: str,
    result: str,
    reader: str = "this model reads",
    what: str = "the text",
) -> str:
    """The warning for one text of ``length`` tokens that was cut; ``result``: what that means for the output;
    ``reader``: whose limit it is (another than the model's, e.g. what a picture shows legibly)."""
    return (
        f"Cut {what} ({length:,} tokens) to its first {limit} tokens, the most {reader} ({limit_name}): "
        f"{result}."
    )


def warn(message: str) -> None:
    """Say a cut: this module's ``logging`` warning (stderr, unless the program routes logging elsewhere)."""
    logger.warning(message)


class CutLines:
    """The lines of one input that were cut, gathered over the calls that read it (a stream read in chunks,
    each in batches), for one warning when it ends."""

    def __init__(self) -> None:
        self.lines: list[int] = []
        self.limit, self.limit_name = 0, ""

    def add(self, cut: Sequence[int], first_line: int, limit: int | None, limit_name: str) -> None:
        """Record the texts at indices ``cut`` of a piece of the input whose first text is line
        ``first_line``."""
        if cut:
            self.lines += [first_line + index for index in cut]
            self.limit, self.limit_name = limit, limit_name

    def warn(self) -> None:
        """Log the one warning, if a line was cut, and forget the lines (it is said once)."""
        if self.lines:
            warn(lines_cut_warning(sorted(self.lines), self.limit, self.limit_name))
            self.lines = []


def report_cut(
    cut: Sequence[int], first_line: int, limit: int | None, limit_name: str, cut_lines: CutLines | None = None
) -> None:
    """An engine's report of the sentences it cut (indices ``cut`` of a piece whose first sentence is line
    ``first_line``): added to the caller's ``cut_lines``, which warns once when its input ends, or without
    one, said now."""
    report = CutLines() if cut_lines is None else cut_lines
    report.add(cut, first_line, limit, limit_name)
    if cut_lines is None:
        report.warn()


__all__ = [
    "reading_limit",
    "encode_within",
    "numbered",
    "lines_cut_warning",
    "text_cut_warning",
    "warn",
    "CutLines",
    "report_cut",
]
