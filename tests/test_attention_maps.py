"""Attention heat maps: the weights behind the pictures, and the PNGs the command writes (decoded: their
size follows the layers, heads and tokens; the heat maps are drawn)."""

import numpy as np
import pytest
import torch
from conftest import (
    decoder_only_config,
    encoder_only_config,
    run_without_the_package,
    tiny_config,
    with_short_translations,
)
from PIL import Image

from vanilla_transformer import (
    VanillaTransformerForCausalLM,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerForSequenceClassification,
)
from vanilla_transformer.attention_maps import attention_weights, token_labels
from vanilla_transformer.cli import main
from vanilla_transformer.demo import draw_head
from vanilla_transformer.hub import space_files
from vanilla_transformer.outputs import MARKER

SENTENCE = "a wonderful film with a great cast"


def test_seq2seq_weights_cover_the_three_uses_of_attention(tokenizer):
    model = VanillaTransformerForConditionalGeneration(tiny_config())
    found = attention_weights(model, tokenizer, SENTENCE, target="great acting")
    source, target = found["tokens"]["source"], found["tokens"]["target"]
    assert source[-1] == "</s>" and target[0] == "<s>"  # decoder input: BOS + the target, shifted right
    weights = found["weights"]
    assert weights["encoder_attentions"].shape == (2, 4, len(source), len(source))
    assert weights["decoder_attentions"].shape == (2, 4, len(target), len(target))
    assert weights["cross_attentions"].shape == (2, 4, len(target), len(source))
    for tensor in weights.values():  # each query's weights are a distribution (Eq. 1's softmax)
        torch.testing.assert_close(tensor.sum(-1), torch.ones(tensor.shape[:-1]))
    # §3.2.3: masked decoder self-attention gives no weight to later positions.
    assert torch.all(weights["decoder_attentions"].triu(diagonal=1) == 0)


def test_without_a_target_the_model_attends_over_its_own_translation(tokenizer):
    model = VanillaTransformerForConditionalGeneration(tiny_config())
    generated = model.generate(**tokenizer(SENTENCE, return_tensors="pt"))[0]  # §6.1 defaults
    found = attention_weights(model, tokenizer, SENTENCE)
    assert found["tokens"]["target"] == token_labels(tokenizer, generated)
    assert found["tokens"]["source"][:2] == ["a", "wonderful"]  # readable words, not BPE symbols


@pytest.mark.parametrize(
    "model_class, make_config, pictures",
    [
        (VanillaTransformerForConditionalGeneration, tiny_config, ["cross", "decoder", "encoder"]),
        (VanillaTransformerForSequenceClassification, encoder_only_config, ["encoder"]),
        (VanillaTransformerForCausalLM, decoder_only_config, ["decoder"]),
    ],
)
def test_command_writes_one_png_per_kind_of_attention(
    tokenizer, tmp_path, capsys, model_class, make_config, pictures
):
    model = model_class(make_config()).eval()
    if model.config.is_encoder_decoder:
        # §6.1's bound (source + 50) would give the untrained model a 60-token target and pictures of 13-inch
        # squares (20 s to draw on a 2-core EPYC).
        with_short_translations(model)
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    main(
        [
            "attention",
            "--model",
            str(tmp_path / "model"),
            "--text",
            SENTENCE,
            "--output",
            str(tmp_path / "maps"),
        ]
    )
    written = sorted(p.name for p in (tmp_path / "maps").iterdir())
    # One PNG a kind of attention, and the marker by which a later `attention --force` knows its own output.
    assert written == sorted([MARKER, *(f"{kind}_attention.png" for kind in pictures)])
    assert capsys.readouterr().out.count("Wrote ") == len(pictures)
    # Each picture is a grid of layers (rows) by heads (columns), each head's square 0.22 inch a token (at
    # least 1.6), at 100 dpi; the queries and keys are the sentence's tokens and, for the seq2seq model,
    # its own translation (generate()'s §6.1 beam search, no target given).
    source = len(tokenizer(SENTENCE)["input_ids"])
    target = source
    if model.config.is_encoder_decoder:
        target = int(
            (model.generate(**tokenizer(SENTENCE, return_tensors="pt"))[0] != model.config.pad_token_id).sum()
        )
    layers, heads = 2, 4
    tokens = {"encoder": source, "decoder": target, "cross": max(source, target)}
    for kind in pictures:
        side = max(1.6, 0.22 * tokens[kind])
        image = np.asarray(Image.open(tmp_path / "maps" / f"{kind}_attention.png").convert("RGB"))
        assert image.shape == (round(100 * side * layers), round(100 * side * heads), 3), kind
        # The heat maps are drawn, one a head: viridis is coloured where the text, ticks and background are
        # grey, and the coloured pixels stand in `heads` columns and `layers` rows of squares.
        colourful = image.max(-1) - image.min(-1) > 60  # uint8: max >= min, no wrap-around
        assert colourful.mean() > 0.05, (kind, colourful.mean())
        assert (_runs(colourful.any(0)), _runs(colourful.any(1))) == (heads, layers), kind


def _runs(flags: np.ndarray) -> int:
    """How many separate stretches of True a 1-D array holds."""
    return int(flags[0]) + int(np.count_nonzero(flags[1:] & ~flags[:-1]))


def test_empty_sentence_is_refused(tokenizer):
    model = VanillaTransformerForConditionalGeneration(tiny_config())
    with pytest.raises(ValueError, match="empty"):
        attention_weights(model, tokenizer, "  ")


SPACE_DRAWING = """
import sys
sys.modules["vanilla_transformer"] = None  # a Space without the package
import torch
import app
app.draw_head(torch.load("found.pt"), "cross_attentions", 2, 3).save("head.png")
"""


def test_a_space_draws_the_same_head_picture_from_its_uploaded_files(tmp_path):
    """The page's single-head picture goes through attention_maps.draw_weights; in a Space that file sits
    beside app.py with no package installed, and the picture must be the one the package draws."""
    for name, content in space_files().items():
        (tmp_path / name).write_bytes(content)
    found = {
        "tokens": {"source": ["ein", "Hund", "</s>"], "target": ["<s>", "a", "dog"]},
        "weights": {"cross_attentions": torch.rand(2, 4, 3, 3).softmax(-1)},  # (layers, heads, queries, keys)
    }
    torch.save(found, tmp_path / "found.pt")
    run_without_the_package(SPACE_DRAWING, folder=tmp_path)
    here = np.asarray(draw_head(found, "cross_attentions", 2, 3))
    assert here.shape == (320, 320, 4)
    np.testing.assert_array_equal(np.asarray(Image.open(tmp_path / "head.png")), here)
