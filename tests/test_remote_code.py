"""A folder's own Python files run only when the user asks (``--trust-remote-code``, or
``trust_remote_code=True`` in Python), as transformers itself requires: the demo and every other command
that loads a folder serve folders saved by this package with the package's own classes and pipelines.

Each folder here has every ``.py`` file changed to write a sentinel file when it is imported."""

import importlib.util
import json
import shutil

import pytest

from vanilla_transformer.cli import main
from vanilla_transformer.demo import classify, load_for_demo

CODE_FILES = (
    "configuration_vanilla_transformer.py",
    "modeling_vanilla_transformer.py",
    "classification_pipeline.py",
    "translation_pipeline.py",
)


def _change_code(folder, sentinel) -> None:
    """Every .py file of ``folder`` writes ``sentinel`` (an absolute path) when imported: transformers runs
    a folder's code from a copy in its modules cache, so the path cannot be relative to the file."""
    for name in CODE_FILES:
        path = folder / name
        text = path.read_text(encoding="utf-8")
        line = f"import pathlib as _p; _p.Path({str(sentinel)!r}).write_text({name!r})\n"
        text = text.replace(
            "from __future__ import annotations\n", f"from __future__ import annotations\n{line}", 1
        )
        assert line in text, name
        path.write_text(text, encoding="utf-8")


@pytest.fixture
def changed(tmp_path, classifier_folder, translation_model):
    """{task: folder}: copies of conftest's shared classifier and trained translation model, saved by the
    package, with changed code; and the sentinel file that code writes."""
    sentinel = tmp_path / "the-folders-code-ran"
    folders = {}
    for task, saved in {"classifier": classifier_folder, "translation": translation_model}.items():
        folder = tmp_path / f"changed-{task}-{tmp_path.name}"  # one name each in transformers' modules cache
        shutil.copytree(saved, folder)
        _change_code(folder, sentinel)
        folders[task] = folder
    return folders, sentinel


def test_the_demo_serves_a_changed_classifier_with_the_packages_own_code(changed):
    folders, sentinel = changed
    loaded = load_for_demo(folders["classifier"])
    assert not sentinel.exists()
    assert type(loaded.model).__module__ == "vanilla_transformer.modeling_vanilla_transformer"
    assert type(loaded.classifier).__module__ == "vanilla_transformer.classification_pipeline"
    scores, _ = classify(loaded, "a wonderful film")
    assert sum(scores.values()) == pytest.approx(1.0)
    load_for_demo(folders["translation"])
    assert not sentinel.exists()


def test_the_demo_runs_the_folders_code_when_asked(changed):
    folders, sentinel = changed
    loaded = load_for_demo(folders["classifier"], trust_remote_code=True)
    assert sentinel.exists()
    assert type(loaded.classifier).__module__ != "vanilla_transformer.classification_pipeline"


@pytest.mark.skipif(importlib.util.find_spec("gradio") is None, reason="demo needs gradio, an optional extra")
@pytest.mark.parametrize("flag", [[], ["--trust-remote-code"]], ids=["no flag", "--trust-remote-code"])
def test_the_demo_command_runs_the_folders_code_only_with_the_flag(changed, flag, monkeypatch):
    import gradio

    served = []
    monkeypatch.setattr(gradio.Blocks, "launch", lambda self, **kwargs: served.append(kwargs))
    folders, sentinel = changed
    main(["demo", "--model", str(folders["classifier"]), "--port", "7999", *flag])
    assert served and sentinel.exists() == bool(flag)


@pytest.mark.parametrize("command", ["translate", "attention", "classify evaluate"])
def test_the_commands_that_load_a_folder_run_none_of_its_code(command, changed, tmp_path):
    folders, sentinel = changed
    source, labelled = tmp_path / "in.txt", tmp_path / "labelled.jsonl"
    source.write_text("a wonderful film\n", encoding="utf-8")
    labelled.write_text(json.dumps({"text": "a wonderful film", "label": 1}) + "\n", encoding="utf-8")
    translation, classifier = str(folders["translation"]), str(folders["classifier"])
    main(
        {
            "translate": ["translate", "--model", translation, "--input", str(source), "--beams", "1"],
            "attention": ["attention", "--model", translation, "--text", "a film", "--target", "a film"]
            + ["--output", str(tmp_path / "maps")],
            "classify evaluate": ["classify", "evaluate", "--model", classifier, "--file", str(labelled)],
        }[command]
    )
    assert not sentinel.exists()


def test_a_tokenizer_that_names_custom_code_is_refused_without_the_flag(changed, tmp_path):
    """Its code would run (or transformers would ask on a terminal); the folder check refuses it in one
    line that says how to allow it."""
    folders, sentinel = changed
    folder = folders["translation"]
    shutil.copyfile(folder / "translation_pipeline.py", folder / "custom_tokenizer.py")
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    config |= {
        "tokenizer_class": "CustomTokenizer",
        "auto_map": {"AutoTokenizer": [None, "custom_tokenizer.X"]},
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    source = tmp_path / "in.txt"
    source.write_text("a wonderful film\n", encoding="utf-8")
    with pytest.raises(SystemExit) as exit_:
        main(["translate", "--model", str(folder), "--input", str(source)])
    message = str(exit_.value.code)
    assert message.startswith(f"error: The tokenizer of {folder} (tokenizer_config.json) names custom code")
    assert "--trust-remote-code" in message and "\n" not in message
    assert not sentinel.exists()
