"""The `evaluate`, `translate` and `average` commands end to end on the shared tiny run that conftest's
``trained_run`` trains, and the two BLEU conventions they report, against hand-worked values."""

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import sacrebleu
import torch
from conftest import TRAINED_RUN, trained_run_data_settings, trained_run_settings
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from vanilla_transformer.cli import main
from vanilla_transformer.data.translation import prepare_data
from vanilla_transformer.metrics import bleu_scores
from vanilla_transformer.train.translation.arguments import load_arguments

# -- BLEU ---------------------------------------------------------------------------------------------------

HYPOTHESES = ["ein hund läuft über die Wiese.", "Ein Mann im T-Shirt & Hut."]
REFERENCES = ["Ein Hund läuft über die Wiese.", "Ein Mann im T-Shirt & Mütze."]
# Multi30k's official references are lowercased and Moses-tokenized, "&" unescaped, "t-shirt" unsplit.
TOKENIZED_REFERENCES = ["ein hund läuft über die wiese .", "ein mann im t-shirt & mütze ."]


def test_bleu_both_conventions_against_hand_worked_values():
    """Lowercased tokenized BLEU, worked by hand: both hypotheses become 7 tokens, "ein hund läuft über die
    wiese ." (all n-grams match) and "ein mann im t-shirt & hut ." (all but those with "hut"). Matches over
    the corpus: 1-grams 13/14, 2-grams 10/12, 3-grams 8/10, 4-grams 6/8; equal lengths, no brevity
    penalty: BLEU = 100 (13/14 * 10/12 * 8/10 * 6/8)^(1/4) = 100 * 0.464286^(1/4) = 82.546.

    Cased sacreBLEU (13a splits the final "." and keeps "T-Shirt"): "ein hund" and "Ein Hund" differ,
    so sentence 1 matches 5/7, 4/6, 3/5, 2/4 and the corpus 11/14, 8/12, 6/10, 4/8: 100 * 0.157143^(1/4)
    = 62.961."""
    scores = bleu_scores(HYPOTHESES, REFERENCES, "de")
    assert scores["bleu_lc_tok"] == pytest.approx(82.546, abs=1e-3)
    assert scores["sacrebleu"] == pytest.approx(62.961, abs=1e-3)
    # Against the official tokenized references: the hypotheses are lowercased and tokenized the same way
    # (escape=False keeps "&", no aggressive dash splitting keeps "t-shirt"), scored with tokenize="none".
    official = bleu_scores(HYPOTHESES, REFERENCES, "de", TOKENIZED_REFERENCES)
    assert official["bleu_lc_tok"] == pytest.approx(82.546, abs=1e-3)
    by_hand = ["ein hund läuft über die wiese .", "ein mann im t-shirt & hut ."]
    assert (
        official["bleu_lc_tok"]
        == sacrebleu.corpus_bleu(by_hand, [TOKENIZED_REFERENCES], tokenize="none").score
    )
    assert (
        scores["sacrebleu"] == sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES]).score
    )  # sacreBLEU's defaults


# -- the commands ---------------------------------------------------------------------------------------------

ROOT = Path(__file__).parent.parent


def test_evaluate_reproduces_the_runs_own_test_bleu(trained_run, tmp_path, capsys):
    output = tmp_path / "hypotheses.txt"
    capsys.readouterr()
    main(
        [
            "evaluate",
            "--model",
            str(trained_run / "model"),
            *trained_run_data_settings(),
            "--output",
            str(output),
        ]
    )
    printed = capsys.readouterr().out
    report = json.loads(printed[printed.index("{") : printed.rindex("}") + 1])
    hypotheses = output.read_text(encoding="utf-8").splitlines()
    assert report["split"] == "test" and report["sentences"] == len(hypotheses) == 6
    # The same translations and scores the training run wrote for its final model.
    assert hypotheses == (trained_run / "test_hypotheses.txt").read_text(encoding="utf-8").splitlines()
    run = json.loads((trained_run / "results.json").read_text())["test"]
    assert (report["sacrebleu"], report["bleu_lc_tok"]) == pytest.approx(
        (run["sacrebleu"], run["bleu_lc_tok"])
    )
    references = prepare_data(load_arguments(None, {**TRAINED_RUN, "output_dir": str(trained_run)}))["test"][
        "target"
    ]
    assert report["sacrebleu"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references]).score)
    # Some words right: real German sentences (~30 % of the hypotheses' words are in the references after
    # 150 tiny updates; BLEU itself, on 6 sentences, swings between 1 and 3 with the run's random stream).
    assert sacrebleu.corpus_bleu(hypotheses, [references]).precisions[0] > 20
    assert (report["num_beams"], report["length_penalty"]) == (2, 0.6)  # the run's saved decoding
    assert json.loads((tmp_path / "test_scores.json").read_text()) == report


