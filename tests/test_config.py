"""The config: Table 3 presets, HF aliases, validation that names the field, serialisation."""

import pytest
from conftest import tiny_config

from vanilla_transformer import (
    VanillaTransformerConfig,
    VanillaTransformerForConditionalGeneration,
)


def paper_parameter_count(vocab: int, d_model: int, d_ff: int, layers: int) -> int:
    """Encoder-decoder with all three embeddings tied (§3.4) and biases on every projection.

    embeddings V*D; encoder layer = self-attention 4(D^2 + D) + FFN (2*D*F + F + D) + 2 LayerNorms (4D);
    decoder layer adds encoder-decoder attention 4(D^2 + D) and a third LayerNorm (2D).
    """
    attention = 4 * (d_model * d_model + d_model)
    ffn = 2 * d_model * d_ff + d_ff + d_model
    encoder_layer = attention + ffn + 2 * 2 * d_model
    decoder_layer = 2 * attention + ffn + 3 * 2 * d_model
    return vocab * d_model + layers * (encoder_layer + decoder_layer)


@pytest.mark.parametrize(
    "preset, d_model, d_ff, heads, dropout, expected",
    [("base", 512, 2048, 8, 0.1, 63_082_496), ("big", 1024, 4096, 16, 0.3, 214_245_376)],
)
def test_presets_are_table_3_rows(preset, d_model, d_ff, heads, dropout, expected):
    import torch

    config = VanillaTransformerConfig.from_preset(preset, vocab_size=37000)
    assert (config.d_model, config.d_ff, config.num_heads, config.d_k, config.d_v) == (
        d_model,
        d_ff,
        heads,
        64,
        64,
    )
    assert (config.num_encoder_layers, config.num_decoder_layers) == (6, 6)
    assert (config.dropout, config.label_smoothing) == (dropout, 0.1)
    assert config.norm_position == "post" and config.position_encoding == "sinusoidal"
    with torch.device("meta"):  # no memory for the weights
        model = VanillaTransformerForConditionalGeneration(config)
    count = model.num_parameters()
    assert count == paper_parameter_count(37000, d_model, d_ff, 6) == expected
    # The paper reports 65M and 213M (Table 3); without projection biases the count drops by 4D per attention.
    assert abs(count - {"base": 65e6, "big": 213e6}[preset]) / count < 0.04


def test_preset_overrides_and_unknown_preset():
    assert VanillaTransformerConfig.from_preset("big", dropout=0.1).dropout == 0.1
    with pytest.raises(ValueError, match="Unknown preset 'huge'"):
        VanillaTransformerConfig.from_preset("huge")


def test_hf_aliases_read_and_write_paper_fields():
    config = VanillaTransformerConfig(hidden_size=32, num_attention_heads=2, intermediate_size=64)
    assert (config.d_model, config.num_heads, config.d_ff, config.d_k, config.d_v) == (32, 2, 64, 16, 16)
    assert config.hidden_size == 32 and config.num_attention_heads == 2 and config.head_dim == 16
    config.num_hidden_layers = 3  # one N for both stacks (§3.1)
    assert (config.num_encoder_layers, config.num_decoder_layers) == (3, 3)


def test_num_hidden_layers_counts_the_generating_stack():
    seq2seq = VanillaTransformerConfig(num_encoder_layers=6, num_decoder_layers=2)
    assert seq2seq.num_hidden_layers == 2  # caches are built per decoder layer
    decoder_only = VanillaTransformerConfig(
        num_encoder_layers=6, num_decoder_layers=3, is_encoder_decoder=False, is_decoder=True
    )
    assert decoder_only.num_hidden_layers == 3
    encoder_only = VanillaTransformerConfig(num_encoder_layers=5, is_encoder_decoder=False)
    assert encoder_only.num_hidden_layers == 5


def test_d_k_and_d_v_settable_on_their_own():
    config = VanillaTransformerConfig(d_model=512, num_heads=8, d_k=16, d_v=32)  # Table 3 row (B)-like
    assert (config.d_k, config.d_v) == (16, 32)
    config = VanillaTransformerConfig(d_model=30, num_heads=4, d_k=8, d_v=8)  # no divisibility needed then
    assert config.d_k == 8


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("dropout", 1.0, "`dropout` must be a probability"),
        ("dropout", -0.1, "`dropout` must be a probability"),
        ("attention_dropout", 1.5, "`attention_dropout`"),
        ("activation_dropout", -1, "`activation_dropout`"),
        ("label_smoothing", 1.0, "`label_smoothing`"),
        ("activation", "tanh", "`activation` must be one of"),
        ("position_encoding", "rotary", "`position_encoding` must be one of"),
        ("norm_position", "sandwich", "`norm_position` must be one of"),
        ("vocab_size", 0, "`vocab_size` must be a positive integer"),
        ("d_model", -16, "`d_model` must be a positive integer"),
        ("d_ff", 0, "`d_ff` must be a positive integer"),
        ("num_heads", 0, "`num_heads` must be a positive integer"),
        ("d_k", 0, "`d_k` must be a positive integer"),
        ("num_encoder_layers", -1, "`num_encoder_layers` must be a non-negative integer"),
        ("max_position_embeddings", 0, "`max_position_embeddings` must be a positive integer"),
        ("pad_token_id", 99, "`pad_token_id` \\(99\\) must lie in \\[0, vocab_size=99\\)"),
    ],
)
def test_invalid_values_name_the_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**{field: value})


def test_decoder_only_flag_conflicts_with_encoder_decoder():
    with pytest.raises(ValueError, match="is_decoder=True"):
        VanillaTransformerConfig(is_decoder=True, is_encoder_decoder=True)


@pytest.mark.parametrize(
    "shape", [{}, {"is_encoder_decoder": False}, {"is_encoder_decoder": False, "is_decoder": True}]
)
def test_round_trip_through_json(tmp_path, shape):
    config = tiny_config(d_k=8, position_encoding="learned", norm_position="pre", **shape)
    config.save_pretrained(tmp_path)
    loaded = VanillaTransformerConfig.from_pretrained(tmp_path)
    assert loaded.to_dict() == config.to_dict()
    assert (loaded.is_encoder_decoder, loaded.is_decoder) == (config.is_encoder_decoder, config.is_decoder)


def test_heads_that_do_not_divide_d_model_fail_when_a_model_is_built():
    """As transformers' own configs: the config saves and loads (ConfigTester builds hidden_size=37 with
    8 heads), and building a model names the fields."""
    config = tiny_config(d_model=30)
    assert config.d_k is None and VanillaTransformerConfig.from_dict(config.to_dict()).d_model == 30
    from vanilla_transformer import VanillaTransformerForConditionalGeneration

    with pytest.raises(ValueError, match="`d_model` \\(30\\) must be divisible by `num_heads` \\(4\\)"):
        VanillaTransformerForConditionalGeneration(config)
    assert tiny_config(d_model=30, d_k=6, d_v=6).d_k == 6  # Table 3 row (B): d_k set on its own
