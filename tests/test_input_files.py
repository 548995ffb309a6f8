"""Issue 56: every input named where it enters. Each case runs the command as a user types it and asserts the
exit status, the one line it prints and that nothing the user had is changed: a CSV row with an unquoted
comma, labels that do not start at 0, line separators inside a sentence, a parquet file that is not one,
two checkpoints of different runs averaged, and a misspelt setting (named with the closest ones)."""

import csv
import gzip
import json
import shutil

import pytest
from conftest import CORPUS
from test_input_checks import refused

from vanilla_transformer.cli import main
from vanilla_transformer.data.files import read_lines
from vanilla_transformer.data.translation import load_translation_splits

TINY = [
    "--set=vocab_size=300",
    "--set=max_steps=2",
    "--set=report_to=none",
    "--set=mixed_precision=no",
    "--set=model.d_model=16",
    "--set=model.d_ff=32",
    "--set=model.num_heads=2",
    "--set=model.num_encoder_layers=1",
    "--set=model.num_decoder_layers=1",
]


def snapshot(folder) -> dict:
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def _pairs_csv(path, rows: list[list[str]]):
    with open(path, "w", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerows([["en", "de"], *rows])
    return path


def test_a_csv_row_with_an_unquoted_comma_names_its_line_and_the_fix(tmp_path):
    rows = [[CORPUS[i % len(CORPUS)], f"satz {i}"] for i in range(12)]
    data = _pairs_csv(tmp_path / "pairs.csv", rows)
    lines = data.read_text(encoding="utf-8").splitlines()
    lines[8] = "a cat, a dog,eine katze"  # line 9: three fields, the comma unquoted
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    before = snapshot(tmp_path)
    message = refused(
        [
            "train",
            *TINY,
            "--set=dataset=csv",
            f"--set=train_file={data}",
            f"--set=output_dir={tmp_path / 'run'}",
        ]
    )
    assert message == (
        f"error: {data} line 9: 3 fields where the header line has 2 (en, de): a text holding a comma must be "
        'quoted ("..."), or the file written tab-separated.'
    )
    assert snapshot(tmp_path) == before and not (tmp_path / "run").exists()


def test_an_open_quote_in_a_csv_file_names_its_line(tmp_path):
    data = _pairs_csv(tmp_path / "pairs.csv", [["a man", "ein mann"]] * 4)
    with open(data, "a", encoding="utf-8") as handle:
        handle.write('"a quote that never closes,ein satz\nanother,line\n')
    message = refused(
        [
            "train",
            *TINY,
            "--set=dataset=csv",
            f"--set=train_file={data}",
            f"--set=output_dir={tmp_path / 'run'}",
        ]
    )
    assert message.startswith(f"error: {data} line 7: ") and "close its quote" in message


def test_a_file_that_is_not_parquet_is_named(tmp_path):
    data = tmp_path / "pairs.parquet"
    data.write_text("en,de\na man,ein mann\n", encoding="utf-8")
    message = refused(
        [
            "train",
            *TINY,
            "--set=dataset=parquet",
            f"--set=train_file={data}",
            f"--set=output_dir={tmp_path / 'r'}",
        ]
    )
    assert (
        message
        == f"error: {data} is not a parquet file (parquet files begin and end with PAR1). Write it again."
    )


def _reviews(path, labels):
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        for index, label in enumerate(labels):
            handle.write(
                json.dumps({"text": f"{CORPUS[index % len(CORPUS)]} {index}", "label": label}) + "\n"
            )
    return path


def test_labels_one_and_two_are_refused_with_the_renumbering(tmp_path):
    """Labels 1/2 gave a model of three classes, LABEL_0 never seen, and accuracy 0.5 without a word."""
    train = _reviews(tmp_path / "train.jsonl.gz", [1, 2] * 8)
    before = snapshot(tmp_path)
    message = refused(
        [
            "classify",
            "train",
            *TINY[:1],
            "--set=report_to=none",
            "--set=max_length=16",
            "--set=validation_size=2",
            "--set=model.d_model=16",
            "--set=model.d_ff=32",
            "--set=model.num_encoder_layers=1",
            f"--set=train_file={train}",
            "--set=test_file=null",
            f"--set=output_dir={tmp_path / 'run'}",
        ]
    )
    assert message == (
        f"error: {train}: the labels (`label`: 1, 2) leave class 0 without an example, so the model would learn "
        "3 classes and never see that one. Labels are class ids counted from 0: renumber them from 0 "
        "(1 -> 0, 2 -> 1)."
    )
    assert snapshot(tmp_path) == before and not (tmp_path / "run").exists()


def test_text_labels_are_refused_with_what_to_do(tmp_path):
    train = tmp_path / "train.jsonl"
    train.write_text(
        "".join(json.dumps({"text": f"review {i}", "label": ["neg", "pos"][i % 2]}) + "\n" for i in range(8)),
        encoding="utf-8",
    )
    message = refused(
        [
            "classify",
            "train",
            *TINY[:2],
            f"--set=train_file={train}",
            "--set=test_file=null",
            f"--set=output_dir={tmp_path / 'run'}",
        ]
    )
    assert message == (
        f"error: {train} line 1: 'label' is 'neg'; labels must be integers, the class ids 0, 1, ...: map each "
        "class to its id and name the classes with `class_names`"
    )


SEPARATORS = ["\u2028", "\u2029", "\u0085", "\x1c", "\x1d", "\x1e", "\x0b", "\x0c", "\r"]


@pytest.mark.parametrize("separator", SEPARATORS, ids=[f"U+{ord(s):04X}" for s in SEPARATORS])
def test_a_line_separator_inside_a_sentence_keeps_the_pairs_aligned(tmp_path, separator):
    """A 10-line pair of parallel files with a separator inside line 4 was read as 11 pairs, every pair after
    it misaligned. Lines end at "\\n" only, in every reader of line-aligned text."""
    source = [f"satz {i}" for i in range(10)]
    target = [f"sentence {i}" for i in range(10)]
    source[3] = f"erster teil{separator}zweiter teil"
    for lang, lines in (("de", source), ("en", target)):
        (tmp_path / f"train.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8", newline="")
    (pairs,) = load_translation_splits("text", "de", "en", files={"train": str(tmp_path / "train")}).values()
    assert len(pairs) == 10 and pairs[3] == {"source": source[3], "target": "sentence 3"}
    assert pairs[9] == {"source": "satz 9", "target": "sentence 9"}
    assert read_lines(tmp_path / "train.de") == source


def test_translate_writes_one_line_for_each_line_with_a_separator_inside(translation_model, tmp_path):
    lines = [f"a man{separator}rides a horse" for separator in SEPARATORS] + ["a woman sings"]
    source = tmp_path / "in.txt"
    source.write_bytes("\n".join(lines).encode("utf-8") + b"\n")
    output = tmp_path / "out.txt"
    main(
        [
            "translate",
            "--model",
            str(translation_model),
            "--input",
            str(source),
            "--output",
            str(output),
            "--beams",
            "1",
        ]
    )
    written = output.read_bytes()
    assert written.count(b"\n") == len(lines)
    assert (
        read_lines(output) == output.read_text(encoding="utf-8").splitlines()
    )  # no reader splits it elsewhere


def test_the_tokenizer_reads_a_line_separator_as_a_space(tokenizer):
    """Training, evaluation and translation read a separator inside a line the same way: as a space."""
    from vanilla_transformer.tokenization import train_bpe_tokenizer

    trained = train_bpe_tokenizer(CORPUS * 4, vocab_size=300)
    for separator in SEPARATORS:
        assert trained(f"a man{separator}rides")["input_ids"] == trained("a man rides")["input_ids"]


def test_checkpoints_of_two_runs_are_not_averaged(trained_run, tmp_path):
    """Same shapes, same config: only the runs' settings show that the average would mean nothing."""
    checkpoint = trained_run / "checkpoints" / "checkpoint-100"
    other = shutil.copytree(checkpoint, tmp_path / "other-run")
    settings = json.loads((other / "run_settings.json").read_text(encoding="utf-8"))
    (other / "run_settings.json").write_text(
        json.dumps({**settings, "seed": settings["seed"] + 1}), encoding="utf-8"
    )
    message = refused(["average", str(checkpoint), str(other), "--output", str(tmp_path / "out")])
    assert message == (
        f"error: {other} comes from another run than {checkpoint}: its run_settings.json has seed "
        f"{settings['seed'] + 1}, not {settings['seed']}. Average checkpoints of one run."
    )
    config = json.loads((other / "config.json").read_text(encoding="utf-8"))
    (other / "run_settings.json").unlink()
    (other / "config.json").write_text(
        json.dumps({**config, "position_encoding": "learned"}), encoding="utf-8"
    )
    message = refused(["average", str(checkpoint), str(other), "--output", str(tmp_path / "out")])
    assert message.startswith(f"error: {other} is not a checkpoint of the same model as {checkpoint}: ")
    assert not (tmp_path / "out").exists()


def test_a_misspelt_setting_names_the_closest_not_every_setting(tmp_path):
    message = refused(["train", *TINY, "--set=warmup_step=10", f"--set=output_dir={tmp_path / 'run'}"])
    assert (
        message
        == "error: Unknown setting(s) in --set: warmup_step (did you mean warmup_steps or max_steps?)."
    )
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("separators", [("\u2028", "\u0085")], ids=["U+2028 and U+0085"])
def test_train_reads_as_many_pairs_as_lines_with_separators_inside(tmp_path, capsys, separators):
    """The `train` command, not only the reader: parallel .de/.en files of 10 lines, a U+2028 inside line 4
    of one and a U+0085 inside line 7 of the other, train on 10 pairs (they were read as 11 and 12, every
    pair after the first separator misaligned)."""
    source = [f"ein mann fährt rad nummer {i}" for i in range(10)]
    target = [f"a man rides a bike number {i}" for i in range(10)]
    source[3] = f"erster teil{separators[0]}zweiter teil"
    target[6] = f"first part{separators[1]}second part"
    data = tmp_path / "data"
    data.mkdir()
    for lang, lines in (("de", source), ("en", target)):
        (data / f"train.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8", newline="")
    before = snapshot(data)
    main(
        [
            "train",
            *TINY[:1],
            "--set=max_steps=1",
            *TINY[2:],
            "--set=dataset=text",
            f"--set=train_file={data / 'train'}",
            "--set=source_lang=de",
            "--set=target_lang=en",
            f"--set=output_dir={tmp_path / 'run'}",
        ]
    )
    out = capsys.readouterr().out
    assert "; 10 training pairs in " in out, out
    assert json.loads(out.splitlines()[-1])["updates"] == 1
    assert snapshot(data) == before


# -- weak messages made one line that says what to do ---------------------------------------------------------


def _labelled(path, labels) -> str:
    """A JSON Lines file of labelled texts, ``labels`` written as given (JSON's numbers, strings, booleans)."""
    rows = [{"text": f"{CORPUS[i % len(CORPUS)]} {i}", "label": label} for i, label in enumerate(labels)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _labelled_csv(path, labels: list[str]) -> str:
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerows([["text", "label"], *[[f"{CORPUS[i % 4]} {i}", x] for i, x in enumerate(labels)]])
    return path


def _empty_parquet(path, columns):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({name: pa.array([], pa.string()) for name in columns}), path)
    return path


def _blank_first_line(path):
    rows = "".join(f"{CORPUS[i % 4]} {i},satz {i}\n" for i in range(8))
    path.write_text("\nen,de\n" + rows, encoding="utf-8")
    return path


GOOD = [0, 1] * 5  # ten good labels: the bad one is the 11th row (line 11 of a JSON Lines file)
WEAK_MESSAGES = {  # id -> (task, how the file is made, its format, --set extras, the line after "error: {file}")
    "a zero-row parquet file (classification)": (
        "classify",
        lambda path: _empty_parquet(path.with_suffix(".parquet"), ["text", "label"]),
        "parquet",
        [],
        " is empty: its columns (text, label) hold no rows. Write the rows into it, or name another file.",
    ),
    "a zero-row parquet file (translation)": (
        "train",
        lambda path: _empty_parquet(path.with_suffix(".parquet"), ["en", "de"]),
        "parquet",
        [],
        " is empty: its columns (en, de) hold no rows. Write the rows into it, or name another file.",
    ),
    "a CSV file whose first line is blank": (
        "train",
        lambda path: _blank_first_line(path.with_suffix(".csv")),
        "csv",
        [],
        " line 1 is blank: a CSV file's first line names its columns (e.g. text,label or en,de). Delete the "
        "blank line(s) above the header, or write one.",
    ),
    "a CSV label of 20 digits": (
        "classify",
        lambda path: _labelled_csv(
            path.with_suffix(".csv"), [str(x) for x in GOOD] + ["12345678901234567890"]
        ),
        "csv",
        [],
        ": row 10: 'label' is 12345678901234567890, 20 digits: no class id is that large. Labels are the "
        "class ids 0, 1, ..., one per class: renumber the classes from 0.",
    ),
    "a JSON label of 21 digits": (  # a TypeError traceback from the label count before
        "classify",
        lambda path: _labelled(path, [*GOOD, 10**20]),
        "json",
        [],
        " line 11: 'label' is 100000000000000000000, 21 digits: no class id is that large. Labels are the "
        "class ids 0, 1, ..., one per class: renumber the classes from 0",
    ),
    "a JSON label 1.0": (
        "classify",
        lambda path: _labelled(path, [*GOOD, 1.0]),
        "json",
        [],
        " line 11: 'label' is 1.0: write class ids as whole numbers (1, not 1.0)",
    ),
    "a JSON label 0.5": (
        "classify",
        lambda path: _labelled(path, [*GOOD, 0.5]),
        "json",
        [],
        " line 11: 'label' is 0.5, not a class id: labels are the class ids 0, 1, ... (a score or a "
        "probability is none: turn the scores into classes first, and name them with `class_names`)",
    ),
    "a CSV label 1.0": (
        "classify",
        lambda path: _labelled_csv(path.with_suffix(".csv"), [str(x) for x in GOOD] + ["1.0"]),
        "csv",
        [],
        ": row 10: 'label' is 1.0: write class ids as whole numbers (1, not 1.0).",
    ),
    "a JSON label written as text": (
        "classify",
        lambda path: _labelled(path, [*GOOD, "1"]),
        "json",
        [],
        " line 11: 'label' is '1', a number written as text: write it without quotes (1)",
    ),
    "a JSON label true": (
        "classify",
        lambda path: _labelled(path, [*GOOD, True]),
        "json",
        [],
        " line 11: 'label' is true: write class ids as integers (1, not true)",
    ),
    "a negative label": (
        "classify",
        lambda path: _labelled(path, [*GOOD, -1]),
        "json",
        [],
        " line 11: 'label' is -1; labels are the class ids 0, 1, ...: drop the rows that have no class (-1 "
        "often marks them; pre-training reads such texts through `unlabelled_files`), or renumber the "
        "classes from 0",
    ),
    "class_names shorter than the labels": (
        "classify",
        lambda path: _labelled(path, [0, 1, 2] * 4),
        "json",
        ["--set=class_names=[NEGATIVE, POSITIVE]"],
        " line 3: 'label' is 2, outside `class_names` (2 names: labels 0 to 1): name every class in "
        "`class_names`, or correct the label",
    ),
}


@pytest.mark.parametrize("case", list(WEAK_MESSAGES))
def test_a_weak_message_is_one_line_that_says_what_to_do(tmp_path, case):
    command, make, dataset, extra, said = WEAK_MESSAGES[case]
    data = make(tmp_path / "train.jsonl")
    before = snapshot(tmp_path)
    settings = [
        f"--set=dataset={dataset}",
        f"--set=train_file={data}",
        f"--set=output_dir={tmp_path / 'run'}",
    ]
    if command == "classify":  # the encoder alone: no decoder layers to set
        settings = ["train", *settings, "--set=test_file=null", "--set=validation_size=2", *extra, *TINY[:-1]]
    else:
        settings += TINY
    message = refused([command, *settings])
    assert message == f"error: {data}{said}"
    assert snapshot(tmp_path) == before and not (tmp_path / "run").exists()
