"""The README's and docs/' commands run as written: each shell line the pages show is either
run here, verbatim, in a scratch folder laid out as the pages assume (`training/` beside it, a trained
run at `runs/multi30k-de-en`, the pages' own earlier commands run first), or named below with the reason
it is not (hours of training, the Hub, a server, an installer). A new or changed command fails the
first test until it is placed in one list or the other. tests/test_docs_commands.py also parses every
`vanilla-transformer` line and checks its recipe settings; tests/test_readme.py runs the quick start.

The run the pages' commands read is a tiny model trained in seconds on the synthetic task; the pages'
commands are not changed to suit it.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TINY_RUN
from test_docs_commands import PAGES, shell_lines

from vanilla_transformer.train.run import train
from vanilla_transformer.train.translation.arguments import load_arguments

# The pages' text is checked once; each command here has its own test, run on both ends of the ranges.
pytestmark = pytest.mark.newest_only

ROOT = Path(__file__).resolve().parents[1]
SENTENCE = "Ein Hund läuft über die Wiese."

# Run here, in the order the pages give them ({page: [line, ...]}).
RUN = {
    "README.md": [
        f'echo "{SENTENCE}" | vanilla-transformer translate --model runs/multi30k-de-en/model',
    ],
    "serving.md": [
        "vanilla-transformer export-onnx --model runs/multi30k-de-en/model --output onnx/de-en",
        f'echo "{SENTENCE}" | vanilla-transformer translate --engine onnx --model onnx/de-en',
        "vanilla-transformer export-ct2 --model runs/multi30k-de-en/model --output ct2/de-en --quantization int8",
        f'echo "{SENTENCE}" | vanilla-transformer translate --engine ctranslate2 --model ct2/de-en',
        f'vanilla-transformer attention --model runs/multi30k-de-en/model --text "{SENTENCE}" --output maps/',
    ],
    "translation.md": [
        "vanilla-transformer average runs/multi30k-de-en --last 5 --output runs/multi30k-de-en/averaged",
        "mv runs/de-en-cooldown/model runs/de-en-cooldown/model-average-last5",
        "vanilla-transformer average runs/de-en-cooldown --last 1 --output runs/de-en-cooldown/model",
        'python -m benchmarks.precision_curves runs/de-en-plain runs/de-en-cooldown --labels "bf16, Eq. 3" '
        ' "bf16, Eq. 3 + cool-down" --output docs/multi30k_de_en_bf16.png',
    ],
}

# Not run here: {pattern a line matches: why}.
NOT_RUN = {
    r"^pip install": "an installer (CI's fresh install runs the README's set-up line)",
    r"^OMP_NUM_THREADS=1 python3 -m pytest -q -n 2$": "the test suite itself",
    r"^OMP_NUM_THREADS=1 python3 -m pytest -q -n 0 tests/test_\w+\.py( -k \w+)?$": "a file of the test suite itself",
    r"^hf auth login$": "interactive, and the Hub is not reachable here",
    r"vanilla-transformer train( |$)": (
        "trains for minutes to hours (the quick-start job's 800 updates, the Multi30k, IMDB and causal-LM "
        "recipes); tests/test_run.py trains the causal-LM recipe on a few texts"
    ),
    r"vanilla-transformer classify (train|pretrain) ": "trains on IMDB for 25 minutes to 2 hours",
    r"VT_DATA_DIR=\S+ vanilla-transformer (evaluate|classify evaluate) ": (
        "scores a trained model on a whole test split (thousands of beam searches)"
    ),
    r"bentrevett/multi30k|stanfordnlp/imdb": (
        "reads a Hub data set: tests/test_readme_hub_path.py runs the README's Hub path offline, on local "
        "folders laid out as the Hub's copies"
    ),
    r"nsmc_supervised(\.yaml)?\b": (
        "reads NSMC from the Hub or the release's files; tests/test_nsmc.py runs the recipe on local copies "
        "of both layouts"
    ),
    r"vanilla-transformer ablate ": "trains one model per row of Table 3",
    r"^python examples/fine_tune\.py ": (
        "fine-tunes for thousands of steps on the reader's files; tests/test_fine_tuning_example.py runs the "
        "example on a tiny folder, with and without LoRA"
    ),
    r"vanilla-transformer push ": "uploads to the Hub, which is not reachable here",
    r"vanilla-transformer demo ": "serves until stopped; tests/test_demo.py serves a folder and drives it in a browser",
    r"choose_on_validation\.py ": "decodes the validation split with every checkpoint window of an hour's run",
    r"^python -m benchmarks --presets": "times training and decoding for minutes",
    r"^python -m benchmarks\.paired ": "times 40 alternating rounds of training and decoding, minutes",
    r"python -m benchmarks\.precision_curves runs/(de-en-fp32|en-de-fp32|precision)": (
        "plots fp32 and bf16 runs of an hour each (the same script runs here on the cool-down pair)"
    ),
    r"^python training/plot_pretraining\.py": "plots the logs of two pre-training runs of 2 hours",
    r"^accelerate launch --multi_gpu": "eight GPUs",
    r"^python -m benchmarks\.gpu_check --out": "needs a GPU; its dry run is tests/test_gpu_check.py",
    r"^python -m benchmarks\.gpu_check --sections": "needs a GPU; tests/test_gpu_check.py runs --sections",
    r"^python -m benchmarks\.gpu_check --dry-run": "runs in tests/test_gpu_check.py (the whole check, at tiny sizes)",
}


def _why_not_run(line: str) -> str | None:
    return next((why for pattern, why in NOT_RUN.items() if re.search(pattern, line)), None)


def test_every_command_on_the_pages_is_run_here_or_says_why_not():
    unplaced = []
    for page in PAGES:
        for line in shell_lines(page):
            if line not in RUN.get(page.name, []) and _why_not_run(line) is None:
                unplaced.append(f"{page.name}: {line}")
    assert not unplaced, "commands neither run by tests/test_docs_run.py nor given a reason:\n" + "\n".join(
        unplaced
    )
    for page, lines in RUN.items():
        shown = shell_lines(ROOT / ("README.md" if page == "README.md" else f"docs/{page}"))
        assert [line for line in lines if line not in shown] == [], f"{page} no longer shows these commands"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A folder laid out as the pages assume: the repository's recipes and benchmarks beside it, and
    the runs the pages' commands read (a tiny synthetic run, 10 updates, a checkpoint every 2). Not
    conftest's shared run (3 checkpoints, no validation history): the pages average the last 5 checkpoints
    and plot a validation history, and their commands write into the runs' folders."""
    folder = tmp_path_factory.mktemp("docs")
    for name in ("training", "benchmarks"):
        (folder / name).symlink_to(ROOT / name)
    (folder / "docs").mkdir()
    run = folder / "runs" / "multi30k-de-en"
    settings = {**TINY_RUN, "max_steps": 10, "save_steps": 2, "eval_steps": 5, "output_dir": str(run)}
    train(load_arguments(None, {**settings, "save_total_limit": 5, "test_file": None}))
    for copy in ("de-en-plain", "de-en-cooldown"):
        shutil.copytree(run, folder / "runs" / copy, symlinks=True)
    return folder


