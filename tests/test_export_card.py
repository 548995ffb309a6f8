"""An export's card and its upload: ``model_card.write_export_card`` (the engine, the source model's
metadata, the parity table, the command that runs it) and ``push`` of a CTranslate2 or ONNX export folder,
offline (the Hub is ``conftest.CapturedHub``): model.bin goes up, the parity lines are printed first, a
missing file is named in one line."""

import json
from pathlib import Path

import pytest
from conftest import encoder_only_config, run_without_the_package, tiny_config
from huggingface_hub import ModelCard

from vanilla_transformer import (
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerForMaskedLM,
    VanillaTransformerForSequenceClassification,
)
from vanilla_transformer.cli import main
from vanilla_transformer.hub import push_export
from vanilla_transformer.model_card import Result, write_export_card, write_model_card
from vanilla_transformer.onnx_export import ENCODER_ONLY_FILE, SEQ2SEQ_FILES
from vanilla_transformer.outputs import MARKER
from vanilla_transformer.parity import lines, table, write_report

REPO = "someone/de-en-ct2-int8"


@pytest.fixture
def source(tokenizer, tmp_path):
    """A translation model as a training run leaves it (``de-en/model``), with its card: languages, a Hub
    data set, the license."""
    folder = tmp_path / "de-en" / "model"
    model = VanillaTransformerForConditionalGeneration(tiny_config(source_lang="de", target_lang="en")).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    result = Result("translation", "bleu", "sacreBLEU", 12.34, "bentrevett/multi30k", "json", "test")
    write_model_card(
        folder,
        model,
        task="translation",
        name="de-en",
        summary="A toy run.",
        results=[result],
        datasets=["bentrevett/multi30k"],
        training={},
        language=["de", "en"],
    )
    return folder


def parity_report(source: Path, engine: str = "ctranslate2", precision: str = "int8") -> dict:
    """A report as ``parity.build_report`` writes it, its figures made up."""
    return {
        "engine": engine,
        "precision": precision,
        "model": str(source),
        "sample": "multi30k_de_en test",
        "decoding": {"num_beams": 4, "length_penalty": 0.6},
        "sentences": 1000,
        "identical": 968,
        "identical_share": 0.968,
        "token_disagreement": 0.214,
        "first_difference": {
            "line": 17,
            "input": "Ein Mann fährt Fahrrad.",
            "model": "A man is riding a bike.",
            "candidate": "A man rides a bicycle.",
        },
        "speed": {"model": 41.3, "candidate": 160.2, "ratio": 3.88, "seconds": [24.2, 6.2]},
        "bleu": {"model": 38.71, "candidate": 38.45, "difference": -0.26},
        "machine": "AMD EPYC 7763 64-Core Processor",
        "date": "2025-06-01",
        "versions": {"torch": "2.7.0", "transformers": "5.0.0", "ctranslate2": "4.6.0"},
    }


def fake_ct2_export(folder: Path, source: Path, tokenizer, report: dict | None) -> Path:
    """The files ``export-ct2`` writes (``model.bin`` as bytes that stand for the weights), with its
    parity report and card."""
    folder.mkdir(parents=True)
    (folder / "model.bin").write_bytes(bytes(range(256)) * 4)
    (folder / "config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>"}))
    (folder / "shared_vocabulary.json").write_text(json.dumps(tokenizer.convert_ids_to_tokens(range(99))))
    tokenizer.save_pretrained(folder)
    (folder / "generation_config.json").write_text(json.dumps({"num_beams": 4, "length_penalty": 0.6}))
    if report is not None:
        write_report(report, folder)
    write_export_card(folder, source, "ctranslate2", "int8", report)
    (folder / MARKER).write_text(json.dumps({"command": "export-ct2", "files": []}))
    return folder


@pytest.fixture
def ct2_export(source, tokenizer, tmp_path):
    return fake_ct2_export(tmp_path / "de-en-ct2-int8", source, tokenizer, parity_report(source))


# -- the card -----------------------------------------------------------------------------------------------


def test_the_card_of_an_export_names_its_model_engine_and_parity(ct2_export, source):
    card = ModelCard.load(ct2_export / "README.md")
    report = parity_report(source)
    assert card.data.library_name == "ctranslate2" and card.data.pipeline_tag == "translation"
    assert {"vanilla-transformer", "ctranslate2", "translation"} <= set(card.data.tags)
    assert card.data.license == "apache-2.0"  # the source card's metadata
    assert card.data.language == ["de", "en"] and card.data.datasets == ["bentrevett/multi30k"]
    assert card.data.base_model is None  # a local folder is no Hub id
    assert "\n# de-en (CTranslate2 int8)\n" in card.text
    assert "## How faithful this export is\n\nMeasured" in card.text and table(report) in card.text
    assert "vanilla-transformer translate --engine ctranslate2 --model de-en-ctranslate2-int8" in card.text


