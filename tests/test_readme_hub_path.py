"""The README's path from the Hub, run offline end to end: the commands and the Python of its translation
and sentiment sections and of fine-tuning the pushed translation model, as written, in order, with three
stand-ins for the network:

- each Hub data set id (`bentrevett/multi30k`, `stanfordnlp/imdb`) names a local folder laid out as the
  Hub's copy is (its files, split names and columns), read through the same `load_dataset` call the id takes;
- `push` lands in a captured commit (tests/conftest.py's `CapturedHub`) instead of the Hub, and the
  pushed files are then loaded where this package cannot be imported, by the README's own Python;
- the training commands get settings appended that make them seconds long (a tiny model, a few updates);
  the recipes' other settings (data, decoding, precision, outputs) are the README's.

`hf auth login` is interactive and is the one line not run.
"""

import gzip
import io
import json
import re
import shlex
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import TINY_MODEL, CapturedHub, run_without_the_package
from test_classification import write_reviews

from vanilla_transformer.cli import main
from vanilla_transformer.data.synthetic import synthetic_pairs

pytestmark = (
    pytest.mark.newest_only
)  # the README's text; each command's library calls are tested at both ends

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
NOT_RUN = {"hf auth login": "interactive; the Hub is not reachable here"}
# Appended to the README's training commands: seconds, not the recipes' hour.
TINY = {
    "train": {
        "max_steps": 60,
        "warmup_steps": 10,
        "vocab_size": 300,
        "max_tokens": 400,
        "eval_steps": 1000,
        "save_steps": 60,
        "eval_bleu_samples": 4,
        **{f"model.{key}": value for key, value in TINY_MODEL.items()},
    },
    "classify": {
        "vocab_size": 300,
        "max_length": 32,
        "head_tokens": 8,
        "validation_size": 20,
        "validation_runs": 2,
        "num_train_epochs": 4,
        "learning_rate": 0.003,
        "per_device_train_batch_size": 16,
        "model.d_model": 32,
        "model.d_ff": 64,
        "model.dropout": 0.0,
        "logging_steps": 5,
    },
}


def section(heading: str) -> str:
    """The README's text from the heading that starts with ``heading`` to the next ``## ``."""
    match = re.search(rf"^## {re.escape(heading)}.*?(?=^## )", README, re.MULTILINE | re.DOTALL)
    assert match, f"the README has no section {heading!r}"
    return match.group(0)


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


def commands(text: str) -> list[str]:
    """The shell lines of a section's bash blocks, continuation lines joined."""
    joined = "\n".join(blocks(text, "bash")).replace("\\\n", " ")
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.startswith("#")]


def multi30k_layout(folder: Path) -> Path:
    """`bentrevett/multi30k`: train.jsonl, val.jsonl, test.jsonl, rows of flat `en` / `de` columns."""
    folder.mkdir(parents=True)
    for offset, (name, size) in enumerate((("train", 300), ("val", 8), ("test", 8))):
        rows = synthetic_pairs(size, seed=200 + offset)
        (folder / f"{name}.jsonl").write_text(
            "".join(json.dumps({"en": r["en"], "de": r["de"]}) + "\n" for r in rows)
        )
    return folder


def imdb_layout(folder: Path, scratch: Path) -> Path:
    """`stanfordnlp/imdb`: plain_text/{train,test,unsupervised}-00000-of-00001.parquet, columns text / label,
    the splits declared in the card's `configs`, as on the Hub."""
    (folder / "plain_text").mkdir(parents=True)
    for split, n, seed in (("train", 240, 0), ("test", 40, 1)):
        rows = [json.loads(line) for line in gzip.open(write_reviews(scratch / f"{split}.gz", n, seed), "rt")]
        pd.DataFrame(rows)[["text", "label"]].to_parquet(
            folder / "plain_text" / f"{split}-00000-of-00001.parquet"
        )
    pd.DataFrame({"text": ["an unlabelled review"], "label": [-1]}).to_parquet(
        folder / "plain_text" / "unsupervised-00000-of-00001.parquet"
    )
    files = "".join(
        f"  - split: {name}\n    path: plain_text/{name}-00000-of-00001.parquet\n"
        for name in ("train", "test", "unsupervised")
    )
    (folder / "README.md").write_text(
        f"---\nconfigs:\n- config_name: plain_text\n  data_files:\n{files}---\n"
    )
    return folder


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    """The project root as the README assumes it (the recipes under training/), the Hub's data sets as
    local folders, and the Hub's upload captured."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "training").symlink_to(ROOT / "training")
    monkeypatch.chdir(folder)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("VT_DATA_DIR", raising=False)
    local = {
        "bentrevett/multi30k": multi30k_layout(tmp_path / "hub" / "multi30k"),
        "stanfordnlp/imdb": imdb_layout(tmp_path / "hub" / "imdb", tmp_path),
    }
    hub = CapturedHub(tmp_path / "pushed")
    from huggingface_hub import HfApi

    monkeypatch.setattr(HfApi, "create_repo", lambda api, repo_id, **kw: hub.create_repo(api, repo_id, **kw))
    monkeypatch.setattr(
        HfApi,
        "create_commit",
        lambda api, repo_id, operations, **kw: hub.create_commit(api, repo_id, operations, **kw),
    )
    return folder, local, hub


def run_line(line: str, local: dict, monkeypatch, capsys) -> str:
    """One README line through the `vanilla-transformer` entry point (an `echo ... |` feeds its standard
    input); returns what it printed. ``local``: Hub ids -> the local folders that stand in for them."""
    for hub_id, folder in local.items():
        line = line.replace(hub_id, str(folder))
    stdin = None
    if line.startswith("echo "):
        echoed, line = line.split("|", 1)
        stdin = shlex.split(echoed)[1] + "\n"
    argv = shlex.split(line, comments=True)
    assert argv[0] == "vanilla-transformer", line
    argv = argv[1:]
    if argv[0] == "train" or argv[:2] == ["classify", "train"]:  # tiny settings of the recipe's task
        recipe = argv[argv.index("--recipe") + 1] if "--recipe" in argv else ""
        tiny = TINY["classify" if re.match(r"(imdb|nsmc)_", Path(recipe).name) else "train"]
        argv += [f"--set={key}={value}" for key, value in tiny.items()]
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    capsys.readouterr()
    main(argv)
    return capsys.readouterr().out


def news_files(folder: Path) -> None:
    """The reader's own sentences the fine-tuning section names (path/to/news/*.jsonl, flat de / en rows)."""
    folder.mkdir(parents=True)
    for offset, (name, size) in enumerate((("train", 120), ("valid", 6), ("test", 6))):
        rows = synthetic_pairs(size, seed=300 + offset)
        (folder / f"{name}.jsonl").write_text(
            "".join(json.dumps({"de": r["de"], "en": r["en"]}) + "\n" for r in rows)
        )


