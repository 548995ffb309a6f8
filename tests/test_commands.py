"""Commands no other test ran, each end to end on a tiny model: the installed
`vanilla-transformer` script translating standard input to standard output, `train` + `evaluate` from a
recipe naming JSON Lines or parallel text files, `ablate --minutes-per-row` and `ablate --collect`, the
demo's causal-LM page and the entry a Space runs (`main` / `default_model`), and `export-ct2 --force`."""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sacrebleu
import torch
import yaml
from conftest import CORPUS, TINY_RUN, decoder_only_config, tiny_config
from test_ablation import TINY_RECIPE
from test_training import _write_jsonl
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from vanilla_transformer import VanillaTransformerForCausalLM, VanillaTransformerForConditionalGeneration
from vanilla_transformer.cli import main
from vanilla_transformer.data.synthetic import synthetic_pairs
from vanilla_transformer.train import run as run_module
from vanilla_transformer.train.common.checkpoints import latest_checkpoint

LINES = [CORPUS[0], CORPUS[1], "", CORPUS[4], CORPUS[2]]  # --batch-size 2: chunks of 2, 2 and 1


def translate_file(model, lines, folder: Path, *options: str) -> list[str]:
    """`translate --input FILE --output FILE` in this process; the output lines."""
    source, output = folder / "source.txt", folder / "output.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    main(["translate", "--model", str(model), "--input", str(source), "--output", str(output), *options])
    return output.read_text(encoding="utf-8").splitlines()


# -- the installed console script: standard input to standard output ----------------------------------------