def test_the_card_of_an_unchecked_export_says_nothing_was_measured(source, tokenizer, tmp_path):
    folder = fake_ct2_export(tmp_path / "unchecked", source, tokenizer, None)
    card = ModelCard.load(folder / "README.md")
    assert "written with `--no-check`: nothing was measured" in card.text
    assert "identical outputs" not in card.text


def fake_onnx_export(folder: Path, model, tokenizer, report: dict | None, source: Path) -> Path:
    """The files ``export-onnx`` writes (the graphs as stand-in bytes), with its report and card."""
    folder.mkdir(parents=True)
    model.config.architectures = [type(model).__name__]  # as a model loaded from its folder records
    graphs = SEQ2SEQ_FILES if model.config.is_encoder_decoder else (ENCODER_ONLY_FILE,)
    for name in graphs:
        (folder / name).write_bytes(b"onnx graph")
    model.config.save_pretrained(folder)
    if model.config.is_encoder_decoder:
        model.generation_config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    if report is not None:
        write_report(report, folder)
    write_export_card(folder, source, "onnx", "float32", report)
    return folder


def test_the_cards_of_onnx_exports(source, tokenizer, tmp_path):
    translation = VanillaTransformerForConditionalGeneration(tiny_config())
    report = parity_report(source, "onnx", "float32")
    folder = fake_onnx_export(tmp_path / "onnx", translation, tokenizer, report, source)
    card = ModelCard.load(folder / "README.md")
    assert card.data.library_name == "onnx" and card.data.pipeline_tag == "translation"
    assert "# de-en (ONNX Runtime float32)" in card.text and table(report) in card.text
    assert "vanilla-transformer translate --engine onnx --model de-en-onnx-float32" in card.text

    classifier = VanillaTransformerForSequenceClassification(encoder_only_config(num_labels=2))
    unnamed = tmp_path / "sentiment"  # a source folder without a card: no license, data or language
    folder = fake_onnx_export(tmp_path / "onnx-classifier", classifier, tokenizer, None, unnamed)
    card = ModelCard.load(folder / "README.md")
    assert card.data.library_name == "onnx" and card.data.pipeline_tag == "text-classification"
    assert card.data.license is None and card.data.language is None
    assert "# sentiment (ONNX Runtime float32)" in card.text
    assert 'onnxruntime.InferenceSession("sentiment-onnx-float32/model.onnx")' in card.text
    assert "--engine" not in card.text


