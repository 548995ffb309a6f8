"""Every attention implementation the model declares runs here against eager, Eq. 1 written out: SDPA and
flex attention on the CPU (flex attention's CPU kernel computes forwards only: training with it needs a
GPU), FlashAttention-2 where its package and a CUDA GPU are (the GPU check runs this file there). The model
declares nothing it is not tested with."""

import importlib.util

import pytest
import torch
from conftest import encoder_only_config, random_ids, tiny_config

from vanilla_transformer import (
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerForSequenceClassification,
    VanillaTransformerPreTrainedModel,
)

FLASH = importlib.util.find_spec("flash_attn") is not None and torch.cuda.is_available()
IMPLEMENTATIONS = [
    "sdpa",
    pytest.param("flex_attention", marks=pytest.mark.timeout(600)),  # compiles its kernel first (~30-45 s)
    pytest.param(
        "flash_attention_2",
        marks=pytest.mark.skipif(
            not FLASH, reason="FlashAttention-2 needs the flash_attn package and a CUDA GPU"
        ),
    ),
]


def test_the_model_declares_exactly_the_implementations_tested_here():
    declared = {
        name
        for name, flag in (
            ("sdpa", "_supports_sdpa"),
            ("flash_attention_2", "_supports_flash_attn"),
            ("flex_attention", "_supports_flex_attn"),
        )
        if getattr(VanillaTransformerPreTrainedModel, flag, False)
    }
    tested = {param if isinstance(param, str) else param.values[0] for param in IMPLEMENTATIONS}
    assert declared == tested
    # Kernels from the Hub (attention backends) cannot be fetched or tested here: not declared.
    assert not getattr(VanillaTransformerPreTrainedModel, "_supports_attention_backend", False)


def _batch(seed: int = 0):
    ids = random_ids(2, 7, seed=seed)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0  # padding: the masks must carry it through every implementation
    return ids, mask


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_the_translation_model_computes_what_eager_computes(implementation):
    """Encoder self-attention over a padded batch, causal decoder self-attention and cross-attention."""
    device = "cuda" if implementation == "flash_attention_2" else "cpu"
    dtype = torch.bfloat16 if implementation == "flash_attention_2" else torch.float32
    model = VanillaTransformerForConditionalGeneration(tiny_config()).eval().to(device, dtype)
    ids, mask = (tensor.to(device) for tensor in _batch())
    decoder_ids = random_ids(2, 5, seed=1).to(device)
    with torch.no_grad():
        eager = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).logits
        model.set_attn_implementation(implementation)
        other = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).logits
    tolerance = 2e-2 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(other, eager, atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_the_classifier_computes_what_eager_computes(implementation):
    """The encoder alone, bidirectional over a padded batch, mean-pooled: padding must stay out."""
    device = "cuda" if implementation == "flash_attention_2" else "cpu"
    dtype = torch.bfloat16 if implementation == "flash_attention_2" else torch.float32
    config = encoder_only_config(num_labels=3, classifier_pooling="mean")
    model = VanillaTransformerForSequenceClassification(config).eval().to(device, dtype)
    ids, mask = (tensor.to(device) for tensor in _batch(seed=2))
    with torch.no_grad():
        eager = model(input_ids=ids, attention_mask=mask).logits
        model.set_attn_implementation(implementation)
        other = model(input_ids=ids, attention_mask=mask).logits
    tolerance = 2e-2 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(other, eager, atol=tolerance, rtol=tolerance)
