"""Bad text, and text that is no text: bytes that are not UTF-8 on standard input or in a file, a line
that is not JSON, a ``.gz`` that is not gzip, an empty file or empty input, blank lines, a line longer than
the model reads. Each bad one is one line naming the file (``<stdin>`` for standard input) and the line, not
a traceback; empty input to ``translate`` is no output and success, a blank line is a blank line in its
place, an over-long line is cut with a warning naming the limit. And ``translate`` streams: a chunk of lines
at a time, each written as soon as it is translated, so a pipe gets its first translation while its input
is still open. The translations are the shared tiny run's model's (conftest's ``translation_model``)."""

import copy
import gzip
import io
import json
import os
import select
import subprocess
import sys

import pytest
import torch
from conftest import CORPUS, tiny_config
from transformers import AutoTokenizer, pipeline
from transformers.testing_utils import CaptureLogger

import vanilla_transformer  # noqa: F401  (registers the "vanilla-translation" pipeline)
from vanilla_transformer import VanillaTransformerForConditionalGeneration, long_inputs
from vanilla_transformer.cli import main
from vanilla_transformer.inference import translate


def _translate_stdin(folder, data: bytes, monkeypatch, *options: str) -> None:
    """``translate`` reading ``data`` through ``sys.stdin`` (the bytes under it, as from a pipe)."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
    main(["translate", "--model", str(folder), "--beams", "1", *options])


# -- translate: standard input and --input files -------------------------------------------------------------


def test_stdin_that_is_not_utf8_names_the_line_and_column(translation_model, monkeypatch):
    with pytest.raises(SystemExit) as raised:
        _translate_stdin(translation_model, b"a wonderful film\n\ngreat caf\xe9 acting\n", monkeypatch)
    assert str(raised.value) == "error: <stdin> line 3: not valid UTF-8 (byte 0xe9 at column 10)"


def test_an_input_file_that_is_not_utf8_names_the_file_line_and_column(translation_model, tmp_path):
    source = tmp_path / "in.txt"
    source.write_bytes("정말 재미있는 영화\n".encode() * 2 + "정말 지루한 영화\n".encode("utf-16-le"))
    with pytest.raises(SystemExit) as raised:
        main(
            [
                "translate",
                "--model",
                str(translation_model),
                "--input",
                str(source),
                "--output",
                str(tmp_path / "o"),
            ]
        )
    # UTF-16 bytes: the first code unit of '정' (U+C815) is 0x15 0xc8; 0xc8 needs a continuation byte.
    assert str(raised.value) == f"error: {source} line 3: not valid UTF-8 (byte 0xc8 at column 2)"


def test_empty_stdin_writes_nothing_and_succeeds(translation_model, monkeypatch, capsys):
    _translate_stdin(translation_model, b"", monkeypatch)
    assert capsys.readouterr().out == ""


def test_an_empty_input_file_writes_an_empty_output_and_says_so(translation_model, tmp_path, capsys):
    source, output = tmp_path / "empty.txt", tmp_path / "out.txt"
    source.write_bytes(b"")
    main(["translate", "--model", str(translation_model), "--input", str(source), "--output", str(output)])
    assert output.read_bytes() == b""
    assert capsys.readouterr().err.endswith(f"\n{source} is empty: nothing to translate.\n")


def test_chunks_keep_every_line_in_place_and_translate_as_one_call_does(
    translation_model, monkeypatch, capsys
):
    """40 lines, read in chunks of 16 (--batch-size 1), blank lines among them and \\r\\n endings: the
    output is line for line what one ``translate`` call over all of them gives."""
    words = ["a wonderful film", "", "great acting and a boring story", "정말 재미있는 영화", "   "]
    lines = [
        words[i % len(words)] + " film" * (i % 3) if words[i % len(words)].strip() else "" for i in range(40)
    ]
    _translate_stdin(
        translation_model, "".join(f"{line}\r\n" for line in lines).encode(), monkeypatch, "--batch-size", "1"
    )
    out = capsys.readouterr().out.split("\n")
    assert out.pop() == "" and len(out) == 40
    model = VanillaTransformerForConditionalGeneration.from_pretrained(translation_model).eval()
    # batch_size=1 as the command's: a translation's length bound (source + 50) is its batch's.
    expected = translate(
        model, AutoTokenizer.from_pretrained(translation_model), lines, batch_size=1, num_beams=1
    )
    assert out == expected and all(out[i] == "" for i, line in enumerate(lines) if not line.strip())


def _read_line(stream, timeout: float) -> bytes:
    ready, _, _ = select.select([stream], [], [], timeout)
    assert ready, f"no output line within {timeout:.0f} s while the input was still open"
    return stream.readline()


@pytest.mark.newest_only  # the command's streaming, in its own process; its decoding is the tests' above
def test_a_pipe_gets_each_translation_before_its_input_closes(translation_model):
    """``translate`` in its own process on a pipe that stays open: each line's translation comes back
    while the command still waits for more input."""
    command = [sys.executable, "-m", "vanilla_transformer.cli", "translate"]
    command += ["--model", str(translation_model), "--beams", "1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    try:
        process.stdin.write(b"a wonderful film\n")
        process.stdin.flush()
        first = _read_line(process.stdout, timeout=120)
        process.stdin.write(b"\n")
        process.stdin.flush()
        assert _read_line(process.stdout, timeout=30) == b"\n"  # a blank line keeps its place
        process.stdin.close()
        assert process.wait(timeout=60) == 0, process.stderr.read().decode()
    finally:
        process.kill()
    model = VanillaTransformerForConditionalGeneration.from_pretrained(translation_model).eval()
    expected = translate(
        model, AutoTokenizer.from_pretrained(translation_model), ["a wonderful film"], num_beams=1
    )
    assert first.decode() == f"{expected[0]}\n"


# -- blank and over-long lines --------------------------------------------------------------------------------


def _translate(folder, lines, tmp_path) -> list[str]:
    source, output = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    files = ["--input", str(source), "--output", str(output), "--force"]  # each call rewrites out.txt
    main(["translate", "--model", str(folder), *files, "--beams", "1"])
    return output.read_text(encoding="utf-8").split("\n")[:-1]


def test_empty_lines_translate_to_empty_lines_and_keep_alignment(translation_model, tmp_path):
    lines = ["a wonderful film", "", "great acting", "   "]
    out = _translate(translation_model, lines, tmp_path)
    assert len(out) == len(lines)
    assert out[1] == "" and out[3] == ""
    # The real lines get the translations they get without the blank ones (non-empty: the model translates
    # them), each on its own line.
    alone = _translate(translation_model, [lines[0], lines[2]], tmp_path)
    assert [out[0], out[2]] == alone and "" not in alone


def test_empty_string_through_the_pipeline_gives_an_empty_translation(translation_model):
    translate = pipeline("vanilla-translation", model=str(translation_model))
    assert translate("") == [{"translation_text": ""}]
    results = translate(["", "a wonderful film"], num_beams=1, max_new_tokens=3)
    alone = translate("a wonderful film", num_beams=1, max_new_tokens=3)
    assert results == [{"translation_text": ""}, *alone] and alone[0]["translation_text"] != ""


def test_an_over_long_line_is_truncated_with_a_warning_that_names_the_limit(tmp_path, tokenizer):
    """Not the shared run's model: the test tokenizer's 64 positions, and an untrained model whose output
    follows its input."""
    folder = tmp_path / "model"
    VanillaTransformerForConditionalGeneration(tiny_config()).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    long_line = " ".join(CORPUS[:4] * 6)  # 157 tokens: far beyond the tokenizer's model_max_length of 64
    with CaptureLogger(long_inputs.logger) as captured:
        out = _translate(folder, [long_line, "great acting"], tmp_path)
    assert len(out) == 2
    assert captured.out.startswith("Cut line 1 to its first 64 tokens, the most this model reads")
    # The over-long line's translation is that of its first 63 tokens (+ </s>), given as a line of its own;
    # its last 63 tokens translate otherwise (the untrained model's output follows its input).
    head, tail = _translate(
        folder, [_prefix(tokenizer, long_line, 64), _suffix(tokenizer, long_line, 64)], tmp_path
    )
    assert out[0] == head != tail

    config = tiny_config(max_position_embeddings=32)
    model = VanillaTransformerForConditionalGeneration(config).eval()
    with torch.no_grad():  # weights large enough that the output follows the input (at init it says "film")
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.5)
    translate = pipeline("vanilla-translation", model=model, tokenizer=copy.deepcopy(tokenizer))
    with CaptureLogger(long_inputs.logger) as captured:  # the pipeline follows long_inputs' policy too
        truncated = translate(long_line, num_beams=1, max_new_tokens=2)
    assert "to its first 32 tokens, the most this model reads (max_position_embeddings)" in captured.out
    with CaptureLogger(long_inputs.logger) as captured:
        assert truncated == translate(_prefix(tokenizer, long_line, 32), num_beams=1, max_new_tokens=2)
    assert captured.out == ""  # the prefix fits: nothing cut, nothing said
    assert truncated != translate(_suffix(tokenizer, long_line, 32), num_beams=1, max_new_tokens=2)


def _prefix(tokenizer, text: str, tokens: int) -> str:
    """The text of ``text``'s first ``tokens - 1`` tokens, which the tokenizer encodes back to exactly those
    tokens and </s>: the part of ``text`` a model reading ``tokens`` positions sees."""
    ids = tokenizer(text)["input_ids"][: tokens - 1]
    prefix = tokenizer.decode(ids)
    assert tokenizer(prefix)["input_ids"] == [*ids, tokenizer.eos_token_id]
    return prefix


def _suffix(tokenizer, text: str, tokens: int) -> str:
    """The text of ``text``'s last ``tokens - 1`` tokens (before its </s>)."""
    return tokenizer.decode(tokenizer(text)["input_ids"][-tokens:-1])


