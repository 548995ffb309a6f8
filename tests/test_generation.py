"""generate(): KV cache equals no cache for greedy, beam and sampling; §6.1 defaults; the cache under
either of its names (``cache`` from transformers 5.24, ``past_key_values`` before), with no warnings."""

import logging
import warnings

import pytest
import torch
import transformers
from conftest import EOS, PAD, decoder_only_config, random_ids, tiny_config

from vanilla_transformer import VanillaTransformerForCausalLM, VanillaTransformerForConditionalGeneration
from vanilla_transformer.modeling_vanilla_transformer import CACHE_FIELD

MODES = {
    "greedy": dict(num_beams=1, do_sample=False),
    "beam": dict(num_beams=3, do_sample=False),
    "sample": dict(num_beams=1, do_sample=True, top_k=20),
}


def _generate(model, inputs, use_cache, mode):
    torch.manual_seed(1234)  # the same random stream for both sampling runs
    return model.generate(**inputs, max_new_tokens=8, use_cache=use_cache, **MODES[mode])


@pytest.mark.parametrize("mode", list(MODES))
def test_seq2seq_cache_equals_no_cache(mode):
    model = VanillaTransformerForConditionalGeneration(tiny_config()).eval()
    source = random_ids(3, 6)
    source[2, 4:] = PAD
    inputs = {"input_ids": source, "attention_mask": (source != PAD).long()}
    assert torch.equal(_generate(model, inputs, True, mode), _generate(model, inputs, False, mode))


@pytest.mark.parametrize("mode", list(MODES))
def test_causal_lm_cache_equals_no_cache(mode):
    model = VanillaTransformerForCausalLM(decoder_only_config()).eval()
    prompt = random_ids(2, 4)
    inputs = {"input_ids": prompt, "attention_mask": torch.ones_like(prompt)}
    assert torch.equal(_generate(model, inputs, True, mode), _generate(model, inputs, False, mode))


@pytest.mark.parametrize("mode", ["greedy", "beam"])
@pytest.mark.parametrize("shape", ["seq2seq", "causal"])
def test_cached_generation_prints_no_warning(mode, shape):
    """A user's output stays clean on the installed transformers: no deprecation of the cache's old name
    (from generate(), the mask builders or the output classes), no FutureWarning."""
    if shape == "seq2seq":
        model = VanillaTransformerForConditionalGeneration(tiny_config()).eval()
        source = random_ids(2, 6)
        inputs = {"input_ids": source, "attention_mask": torch.ones_like(source)}
    else:
        model = VanillaTransformerForCausalLM(decoder_only_config()).eval()
        prompt = random_ids(2, 4)
        inputs = {"input_ids": prompt, "attention_mask": torch.ones_like(prompt)}
    records: list[logging.LogRecord] = []
    handler = logging.Handler(level=logging.WARNING)
    handler.emit = records.append
    library_logger = transformers.utils.logging.get_logger("transformers")
    library_logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _generate(model, inputs, True, mode)
    finally:
        library_logger.removeHandler(handler)
    assert [str(w.message) for w in caught] == []
    assert [r.getMessage() for r in records] == []


@pytest.mark.parametrize("name", ["cache", "past_key_values"])
def test_forward_takes_the_cache_under_either_name(name):
    """Code written for transformers before 5.24 passes ``past_key_values=``; newer passes ``cache=``:
    both continue the same cache, and the output carries it under the installed version's field."""
    model = VanillaTransformerForConditionalGeneration(tiny_config()).eval()
    source, target = random_ids(2, 5), random_ids(2, 4, seed=4)
    full = model(input_ids=source, decoder_input_ids=target).logits
    prefix = model(input_ids=source, decoder_input_ids=target[:, :3], use_cache=True)
    cache = getattr(prefix, CACHE_FIELD)
    assert cache.get_seq_length() == 3
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step = model(input_ids=source, decoder_input_ids=target[:, 3:], use_cache=True, **{name: cache})
    # The old name warns only where the installed transformers has renamed it, as its own models do.
    deprecated = name == "past_key_values" and CACHE_FIELD == "cache"
    assert any(f"`{name}` is deprecated" in str(w.message) for w in caught) == deprecated
    torch.testing.assert_close(step.logits[:, -1], full[:, -1], atol=1e-5, rtol=1e-5)
    assert getattr(step, CACHE_FIELD).get_seq_length() == 4


