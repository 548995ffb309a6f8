"""Exports that prove themselves (parity.py): `export-ct2`, `export-onnx` and `parity` measure the export, or
the model served in int8 / bf16, against the PyTorch model on a sample, print two lines, write parity.json and
PARITY.md beside the export, and refuse a float32 export that disagrees, naming the first differing line,
before anything is published."""

import json
import shutil

import numpy as np
import pytest
import torch
from conftest import encoder_only_config
from test_input_checks import refused

from vanilla_transformer import VanillaTransformerForSequenceClassification
from vanilla_transformer.cli import main
from vanilla_transformer.data.synthetic import synthetic_pairs

pytest.importorskip("onnxruntime", reason="the `onnx` extra (onnx, onnxscript, onnxruntime)")
ctranslate2 = pytest.importorskip(
    "ctranslate2", reason='the optional CTranslate2 engine: pip install "vanilla-transformer[ctranslate2]"'
)

# Once, on the newest releases (.ci/run): the engines are not pinned, and the model, generate() and the
# exports' graphs are checked at both ends of the ranges by test_onnx.py, test_generation.py and
# test_save_load.py.
pytestmark = pytest.mark.newest_only


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """40 held-out English -> German pairs of the shared run's synthetic task: as plain lines and as JSON
    Lines with references."""
    folder = tmp_path_factory.mktemp("sample")
    pairs = synthetic_pairs(40, seed=7)
    lines = folder / "sentences.txt"
    lines.write_text("".join(f"{pair['en']}\n" for pair in pairs), encoding="utf-8")
    data = folder / "pairs.jsonl"
    data.write_text("".join(json.dumps({"translation": pair}) + "\n" for pair in pairs), encoding="utf-8")
    return lines, data


def _printed(capsys) -> list[str]:
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith(("Parity", "Speed"))]


@pytest.mark.parametrize("command", ["export-ct2", "export-onnx"])
def test_float32_exports_report_parity_with_the_model(command, translation_model, sample, tmp_path, capsys):
    """A float32 export agrees with generate() at the model's own beam search on every line of the sample,
    and says so in two lines, parity.json, PARITY.md and its card."""
    output = tmp_path / "export"
    main(
        [command, "--model", str(translation_model), "--output", str(output), "--check-file", str(sample[1])]
    )
    first, second = _printed(capsys)
    engine = "CTranslate2" if command == "export-ct2" else "ONNX Runtime"
    saved = json.loads((translation_model / "generation_config.json").read_text())
    assert first.startswith(f"Parity of {engine} float32 with the PyTorch model, beam {saved['num_beams']}")
    assert "on 40 lines (pairs.jsonl): 40 identical (100.0%)" in first and "BLEU" in first
    assert second.startswith("Speed on ") and f"{output / 'parity.json'}" in second
    report = json.loads((output / "parity.json").read_text())
    assert report["identical"] == 40 and report["first_difference"] is None and report["differences"] == []
    assert report["decoding"]["num_beams"] == saved["num_beams"]
    assert report["bleu"]["difference"] == 0
    assert report["speed"]["model"] > 0 and report["speed"]["candidate"] > 0
    table = (output / "PARITY.md").read_text()
    assert "| identical outputs | | 40 of 40 (100.0%) |" in table
    assert "| identical outputs |" in (output / "README.md").read_text()  # the export's card carries it


def _perturb(model) -> None:
    """What a broken conversion would do: one feed-forward weight of the first decoder layer changed."""
    with torch.no_grad():
        weight = model.model.decoder.layers[0].ffn.fc2.weight
        weight.add_(torch.randn_like(weight) * weight.std() * 3)


@pytest.fixture
def altered_exports(monkeypatch):
    """Both exporters convert a model whose weights were altered after loading (the reference is not)."""
    from vanilla_transformer import ctranslate2_export, onnx_export

    original_spec, original_seq2seq = ctranslate2_export.transformer_spec, onnx_export._export_seq2seq

    def altered_spec(model, *args, **kwargs):
        _perturb(model)
        return original_spec(model, *args, **kwargs)

    def altered_seq2seq(model, *args, **kwargs):
        _perturb(model)
        return original_seq2seq(model, *args, **kwargs)

    monkeypatch.setattr(ctranslate2_export, "transformer_spec", altered_spec)
    monkeypatch.setattr(onnx_export, "_export_seq2seq", altered_seq2seq)


