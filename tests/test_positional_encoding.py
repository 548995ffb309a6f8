"""§3.5 sinusoidal positional encoding and Table 3 row (E) learned positions."""

import math

import pytest
import torch
from conftest import random_ids, tiny_config

from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.modeling_vanilla_transformer import sinusoidal_position_encoding


@pytest.mark.parametrize("d_model", [512, 7])
def test_formula_values(d_model):
    positions = torch.tensor([0, 1, 5, 37, 1000])
    encoding = sinusoidal_position_encoding(positions, d_model)
    assert encoding.shape == (5, d_model)
    for row, pos in enumerate(positions.tolist()):
        for i in range(0, d_model, 2):  # PE(pos, 2i) = sin(pos / 10000^(2i/d)); PE(pos, 2i+1) = cos(...)
            angle = pos / 10000 ** (i / d_model)
            assert encoding[row, i].item() == pytest.approx(math.sin(angle), abs=2e-4)
            if i + 1 < d_model:
                assert encoding[row, i + 1].item() == pytest.approx(math.cos(angle), abs=2e-4)


def test_relative_offset_is_a_linear_function():
    """§3.5: for a fixed offset k, PE(pos + k) is a linear function (a rotation) of PE(pos)."""
    d_model, k = 16, 3
    pe = sinusoidal_position_encoding(torch.arange(200), d_model).double()
    rotation = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(
        0, d_model, 2
    ):  # sin(a + b) = sin a cos b + cos a sin b; cos(a + b) = cos a cos b - sin a sin b
        angle = k / 10000 ** (i / d_model)
        rotation[i, i], rotation[i + 1, i] = math.cos(angle), math.sin(angle)
        rotation[i, i + 1], rotation[i + 1, i + 1] = -math.sin(angle), math.cos(angle)
    torch.testing.assert_close(pe[:-k] @ rotation, pe[k:], atol=1e-4, rtol=0)


def test_sinusoids_are_not_stored_in_checkpoints(tmp_path):
    model = VanillaTransformerForConditionalGeneration(tiny_config())
    assert not [name for name in model.state_dict() if "embed_positions" in name]


def test_learned_positions_reject_longer_sequences():
    model = VanillaTransformerForConditionalGeneration(
        tiny_config(position_encoding="learned", max_position_embeddings=8)
    ).eval()
    assert "model.encoder.embed_positions.weight" in model.state_dict()
    model(input_ids=random_ids(1, 8), decoder_input_ids=random_ids(1, 8))
    with pytest.raises(ValueError, match="max_position_embeddings`=8"):
        model(input_ids=random_ids(1, 9), decoder_input_ids=random_ids(1, 3))
