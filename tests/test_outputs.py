"""Outputs never destroy: every command that writes checks its output before any work. An input, a folder
around or inside one, a training run, a model or a folder holding anything else is refused with one line
naming the path, and every file stays byte for byte; `--force` replaces only the same command's own earlier
output (its marker). The inference commands' numeric options are refused where they enter, naming the option."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from vanilla_transformer.cli import main
from vanilla_transformer.outputs import MARKER

# A command's own orchestration and I/O (pathlib and renames): run once, on the newest releases.
pytestmark = pytest.mark.newest_only

SOURCE = "a wonderful film\ngreat acting and a boring story\n"


@pytest.fixture
def run(trained_run, tmp_path) -> Path:
    """A copy of the shared tiny run (conftest's ``trained_run``), as training leaves it: checkpoints 50, 100
    and 150, the final model with its card, results.json."""
    return shutil.copytree(trained_run, tmp_path / "run")


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every file's bytes and every folder (None) under ``folder``, hidden ones included."""
    return {
        str(path.relative_to(folder)): path.read_bytes() if path.is_file() else None
        for path in sorted(folder.rglob("*"))
    }


def refused(argv: list[str]) -> str:
    """What the user sees when the command is refused: its one line (the CLI exits with status 1)."""
    with pytest.raises(SystemExit) as raised:
        main(argv)
    message = raised.value.code
    assert isinstance(message, str) and message.startswith("error: ") and "\n" not in message, message
    return message


# -- average ------------------------------------------------------------------------------------------------

AVERAGE_OVER_INPUTS = {
    "run/checkpoints/checkpoint-150": "is an input of this command",
    "run/checkpoints/checkpoint-150/averaged": "is inside the input",
    "run": "holds the input",
    "run/checkpoints": "holds the input",
    "run/checkpoints/averaged": "would go among the checkpoints in",
    "run/checkpoints/checkpoint-200": "would go among the checkpoints in",
    "run/model": "holds a model (config.json, model.safetensors) that `average` did not write",
    "run/model/averaged": "would go inside the model folder",
}


@pytest.mark.parametrize("output", list(AVERAGE_OVER_INPUTS))
def test_average_never_writes_over_around_or_inside_its_inputs_even_with_force(run, output):
    tmp = run.parent
    before = snapshot(tmp)
    checkpoints = [str(run / "checkpoints" / name) for name in ("checkpoint-100", "checkpoint-150")]
    message = refused(["average", *checkpoints, "--output", str(tmp / output), "--force"])
    assert message.startswith(f"error: {tmp / output} {AVERAGE_OVER_INPUTS[output]}"), message
    assert snapshot(tmp) == before  # nothing written, nothing left behind


def test_average_last_refuses_the_run_folder_itself(run):
    before = snapshot(run)
    message = refused(["average", str(run), "--last", "2", "--output", str(run)])
    assert message.startswith(f"error: {run} holds the input {run}/checkpoints/checkpoint-100"), message
    assert snapshot(run) == before


def test_force_replaces_only_the_commands_own_earlier_output(run, capsys):
    """`average --last 2` into the run folder works and leaves its marker; again: refused without --force;
    --force replaces it (swapped in by rename, nothing left beside it); a file the user put there, or another
    command's --force, is refused."""
    output = run / "averaged"
    before, names = snapshot(run), sorted(path.name for path in run.iterdir())
    main(["average", str(run), "--last", "2", "--output", str(output)])
    assert capsys.readouterr().out == f"Averaged 2 checkpoints into {output}\n"
    marker = json.loads((output / MARKER).read_text())
    assert marker["command"] == "average" and "model.safetensors" in marker["files"]
    after = snapshot(run)
    assert {name: data for name, data in after.items() if not name.startswith("averaged")} == before

    message = refused(["average", str(run), "--last", "1", "--output", str(output)])
    assert re.fullmatch(
        rf"error: {output} holds an earlier `average` output \(written \S+\); pass --force to replace it\.",
        message,
    )
    assert snapshot(run) == after

    main(["average", str(run), "--last", "1", "--output", str(output), "--force"])
    last = load_file(run / "checkpoints" / "checkpoint-150" / "model.safetensors")
    replaced = load_file(output / "model.safetensors")
    assert replaced.keys() == last.keys() and all(torch.equal(replaced[k], last[k]) for k in last)
    assert sorted(path.name for path in run.iterdir()) == sorted([*names, "averaged"])

    (output / "notes.txt").write_text("my notes on this average")
    kept = snapshot(run)
    message = refused(["average", str(run), "--last", "2", "--output", str(output), "--force"])
    assert message == (
        f"error: {output} holds files `average` did not write (notes.txt); move them out or choose another "
        "--output."
    )
    message = refused(["export-onnx", "--model", str(run / "model"), "--output", str(output), "--force"])
    assert message == f"error: {output} was written by `average`, not `export-onnx`; choose another --output."
    assert snapshot(run) == kept


@pytest.mark.parametrize("command", ["average", "export-onnx", "attention"])
def test_a_folder_the_command_did_not_write_is_refused_even_with_force(
    run, tmp_path, translation_model, command
):
    """A user's own non-empty folder (no marker) is never replaced; a run's folder names what makes it one."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("months of work")
    model = str(translation_model)
    argv = {
        "average": ["average", model],
        "export-onnx": ["export-onnx", "--model", model],
        "attention": ["attention", "--model", model, "--text", "a wonderful film"],
    }[command]
    before = snapshot(tmp_path)
    assert refused([*argv, "--output", str(mine), "--force"]) == (
        f"error: {mine} is not empty (it holds thesis.tex) and was not written by `{command}`; choose another "
        f"--output (--force replaces only an earlier `{command}` output)."
    )
    assert refused([*argv, "--output", str(run), "--force"]) == (
        f"error: {run} holds a training run (checkpoints/); choose another --output (--force replaces only "
        f"an earlier `{command}` output)."
    )
    assert snapshot(tmp_path) == before


def test_export_onnx_and_attention_never_write_into_their_model_folder(run):
    model = run / "model"
    before = snapshot(run)
    for argv in (
        ["export-onnx", "--model", str(model)],
        ["attention", "--model", str(model), "--text", "a wonderful film"],
    ):
        assert refused([*argv, "--output", str(model), "--force"]).startswith(
            f"error: {model} is an input of this command"
        )
        assert refused([*argv, "--output", str(model / "maps")]).startswith(
            f"error: {model / 'maps'} is inside the input"
        )
    assert snapshot(run) == before


def test_attention_creates_a_missing_output_folder(run, tmp_path, capsys):
    output = tmp_path / "new" / "maps"
    model, text = str(run / "model"), "a wonderful film"
    main(["attention", "--model", model, "--text", text, "--target", text, "--output", str(output)])
    written = {"cross_attention.png", "decoder_attention.png", "encoder_attention.png"}
    assert {path.name for path in output.iterdir()} == written | {MARKER}
    assert capsys.readouterr().out.count(f"Wrote {output}/") == 3
    assert sorted(path.name for path in (tmp_path / "new").iterdir()) == ["maps"]  # no staging left


# -- export-ct2: the case that deleted a whole run -----------------------------------------------------------


def test_export_ct2_force_onto_a_run_folder_is_refused_and_deletes_nothing(run):
    """As a user runs it, in a fresh process: exit status 1, one line on stderr, the run intact."""
    pytest.importorskip("ctranslate2", reason='the optional CTranslate2 engine: pip install ".[ctranslate2]"')
    before = snapshot(run)
    argv = ["export-ct2", "--model", str(run / "model"), "--output", str(run), "--force"]
    result = subprocess.run(
        [sys.executable, "-m", "vanilla_transformer.cli", *argv], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 1
    assert result.stderr == (f"error: {run} holds the input {run / 'model'}; choose another --output.\n"), (
        result.stderr
    )
    assert snapshot(run) == before


# -- translate and evaluate: single files ---------------------------------------------------------------------


def test_translate_never_writes_over_its_input_or_a_model_file(run, tmp_path):
    model = run / "model"
    source = tmp_path / "source.txt"
    source.write_text(SOURCE, encoding="utf-8")
    before = snapshot(tmp_path)
    translate = ["translate", "--model", str(model), "--input", str(source), "--beams", "1", "--force"]
    assert refused([*translate, "--output", str(source)]) == (
        f"error: {source} is an input of this command; choose another --output."
    )
    for name in ("config.json", "model.safetensors", "tokenizer.json", "README.md"):
        assert refused([*translate, "--output", str(model / name)]) == (
            f"error: {model / name} is a file of the model or run in {model}; choose another --output."
        )
    assert refused([*translate, "--output", str(run / "results.json")]).startswith(
        f"error: {run / 'results.json'} is a file of the model or run"
    )
    assert (
        refused([*translate, "--output", str(model)]) == f"error: {model} is a folder; --output names a file."
    )
    assert snapshot(tmp_path) == before


def test_translate_replaces_an_existing_file_only_with_force(run, tmp_path):
    source, output = tmp_path / "source.txt", tmp_path / "out.txt"
    source.write_text(SOURCE, encoding="utf-8")
    output.write_text("my hand-corrected translations\n", encoding="utf-8")
    translate = ["translate", "--model", str(run / "model"), "--input", str(source), "--beams", "1"]
    assert refused([*translate, "--output", str(output)]) == (
        f"error: {output} already exists; pass --force to replace it."
    )
    assert output.read_text(encoding="utf-8") == "my hand-corrected translations\n"
    main([*translate, "--output", str(output), "--force"])
    assert len(output.read_text(encoding="utf-8").splitlines()) == 2
    nested = tmp_path / "new" / "folder" / "out.txt"  # missing folders are made
    main([*translate, "--output", str(nested)])
    assert nested.read_text(encoding="utf-8") == output.read_text(encoding="utf-8")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["new", "out.txt", "run", "source.txt"]


def test_an_output_that_cannot_be_written_is_refused_before_the_model_is_read(tmp_path):
    """A file where a folder must be: one line about the output, not about the (missing) model, so nothing
    was loaded or translated first."""
    blocker = tmp_path / "results"
    blocker.write_text("a file, not a folder")
    missing_model = str(tmp_path / "no-such-model")
    source = tmp_path / "source.txt"
    source.write_text(SOURCE, encoding="utf-8")
    expected = f"error: Cannot write {blocker / 'out.txt'}: {blocker} is a file, not a folder."
    translate = ["translate", "--model", missing_model, "--input", str(source)]
    assert refused([*translate, "--output", str(blocker / "out.txt")]) == expected
    evaluate = ["evaluate", "--model", missing_model, "--set=synthetic_eval_size=2"]
    assert refused([*evaluate, "--output", str(blocker / "out.txt")]) == expected
    assert refused(["average", missing_model, "--output", str(blocker / "out.txt")]) == expected


TINY_DATA = ["--set=synthetic_train_size=8", "--set=synthetic_eval_size=2"]


def test_evaluate_writes_into_a_missing_folder_and_replaces_its_files_only_with_force(run, tmp_path, capsys):
    model = run / "model"
    output = tmp_path / "new" / "hypotheses.txt"
    evaluate = ["evaluate", "--model", str(model), *TINY_DATA]
    main([*evaluate, "--output", str(output)])
    assert len(output.read_text(encoding="utf-8").splitlines()) == 2
    scores = output.with_name("test_scores.json")
    assert json.loads(scores.read_text())["sentences"] == 2
    assert f"Hypotheses written to {output}, scores to {scores}" in capsys.readouterr().out

    before = snapshot(tmp_path)
    assert refused([*evaluate, "--output", str(output)]) == (
        f"error: {output} already exists; pass --force to replace it."
    )
    output.unlink()  # the scores file beside it is checked too, before any work
    assert refused([*evaluate, "--output", str(output)]) == (
        f"error: {scores} already exists; pass --force to replace it."
    )
    assert not output.exists()
    main([*evaluate, "--output", str(output), "--force"])
    assert output.exists() and scores.read_bytes() == before[str(scores.relative_to(tmp_path))]

    assert refused([*evaluate, "--output", str(model / "config.json"), "--force"]) == (
        f"error: {model / 'config.json'} is a file of the model or run in {model}; choose another --output."
    )


# -- numeric options ------------------------------------------------------------------------------------------

BAD_VALUES = [
    (["translate", "--batch-size", "-1"], "--batch-size", "must be a positive integer, got -1"),
    (["translate", "--batch-size", "0"], "--batch-size", "must be a positive integer, got 0"),
    (["translate", "--batch-size", "two"], "--batch-size", "must be a positive integer, got 'two'"),
    (["translate", "--beams", "0"], "--beams", "must be a positive integer, got 0"),
    (["translate", "--length-penalty", "nan"], "--length-penalty", "must be a finite number, got 'nan'"),
    (["evaluate", "--beams", "-2"], "--beams", "must be a positive integer, got -2"),
    (["evaluate", "--length-penalty", "inf"], "--length-penalty", "must be a finite number, got 'inf'"),
    (["average", "run", "--output", "out", "--last", "0"], "--last", "must be a positive integer, got 0"),
    (["demo", "--port", "0"], "--port", "must be a positive integer, got 0"),
    (["demo", "--port", "65536"], "--port", "must be a port from 1 to 65535, got 65536"),
    (["ablate", "--minutes-per-row", "0"], "--minutes-per-row", "must be above 0, got '0'"),
]


@pytest.mark.parametrize(("argv", "option", "why"), BAD_VALUES, ids=[" ".join(v[0]) for v in BAD_VALUES])
def test_a_bad_number_is_refused_where_it_enters_naming_the_option(argv, option, why, capsys, tmp_path):
    command = argv[0]
    needed = {"translate": ["--model", str(tmp_path)], "evaluate": ["--model", str(tmp_path)]}
    needed["demo"] = needed["translate"]
    with pytest.raises(SystemExit) as raised:
        main([*argv, *needed.get(command, [])])
    assert raised.value.code == 2  # argparse's status for a bad command line
    assert capsys.readouterr().err == f"vanilla-transformer {command}: error: argument {option}: {why}\n"
    assert list(tmp_path.iterdir()) == []