# -- data files of a translation recipe and of a classification recipe ----------------------------------

TRANSLATION_ROW = {"translation": {"de": "Ein Hund läuft", "en": "A dog runs"}}
CLASSIFICATION_ROW = {"text": "a wonderful film", "label": 1}


def _line(row: dict) -> bytes:
    return json.dumps(row, ensure_ascii=False).encode() + b"\n"


def _train(task: str, path, tmp_path) -> str:
    """The message ``train`` (``classify train``) exits with on a recipe whose train_file is ``path``."""
    if task == "translation":
        argv = ["train", "--set", "dataset=json", "--set", "source_lang=de", "--set", "target_lang=en"]
        argv += ["--set", f"output_dir={tmp_path / 'run'}"]
    else:
        argv = ["classify", "train", "--set", "dataset=json", "--set", "report_to=none"]
        argv += ["--set", f"output_dir={tmp_path / 'run'}", "--set", "test_file=null"]
    with pytest.raises(SystemExit) as raised:
        main([*argv, "--set", f"train_file={path}"])
    assert not (tmp_path / "run").exists()
    return str(raised.value)


@pytest.mark.parametrize("task", ["translation", "classification"])
def test_an_invalid_json_line_names_the_file_line_and_column(task, tmp_path):
    good = _line(TRANSLATION_ROW if task == "translation" else CLASSIFICATION_ROW)
    broken = good.rstrip(b"\n")[:-1]  # the closing brace lost
    path = tmp_path / "train.jsonl"
    path.write_bytes(good + b"\n" + broken + b"\n" + good)
    column = len(broken.decode()) + 1
    expected = f"error: {path} line 3: not valid JSON (Expecting ',' delimiter at column {column})"
    assert _train(task, path, tmp_path) == expected