@pytest.mark.parametrize("command", ["export-ct2", "export-onnx"])
def test_an_altered_float32_export_is_refused_naming_the_first_differing_line(
    command, altered_exports, translation_model, sample, tmp_path, capsys
):
    output = tmp_path / "export"
    argv = [
        command,
        "--model",
        str(translation_model),
        "--output",
        str(output),
        "--check-file",
        str(sample[0]),
    ]
    message = refused(argv)
    assert "float32 agrees with the model on" in message and "under the 99% bound" in message
    lines = sample[0].read_text(encoding="utf-8").splitlines()
    line = int(message.split("first difference: line ")[1].split()[0])
    assert repr(lines[line - 1])[:40] in message  # the input named by its line number in the user's file
    assert "--accept-disagreement" in message
    assert not output.exists() and not list(tmp_path.glob(".*"))  # nothing published, no staging left
    assert _printed(capsys)[0].startswith("Parity of")  # the figures came first

    main([*argv, "--accept-disagreement"])  # accepted: written, with the measured disagreement on record
    report = json.loads((output / "parity.json").read_text())
    assert report["identical_share"] < 0.99 and report["first_difference"]["line"] == line
    assert report["differences"][0] == report["first_difference"] and len(report["differences"]) <= 20


def test_quantized_export_reports_and_fails_only_past_the_users_bound(
    altered_exports, translation_model, sample, tmp_path, capsys
):
    output = tmp_path / "int8"
    argv = [
        "export-ct2",
        "--model",
        str(translation_model),
        "--output",
        str(output),
        "--check-file",
        str(sample[1]),
    ]
    main([*argv, "--quantization", "int8"])  # disagreeing, but no bound was set: reported, not refused
    report = json.loads((output / "parity.json").read_text())
    assert report["precision"] == "int8" and report["identical_share"] < 0.99
    assert report["bleu"]["model"] >= 0 and report["token_disagreement"] > 0
    first, _ = _printed(capsys)
    assert first.startswith("Parity of CTranslate2 int8") and "where they differ" in first
    message = refused(
        [*argv[:4], str(tmp_path / "bounded"), *argv[5:], "--quantization", "int8", "--min-identical", "99%"]
    )
    assert "under the 99% bound; first difference: line " in message and "a lower --min-identical" in message
    assert not (tmp_path / "bounded").exists()


def test_a_model_in_its_run_is_checked_on_the_runs_validation_split(
    translation_model, trained_run, tmp_path, capsys
):
    """No sample named: the run the folder is the model/ of records its validation data (read where training
    read it); a folder outside a run has none, and the export is refused before any work, naming the options."""
    main(
        [
            "export-ct2",
            "--model",
            str(translation_model),
            "--output",
            str(tmp_path / "ct2"),
            "--check-lines",
            "30",
        ]
    )
    first, _ = _printed(capsys)
    assert f"(validation split of {trained_run.name})" in first and "BLEU" in first

    alone = shutil.copytree(translation_model, tmp_path / "model")
    message = refused(["export-ct2", "--model", str(alone), "--output", str(tmp_path / "ct2-alone")])
    assert "--check-file FILE" in message and "--recipe NAME" in message and "--no-check" in message
    assert not (tmp_path / "ct2-alone").exists()
    empty = tmp_path / "empty.txt"
    empty.write_text("\n \n", encoding="utf-8")
    message = refused(
        ["export-onnx", "--model", str(alone), "--output", str(tmp_path / "o"), "--check-file", str(empty)]
    )
    assert message == f"error: --check-file: {empty} has no line with text to check the export on."


def test_serving_paths_report_parity(translation_model, sample, tmp_path, capsys):
    """`parity --quantize int8` / `--dtype bf16`: the PyTorch model served faster, measured the same way."""
    main(["parity", "--model", str(translation_model), "--quantize", "int8", "--check-file", str(sample[1])])
    first, second = _printed(capsys)
    assert first.startswith("Parity of PyTorch int8 with the PyTorch model") and "BLEU" in first
    assert "Report" not in second  # nothing written unless --report names a folder
    report_dir = tmp_path / "bf16"
    main(
        [
            "parity",
            "--model",
            str(translation_model),
            "--dtype",
            "bf16",
            "--check-file",
            str(sample[0]),
            "--report",
            str(report_dir),
        ]
    )
    report = json.loads((report_dir / "parity.json").read_text())
    assert report["engine"] == "pytorch" and report["precision"] == "bf16" and report["bleu"] is None
    assert 0 <= report["identical_share"] <= 1


def test_classifier_onnx_export_reports_identical_labels(tmp_path, tokenizer, capsys):
    torch.manual_seed(0)
    model = VanillaTransformerForSequenceClassification(encoder_only_config(num_labels=3)).eval()
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    texts = tmp_path / "texts.txt"
    texts.write_text("a wonderful film\nthe worst plot\n\nan ordinary day\n", encoding="utf-8")
    output = tmp_path / "onnx"
    main(
        [
            "export-onnx",
            "--model",
            str(tmp_path / "model"),
            "--output",
            str(output),
            "--check-file",
            str(texts),
        ]
    )
    first, _ = _printed(capsys)
    assert "on 3 texts (texts.txt): 3 identical (100.0%); largest probability difference" in first
    report = json.loads((output / "parity.json").read_text())
    assert report["largest_probability_difference"] < 1e-4 and np.isclose(report["identical_share"], 1.0)


