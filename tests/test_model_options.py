"""Config options the README offers beside the paper's defaults: attention without bias vectors (§3.2.2's
plain matrices) and the classifier's first-token pooling."""

import pytest
import torch
from conftest import PAD, encoder_only_config, random_ids, tiny_config

from vanilla_transformer import (
    VanillaTransformerConfig,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerForSequenceClassification,
)

# -- attention_bias=False ----------------------------------------------------------------------------------


def test_attention_without_bias_has_no_bias_parameters_and_the_papers_count():
    """Base preset, vocabulary 37000: 63,082,496 parameters with biases (tests/test_config.py's formula).
    Without them each attention block loses its four D-vectors, 4 x 512 = 2,048, in 18 blocks (6 encoder
    self-attention, 6 decoder self-attention, 6 encoder-decoder attention): 63,082,496 - 36,864."""
    config = VanillaTransformerConfig.from_preset("base", vocab_size=37000, attention_bias=False)
    with torch.device("meta"):  # no memory for the weights
        model = VanillaTransformerForConditionalGeneration(config)
    assert model.num_parameters() == 63_045_632
    names = [name for name, _ in model.named_parameters()]
    attention = [name for name in names if "_attn." in name]
    assert len(attention) == 18 * 4  # q, k, v, out weights only
    assert all(name.endswith("_proj.weight") for name in attention)
    # Only the attention projections lose their bias: the FFN's and the LayerNorms' stay (Eq. 2).
    assert "model.encoder.layers.0.ffn.fc1.bias" in names
    assert "model.decoder.layers.5.final_layer_norm.bias" in names


def test_a_model_without_attention_bias_trains_generates_and_reloads(tmp_path):
    model = VanillaTransformerForConditionalGeneration(tiny_config(attention_bias=False))
    for layer in (*model.model.encoder.layers, *model.model.decoder.layers):
        blocks = [layer.self_attn] + ([layer.encoder_attn] if hasattr(layer, "encoder_attn") else [])
        for block in blocks:
            assert all(
                proj.bias is None for proj in (block.q_proj, block.k_proj, block.v_proj, block.out_proj)
            )
    source, target = random_ids(2, 6), random_ids(2, 5, seed=1)
    loss = model(input_ids=source, labels=target).loss
    loss.backward()
    assert torch.isfinite(loss) and model.model.encoder.layers[0].self_attn.q_proj.weight.grad.abs().sum() > 0
    model.eval()
    generated = model.generate(input_ids=source, max_new_tokens=4, num_beams=2)
    assert generated.shape == (2, 5)
    model.save_pretrained(tmp_path)
    loaded, info = VanillaTransformerForConditionalGeneration.from_pretrained(
        tmp_path, output_loading_info=True
    )
    assert loaded.config.attention_bias is False
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert torch.equal(loaded.generate(input_ids=source, max_new_tokens=4, num_beams=2), generated)


# -- classifier_pooling="first" -----------------------------------------------------------------------------


@pytest.mark.parametrize("pooling", ["first", "mean"])
def test_the_classifier_reads_the_pooled_final_state(pooling):
    """Logits = classifier(pool(final encoder states)): the first position's state, or the mean over the
    real (non-padding) tokens; the two differ, so the option really selects."""
    model = VanillaTransformerForSequenceClassification(
        encoder_only_config(classifier_pooling=pooling)
    ).eval()
    ids = random_ids(2, 6)
    ids[1, 4:] = PAD
    mask = (ids != PAD).long()
    out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    states = out.hidden_states[-1]  # (B, S, D)
    first = model.classifier(states[:, 0])
    weights = mask.unsqueeze(-1).float()
    mean = model.classifier((states * weights).sum(1) / weights.sum(1))
    expected, other = (first, mean) if pooling == "first" else (mean, first)
    torch.testing.assert_close(out.logits, expected)
    assert (out.logits - other).abs().max() > 1e-3


def test_first_token_pooling_ignores_later_tokens_without_attention_layers():
    """With no encoder layer, a position's final state is its own embedding plus its position's encoding:
    under first-token pooling a later token cannot change the prediction; under mean pooling it does."""
    ids = random_ids(1, 6)
    changed = ids.clone()
    changed[0, 4] = (ids[0, 4] + 1 - 3) % 96 + 3  # another ordinary token (ids 3..98)
    assert not torch.equal(ids, changed)
    torch.manual_seed(0)
    first = VanillaTransformerForSequenceClassification(
        encoder_only_config(num_encoder_layers=0, classifier_pooling="first")
    ).eval()
    torch.testing.assert_close(first(input_ids=changed).logits, first(input_ids=ids).logits, rtol=0, atol=0)
    mean = VanillaTransformerForSequenceClassification(
        encoder_only_config(num_encoder_layers=0, classifier_pooling="mean")
    ).eval()
    mean.load_state_dict(first.state_dict())
    assert (mean(input_ids=changed).logits - mean(input_ids=ids).logits).abs().max() > 1e-4