def run_section(heading: str, local: dict, hub: CapturedHub, monkeypatch, capsys) -> tuple[str, dict]:
    """Every command of the section, in order; a repository pushed earlier stands in for its Hub id."""
    text = section(heading)
    printed = {}
    for line in commands(text):
        if line in NOT_RUN:
            continue
        pushed = {commit["repo_id"]: hub.folder(commit["repo_id"]) for commit in hub.commits}
        printed[line] = run_line(line, {**local, **pushed}, monkeypatch, capsys)
    # What each command printed, kept beside the test's folders (pytest --basetemp=DIR to read it).
    transcript = Path.cwd() / "readme_transcript.txt"
    with transcript.open("a", encoding="utf-8") as out:
        out.writelines(f"$ {line}\n{output}\n" for line, output in printed.items())
    return text, printed


def check_python(text: str, heading: str, model: str, pushed: Path, capsys) -> None:
    """The section's Python: in this process on the run's folder, and where the package cannot be imported
    on what was pushed (as a user who downloaded the repository would)."""
    for code in blocks(text, "python"):
        exec(compile(code, f"README.md ({heading})", "exec"), {})
        assert capsys.readouterr().out.strip()
        remote = code.replace(f'"{model}"', f'"{pushed}"')
        blocked = 'import sys\nsys.modules["vanilla_transformer"] = None\n'
        result = run_without_the_package(blocked + remote, folder=pushed.parent)
        assert result.stdout.strip(), "the README's Python printed nothing where the package is not installed"
        # transformers asks on the terminal before it runs a folder's code unless told it may: never here.
        assert "run the custom code?" not in result.stdout + result.stderr


def test_the_readme_translation_path_from_the_hub_to_a_fine_tuned_model(workspace, monkeypatch, capsys):
    folder, local, hub = workspace
    heading, model = "Translation, from the Hub", "runs/multi30k-de-en/model"
    text, printed = run_section(heading, local, hub, monkeypatch, capsys)
    assert any("bentrevett/multi30k" in line for line in printed), "the section reads no Hub data set"
    assert (folder / model / "model.safetensors").is_file()
    evaluated = next(out for line, out in printed.items() if line.startswith("vanilla-transformer evaluate"))
    scores = json.loads(evaluated[evaluated.index("{") :].split("\n}")[0] + "\n}")
    assert scores["split"] == "test" and scores["sentences"] == 8 and 0 <= scores["sacrebleu"] <= 100
    translated = next(out for line, out in printed.items() if line.startswith("echo "))
    assert len(translated.splitlines()) == 1 and translated.strip()
    # The push sent the complete folder in one commit, where the README's repository id says.
    assert [commit["repo_id"] for commit in hub.commits] == ["YOUR_NAME/multi30k-de-en"]
    pushed = hub.folder("YOUR_NAME/multi30k-de-en")
    assert {"config.json", "model.safetensors", "tokenizer.json", "README.md"} <= {
        p.name for p in pushed.iterdir()
    }
    check_python(text, heading, model, pushed, capsys)

    # Then the fine-tuning section: from the pushed model, on the reader's own files, pushed again.
    news_files(folder / "path" / "to" / "news")
    run_section("Fine-tuning a trained model", local, hub, monkeypatch, capsys)
    tuned = folder / "runs" / "news-de-en" / "model"
    assert (tuned / "tokenizer.json").read_bytes() == (pushed / "tokenizer.json").read_bytes()
    assert f"fine-tuned from {pushed}" in (tuned / "README.md").read_text()
    assert [commit["repo_id"] for commit in hub.commits][-1] == "YOUR_NAME/news-de-en"


def test_the_readme_sentiment_path_from_the_hub(workspace, monkeypatch, capsys):
    folder, local, hub = workspace
    heading, model = "Sentiment classification", "runs/imdb-supervised/model"
    text, printed = run_section(heading, local, hub, monkeypatch, capsys)
    assert any("stanfordnlp/imdb" in line for line in printed), "the section reads no Hub data set"
    evaluated = next(
        out for line, out in printed.items() if line.startswith("vanilla-transformer classify evaluate")
    )
    metrics = json.loads(evaluated[evaluated.index("{") :])
    assert metrics["examples"] == 40 and metrics["accuracy"] > 0.8
    assert [commit["repo_id"] for commit in hub.commits] == ["YOUR_NAME/imdb-sentiment"]
    check_python(text, heading, model, hub.folder("YOUR_NAME/imdb-sentiment"), capsys)