def test_token_disagreement_is_an_edit_distance(tokenizer):
    """A word inserted at the start is one token's difference, not every later position shifted."""
    from vanilla_transformer.parity import token_disagreement

    words = "the red dog runs to the small house"
    length = len(tokenizer(text_target=words, add_special_tokens=False)["input_ids"])
    inserted = len(tokenizer(text_target="big", add_special_tokens=False)["input_ids"])
    assert token_disagreement(tokenizer, words, words) == 0
    assert token_disagreement(tokenizer, words, "big " + words) == pytest.approx(
        inserted / (length + inserted)
    )
    assert token_disagreement(tokenizer, words, "") == 1


def _babble(path, count: int = 64):
    """``count`` lines the shared model partly babbles on until its length bound (numbers, nonsense letters)
    beside sentences, whose length in characters orders them otherwise than their length in tokens: a line
    that runs to the bound (the longest source of its batch + 50) translates differently in another batch."""
    import random

    draw = random.Random(1)
    words = "the big small woman man dog tree bird follows says happy beautiful that".split()
    lines = []
    for index in range(count):
        if index % 3 == 0:
            lines.append(" ".join(draw.choice(words) for _ in range(draw.randint(2, 12))).capitalize() + " .")
        elif index % 3 == 1:
            lines.append(" ".join(str(draw.randint(0, 99999)) for _ in range(draw.randint(1, 8))))
        else:
            lines.append("".join(draw.choice("xyzqjkvw") for _ in range(draw.randint(3, 40))))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_both_sides_decode_the_same_batches(translation_model, tmp_path, capsys):
    """A float32 export is compared on the batches the model is: each engine batching the sample its own way
    (by characters, by tokens) gave some line another batch, another length bound and another translation,
    and a faithful export was refused at 63 of 64. `translate --engine onnx` batches as the PyTorch engine."""
    lines = _babble(tmp_path / "babble.txt")
    output = tmp_path / "ct2"
    main(
        ["export-ct2", "--model", str(translation_model), "--output", str(output), "--check-file", str(lines)]
    )
    assert "on 64 lines (babble.txt): 64 identical (100.0%)" in _printed(capsys)[0]

    from vanilla_transformer.inference import load_for_inference, translate
    from vanilla_transformer.onnx_export import OnnxTranslator

    main(["export-onnx", "--model", str(translation_model), "--output", str(tmp_path / "onnx"), "--no-check"])
    model, tokenizer = load_for_inference(translation_model, "cpu", "fp32")
    sentences = lines.read_text(encoding="utf-8").splitlines()
    onnx = OnnxTranslator(tmp_path / "onnx")(sentences, batch_size=32)
    assert onnx == translate(model, tokenizer, sentences, batch_size=32)


def test_data_file_samples_keep_the_line_numbers_of_the_users_file(
    altered_exports, translation_model, tmp_path, capsys
):
    """A JSON Lines file with blank lines and a CSV file under its header line: a differing input is named by
    the line it is on in the file; a pair with an empty source is no check (both sides give "")."""
    pairs = synthetic_pairs(12, seed=5)
    jsonl = tmp_path / "pairs.jsonl"
    rows = [json.dumps({"translation": pair}) for pair in pairs]
    rows.insert(3, json.dumps({"translation": {"en": "", "de": "Hallo"}}))
    jsonl.write_text("\n" + "\n\n".join(rows) + "\n", encoding="utf-8")
    csv_file = tmp_path / "pairs.csv"
    csv_file.write_text(
        "en,de\n" + "".join(f'"{pair["en"]}","{pair["de"]}"\n' for pair in pairs), encoding="utf-8"
    )
    for data in (jsonl, csv_file):
        output = tmp_path / f"ct2-{data.suffix[1:]}"
        argv = ["export-ct2", "--model", str(translation_model), "--output", str(output)]
        message = refused([*argv, "--check-file", str(data)])
        line = int(message.split("first difference: line ")[1].split()[0])
        text = data.read_text(encoding="utf-8").splitlines()[line - 1]
        source = json.loads(text)["translation"]["en"] if data is jsonl else text.split('","')[0][1:]
        assert repr(source)[:40] in message, (line, text, message)
        main([*argv, "--check-file", str(data), "--accept-disagreement"])
        report = json.loads((output / "parity.json").read_text())
        assert report["sentences"] == 12 and report["first_difference"]["line"] == line
        lines = data.read_text(encoding="utf-8").splitlines()
        for difference in report["differences"]:
            assert difference["input"] in lines[difference["line"] - 1]


