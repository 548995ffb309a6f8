"""Bad input a user hands a saved translation model: empty lines, over-long lines, damaged weights.
Each gets a clear answer (empty in, empty out; a warning naming the limit; an error naming the file)."""

import copy

import pytest
import torch
from conftest import CORPUS, tiny_config
from transformers import pipeline
from transformers.testing_utils import CaptureLogger

import vanilla_transformer  # noqa: F401  (registers the "vanilla-translation" pipeline)
from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.cli import main
from vanilla_transformer.train.translation import evaluation
from vanilla_transformer.translation_pipeline import logger as pipeline_logger

LINES = ["a wonderful film", "", "great acting", "   "]


@pytest.fixture
def folder(tmp_path, tokenizer):
    model = VanillaTransformerForConditionalGeneration(tiny_config()).eval()
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    return tmp_path / "model"


def _translate(folder, lines, tmp_path) -> list[str]:
    source, output = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    files = ["--input", str(source), "--output", str(output), "--force"]  # each call rewrites out.txt
    main(["translate", "--model", str(folder), *files, "--beams", "1"])
    return output.read_text(encoding="utf-8").split("\n")[:-1]


def test_empty_lines_translate_to_empty_lines_and_keep_alignment(folder, tmp_path):
    out = _translate(folder, LINES, tmp_path)
    assert len(out) == len(LINES)
    assert out[1] == "" and out[3] == ""
    # The real lines get the translations they get without the blank ones (non-empty: the untrained
    # tiny model still emits tokens), each on its own line.
    alone = _translate(folder, [LINES[0], LINES[2]], tmp_path)
    assert [out[0], out[2]] == alone and "" not in alone


def test_empty_string_through_the_pipeline_gives_an_empty_translation(folder):
    translate = pipeline("vanilla-translation", model=str(folder))
    assert translate("") == [{"translation_text": ""}]
    results = translate(["", "a wonderful film"], num_beams=1, max_new_tokens=3)
    alone = translate("a wonderful film", num_beams=1, max_new_tokens=3)
    assert results == [{"translation_text": ""}, *alone] and alone[0]["translation_text"] != ""


def test_an_over_long_line_is_truncated_with_a_warning_that_names_the_limit(folder, tmp_path, tokenizer):
    long_line = " ".join(CORPUS[:4] * 6)  # 157 tokens: far beyond the tokenizer's model_max_length of 64
    with CaptureLogger(evaluation.logger) as captured:
        out = _translate(folder, [long_line, "great acting"], tmp_path)
    assert len(out) == 2
    assert "max_source_length=64" in captured.out and "1 of 2 sentences" in captured.out
    # The over-long line's translation is that of its first 63 tokens (+ </s>), given as a line of its own;
    # its last 63 tokens translate otherwise (the untrained model's output follows its input).
    head, tail = _translate(
        folder, [_prefix(tokenizer, long_line, 64), _suffix(tokenizer, long_line, 64)], tmp_path
    )
    assert out[0] == head != tail

    config = tiny_config(max_position_embeddings=32)
    model = VanillaTransformerForConditionalGeneration(config).eval()
    with torch.no_grad():  # weights large enough that the output follows the input (at init it says "film")
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.5)
    translate = pipeline("vanilla-translation", model=model, tokenizer=copy.deepcopy(tokenizer))
    with CaptureLogger(pipeline_logger) as captured:
        truncated = translate(long_line, num_beams=1, max_new_tokens=2)
    assert "max_position_embeddings=32" in captured.out
    with CaptureLogger(pipeline_logger) as captured:
        assert truncated == translate(_prefix(tokenizer, long_line, 32), num_beams=1, max_new_tokens=2)
    assert captured.out == ""  # the prefix fits: nothing cut, nothing said
    assert truncated != translate(_suffix(tokenizer, long_line, 32), num_beams=1, max_new_tokens=2)


def _prefix(tokenizer, text: str, tokens: int) -> str:
    """The text of ``text``'s first ``tokens - 1`` tokens, which the tokenizer encodes back to exactly those
    tokens and </s>: the part of ``text`` a model reading ``tokens`` positions sees."""
    ids = tokenizer(text)["input_ids"][: tokens - 1]
    prefix = tokenizer.decode(ids)
    assert tokenizer(prefix)["input_ids"] == [*ids, tokenizer.eos_token_id]
    return prefix


def _suffix(tokenizer, text: str, tokens: int) -> str:
    """The text of ``text``'s last ``tokens - 1`` tokens (before its </s>)."""
    return tokenizer.decode(tokenizer(text)["input_ids"][-tokens:-1])


def test_damaged_weights_name_the_file(folder, tmp_path):
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])  # a copy cut short
    with pytest.raises(SystemExit, match=r"model\.safetensors is damaged"):
        _translate(folder, LINES, tmp_path)
    with pytest.raises(SystemExit, match=r"model\.safetensors is damaged"):
        main(["push", "--model", str(folder), "--repo-id", "someone/broken"])