@pytest.mark.newest_only  # the script's own I/O; translate runs at both ends in tests/test_cli.py
def test_the_console_script_translates_standard_input_to_standard_output(translation_model, tmp_path):
    """The script pip installed (pyproject's [project.scripts]), in a fresh process: one output line per
    input line (a blank line stays blank), the lines `--input/--output` files give, exit status 0."""
    script = shutil.which("vanilla-transformer")
    if script is None:
        pytest.fail("`vanilla-transformer` is not on PATH: install the package (pip install -e .) to get it.")
    result = subprocess.run(
        [script, "translate", "--model", str(translation_model), "--batch-size", "2"],
        input="\n".join(LINES) + "\n",
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.endswith("\n")
    printed = result.stdout.splitlines()
    assert len(printed) == len(LINES)
    assert printed[2] == "" and all(printed[i] for i in (0, 1, 3, 4))
    assert printed == translate_file(translation_model, LINES, tmp_path, "--batch-size", "2")


@pytest.mark.newest_only  # the command's handling of a closed pipe, in its own process
def test_a_reader_that_stops_early_ends_translate_quietly(translation_model):
    """`translate ... | head -n 1`: the first translation arrives, then the command stops without an error
    (Python's default is a "Broken pipe" traceback or error line once the reader has gone)."""
    script = shutil.which("vanilla-transformer")
    lines = "\n".join(["a wonderful film"] * 3000) + "\n"
    result = subprocess.run(
        [
            "bash",
            "-c",
            f'"{script}" translate --model "{translation_model}" --beams 1 --batch-size 1 | head -n 1',
        ],
        input=lines,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 0 and len(result.stdout.splitlines()) == 1
    assert "Broken pipe" not in result.stderr and "error" not in result.stderr.lower(), result.stderr[-2000:]


# -- train and evaluate from local files -------------------------------------------------------------------

SIZES = {"train": 40, "validation": 5, "test": 7}  # distinct sizes: a split read in place of another shows


def write_recipe(folder: Path, layout: str) -> tuple[Path, list[dict]]:
    """A copy task (both sides a synthetic English sentence, so that 60 tiny updates reach a BLEU above 0)
    written as JSON Lines (``json``) or parallel text files (``text``) under ``folder/data``, and a recipe
    that names them relative to its ``data_dir``, as docs/data.md shows. Returns the recipe and the test
    pairs."""
    data = folder / "data"
    (data / "corpus").mkdir(parents=True)
    files = {}
    for offset, (split, size) in enumerate(SIZES.items()):
        pairs = [{"en": pair["en"], "de": pair["en"]} for pair in synthetic_pairs(size, seed=200 + offset)]
        if layout == "json":
            _write_jsonl(data / "corpus" / f"{split}.jsonl.gz", [{"translation": pair} for pair in pairs])
            files[f"{split}_file"] = f"corpus/{split}.jsonl.gz"
        else:
            for lang in ("en", "de"):
                (data / "corpus" / f"{split}.{lang}").write_text(
                    "\n".join(pair[lang] for pair in pairs) + "\n", encoding="utf-8"
                )
            files[f"{split}_file"] = f"corpus/{split}"
    settings = {key: value for key, value in TINY_RUN.items() if not key.startswith("synthetic_")}
    settings |= {"dataset": layout, "data_dir": str(data), **files, "source_lang": "en", "target_lang": "de"}
    settings |= {"max_steps": 60, "warmup_steps": 20, "save_steps": 60, "output_dir": str(folder / "run")}
    recipe = folder / "recipe.yaml"
    recipe.write_text(yaml.safe_dump(settings, sort_keys=False), encoding="utf-8")
    return recipe, pairs


def assert_bleu(scores: dict) -> None:
    for name in ("sacrebleu", "bleu_lc_tok"):
        assert isinstance(scores[name], float) and 0.0 <= scores[name] <= 100.0, scores


@pytest.mark.parametrize("layout", ["json", "text"])
def test_train_then_evaluate_from_a_recipe_naming_local_files(tmp_path, layout, capsys):
    """`train --recipe` saves a loadable model and the test split's BLEU; `evaluate` on the same recipe
    writes test_scores.json with the same BLEU, which is sacreBLEU of its hypotheses against the target
    side of the test file (above 0: the copies share words with it); its samples are the test file's."""
    recipe, test_pairs = write_recipe(tmp_path, layout)
    run = tmp_path / "run"
    main(["train", "--recipe", str(recipe)])
    model = AutoModelForSeq2SeqLM.from_pretrained(run / "model")
    assert type(model) is VanillaTransformerForConditionalGeneration
    assert AutoTokenizer.from_pretrained(run / "model").pad_token_id == model.config.pad_token_id
    results = json.loads((run / "results.json").read_text())
    assert results["updates"] == 60
    assert_bleu(results["test"])
    assert len((run / "test_hypotheses.txt").read_text(encoding="utf-8").splitlines()) == SIZES["test"]

    capsys.readouterr()
    main(["evaluate", "--model", str(run / "model"), "--recipe", str(recipe)])
    printed = capsys.readouterr().out
    report = json.loads((run / "model" / "test_scores.json").read_text())
    assert (report["split"], report["sentences"]) == ("test", SIZES["test"])
    assert_bleu(report)
    assert (report["sacrebleu"], report["bleu_lc_tok"]) == pytest.approx(
        (results["test"]["sacrebleu"], results["test"]["bleu_lc_tok"])
    )
    hypotheses = (run / "model" / "test_hypotheses.txt").read_text(encoding="utf-8").splitlines()
    references = [pair["de"] for pair in test_pairs]
    assert report["sacrebleu"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references]).score)
    assert report["sacrebleu"] > 0  # 3.3 when written: some copied words, not empty lines
    assert f"source:     {test_pairs[0]['en']}\n" in printed
    assert f"reference:  {test_pairs[0]['de']}\n" in printed


# -- ablate: a minutes budget per row, and --collect -------------------------------------------------------

MINUTES = 0.05  # 3 seconds of training per row
STUDY = """
recipe: tiny.yaml
settings: {max_steps: 1, save_steps: 1000, eval_steps: 1000, model.dropout: 0.0}
rows:
  A:
    - {model.num_heads: 1}
  C:
    - {model.d_model: 16, model.d_ff: 48}
"""


