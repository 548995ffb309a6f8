"""§3.2.1 scaled dot-product attention (Eq. 1) and its fast paths, against the lecture notes' worked example."""

import math

import pytest
import torch
from conftest import decoder_only_config, random_ids, tiny_config
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask

from vanilla_transformer import VanillaTransformerForCausalLM
from vanilla_transformer.modeling_vanilla_transformer import _MASK_CACHE_ARGUMENT, eager_attention_forward

# ../shared/seeds/000_*.txt, "Attention(Q, K, V) = Softmax(QK^T)V (cont'd)".
Q = torch.tensor([[2.0, 0, 2], [1, 0, 1], [1, 0, 2]])
K = torch.tensor([[3.0, 2, 1], [2, 2, 0], [2, 1, 2]])
V = torch.tensor([[1.0, 2, 2], [1, 1, 1], [1, 2, 2]])
NOTES_SCORES = torch.tensor([[8.0, 4, 8], [4, 2, 4], [5, 2, 6]])
NOTES_UNSCALED_OUTPUT = torch.tensor([[1.0, 2, 2], [1, 1.94, 1.94], [1, 1.99, 1.99]])  # rounded in the notes


class _Module(torch.nn.Module):
    is_causal = False


def _attend(q, k, v, scaling, mask=None, function=eager_attention_forward):
    """Run an attention function on (T, d) matrices as one batch with one head."""
    output, probs = function(
        _Module().eval(), q[None, None], k[None, None], v[None, None], mask, scaling=scaling
    )
    return output[0, :, 0], probs


def test_worked_example_unscaled_matches_lecture_notes():
    assert torch.equal(Q @ K.T, NOTES_SCORES)
    output, probs = _attend(Q, K, V, scaling=1.0)
    # The notes round each entry to two decimals (1.991 is printed as 2).
    torch.testing.assert_close(output, NOTES_UNSCALED_OUTPUT, atol=0.01, rtol=0)
    torch.testing.assert_close(probs[0, 0], torch.softmax(NOTES_SCORES, dim=-1))
    torch.testing.assert_close(probs[0, 0].sum(-1), torch.ones(3))


def test_worked_example_scaled_by_sqrt_dk():
    d_k = Q.shape[-1]
    output, _ = _attend(Q, K, V, scaling=None)  # default scaling is 1/sqrt(d_k)
    expected = []
    for row in NOTES_SCORES.tolist():
        exps = [math.exp(score / math.sqrt(d_k)) for score in row]
        weights = [e / sum(exps) for e in exps]
        expected.append([sum(w * V[j, c].item() for j, w in enumerate(weights)) for c in range(3)])
    torch.testing.assert_close(output, torch.tensor(expected))
    # Scaling flattens the distribution: the off-peak middle key gets more weight than unscaled.
    assert _attend(Q, K, V, scaling=None)[1][0, 0, 1, 1] > _attend(Q, K, V, scaling=1.0)[1][0, 0, 1, 1]


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_matches_eager_reference(causal):
    torch.manual_seed(0)
    config = tiny_config()
    batch, heads, length, d_k, d_v = 3, 4, 6, 8, 5  # d_v != d_k as Table 3 row B allows
    q, k = torch.randn(batch, heads, length, d_k), torch.randn(batch, heads, length, d_k)
    v = torch.randn(batch, heads, length, d_v)
    padding = torch.ones(batch, length, dtype=torch.long)
    padding[1, 4:] = 0
    embeds = torch.zeros(batch, length, 1)
    masks = {}
    for implementation in ("eager", "sdpa"):
        config._attn_implementation = implementation
        build = create_causal_mask if causal else create_bidirectional_mask
        kwargs = {_MASK_CACHE_ARGUMENT: None} if causal else {}
        masks[implementation] = build(config=config, inputs_embeds=embeds, attention_mask=padding, **kwargs)
    module = _Module().eval()
    module.is_causal = causal
    eager, _ = eager_attention_forward(module, q, k, v, masks["eager"], scaling=d_k**-0.5)
    sdpa, _ = sdpa_attention_forward(module, q, k, v, masks["sdpa"], scaling=d_k**-0.5)
    valid = padding.bool()  # rows of padding queries are irrelevant
    torch.testing.assert_close(sdpa[valid], eager[valid], atol=1e-5, rtol=1e-5)


def test_causal_mask_blocks_the_future():
    model = VanillaTransformerForCausalLM(decoder_only_config(attn_implementation="eager")).eval()
    ids = random_ids(2, 6)
    attentions = model(input_ids=ids, output_attentions=True).attentions
    assert len(attentions) == 2
    for probs in attentions:  # (B, H, T, T)
        assert probs.shape == (2, 4, 6, 6)
        future = torch.triu(torch.ones(6, 6, dtype=torch.bool), diagonal=1)
        assert probs[..., future].abs().max() == 0
        assert (probs[..., ~future] > 0).all()
        torch.testing.assert_close(probs.sum(-1), torch.ones(2, 4, 6))