def test_the_classifier_cards_use_runs_on_a_real_onnx_export_without_the_package(tokenizer, tmp_path):
    """The card's onnxruntime code, run as written on the exported folder where the package cannot be
    imported, gives the model's logits (and runs none of the folder's code)."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    import re

    import torch

    from vanilla_transformer.onnx_export import export_onnx

    model = VanillaTransformerForSequenceClassification(encoder_only_config(num_labels=2)).eval()
    model.config.architectures = [type(model).__name__]  # as a model loaded from its folder records
    folder = tmp_path / "sentiment-onnx-float32"  # the folder the card's download command names
    export_onnx(model, folder, tokenizer)
    write_export_card(folder, tmp_path / "sentiment", "onnx", "float32", None)
    usage = re.search(r"```python\n(.*?)```", (folder / "README.md").read_text(encoding="utf-8"), re.S).group(
        1
    )
    script = 'import sys\nsys.modules["vanilla_transformer"] = None\n' + usage + "print(logits.tolist())\n"
    result = run_without_the_package(script, folder=tmp_path)
    assert "custom code" not in result.stdout + result.stderr
    with torch.no_grad():
        expected = model(**tokenizer(["a text"], return_tensors="pt")).logits
    torch.testing.assert_close(torch.tensor(json.loads(result.stdout.splitlines()[-1])), expected)


def test_the_card_of_a_model_the_check_does_not_compare_says_why(tokenizer, tmp_path):
    masked = VanillaTransformerForMaskedLM(encoder_only_config())
    folder = fake_onnx_export(tmp_path / "mlm", masked, tokenizer, None, tmp_path / "imdb-mlm")
    card = ModelCard.load(folder / "README.md")
    assert card.data.pipeline_tag == "fill-mask"
    assert "the parity check does not compare a fill-mask model's outputs" in card.text
    assert "--no-check" not in card.text and "id2label" not in card.text


# -- push ----------------------------------------------------------------------------------------------------


def test_push_sends_the_export_with_model_bin_after_its_parity_lines(hub, ct2_export, source, capsys):
    main(["push", "--model", str(ct2_export), "--repo-id", REPO])
    printed = capsys.readouterr().out.splitlines()
    url = f"https://huggingface.co/{REPO}/commit/{'0' * 40}"
    assert printed == [*lines(parity_report(source)), f"Pushed {ct2_export} to {url}"]
    assert len(hub.commits) == 1 and hub.commits[0]["message"] == "Upload CTranslate2 int8 export"
    pushed = hub.folder(REPO)
    sent = sorted(path.name for path in pushed.iterdir())
    assert sent == sorted(path.name for path in ct2_export.iterdir() if path.name != MARKER)
    assert (pushed / "model.bin").read_bytes() == (ct2_export / "model.bin").read_bytes()
    assert json.loads((pushed / "parity.json").read_text()) == parity_report(source)
    card = ModelCard.load(pushed / "README.md")
    assert table(parity_report(source)) in card.text
    assert f"hf download {REPO} --local-dir de-en-ctranslate2-int8" in card.text  # the repository's id
    assert "USER/NAME" in (ct2_export / "README.md").read_text()  # the folder's own card is as it was


def test_push_writes_the_card_of_an_export_from_its_parity_report(hub, ct2_export, source, capsys):
    (ct2_export / "README.md").unlink()
    main(["push", "--model", str(ct2_export), "--repo-id", REPO])
    assert capsys.readouterr().out.startswith(f"Wrote {ct2_export / 'README.md'} (from its parity.json)\n")
    card = ModelCard.load(hub.folder(REPO) / "README.md")
    assert card.data.library_name == "ctranslate2" and card.data.language == ["de", "en"]
    assert table(parity_report(source)) in card.text


def test_push_of_an_export_without_a_report_says_so(hub, source, tokenizer, tmp_path, capsys):
    folder = fake_ct2_export(tmp_path / "unchecked", source, tokenizer, None)
    main(["push", "--model", str(folder), "--repo-id", REPO])
    first = capsys.readouterr().out.splitlines()[0]
    unmeasured = (
        "carries no parity report (parity.json): how faithfully it reproduces its model was not measured."
    )
    assert first == f"{folder} {unmeasured}"
    assert hub.commits[0]["message"] == "Upload CTranslate2 export"
    assert (hub.folder(REPO) / "model.bin").is_file()


@pytest.mark.parametrize(
    "removed, named",
    [
        (
            ["shared_vocabulary.json", "tokenizer.json", "tokenizer_config.json"],
            "shared_vocabulary.json, tokenizer.json",
        ),
        (["model.bin"], "model.bin"),  # still an export: its parity report names the engine
        (["parity.json", "README.md"], "README.md"),  # no card, and no report to write one from
    ],
)
def test_push_refuses_an_incomplete_export_in_one_line(hub, ct2_export, removed, named, capsys):
    for name in removed:
        (ct2_export / name).unlink()
    with pytest.raises(SystemExit) as refusal:
        main(["push", "--model", str(ct2_export), "--repo-id", REPO])
    message = str(refusal.value)
    assert message.startswith(f"error: {ct2_export} is not a complete CTranslate2") and "\n" not in message
    assert f"it lacks {named}." in message
    assert capsys.readouterr().out == "" and hub.commits == []  # refused before its figures are shown


def test_push_refuses_an_onnx_export_missing_a_graph(hub, source, tokenizer, tmp_path):
    model = VanillaTransformerForConditionalGeneration(tiny_config())
    folder = fake_onnx_export(
        tmp_path / "onnx", model, tokenizer, parity_report(source, "onnx", "float32"), source
    )
    (folder / "decoder_with_past_model.onnx").unlink()
    with pytest.raises(
        FileNotFoundError,
        match=r"complete ONNX Runtime float32 export: it lacks decoder_with_past_model.onnx\.",
    ):
        push_export(folder, REPO)
    assert hub.commits == []


def test_push_refuses_the_demo_with_an_export(hub, ct2_export):
    with pytest.raises(SystemExit, match="--with-demo: .* is an export"):
        main(["push", "--model", str(ct2_export), "--repo-id", REPO, "--with-demo"])
    assert hub.commits == []


def test_a_real_ctranslate2_export_pushed_translates_as_the_folder_does(hub, source, tmp_path):
    pytest.importorskip("ctranslate2")
    from vanilla_transformer.ctranslate2_export import export_ctranslate2, translate_ctranslate2

    folder = export_ctranslate2(source, tmp_path / "de-en-ct2-int8", quantization="int8")
    write_report(parity_report(source), folder)
    write_export_card(folder, source, "ctranslate2", "int8", parity_report(source))
    push_export(folder, REPO)
    pushed = hub.folder(REPO)
    assert {path.name for path in pushed.iterdir()} == {path.name for path in folder.iterdir()} - {MARKER}
    assert {"model.bin", "shared_vocabulary.json", "config.json", "README.md"} <= {
        p.name for p in pushed.iterdir()
    }
    sentences = ["a wonderful film", "great acting"]
    assert translate_ctranslate2(pushed, sentences, max_decoding_length=6) == translate_ctranslate2(
        folder, sentences, max_decoding_length=6
    )