@pytest.fixture(scope="module")
def minutes_study(tmp_path_factory):
    """`ablate --rows A --minutes-per-row 0.05`: the base row and A1 trained, measured and tabulated (C1
    not selected), each row through the one run in this process; returns the folder and each row's
    settings."""
    folder = tmp_path_factory.mktemp("ablate")
    (folder / "tiny.yaml").write_text(TINY_RECIPE)
    (folder / "table3.yaml").write_text(STUDY)
    rows, real_train = [], run_module.train_recipe

    def recorded(recipe, overrides, *args, **kwargs):
        rows.append(overrides)
        return real_train(recipe, overrides, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run_module, "train_recipe", recorded)
        main(["ablate", "--recipe", str(folder / "table3.yaml"), "--rows", "A",
              "--minutes-per-row", str(MINUTES), "--output", str(folder / "runs")])  # fmt: skip
    return folder, rows


@pytest.mark.newest_only  # ablate's orchestration, as tests/test_ablation.py
def test_minutes_per_row_trains_every_row_for_the_same_minutes(minutes_study):
    folder, settings = minutes_study
    runs = folder / "runs"
    assert len(settings) == 2 and not (runs / "C1").exists()  # base and A1 only
    for values in settings:
        assert values["run_minutes"] == MINUTES and values["max_steps"] == 10**9
    table = json.loads((runs / "table3.json").read_text())
    assert [row["name"] for row in table["rows"]] == ["base", "A1"] and table["wall_minutes"] > 0
    for row in table["rows"]:
        results = json.loads((runs / row["name"] / "results.json").read_text())
        state = json.loads(
            (latest_checkpoint(runs / row["name"] / "checkpoints") / "trainer_state.json").read_text()
        )
        assert state["max_steps"] == 10**9
        assert state["stateful_callbacks"]["TrainingClock"]["args"]["budget_minutes"] == MINUTES
        # Stopped by the clock once the minutes were spent, not by the study's one update.
        assert MINUTES <= results["training_minutes"] < MINUTES + 0.5
        assert row["updates"] == results["updates"] > 1


@pytest.mark.newest_only  # ablate's orchestration, as tests/test_ablation.py
def test_collect_measures_the_trained_rows_and_writes_the_table_without_training(
    minutes_study, tmp_path, monkeypatch, capsys
):
    """`ablate --collect` trains nothing: it measures a trained row not yet measured (A1, as the study's
    own run measured it), keeps a measured one (base), leaves out an untrained one (C1, saying so) and
    writes table3.json and table3.md with each row's values."""
    folder, _ = minutes_study
    runs = tmp_path / "runs"
    shutil.copytree(folder / "runs", runs)
    measured_before = json.loads((runs / "A1" / "table3_row.json").read_text())
    for done in (runs / "A1" / "table3_row.json", runs / "table3.json", runs / "table3.md"):
        done.unlink()

    def no_training(*args, **kwargs):
        raise AssertionError(f"--collect trained a row: {args}")

    monkeypatch.setattr(run_module, "train_recipe", no_training)
    capsys.readouterr()
    main(["ablate", "--recipe", str(folder / "table3.yaml"), "--rows", "A,C", "--collect",
          "--output", str(runs)])  # fmt: skip
    assert "[table3] C1: not trained yet" in capsys.readouterr().out
    table = json.loads((runs / "table3.json").read_text())
    assert "wall_minutes" not in table  # only the study's own run times itself
    rows = {row["name"]: row for row in table["rows"]}
    assert list(rows) == ["base", "A1"]
    assert rows["A1"] == json.loads((runs / "A1" / "table3_row.json").read_text())  # measured again now
    for key in ("dev_perplexity", "dev_sacrebleu", "dev_bleu_lc_tok"):
        assert rows["A1"][key] == pytest.approx(measured_before[key], rel=1e-5)
    assert rows["A1"]["config"]["h"] == "1" and rows["base"]["config"]["h"] == "4"

    lines = (runs / "table3.md").read_text().splitlines()
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    cells = {}  # the row's label -> {column: cell}
    for line in lines[2:]:
        values = [cell.strip() for cell in line.strip("|").split("|")]
        cells[values[0]] = dict(zip(header, values, strict=True))
    assert list(cells) == ["base", "A"]
    for label, row in (("base", rows["base"]), ("A", rows["A1"])):
        assert cells[label]["PPL (dev)"] == f"{row['dev_perplexity']:.2f}"
        assert cells[label]["BLEU (dev)"] == f"{row['dev_sacrebleu']:.1f}"
        assert cells[label]["params ×10⁶"] == f"{row['parameters'] / 1e6:.1f}"
    assert cells["base"]["train steps"] == str(rows["base"]["updates"])
    same_steps = rows["A1"]["updates"] == rows["base"]["updates"]
    assert cells["A"]["train steps"] == ("" if same_steps else str(rows["A1"]["updates"]))
    assert (cells["A"]["h"], cells["A"]["d_model"]) == ("1", "")  # blank: the base row's value