@pytest.mark.parametrize("task", ["translation", "classification"])
def test_a_line_that_is_not_utf8_names_the_file_line_and_column(task, tmp_path):
    row = (
        {"translation": {"de": "Ein Café", "en": "A café"}}
        if task == "translation"
        else {"text": "café", "label": 0}
    )
    latin1 = json.dumps(row, ensure_ascii=False).encode("latin-1") + b"\n"
    good = _line(TRANSLATION_ROW if task == "translation" else CLASSIFICATION_ROW)
    path = tmp_path / "train.jsonl.gz"
    path.write_bytes(gzip.compress(good * 2 + latin1))
    column = latin1.index("é".encode("latin-1")) + 1  # the bytes before it are ASCII: one a character
    expected = f"error: {path} line 3: not valid UTF-8 (byte 0xe9 at column {column})"
    assert _train(task, path, tmp_path) == expected


@pytest.mark.parametrize("task", ["translation", "classification"])
def test_a_gz_that_is_not_gzip_or_is_cut_short_names_the_file(task, tmp_path):
    good = _line(TRANSLATION_ROW if task == "translation" else CLASSIFICATION_ROW)
    path = tmp_path / "train.jsonl.gz"
    path.write_bytes(good * 3)  # plain text under a .gz name
    assert _train(task, path, tmp_path) == f"error: {path} is named .gz but is not gzip"
    path.write_bytes(gzip.compress(good * 50)[:-30])  # a download cut short
    assert _train(task, path, tmp_path).startswith(f"error: {path} is a damaged or cut-short gzip file (")


@pytest.mark.parametrize("task", ["translation", "classification"])
@pytest.mark.parametrize("content", [b"", b"\n  \n"])
def test_an_empty_file_names_the_file(task, content, tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_bytes(content)
    assert _train(task, path, tmp_path) == f"error: {path} is empty: no rows to read."


@pytest.mark.parametrize(
    ("task", "row", "problem"),
    [
        ("translation", {"translation": {"de": "Hallo"}}, "language key 'en' is missing; the row has ['de']"),
        ("translation", {"translation": {"de": "Hallo", "en": None}}, "language key 'en' is None, not text"),
        (
            "classification",
            {"text": "a film", "label": "pos"},
            "'label' is 'pos'; labels must be integers, the class ids 0, 1, ...: map each class to its id "
            "and name the classes with `class_names`",
        ),
        (
            "classification",
            {"review": "a film", "label": 1},
            "column 'text' is missing; the row has ['label', 'review']",
        ),
        ("classification", [1, 2], "'[1, 2]' is not a JSON object (JSON Lines: one object a line)"),
    ],
)
def test_a_row_without_its_columns_names_the_file_and_line(task, row, problem, tmp_path):
    good = _line(TRANSLATION_ROW if task == "translation" else CLASSIFICATION_ROW)
    path = tmp_path / "train.jsonl"
    path.write_bytes(good + _line(row))
    assert _train(task, path, tmp_path) == f"error: {path} line 2: {problem}"