def test_evaluate_tries_another_decoding_without_changing_the_folder(trained_run, tmp_path, capsys):
    """`evaluate --beams/--length-penalty` scores a decoding (how one is chosen on validation) with the
    hypotheses `translate --beams` gives, and leaves the folder's saved generation config as it was."""
    output, greedy = tmp_path / "hypotheses.txt", tmp_path / "greedy.txt"
    main(
        [
            "evaluate",
            "--model",
            str(trained_run / "model"),
            *trained_run_data_settings(),
            "--split",
            "validation",
            "--beams",
            "1",
            "--output",
            str(output),
        ]
    )
    report = json.loads((tmp_path / "validation_scores.json").read_text())
    assert (report["split"], report["num_beams"], report["length_penalty"]) == ("validation", 1, 1.0)
    sources = prepare_data(load_arguments(None, {**TRAINED_RUN, "output_dir": str(trained_run)}))[
        "validation"
    ]["source"]
    (tmp_path / "source.txt").write_text("\n".join(sources) + "\n", encoding="utf-8")
    main(
        [
            "translate",
            "--model",
            str(trained_run / "model"),
            "--input",
            str(tmp_path / "source.txt"),
            "--output",
            str(greedy),
            "--beams",
            "1",
        ]
    )
    assert output.read_text(encoding="utf-8").splitlines() == greedy.read_text(encoding="utf-8").splitlines()
    saved = json.loads((trained_run / "model" / "generation_config.json").read_text())
    assert (saved["num_beams"], saved["length_penalty"]) == (2, 0.6)
    with pytest.raises(SystemExit) as refused:  # refused by the parser, before anything is read
        main(
            [
                "evaluate",
                "--model",
                str(trained_run / "model"),
                *trained_run_data_settings(),
                "--beams",
                "0",
            ]
        )
    assert refused.value.code == 2
    assert capsys.readouterr().err.endswith("error: argument --beams: must be a positive integer, got 0\n")


def test_translate_writes_one_line_per_input_line(trained_run, tmp_path):
    args = load_arguments(None, {**TRAINED_RUN, "output_dir": str(trained_run)})
    sources = list(prepare_data(args)["test"]["source"])
    source, output = tmp_path / "source.txt", tmp_path / "out.txt"
    source.write_text("\n".join(sources) + "\n", encoding="utf-8")
    main(
        ["translate", "--model", str(trained_run / "model"), "--input", str(source), "--output", str(output)]
    )
    # The saved generation config (the run's beam 2, alpha 0.6, input + 50) translates as the run did.
    assert (
        output.read_text(encoding="utf-8").splitlines()
        == (trained_run / "test_hypotheses.txt").read_text(encoding="utf-8").splitlines()
    )
    main(
        [
            "translate",
            "--model",
            str(trained_run / "model"),
            "--input",
            str(source),
            "--output",
            str(output),
            "--beams",
            "1",
            "--force",  # replaces the first call's file
        ]
    )
    model = AutoModelForSeq2SeqLM.from_pretrained(trained_run / "model").eval()
    tokenizer = AutoTokenizer.from_pretrained(trained_run / "model")
    greedy = [
        tokenizer.decode(
            model.generate(**tokenizer(text, return_tensors="pt"), num_beams=1)[0], skip_special_tokens=True
        ).strip()
        for text in sources[:2]
    ]
    assert output.read_text(encoding="utf-8").splitlines()[:2] == greedy


def test_average_writes_the_mean_of_the_checkpoints(trained_run, tmp_path, capsys):
    checkpoints = trained_run / "checkpoints"
    weights = {
        step: load_file(checkpoints / f"checkpoint-{step}" / "model.safetensors") for step in (50, 100, 150)
    }
    main(
        [
            "average",
            str(checkpoints / "checkpoint-50"),
            str(checkpoints / "checkpoint-100"),
            "--output",
            str(tmp_path / "a"),
        ]
    )
    main(["average", str(trained_run), "--last", "2", "--output", str(tmp_path / "b")])
    assert capsys.readouterr().out.count("Averaged 2 checkpoints into") == 2
    for output, steps in ((tmp_path / "a", (50, 100)), (tmp_path / "b", (100, 150))):
        averaged = load_file(output / "model.safetensors")
        assert averaged.keys() == weights[50].keys()
        for name, tensor in averaged.items():
            torch.testing.assert_close(tensor, (weights[steps[0]][name] + weights[steps[1]][name]) / 2)
        model = AutoModelForSeq2SeqLM.from_pretrained(output)  # a complete model folder
        assert AutoTokenizer.from_pretrained(output).pad_token_id == model.config.pad_token_id == 0
    with pytest.raises(SystemExit, match="--last N takes one run folder"):
        main(
            [
                "average",
                str(checkpoints / "checkpoint-50"),
                str(trained_run),
                "--last",
                "2",
                "--output",
                str(tmp_path / "c"),
            ]
        )


