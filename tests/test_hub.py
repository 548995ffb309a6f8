"""push_to_hub and the `push` command, tested offline: the upload is intercepted at huggingface_hub's
commit call (the files it would send land in a folder), and that folder must load as a Hub download
does, with trust_remote_code in a real virtualenv that has torch and transformers but not this package."""

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers
from conftest import run_without_the_package, tiny_config
from huggingface_hub import ModelCard
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.cli import main
from vanilla_transformer.hub import push_model
from vanilla_transformer.model_card import Result, write_model_card

SENTENCES = ["a wonderful film", "great acting"]


@pytest.fixture
def trained_folder(tokenizer, tmp_path):
    """A saved translation model with the filled card a training run writes (results included)."""
    folder = tmp_path / "run" / "model"
    model = VanillaTransformerForConditionalGeneration(tiny_config(source_lang="en", target_lang="ko")).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    result = Result("translation", "bleu", "sacreBLEU", 12.34, "toy", "json", "test")
    write_model_card(
        folder, model, task="translation", summary="A toy run.", results=[result], datasets=[], training={}
    )
    (folder / "eval").mkdir()
    (folder / "eval" / "trainer_state.json").write_text("{}")  # a training by-product
    return folder


DECODINGS = {"greedy": dict(num_beams=1, max_new_tokens=8), "beam": dict(num_beams=3, max_new_tokens=8)}


def _translations(folder, **decoding) -> dict[str, list[str]]:
    """{decoding: translations of SENTENCES}, greedy and beam, with the key/value cache unless told."""
    translate = pipeline("translation", model=str(folder), trust_remote_code=True)
    return {
        name: [item["translation_text"] for item in translate(SENTENCES, **settings, **decoding)]
        for name, settings in DECODINGS.items()
    }


def test_push_command_uploads_everything_in_one_commit(hub, trained_folder):
    main(["push", "--model", str(trained_folder), "--repo-id", "someone/tiny-en-ko"])
    assert len(hub.commits) == 1 and hub.commits[0]["repo_id"] == "someone/tiny-en-ko"
    pushed = hub.folder("someone/tiny-en-ko")
    names = {path.name for path in pushed.iterdir()}
    assert {
        "model.safetensors",
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "README.md",
        "configuration_vanilla_transformer.py",
        "modeling_vanilla_transformer.py",
        "translation_pipeline.py",
    } <= names
    assert "eval" not in names  # training by-products stay home
    card = ModelCard.load(pushed / "README.md")
    assert card.data.eval_results[0].metric_value == 12.34
    assert _translations(pushed) == _translations(trained_folder)


def test_a_model_folder_with_a_parity_report_is_pushed_as_a_model(hub, trained_folder, capsys):
    """``parity --quantize int8 --report MODEL`` leaves a PyTorch report in a model folder: ``push`` still
    sends it as the model it is (``push_folder``), not as an export; a damaged report is not read."""
    (trained_folder / "parity.json").write_text('{"engine": "pytorch", "precision": "int8"', encoding="utf-8")
    main(["push", "--model", str(trained_folder), "--repo-id", "someone/tiny-en-ko"])
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"Pushed {trained_folder} to ")  # no parity lines
    names = {path.name for path in hub.folder("someone/tiny-en-ko").iterdir()}
    assert {"model.safetensors", "modeling_vanilla_transformer.py"} <= names and "eval" not in names


def test_push_refuses_an_incomplete_folder_before_sending_anything(hub, trained_folder):
    (trained_folder / "tokenizer.json").unlink()
    (trained_folder / "tokenizer_config.json").unlink()
    (trained_folder / "translation_pipeline.py").unlink()
    with pytest.raises(SystemExit, match=r"lacks tokenizer.json, translation_pipeline.py"):
        main(["push", "--model", str(trained_folder), "--repo-id", "someone/broken"])
    assert hub.commits == []


def test_push_model_keeps_the_runs_card_and_sends_the_tokenizer(hub, trained_folder, tokenizer):
    model = AutoModelForSeq2SeqLM.from_pretrained(trained_folder)
    commit = push_model(model, "someone/tiny", tokenizer=tokenizer, tags=["toy"])
    assert commit.commit_url.startswith("https://huggingface.co/someone/tiny/commit/")
    assert len(hub.commits) == 1
    pushed = hub.folder("someone/tiny")
    card = ModelCard.load(pushed / "README.md")
    assert "toy" in card.data.tags and "vanilla-transformer" in card.data.tags
    assert card.data.eval_results[0].metric_value == 12.34  # the run's numbers, not a generic card
    reloaded = AutoModelForSeq2SeqLM.from_pretrained(pushed).eval()
    ids = torch.tensor([[5, 6, 7, 2]])
    torch.testing.assert_close(
        reloaded(input_ids=ids, decoder_input_ids=ids).logits,
        model(input_ids=ids, decoder_input_ids=ids).logits,
    )


def test_push_model_of_an_in_memory_model_writes_a_card(hub):
    model = VanillaTransformerForConditionalGeneration(tiny_config())
    push_model(model, "someone/untrained")
    card = ModelCard.load(hub.folder("someone/untrained") / "README.md")
    assert card.data.pipeline_tag == "translation" and card.data.library_name == "transformers"
    assert "no evaluation results" in card.text
    assert "automatically generated" not in card.text  # transformers' generic card did not replace ours


