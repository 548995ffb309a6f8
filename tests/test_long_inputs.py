"""Inputs longer than the model reads (``long_inputs``, one policy for every command and engine): a long line
is cut to the model's limit, never refused; one warning names the input's own line numbers (not a chunk's)
and the limit; the output keeps one line per input line. Checked for `translate` with each engine (in its own
process, on its real stderr), `attention` on a 2,000-word text, and the demo page."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import CORPUS, encoder_only_config, tiny_config, with_short_translations
from PIL import Image
from transformers.testing_utils import CaptureLogger

from vanilla_transformer import VanillaTransformerForConditionalGeneration, attention_maps, long_inputs
from vanilla_transformer.cli import main
from vanilla_transformer.long_inputs import CutLines, numbered, reading_limit

LONG_LINE = " ".join(CORPUS[:4] * 6)  # 157 tokens of the test tokenizer; the tiny models read 64
LINES = [CORPUS[i % 4] for i in range(105)]
LINES[99] = LONG_LINE  # line 100: in the second chunk of `--batch-size 4` (64 lines a chunk), its 36th line


def test_the_limit_and_the_lines_named():
    """The limit is the smaller of the positions and the tokenizer's record (transformers' "no limit" is
    none); one warning for a whole input names its lines in order, a long list abbreviated."""
    assert reading_limit(64, 64) == (64, "max_position_embeddings")  # a tie names the model's own
    assert reading_limit(512, 128) == (128, "the tokenizer's model_max_length")
    assert reading_limit(float("inf"), int(1e30)) == (None, "")
    assert numbered([100]) == "line 100" and numbered([3, 100]) == "lines 3 and 100"
    assert numbered([3, 100, *range(200, 212)]) == "lines 3, 100 and 12 more"

    cut = CutLines()
    cut.add({35: 482}, first_line=65, limit=64, limit_name="max_position_embeddings")  # a chunk's 36th line
    cut.add({}, first_line=129, limit=64, limit_name="max_position_embeddings")
    cut.add({0: 70}, first_line=3, limit=64, limit_name="max_position_embeddings")
    with CaptureLogger(long_inputs.logger) as captured:
        cut.warn()
        cut.warn()  # said once
    assert captured.out == (
        "Cut lines 3 and 100 to their first 64 tokens, the most this model reads (max_position_embeddings): "
        "their translations cover only that part. Split long lines into sentences.\n"
    )


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory, tokenizer):
    """An untrained tiny translation model (64 positions, the test tokenizer's model_max_length 64) with a
    4-token bound past the source, so that 105 lines decode in a second or two."""
    folder = tmp_path_factory.mktemp("long") / "model"
    torch.manual_seed(0)
    model = with_short_translations(VanillaTransformerForConditionalGeneration(tiny_config()).eval())
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _translate_in_its_own_process(model: str, tmp_path, *engine: str) -> tuple[list[str], str]:
    """`vanilla-transformer translate` as a user types it, on a 105-line file whose line 100 is too long;
    returns the output's lines and the command's stderr."""
    source, output = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    command = [sys.executable, "-m", "vanilla_transformer.cli", "translate", "--model", model, *engine]
    command += ["--input", str(source), "--output", str(output), "--beams", "1", "--batch-size", "4"]
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return output.read_text(encoding="utf-8").split("\n")[:-1], result.stderr


EXPECTED_WARNING = (
    "Cut line 100 to its first 64 tokens, the most this model reads (max_position_embeddings): its "
    "translation covers only that part. Split long lines into sentences."
)


def _assert_one_warning_naming_line_100(stderr: str) -> None:
    warnings = [line for line in stderr.splitlines() if "line" in line.lower() and "token" in line.lower()]
    assert warnings == [EXPECTED_WARNING], stderr[-3000:]


def test_pytorch_engine_cuts_line_100_and_says_so_once(model_folder, tmp_path):
    out, stderr = _translate_in_its_own_process(str(model_folder), tmp_path)
    assert len(out) == len(LINES) and out[99] != ""
    _assert_one_warning_naming_line_100(stderr)


@pytest.mark.newest_only  # CTranslate2 is not pinned (as tests/test_ctranslate2.py)
def test_ctranslate2_engine_cuts_line_100_and_says_so_once(model_folder, tmp_path):
    """It used to refuse the file ("Sentence 35 has 157 tokens", the line's index in its chunk) and write
    nothing."""
    pytest.importorskip("ctranslate2", reason='pip install "vanilla-transformer[ctranslate2]"')
    main(["export-ct2", "--model", str(model_folder), "--output", str(tmp_path / "ct2"), "--no-check"])
    out, stderr = _translate_in_its_own_process(str(tmp_path / "ct2"), tmp_path, "--engine", "ctranslate2")
    assert len(out) == len(LINES) and out[99] != ""
    _assert_one_warning_naming_line_100(stderr)


@pytest.mark.parametrize(
    "positions, cap, limit, said",
    [
        (16, None, 16, "the most this model reads (max_position_embeddings)"),
        (64, 12, 12, "the most an attention picture shows legibly (this model reads 64)"),
    ],
)
def test_attention_on_a_2000_word_text_draws_its_first_tokens_and_says_so(
    tokenizer, tmp_path, monkeypatch, capsys, positions, cap, limit, said
):
    """A 2,000-word text (it used to end in `MemoryError: std::bad_alloc` from the renderer): its maps are
    those of its first tokens, up to the model's limit or what a picture shows legibly (MAX_DRAWN_TOKENS,
    made small here to keep the pictures small), with one warning. The model's own translation is cut too."""
    if cap is not None:
        monkeypatch.setattr(attention_maps, "MAX_DRAWN_TOKENS", cap)
    config = tiny_config(max_position_embeddings=positions, num_encoder_layers=1, num_decoder_layers=1)
    model = with_short_translations(VanillaTransformerForConditionalGeneration(config).eval())
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    text = " ".join((CORPUS[0] + " " + CORPUS[2]).split() * 150)  # 2,100 words
    length = len(tokenizer(text, verbose=False)["input_ids"])
    with CaptureLogger(long_inputs.logger) as captured:
        main(
            [
                "attention",
                "--model",
                str(tmp_path / "model"),
                "--text",
                text,
                "--output",
                str(tmp_path / "maps"),
            ]
        )
    assert captured.out.startswith(f"Cut the text ({length:,} tokens) to its first {limit} tokens, {said}: ")
    assert "Cut the model's translation" in captured.out  # source + 4 tokens, cut to the same limit
    assert captured.out.count("\n") == 1  # one warning
    assert capsys.readouterr().out.count("Wrote ") == 3
    side = max(1.6, 0.22 * limit)  # inches a head, at 100 dpi: `limit` tokens on both axes
    for kind in ("encoder", "decoder", "cross"):
        image = np.asarray(Image.open(tmp_path / "maps" / f"{kind}_attention.png"))
        assert image.shape[:2] == (round(100 * side), round(100 * side * 4)), kind  # 1 layer, 4 heads


def test_the_demo_page_translates_a_long_text_cut_and_says_so(model_folder, tokenizer):
    """The page no longer refuses a text longer than the model reads: it translates and draws its first 64
    tokens, and its message says so; a text that fits gets no message."""
    pytest.importorskip("gradio", reason="pip install 'vanilla-transformer[demo]'")
    from vanilla_transformer.demo import build_demo

    page = build_demo(model_folder)
    blocks = {block.elem_id: block for block in page.blocks.values() if getattr(block, "elem_id", None)}
    (respond,) = {
        event.fn for event in page.fns.values() if event.inputs and event.inputs[0] is blocks["vt-input"]
    }
    message, translation, found, *pictures = respond(LONG_LINE, 1, 0.6, 0, 1, 1)
    length = len(tokenizer(LONG_LINE, verbose=False)["input_ids"])
    assert message.startswith(f"✂️ Cut the text ({length} tokens) to its first 64 tokens, the most this")
    assert "the translation and the pictures cover only that part" in message
    assert translation != "" and len(found["tokens"]["source"]) == 64 and all(pictures)
    message, translation, found, *pictures = respond(CORPUS[0], 1, 0.6, 0, 1, 1)
    assert message == "" and translation != ""


# -- a learned position table shorter than what a call would read ---------------------------------------------


def _files(folder) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _learned(folder, tokenizer, model_class, config):
    """An untrained model of 16 learned positions (the test tokenizer records 64), saved with its tokenizer."""
    torch.manual_seed(0)
    model_class(config).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


SIXTEEN = dict(position_encoding="learned", max_position_embeddings=16)


def test_translate_on_a_learned_table_shorter_than_the_length_bound_gives_output(tokenizer, tmp_path):
    """§6.1's bound, the source's length + 50, passed a table of 16 learned positions: `translate` ended in
    "error: Sequence needs position 16, but learned position embeddings hold only ..." for a 4-token line.
    generate() now stops where the decoder's table ends; sinusoids keep the bound."""
    folder = _learned(
        tmp_path / "model", tokenizer, VanillaTransformerForConditionalGeneration, tiny_config(**SIXTEEN)
    )
    source, output = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("a wonderful film\n", encoding="utf-8")
    before = _files(folder)
    main(
        ["translate", "--model", str(folder), "--input", str(source), "--output", str(output), "--beams", "1"]
    )
    (line,) = output.read_text(encoding="utf-8").splitlines()
    assert line != "" and _files(folder) == before

    inputs = tokenizer(["a wonderful film"], return_tensors="pt")  # 4 tokens
    never_ends = dict(num_beams=1, suppress_tokens=[tokenizer.eos_token_id])  # runs to the bound
    learned = VanillaTransformerForConditionalGeneration.from_pretrained(folder).eval()
    assert learned.generate(**inputs, **never_ends).shape[-1] == 1 + 16  # the start token, 16 read back
    sinusoidal = VanillaTransformerForConditionalGeneration(tiny_config(max_position_embeddings=16)).eval()
    assert sinusoidal.generate(**inputs, **never_ends).shape[-1] == 1 + 4 + 50


@pytest.mark.parametrize(
    "task, options", [("vanilla-translation", {}), ("translation", {"trust_remote_code": True})]
)
def test_the_translation_pipeline_cuts_a_long_text_and_says_so(tokenizer, tmp_path, caplog, task, options):
    """The pipeline on a saved folder (in-process, and as the folder's remote code where the package is
    not imported) follows long_inputs' policy: a text longer than the model reads is cut to its 16 learned
    positions, with one warning, and translated; it ended in the decoder's error before."""
    from transformers import pipeline

    folder = tmp_path / f"learned-{tmp_path.name}"  # one name each in transformers' modules cache
    _learned(folder, tokenizer, VanillaTransformerForConditionalGeneration, tiny_config(**SIXTEEN))
    before = _files(folder)
    translate = pipeline(task, model=str(folder), **options)
    length = len(tokenizer(LONG_LINE, verbose=False)["input_ids"])
    with caplog.at_level("WARNING"):
        (result,) = translate(LONG_LINE, num_beams=1)
    assert result["translation_text"] != ""
    assert [record.getMessage() for record in caplog.records if "Cut " in record.getMessage()] == [
        f"Cut the text ({length} tokens) to its first 16 tokens, the most this model reads "
        "(max_position_embeddings): its translation covers only that part. Split long texts into sentences."
    ]
    assert _files(folder) == before


def test_the_classification_pipeline_reads_a_long_text_as_the_model_was_trained_to(tokenizer, tmp_path):
    """A classifier of 16 learned positions and a 157-token text: read as its config says (its head and
    tail, 16 tokens with </s>), a label and no error, as the folder's pipeline."""
    from transformers import pipeline

    from vanilla_transformer import VanillaTransformerForSequenceClassification

    folder = tmp_path / f"learned-classifier-{tmp_path.name}"
    config = encoder_only_config(num_labels=2, **SIXTEEN)
    _learned(folder, tokenizer, VanillaTransformerForSequenceClassification, config)
    before = _files(folder)
    classify = pipeline("text-classification", model=str(folder), trust_remote_code=True)
    (result,) = classify([LONG_LINE])
    assert result["label"] in ("LABEL_0", "LABEL_1") and 0.5 <= result["score"] <= 1
    assert _files(folder) == before