def test_a_cut_line_is_named_by_its_line_in_the_users_file(translation_model, tmp_path, caplog):
    """Both sides cut a line longer than the model reads alike, and the one warning numbers it as the file
    does (the sides see chunks of the sample, reordered, blank lines left out)."""
    sentences = [pair["en"] for pair in synthetic_pairs(70, seed=3)]
    sentences[60] = " ".join(["the big dog follows the small bird ."] * 30)  # far past 128 tokens
    text = "\n\n".join(sentences[:5]) + "\n" + "\n".join(sentences[5:]) + "\n"  # 4 blank lines first
    check = tmp_path / "long.txt"
    check.write_text(text, encoding="utf-8")
    line = text.splitlines().index(sentences[60]) + 1
    with caplog.at_level("WARNING"):
        main(["parity", "--model", str(translation_model), "--dtype", "bf16", "--check-file", str(check)])
    warnings = [record.getMessage() for record in caplog.records if "Cut line" in record.getMessage()]
    assert len(warnings) == 1 and warnings[0].startswith(f"Cut line {line} to its first "), warnings


def test_parity_of_an_earlier_export(translation_model, sample, tmp_path, capsys):
    """`parity --export` on an export written unmeasured: its weights' type is read from the export (an int8
    export is no float32 one, held to no 99% bound), the report joins the export (its card, and the files
    `--force` may replace), and a refused check writes nothing."""
    export = tmp_path / "int8"
    base = ["--model", str(translation_model)]
    main(["export-ct2", *base, "--output", str(export), "--quantization", "int8", "--no-check"])
    main(["parity", *base, "--export", str(export), "--check-file", str(sample[1])])
    assert _printed(capsys)[-2].startswith("Parity of CTranslate2 int8 with the PyTorch model")
    report = json.loads((export / "parity.json").read_text())
    assert report["precision"] == "int8"
    assert "| identical outputs |" in (export / "README.md").read_text()  # the card carries it
    message = refused(
        [
            "parity",
            *base,
            "--export",
            str(export),
            "--check-file",
            str(sample[0]),
            "--min-identical",
            "100%",
            "--beams",
            "1",
        ]
    )
    assert "under the 100% bound" in message and "Nothing was written" in message
    assert json.loads((export / "parity.json").read_text()) == report  # the earlier report, as it was
    main(["export-ct2", *base, "--output", str(export), "--quantization", "bf16", "--force", "--no-check"])
    assert not (export / "parity.json").exists()  # replaced whole, the report parity added included
    main(["parity", *base, "--export", str(export), "--check-file", str(sample[0])])
    assert _printed(capsys)[-2].startswith("Parity of CTranslate2 bfloat16 with the PyTorch model")


def test_what_parity_refuses_in_one_line(translation_model, classifier_folder, sample, tmp_path, tokenizer):
    """An export of another kind of model, a model folder or nothing at all as --export, a masked LM, options
    that mean nothing for the model, a bound the sample cannot measure, a recipe in the other direction."""
    from vanilla_transformer import VanillaTransformerForMaskedLM

    ct2 = tmp_path / "ct2"
    main(["export-ct2", "--model", str(translation_model), "--output", str(ct2), "--no-check"])
    masked = tmp_path / "masked"
    VanillaTransformerForMaskedLM(encoder_only_config()).save_pretrained(masked)
    tokenizer.save_pretrained(masked)
    labelled = tmp_path / "labelled.csv"
    labelled.write_text("text,label\na wonderful film,1\nthe worst plot,0\n", encoding="utf-8")
    translation, classifier = str(translation_model), str(classifier_folder)
    cases = {
        (classifier, "--export", str(ct2)): "is an export of a translation model, and --model",
        (translation, "--export", translation): "is a model folder, not an export",
        (translation, "--export", str(tmp_path / "none")): "does not exist",
        (str(masked), "--dtype", "bf16", "--check-file", str(sample[0])): "compares a translation model's",
        (classifier, "--dtype", "bf16", "--check-file", str(labelled), "--beams", "2"): "--beams: ",
        (
            translation,
            "--quantize",
            "int8",
            "--check-file",
            str(sample[0]),
            "--max-bleu-drop",
            "1",
        ): "no references",
        (
            translation,
            "--quantize",
            "int8",
            "--recipe",
            "synthetic_en_de",
            "--set",
            "source_lang=de",
            "--set",
            "target_lang=en",
        ): "its data is de -> en, but the model translates en -> de",
    }
    for (model, *rest), expected in cases.items():
        assert expected in refused(["parity", "--model", model, *rest])
    assert not (ct2 / "parity.json").exists()
    # A labelled CSV file is read as CSV (not as the default JSON Lines), its rows numbered under the header.
    from vanilla_transformer.parity import classification_sample

    assert classification_sample(str(labelled), None, "test").lines == [2, 3]