def test_forward_refuses_two_different_caches():
    model = VanillaTransformerForCausalLM(decoder_only_config()).eval()
    prompt = random_ids(1, 3)
    first = getattr(model(input_ids=prompt, use_cache=True), CACHE_FIELD)
    second = getattr(model(input_ids=prompt, use_cache=True), CACHE_FIELD)
    with pytest.raises(ValueError, match="`cache` .*`past_key_values`"):
        model(input_ids=prompt[:, -1:], cache=first, past_key_values=second)


def test_step_by_step_decoding_with_cache_equals_full_forward():
    model = VanillaTransformerForConditionalGeneration(tiny_config()).eval()
    source, target = random_ids(2, 5), random_ids(2, 6, seed=4)
    full = model(input_ids=source, decoder_input_ids=target).logits
    encoder_outputs = model.get_encoder()(input_ids=source)
    past, steps = None, []
    for t in range(target.shape[1]):
        out = model(
            encoder_outputs=encoder_outputs,
            decoder_input_ids=target[:, t : t + 1],
            cache=past,
            use_cache=True,
        )
        past = getattr(out, CACHE_FIELD)
        steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    # Encoder-decoder keys/values were projected once and kept: S positions, not T.
    assert past.cross_attention_cache.layers[0].keys.shape[-2] == source.shape[1]
    assert past.self_attention_cache.get_seq_length() == target.shape[1]


def test_left_padded_batch_generates_like_single_prompts():
    model = VanillaTransformerForCausalLM(decoder_only_config()).eval()
    short, long = random_ids(1, 3, seed=1), random_ids(1, 5, seed=2)
    batch = torch.cat([torch.cat([torch.full((1, 2), PAD), short], dim=1), long])
    out = model.generate(
        input_ids=batch, attention_mask=(batch != PAD).long(), max_new_tokens=5, do_sample=False
    )
    alone = model.generate(input_ids=short, max_new_tokens=5, do_sample=False)
    assert torch.equal(out[0, 2:], alone[0])


def test_paper_generation_defaults():
    model = VanillaTransformerForConditionalGeneration(tiny_config())
    config = model.generation_config
    assert (config.num_beams, config.length_penalty) == (4, 0.6)  # §6.1
    assert config.max_new_tokens_over_source == 50
    assert (config.decoder_start_token_id, config.eos_token_id, config.pad_token_id) == (1, EOS, PAD)


@pytest.mark.parametrize("reload", [False, True], ids=["in-memory", "saved-and-loaded"])
def test_output_length_is_bounded_by_input_length_plus_50(tmp_path, reload):
    model = VanillaTransformerForConditionalGeneration(tiny_config()).eval()
    if reload:  # the bound must survive generation_config.json (not fall back to max_length 20)
        model.save_pretrained(tmp_path)
        model = VanillaTransformerForConditionalGeneration.from_pretrained(tmp_path).eval()
        assert model.generation_config.max_new_tokens_over_source == 50
    # Every row padded (the padded width, 10, must not be what the bound reads): per batch, the longest
    # real source (7 tokens) + 50, plus the start token.
    source = torch.cat([random_ids(2, 7), torch.full((2, 3), PAD)], dim=1)
    source[1, 3:] = PAD
    out = model.generate(
        input_ids=source, attention_mask=(source != PAD).long(), suppress_tokens=[EOS], num_beams=2
    )
    assert out.shape[1] == 1 + 7 + 50
    assert model.generate(input_ids=source, max_new_tokens=3, suppress_tokens=[EOS]).shape[1] == 4
    # A generation config carrying transformers' own default max_length (20), as some saved folders and
    # transformers 5.17's pipelines give it, sets no bound: §6.1's still holds.
    model.generation_config.max_length = 20
    mask = (source != PAD).long()
    assert model.generate(input_ids=source, attention_mask=mask, suppress_tokens=[EOS]).shape[1] == 1 + 7 + 50