# -- the demo: the causal-LM page, and the entry a Space runs ------------------------------------------------


def test_the_causal_lm_page_continues_the_prompt_and_draws_its_self_attention(tmp_path, tokenizer):
    """build_demo for a causal LM: a prompt box, its continuation (what generate() adds after the prompt)
    and one picture, the decoder self-attention; empty input gets a message. Called as Gradio would call
    the page's function, without a server."""
    from vanilla_transformer.demo import build_demo

    model = VanillaTransformerForCausalLM(decoder_only_config(vocab_size=len(tokenizer))).eval()
    model.save_pretrained(tmp_path / "lm")
    tokenizer.save_pretrained(tmp_path / "lm")
    page = build_demo(tmp_path / "lm")
    blocks = {block.elem_id: block for block in page.blocks.values() if getattr(block, "elem_id", None)}
    assert {"vt-input", "vt-run", "vt-output", "vt-message", "vt-decoder-attention"} <= set(blocks)
    assert not {"vt-encoder-attention", "vt-cross-attention"} & set(blocks)
    assert (blocks["vt-input"].label, blocks["vt-output"].label) == ("Prompt", "Continuation")
    described = " ".join(
        str(block.value) for block in page.blocks.values() if type(block).__name__ == "Markdown"
    )
    assert "VanillaTransformerForCausalLM" in described and "2 layers" in described
    (respond,) = {
        event.fn for event in page.fns.values() if event.inputs and event.inputs[0] is blocks["vt-input"]
    }

    prompt = CORPUS[0]
    encoded = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        generated = model.generate(**encoded, num_beams=1, max_new_tokens=5)[0]
    expected = tokenizer.decode(generated[encoded["input_ids"].shape[-1] :], skip_special_tokens=True)
    message, continuation, found, picture = respond(prompt, 1, 5, 2, 3)
    assert message == "" and continuation == expected != ""
    assert set(found["weights"]) == {"decoder_attentions"}
    assert found["weights"]["decoder_attentions"].shape[:2] == (2, 4)  # (layers, heads, queries, keys)
    assert picture.size[0] >= 300 and picture.size[1] >= 300

    with pytest.warns(UserWarning, match="empty"):  # gr.Warning, outside a server: a Python warning
        message, continuation, found, picture = respond("   ", 1, 5, 1, 1)
    assert "The text is empty" in message and (continuation, found, picture) == ("", None, None)