def test_transformers_push_to_hub_sends_complete_remote_code(hub, monkeypatch):
    """``model.push_to_hub`` is transformers' own (its generic card): the folder it sends still carries
    the model code and the translation pipeline that ``trust_remote_code`` users need."""
    import transformers.utils.hub as transformers_hub
    from huggingface_hub import ModelCard as Card

    monkeypatch.setattr(transformers_hub, "create_and_tag_model_card", lambda *a, **k: Card("generic"))
    model = VanillaTransformerForConditionalGeneration(tiny_config())
    model.push_to_hub("someone/plain")
    pushed = hub.folder("someone/plain")
    names = {path.name for path in pushed.iterdir()}
    assert {"modeling_vanilla_transformer.py", "configuration_vanilla_transformer.py"} <= names
    assert "translation_pipeline.py" in names
    config = json.loads((pushed / "config.json").read_text())
    assert config["custom_pipelines"]["translation"]["impl"] == "translation_pipeline.TranslationPipeline"


def _installed_closure(*names: str) -> list[importlib.metadata.Distribution]:
    """The installed distributions ``names`` need to run: each one and, recursively, every requirement
    whose marker holds on this interpreter with no extra requested (what ``pip install name`` brings)."""
    found: dict[str, importlib.metadata.Distribution] = {}
    wanted = list(names)
    while wanted:
        name = canonicalize_name(wanted.pop())
        if name in found:
            continue
        found[name] = importlib.metadata.distribution(name)
        for line in found[name].requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                wanted.append(requirement.name)
    return list(found.values())


def fresh_virtualenv(folder: Path) -> Path:
    """A real virtualenv in ``folder`` whose site-packages holds torch and transformers, the builds and
    versions installed here, with what they require and nothing else (no accelerate, datasets, this
    package...), as a user's environment after ``pip install torch transformers``. Each distribution is
    linked, not copied: the virtualenv takes a second to build instead of a minute to install into (CI's
    oldest stage has the oldest transformers installed, so the test runs there on it)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    (site_packages,) = folder.glob("lib/python*/site-packages")
    for distribution in _installed_closure("torch", "transformers"):
        if distribution.files is None:
            raise AssertionError(
                f"{distribution.metadata['Name']} is installed without a RECORD of its files"
            )
        for top in {file.parts[0] for file in distribution.files} - {"..", "__pycache__"}:
            if not (site_packages / top).exists():
                (site_packages / top).symlink_to(distribution.locate_file(top))
    return folder / "bin" / "python"


LOAD_IN_FRESH_VENV = """
import json, sys
try:
    import vanilla_transformer
except ImportError:
    pass
else:
    raise SystemExit("vanilla_transformer is importable in the fresh virtualenv")
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline
model = AutoModelForSeq2SeqLM.from_pretrained(sys.argv[1], trust_remote_code=True)
assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
translate = pipeline("translation", model=sys.argv[1], trust_remote_code=True)
sentences, decodings = json.loads(sys.argv[2]), json.loads(sys.argv[3])
translations = {
    name: [item["translation_text"] for item in translate(sentences, **settings)]
    for name, settings in decodings.items()
}
import torch, transformers
print(json.dumps({"torch": torch.__version__, "transformers": transformers.__version__, "translations": translations}))
"""


def test_pushed_folder_loads_in_a_fresh_virtualenv_without_the_package(hub, trained_folder, tmp_path):
    """The code that travels with the weights (model, configuration, translation pipeline) runs where only
    torch and transformers are installed: a user who downloads the folder brings their own transformers,
    any release the package declares (CI runs this at both ends of the range). Its cached greedy and beam
    decoding there equals this process's decoding without the cache (a renamed cache argument, as in
    transformers 5.24, would leave each step blind to the ones before)."""
    main(["push", "--model", str(trained_folder), "--repo-id", "someone/tiny-en-ko"])
    pushed = hub.folder("someone/tiny-en-ko")
    python = fresh_virtualenv(tmp_path / "venv")
    result = run_without_the_package(
        LOAD_IN_FRESH_VENV,
        str(pushed),
        json.dumps(SENTENCES),
        json.dumps(DECODINGS),
        folder=tmp_path,
        python=python,
    )
    printed = json.loads(result.stdout.strip().splitlines()[-1])
    assert printed == {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "translations": _translations(trained_folder, use_cache=False),
    }


def test_the_cards_how_to_use_runs_where_the_package_is_not_installed(hub, trained_folder, tmp_path):
    """The card a pushed folder carries tells its readers how to load it: that code, run as written on the
    downloaded folder where the package cannot be imported, loads the model and its tokenizer without
    transformers stopping to ask on the terminal whether it may run the folder's code."""
    import re

    main(["push", "--model", str(trained_folder), "--repo-id", "someone/tiny-en-ko"])
    pushed = hub.folder("someone/tiny-en-ko")
    card = (pushed / "README.md").read_text(encoding="utf-8")
    usage = re.search(r"## How to use\n\n```python\n(.*?)```", card, re.S).group(1)
    script = 'import sys\nsys.modules["vanilla_transformer"] = None\n'
    script += re.sub(
        r'from_pretrained\("[^"]*"', f'from_pretrained("{pushed}"', usage
    )  # the id the card names
    script += "print(type(model).__name__, len(tokenizer))\n"
    result = run_without_the_package(script, folder=tmp_path)
    assert "run the custom code?" not in result.stdout + result.stderr
    expected = len(AutoTokenizer.from_pretrained(trained_folder))
    assert result.stdout.split()[-2:] == ["VanillaTransformerForConditionalGeneration", str(expected)]


def test_a_module_the_remote_code_imports_is_part_of_a_complete_folder(trained_folder):
    """translation_pipeline.py imports long_inputs.py, which trust_remote_code downloads with it: a folder
    without it is incomplete, named before anything is sent."""
    from vanilla_transformer.hub import missing_files

    assert missing_files(trained_folder) == []
    (trained_folder / "long_inputs.py").unlink()
    assert missing_files(trained_folder) == ["long_inputs.py"]