def _run(line: str, folder: Path) -> subprocess.CompletedProcess:
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    environment["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environment['PATH']}"
    return subprocess.run(
        ["bash", "-c", line], cwd=folder, env=environment, capture_output=True, text=True, timeout=300
    )


def _loads_and_translates(model_dir: Path) -> None:
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir, trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    ids = model.generate(**tokenizer([SENTENCE], return_tensors="pt"), num_beams=1, max_new_tokens=5)
    assert ids.shape[0] == 1 and ids.shape[1] >= 2


def test_the_pages_commands_run_as_written(workspace):
    """Each command exits 0 and leaves what the page says it makes."""
    run = workspace / "runs" / "multi30k-de-en"
    outputs = {}
    for page, lines in RUN.items():
        for line in lines:
            done = _run(line, workspace)
            assert done.returncode == 0, f"{page}: `{line}` failed:\n{done.stdout}\n{done.stderr}"
            outputs[line] = done.stdout

    translations = [outputs[line] for line in outputs if line.startswith("echo")]
    assert [len(text.splitlines()) for text in translations] == [1, 1, 1]  # one line in, one line out
    _loads_and_translates(run / "averaged")
    checkpoints = sorted((run / "checkpoints").glob("checkpoint-*"), key=lambda path: int(path.name[11:]))
    assert [path.name for path in checkpoints] == [f"checkpoint-{step}" for step in (2, 4, 6, 8, 10)]
    assert "Averaged 5 checkpoints" in outputs[RUN["translation.md"][0]]
    assert {path.name for path in (workspace / "onnx" / "de-en").glob("*.onnx")} == {
        "encoder_model.onnx",
        "decoder_model.onnx",
        "decoder_with_past_model.onnx",
    }
    assert (workspace / "ct2" / "de-en" / "model.bin").is_file()
    assert sorted(path.name for path in (workspace / "maps").glob("*.png"))
    cooldown = workspace / "runs" / "de-en-cooldown"
    assert (cooldown / "model-average-last5" / "config.json").is_file()
    _loads_and_translates(cooldown / "model")
    assert "Averaged 1 checkpoints into runs/de-en-cooldown/model" in outputs[RUN["translation.md"][2]]
    assert (workspace / "docs" / "multi30k_de_en_bf16.png").stat().st_size > 0
    history = json.loads((run / "results.json").read_text())["history"]
    assert [row["step"] for row in history] == [5, 10]