def test_the_space_entry_serves_the_folder_beside_app_py_or_the_one_the_environment_names(
    tmp_path, monkeypatch, capsys, translation_model
):
    """demo.py as a Space's app.py (what `push --with-demo` uploads beside the weights): `main()` with no
    arguments serves the folder it sits in, or $VT_DEMO_MODEL; --host/--port reach Gradio. The package's
    own module, with neither, is a usage error naming both. `launch` is recorded, not served."""
    import gradio

    from vanilla_transformer import demo

    # The shared run's model has one layer: the page shows the only layer as a number (Gradio refuses a
    # slider whose minimum equals its maximum).
    model, space = translation_model, tmp_path / "space"
    shutil.copytree(model, space)
    shutil.copy(demo.__file__, space / "app.py")
    spec = importlib.util.spec_from_file_location("space_app", space / "app.py")
    app = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "space_app", app)  # as `python app.py` registers __main__
    spec.loader.exec_module(app)
    launched = []
    monkeypatch.setattr(gradio.Blocks, "launch", lambda page, **kwargs: launched.append((page, kwargs)))

    def served(page) -> str:
        """The model the page describes (its first heading)."""
        (heading,) = [
            block.value for block in page.blocks.values()
            if type(block).__name__ == "Markdown" and str(block.value).startswith("# ")
        ]  # fmt: skip
        return heading.splitlines()[0].removeprefix("# ")

    monkeypatch.delenv(demo.MODEL_ENV, raising=False)
    assert app.default_model() == str(space.resolve())
    app.main([])
    page, settings = launched[-1]
    assert served(page) == str(space.resolve())
    assert (settings["server_name"], settings["server_port"]) == (None, None)  # Gradio's, or the Space's env
    assert {"vt-cross-attention", "vt-run"} <= {block.elem_id for block in page.blocks.values()}

    monkeypatch.setenv(demo.MODEL_ENV, str(model))
    assert app.default_model() == str(model)
    app.main(["--host", "0.0.0.0", "--port", "8123"])
    page, settings = launched[-1]
    assert served(page) == str(model)
    assert (settings["server_name"], settings["server_port"]) == ("0.0.0.0", 8123)

    monkeypatch.delenv(demo.MODEL_ENV)
    assert demo.default_model() is None  # the installed package's folder holds no model
    with pytest.raises(SystemExit) as exit:
        demo.main([])
    assert exit.value.code == 2 and len(launched) == 2
    assert "no model: pass --model DIR_OR_HUB_ID or set $VT_DEMO_MODEL" in capsys.readouterr().err


# -- export-ct2 --force ---------------------------------------------------------------------------------------


@pytest.mark.newest_only  # CTranslate2 is not pinned, as tests/test_ctranslate2.py
def test_export_ct2_replaces_an_existing_export_only_with_force(tmp_path, tokenizer):
    """A second export into the same folder is refused (the first export still translates as before); with
    --force it replaces the folder, swapped in whole, and translates as the new model does. A file the user
    added to the export is never deleted: --force is refused, naming it."""
    pytest.importorskip(
        "ctranslate2",
        reason='the optional CTranslate2 engine: pip install "vanilla-transformer[ctranslate2]"',
    )
    from vanilla_transformer.ctranslate2_export import export_ctranslate2

    models = {}
    for seed in (0, 1):  # two models that translate differently
        torch.manual_seed(seed)
        models[seed] = tmp_path / f"model{seed}"
        config = tiny_config(vocab_size=len(tokenizer))
        VanillaTransformerForConditionalGeneration(config).eval().save_pretrained(models[seed])
        tokenizer.save_pretrained(models[seed])
    output = tmp_path / "ct2"
    (tmp_path / "work").mkdir()

    def translations(folder) -> list[str]:
        return translate_file(
            folder, CORPUS[:3], tmp_path / "work", "--engine", "ctranslate2", "--beams", "1", "--force"
        )

    main(["export-ct2", "--model", str(models[0]), "--output", str(output), "--no-check"])
    first = translations(output)
    with pytest.raises(SystemExit, match=rf"^error: {re.escape(str(output))} holds an earlier `export-ct2`"):
        main(["export-ct2", "--model", str(models[1]), "--output", str(output)])
    assert translations(output) == first

    (output / "notes.txt").write_text("the user's own")
    with pytest.raises(SystemExit, match=r"holds files `export-ct2` did not write \(notes.txt\)"):
        main(["export-ct2", "--model", str(models[1]), "--output", str(output), "--force"])
    (output / "notes.txt").unlink()
    main(["export-ct2", "--model", str(models[1]), "--output", str(output), "--force", "--no-check"])
    assert {"model.bin", "tokenizer.json", "generation_config.json"} <= {
        path.name for path in output.iterdir()
    }
    assert sorted(path.name for path in tmp_path.iterdir()) == ["ct2", "model0", "model1", "work"]
    fresh = export_ctranslate2(models[1], tmp_path / "fresh")
    assert translations(output) == translations(fresh) != first