def test_choose_on_validation_scores_windows_then_decodings(trained_run, tmp_path, capsys):
    """training/choose_on_validation.py: the last-1 window is the run's final model (its validation BLEU is
    what `evaluate --split validation` gives), windows average spaced checkpoints, and the winner is the
    best validation row; the test split is not translated. Both write into the run folder, so they get a copy.
    """
    run = shutil.copytree(trained_run, tmp_path / "run")
    spec = importlib.util.spec_from_file_location("choose", ROOT / "training" / "choose_on_validation.py")
    choose = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(choose)
    choose.main(
        [
            str(run),
            *trained_run_settings(run),
            "--last",
            "1",
            "3",
            "4",
            "--beams",
            "1",
            "2",
            "--length-penalty",
            "0.6",
            "1.2",
        ]
    )
    results = json.loads((run / "validation_choices.json").read_text())
    assert [row["last"] for row in results["windows"]] == [1, 3]  # 3 checkpoints: no window of 4
    assert results["windows"][1]["checkpoints"] == ["checkpoint-50", "checkpoint-100", "checkpoint-150"]
    assert "--last 4: only 3 checkpoints" in capsys.readouterr().out
    main(["evaluate", "--model", str(run / "model"), *trained_run_data_settings(), "--split", "validation"])
    validation = json.loads((run / "model" / "validation_scores.json").read_text())
    assert results["windows"][0]["sacrebleu"] == pytest.approx(validation["sacrebleu"])
    decodings = {(row["num_beams"], row["length_penalty"]) for row in results["decoding"]}
    assert decodings == {(2, 0.6), (1, 1.0), (2, 1.2)}  # the run's own (beam 2, 0.6) scored once
    best = max(results["decoding"], key=lambda row: row["sacrebleu"])
    assert results["winner"]["num_beams"] == best["num_beams"]
    assert (
        results["winner"]["average_last"] == max(results["windows"], key=lambda row: row["sacrebleu"])["last"]
    )
    assert not list(run.glob("choose-*"))  # the averaged scratch folders are removed


def test_the_modules_usage_lines_name_only_commands_and_options_the_parser_has():
    """The usage block at the top of cli.py is what `--help` users read first: every command it lists is
    a subcommand, every subcommand is listed, and every --option it names exists on its command."""
    import re

    import vanilla_transformer.cli as cli

    parser = cli.build_parser()
    (subparsers,) = [action for action in parser._actions if action.choices and "train" in action.choices]
    lines = [line for line in cli.__doc__.splitlines() if line.startswith("vanilla-transformer ")]
    listed = {line.split()[1] for line in lines}
    assert listed == set(subparsers.choices)
    for line in lines:
        command = subparsers.choices[line.split()[1]]
        options = {option for action in command._actions for option in action.option_strings}
        assert set(re.findall(r"--[a-z0-9-]+", line)) <= options, line


def test_translate_takes_a_length_penalty_as_evaluate_does(trained_run, tmp_path):
    """`translate --beams 2 --length-penalty A` writes, line for line, what `inference.translate` (the
    function `evaluate` translates with: generate() in length-sorted batches) gives with num_beams=2 and
    length_penalty=A, for A = 0.0 and 3.0; the two differ on some sentence, and where they differ the
    long-favouring alpha's translation has at least as many tokens."""
    from vanilla_transformer.inference import translate

    sources = prepare_data(load_arguments(None, {**TRAINED_RUN, "output_dir": str(trained_run)}))["test"][
        "source"
    ]
    (tmp_path / "source.txt").write_text("\n".join(sources) + "\n", encoding="utf-8")
    model = AutoModelForSeq2SeqLM.from_pretrained(trained_run / "model").eval()
    tokenizer = AutoTokenizer.from_pretrained(trained_run / "model")
    outputs = {}
    for alpha in ("0.0", "3.0"):
        output = tmp_path / f"alpha{alpha}.txt"
        main(["translate", "--model", str(trained_run / "model"), "--input", str(tmp_path / "source.txt"),
              "--output", str(output), "--beams", "2", "--length-penalty", alpha])  # fmt: skip
        outputs[alpha] = output.read_text(encoding="utf-8").splitlines()
        assert outputs[alpha] == translate(
            model, tokenizer, sources, num_beams=2, length_penalty=float(alpha)
        )
    assert outputs["0.0"] != outputs["3.0"]
    # Both alphas pick among the same finished beams (the beams run on raw log-probabilities and stop at
    # the same step); dividing the negative score by length**3 can only favour a longer one.
    for short, long in zip(outputs["0.0"], outputs["3.0"], strict=True):
        assert len(tokenizer(long)["input_ids"]) >= len(tokenizer(short)["input_ids"]), (short, long)
