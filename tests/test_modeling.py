"""Properties of the five model classes on a tiny config: the behaviour users rely on."""

import pytest
import torch
import torch.nn.functional as F
from conftest import BOS, EOS, PAD, VOCAB, decoder_only_config, encoder_only_config, random_ids, tiny_config

from vanilla_transformer import (
    VanillaTransformerConfig,
    VanillaTransformerForCausalLM,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerForMaskedLM,
    VanillaTransformerForSequenceClassification,
    VanillaTransformerModel,
)
from vanilla_transformer.modeling_vanilla_transformer import CACHE_FIELD

VOCAB_PLUS = VOCAB + 8  # the tiny vocabulary and 8 added tokens


def seq2seq(**overrides):
    return VanillaTransformerForConditionalGeneration(tiny_config(**overrides)).eval()


def classifier(**overrides):
    return VanillaTransformerForSequenceClassification(encoder_only_config(**overrides)).eval()


def causal_lm(**overrides):
    return VanillaTransformerForCausalLM(decoder_only_config(**overrides)).eval()


def pad_right(ids: torch.Tensor, extra: int) -> tuple[torch.Tensor, torch.Tensor]:
    padded = torch.cat([ids, torch.full((ids.shape[0], extra), PAD)], dim=1)
    return padded, (padded != PAD).long()


# -- architecture --------------------------------------------------------------------------------


def test_stacks_follow_the_config():
    from vanilla_transformer.modeling_vanilla_transformer import (
        VanillaTransformerAttention,
        VanillaTransformerDecoder,
        VanillaTransformerEncoder,
    )

    both = VanillaTransformerModel(tiny_config())
    assert isinstance(both.encoder, VanillaTransformerEncoder) and isinstance(
        both.decoder, VanillaTransformerDecoder
    )
    assert all(isinstance(layer.encoder_attn, VanillaTransformerAttention) for layer in both.decoder.layers)
    assert (len(both.encoder.layers), len(both.decoder.layers)) == (2, 2)
    encoder_only = VanillaTransformerModel(encoder_only_config())
    assert encoder_only.decoder is None and len(encoder_only.encoder.layers) == 2
    decoder_only = VanillaTransformerModel(decoder_only_config())
    assert decoder_only.encoder is None
    assert all(layer.encoder_attn is None for layer in decoder_only.decoder.layers)  # no cross-attention


def test_post_ln_has_no_final_layer_norm_and_pre_ln_has_one():
    post = seq2seq()
    assert post.model.encoder.layer_norm is None and post.model.decoder.layer_norm is None
    pre = seq2seq(norm_position="pre")
    assert isinstance(pre.model.encoder.layer_norm, torch.nn.LayerNorm)
    assert isinstance(pre.model.decoder.layer_norm, torch.nn.LayerNorm)
    ids = random_ids(2, 5)
    assert torch.isfinite(pre(input_ids=ids, decoder_input_ids=ids).logits).all()


def test_post_ln_sublayer_wiring_is_layernorm_of_x_plus_sublayer():
    """§3.1: the output of each sub-layer is LayerNorm(x + Sublayer(x))."""
    layer = VanillaTransformerModel(encoder_only_config()).encoder.layers[0].eval()
    x = torch.randn(2, 5, 16)
    attended, _ = layer.self_attn(x)
    middle = layer.self_attn_layer_norm(x + attended)
    expected = layer.final_layer_norm(middle + layer.ffn(middle))
    torch.testing.assert_close(layer(x)[0], expected)
    ffn = layer.ffn  # Eq. 2: max(0, x W1 + b1) W2 + b2
    torch.testing.assert_close(
        ffn(x), F.linear(torch.relu(F.linear(x, ffn.fc1.weight, ffn.fc1.bias)), ffn.fc2.weight, ffn.fc2.bias)
    )


def test_pre_ln_sublayer_wiring_is_x_plus_sublayer_of_layernorm():
    """The pre-LN flag: x + Sublayer(LayerNorm(x)), and one final LayerNorm per stack."""
    layer = VanillaTransformerModel(encoder_only_config(norm_position="pre")).encoder.layers[0].eval()
    x = torch.randn(2, 5, 16)
    attended, _ = layer.self_attn(layer.self_attn_layer_norm(x))
    middle = x + attended
    expected = middle + layer.ffn(layer.final_layer_norm(middle))
    torch.testing.assert_close(layer(x)[0], expected)


@pytest.mark.parametrize("norm_position", ["post", "pre"])
def test_stacks_add_the_positional_encoding_to_the_scaled_embeddings(norm_position):
    """§3.5 inside the model: each stack's input is embed(ids) * sqrt(d_model) + PE(position), for the
    encoder, the decoder, and a cached decoding step (its position is the number of tokens before it)."""
    from vanilla_transformer.modeling_vanilla_transformer import sinusoidal_position_encoding

    model = seq2seq(norm_position=norm_position)
    weight, scale = model.model.encoder.embed_tokens.weight, 16**0.5
    source, target = random_ids(2, 7), random_ids(2, 5)
    with torch.no_grad():
        out = model(input_ids=source, decoder_input_ids=target, output_hidden_states=True)
        expected = F.embedding(source, weight) * scale + sinusoidal_position_encoding(torch.arange(7), 16)
        torch.testing.assert_close(out.encoder_hidden_states[0], expected)
        expected = F.embedding(target, weight) * scale + sinusoidal_position_encoding(torch.arange(5), 16)
        torch.testing.assert_close(out.decoder_hidden_states[0], expected)

        prefix = model(input_ids=source, decoder_input_ids=target[:, :4], use_cache=True)
        step = model(
            encoder_outputs=(prefix.encoder_last_hidden_state,),
            decoder_input_ids=target[:, 4:],
            cache=getattr(prefix, CACHE_FIELD),
            output_hidden_states=True,
        )
        expected = F.embedding(target[:, 4:], weight) * scale + sinusoidal_position_encoding(
            torch.tensor([4]), 16
        )
        torch.testing.assert_close(step.decoder_hidden_states[0], expected)
        torch.testing.assert_close(step.logits[:, -1], out.logits[:, -1], rtol=1e-4, atol=1e-4)


def test_three_way_weight_tying():
    model = seq2seq()
    source = model.model.encoder.embed_tokens.weight
    assert model.model.decoder.embed_tokens.weight is source
    assert model.lm_head.weight is source
    untied = seq2seq(tie_word_embeddings=False)
    assert untied.model.decoder.embed_tokens.weight is untied.model.encoder.embed_tokens.weight
    assert untied.lm_head.weight is not untied.model.encoder.embed_tokens.weight
    separate = seq2seq(share_embeddings=False)
    assert separate.model.decoder.embed_tokens.weight is not separate.model.encoder.embed_tokens.weight
    assert separate.lm_head.weight is separate.model.decoder.embed_tokens.weight
    lm = causal_lm()
    assert lm.lm_head.weight is lm.model.decoder.embed_tokens.weight


def test_embeddings_are_scaled_by_sqrt_d_model_inside_the_module():
    model = seq2seq()
    ids = random_ids(2, 5)
    embedding = model.get_input_embeddings()
    torch.testing.assert_close(embedding(ids), F.embedding(ids, embedding.weight) * 4.0)  # sqrt(16)
    by_ids = model(input_ids=ids, decoder_input_ids=ids).logits
    by_embeds = model(inputs_embeds=embedding(ids), decoder_inputs_embeds=embedding(ids)).logits
    torch.testing.assert_close(by_ids, by_embeds)
    assert seq2seq(scale_embedding=False).get_input_embeddings().embed_scale == 1.0


# -- causality and padding -------------------------------------------------------------------------


def test_seq2seq_decoder_is_causal():
    model = seq2seq()
    source, target = random_ids(2, 6, seed=1), random_ids(2, 7, seed=2)
    logits = model(input_ids=source, decoder_input_ids=target).logits
    changed = target.clone()
    changed[:, 4:] = random_ids(2, 3, seed=3)
    changed_logits = model(input_ids=source, decoder_input_ids=changed).logits
    torch.testing.assert_close(changed_logits[:, :4], logits[:, :4])
    assert not torch.allclose(changed_logits[:, 4:], logits[:, 4:])


def test_causal_lm_is_causal():
    model = causal_lm()
    ids = random_ids(2, 8)
    logits = model(input_ids=ids).logits
    changed = ids.clone()
    changed[:, 5] = (changed[:, 5] + 1 - 3) % 96 + 3
    changed_logits = model(input_ids=changed).logits
    torch.testing.assert_close(changed_logits[:, :5], logits[:, :5])
    assert not torch.allclose(changed_logits[:, 5:], logits[:, 5:])


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_source_padding_changes_nothing(implementation):
    model = seq2seq(attn_implementation=implementation)
    source, target = random_ids(2, 5, seed=1), random_ids(2, 4, seed=2)
    reference = model(input_ids=source, decoder_input_ids=target)
    padded, mask = pad_right(source, 3)
    out = model(input_ids=padded, attention_mask=mask, decoder_input_ids=target)
    torch.testing.assert_close(out.logits, reference.logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        out.encoder_last_hidden_state[:, :5], reference.encoder_last_hidden_state, atol=1e-5, rtol=1e-5
    )


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_classifier_ignores_padding_left_or_right(implementation):
    model = classifier(attn_implementation=implementation)
    ids = random_ids(3, 6)
    reference = model(input_ids=ids).logits
    right, right_mask = pad_right(ids, 4)
    torch.testing.assert_close(
        model(input_ids=right, attention_mask=right_mask).logits, reference, atol=1e-5, rtol=1e-5
    )
    left = torch.cat([torch.full((3, 2), PAD), ids], dim=1)
    torch.testing.assert_close(
        model(input_ids=left, attention_mask=(left != PAD).long()).logits, reference, atol=1e-5, rtol=1e-5
    )


def test_causal_lm_ignores_left_padding():
    model = causal_lm()
    ids = random_ids(1, 5)
    reference = model(input_ids=ids).logits
    left = torch.cat([torch.full((1, 3), PAD), ids], dim=1)
    logits = model(input_ids=left, attention_mask=(left != PAD).long()).logits
    torch.testing.assert_close(logits[:, 3:], reference, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_all_padding_row_gives_finite_outputs(implementation):
    ids = torch.tensor([[5, 6, 7, 8], [PAD, PAD, PAD, PAD]])
    mask = (ids != PAD).long()
    out = seq2seq(attn_implementation=implementation)(
        input_ids=ids, attention_mask=mask, decoder_input_ids=ids, decoder_attention_mask=mask
    )
    assert torch.isfinite(out.logits).all() and torch.isfinite(out.encoder_last_hidden_state).all()
    assert torch.isfinite(
        classifier(attn_implementation=implementation)(input_ids=ids, attention_mask=mask).logits
    ).all()
    assert torch.isfinite(
        causal_lm(attn_implementation=implementation)(input_ids=ids, attention_mask=mask).logits
    ).all()


def test_batch_equals_one_by_one():
    model = seq2seq()
    sources = [random_ids(1, n, seed=n) for n in (3, 6, 4)]
    target = random_ids(1, 4, seed=9)
    width = max(s.shape[1] for s in sources)
    batch = torch.cat([pad_right(s, width - s.shape[1])[0] for s in sources])
    logits = model(
        input_ids=batch, attention_mask=(batch != PAD).long(), decoder_input_ids=target.repeat(3, 1)
    ).logits
    for row, source in enumerate(sources):
        single = model(input_ids=source, decoder_input_ids=target).logits
        torch.testing.assert_close(logits[row : row + 1], single, atol=1e-5, rtol=1e-5)


# -- attention implementations ------------------------------------------------------------------------


@pytest.mark.parametrize("make", [seq2seq, classifier, causal_lm])
def test_sdpa_equals_eager(make):
    torch.manual_seed(0)
    sdpa = make(attn_implementation="sdpa")
    eager = make(attn_implementation="eager")
    eager.load_state_dict(sdpa.state_dict())
    ids, _ = pad_right(random_ids(2, 6), 2)
    ids[0, 6:] = random_ids(1, 2, seed=5)  # first row unpadded, second row padded
    mask = (ids != PAD).long()
    inputs = {"input_ids": ids, "attention_mask": mask}
    if sdpa.config.is_encoder_decoder:
        inputs["decoder_input_ids"] = random_ids(2, 5, seed=7)
    torch.testing.assert_close(sdpa(**inputs).logits, eager(**inputs).logits, atol=1e-5, rtol=1e-5)


def test_output_attentions_and_hidden_states():
    model = seq2seq(attn_implementation="eager")
    source, target = random_ids(2, 6), random_ids(2, 4)
    out = model(input_ids=source, decoder_input_ids=target, output_attentions=True, output_hidden_states=True)
    assert len(out.encoder_attentions) == 2 and out.encoder_attentions[0].shape == (2, 4, 6, 6)
    assert len(out.decoder_attentions) == 2 and out.decoder_attentions[0].shape == (2, 4, 4, 4)
    assert len(out.cross_attentions) == 2 and out.cross_attentions[0].shape == (2, 4, 4, 6)
    assert (
        len(out.encoder_hidden_states) == 3 and len(out.decoder_hidden_states) == 3
    )  # embeddings + N layers
    torch.testing.assert_close(out.encoder_hidden_states[-1], out.encoder_last_hidden_state)
    # SDPA never materialises the probabilities: like transformers' own models it returns None for them.
    sdpa_model = seq2seq(attn_implementation="sdpa")
    sdpa_model.load_state_dict(model.state_dict())
    sdpa = sdpa_model(input_ids=source, decoder_input_ids=target, output_attentions=True)
    assert sdpa.encoder_attentions == (None, None) and sdpa.cross_attentions == (None, None)
    torch.testing.assert_close(sdpa.logits, out.logits, atol=1e-5, rtol=1e-5)


# -- loss ----------------------------------------------------------------------------------------------


def test_label_smoothed_loss_equals_manual_computation():
    epsilon = 0.1
    model = seq2seq(label_smoothing=epsilon)
    source, labels = random_ids(2, 5), random_ids(2, 4, seed=3)
    labels[1, 3] = -100  # ignored position
    out = model(input_ids=source, labels=labels)
    log_probs = torch.log_softmax(out.logits, dim=-1)
    total, count = 0.0, 0
    for b in range(2):
        for t in range(4):
            if labels[b, t] == -100:
                continue
            target = torch.full((99,), epsilon / 99)
            target[labels[b, t]] += 1 - epsilon
            total += -(target * log_probs[b, t]).sum()
            count += 1
    torch.testing.assert_close(out.loss, total / count)


def test_labels_are_shifted_right_into_decoder_inputs():
    model = seq2seq()
    source = random_ids(2, 5)
    labels = torch.tensor([[10, 11, 12, EOS], [20, 21, EOS, -100]])
    by_labels = model(input_ids=source, labels=labels)
    decoder_inputs = torch.tensor([[BOS, 10, 11, 12], [BOS, 20, 21, EOS]])
    explicit = model(input_ids=source, decoder_input_ids=decoder_inputs)
    torch.testing.assert_close(by_labels.logits, explicit.logits)
    assert torch.equal(
        model.prepare_decoder_input_ids_from_labels(labels),
        torch.tensor([[BOS, 10, 11, 12], [BOS, 20, 21, EOS]]),
    )


def test_causal_lm_loss_predicts_the_next_token():
    model = causal_lm(label_smoothing=0.0)
    ids = random_ids(2, 6)
    out = model(input_ids=ids, labels=ids)
    expected = F.cross_entropy(out.logits[:, :-1].reshape(-1, 99), ids[:, 1:].reshape(-1))
    torch.testing.assert_close(out.loss, expected)


@pytest.mark.parametrize(
    "problem_type, num_labels, labels, loss_fn",
    [
        ("single_label_classification", 3, torch.tensor([0, 2]), lambda lg, lb: F.cross_entropy(lg, lb)),
        (
            "multi_label_classification",
            3,
            torch.tensor([[1.0, 0, 1], [0, 1, 0]]),
            F.binary_cross_entropy_with_logits,
        ),
        ("regression", 1, torch.tensor([0.5, -1.0]), lambda lg, lb: F.mse_loss(lg.squeeze(-1), lb)),
    ],
)
def test_classifier_problem_types(problem_type, num_labels, labels, loss_fn):
    model = classifier(num_labels=num_labels, problem_type=problem_type)
    out = model(input_ids=random_ids(2, 5), labels=labels)
    assert out.logits.shape == (2, num_labels)
    torch.testing.assert_close(out.loss, loss_fn(out.logits, labels))


def test_gradients_reach_every_parameter():
    for model in (seq2seq(dropout=0.1), classifier(), causal_lm()):
        model.train()
        ids = random_ids(2, 6)
        mask = torch.ones_like(ids)
        mask[1, 4:] = 0
        labels = (
            torch.tensor([0, 1]) if isinstance(model, VanillaTransformerForSequenceClassification) else ids
        )
        model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
        missing = [
            name for name, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0
        ]
        assert not missing, f"{type(model).__name__}: no gradient for {missing}"


# -- memory and vocabulary tools ---------------------------------------------------------------------------


@pytest.mark.parametrize("make", [seq2seq, classifier, causal_lm], ids=["seq2seq", "classifier", "causal_lm"])
def test_gradient_checkpointing_recomputes_layers_and_keeps_the_gradients(make):
    model = make().train()  # dropout is 0 in the tiny config: both passes see the same function
    ids = random_ids(2, 7)
    inputs = {
        "input_ids": ids,
        "labels": random_ids(2, 5, seed=1) if model.config.is_encoder_decoder else ids,
    }
    if isinstance(model, VanillaTransformerForSequenceClassification):
        inputs["labels"] = torch.tensor([0, 1])
    first_layer = (model.model.encoder or model.model.decoder).layers[0]  # the one stack, or the encoder
    calls = []
    first_layer.ffn.register_forward_hook(lambda *_: calls.append(1))

    def loss_and_gradients():
        model.zero_grad()
        calls.clear()
        loss = model(**inputs).loss
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    loss, gradients = loss_and_gradients()
    assert len(calls) == 1
    # transformers 5.24 renamed gradient checkpointing to activation checkpointing (the old names warn).
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable()
        assert model.is_activation_checkpointing
    else:
        model.gradient_checkpointing_enable()
        assert model.is_gradient_checkpointing
    checkpointed_loss, checkpointed = loss_and_gradients()
    assert len(calls) == 2  # the layer ran again during backward instead of keeping its activations
    torch.testing.assert_close(checkpointed_loss, loss)
    assert checkpointed.keys() == gradients.keys()
    for name, gradient in gradients.items():
        torch.testing.assert_close(checkpointed[name], gradient, msg=name)


def test_resize_token_embeddings_keeps_the_paper_ties(tmp_path):
    model = seq2seq()
    old = model.get_input_embeddings().weight.detach().clone()
    model.resize_token_embeddings(VOCAB_PLUS)
    encoder, decoder = model.model.encoder.embed_tokens, model.model.decoder.embed_tokens
    assert model.config.vocab_size == VOCAB_PLUS and encoder.weight.shape[0] == VOCAB_PLUS
    assert decoder.weight is encoder.weight and model.lm_head.weight is encoder.weight  # §3.4
    torch.testing.assert_close(encoder.weight[: old.shape[0]], old)  # known tokens keep their vectors
    source, target = random_ids(2, 5), random_ids(2, 4, seed=2)
    logits = model(input_ids=source, decoder_input_ids=target).logits
    assert logits.shape == (2, 4, VOCAB_PLUS)
    model.save_pretrained(tmp_path)
    loaded = VanillaTransformerForConditionalGeneration.from_pretrained(tmp_path).eval()
    assert loaded.lm_head.weight is loaded.model.encoder.embed_tokens.weight
    torch.testing.assert_close(loaded(input_ids=source, decoder_input_ids=target).logits, logits)


# -- bad input -------------------------------------------------------------------------------------------


def test_token_ids_outside_the_vocabulary_are_named_by_the_opt_in_check():
    """The forward names ids outside the vocabulary on the CPU and, on an accelerator, when asked
    (``check_inputs``; the entry points check where ids enter: tests/test_host_reads.py)."""
    model = seq2seq()
    model.check_inputs = True
    with pytest.raises(
        ValueError, match=r"Token id 99 is outside the vocabulary: ids must lie in \[0, vocab_size=99\)"
    ):
        model(input_ids=torch.tensor([[5, 99]]), decoder_input_ids=torch.tensor([[1]]))
    checked = classifier()
    checked.check_inputs = True
    with pytest.raises(ValueError, match="Token id -3"):
        checked(input_ids=torch.tensor([[5, -3]]))


def test_classifier_rejects_labels_outside_num_labels_under_the_opt_in_check():
    checked = classifier()
    checked.check_inputs = True
    with pytest.raises(ValueError, match=r"Label 5 is outside \[0, num_labels=2\)"):
        checked(input_ids=random_ids(2, 4), labels=torch.tensor([0, 5]))


def test_missing_or_double_inputs_are_explained():
    model = seq2seq()
    with pytest.raises(ValueError, match="exactly one of `input_ids` and `inputs_embeds`"):
        model(decoder_input_ids=random_ids(1, 3))
    with pytest.raises(ValueError, match="shape \\(batch, length\\)"):
        classifier()(input_ids=torch.tensor([5, 6, 7]))


def test_for_conditional_generation_needs_both_stacks():
    with pytest.raises(ValueError, match="is_encoder_decoder=True"):
        VanillaTransformerForConditionalGeneration(encoder_only_config())


def test_single_stack_models_accept_a_seq2seq_config_without_mutating_it():
    config = tiny_config()
    model = VanillaTransformerForSequenceClassification(config)
    assert config.is_encoder_decoder and not model.config.is_encoder_decoder
    assert VanillaTransformerForCausalLM(config).config.is_decoder and not config.is_decoder
    assert isinstance(config, VanillaTransformerConfig)


def test_causal_lm_takes_pre_shifted_targets():
    model = causal_lm(label_smoothing=0.0)
    ids = random_ids(2, 6)
    shifted = torch.cat([ids[:, 1:], torch.full((2, 1), -100)], dim=1)
    by_labels = model(input_ids=ids, labels=ids).loss
    torch.testing.assert_close(model(input_ids=ids, shift_labels=shifted).loss, by_labels)
    torch.testing.assert_close(
        model(input_ids=ids, labels=random_ids(2, 6, seed=9), shift_labels=shifted).loss, by_labels
    )


def test_masked_lm_sparse_prediction_gives_the_dense_loss_and_full_logits_without_labels():
    dense = VanillaTransformerForMaskedLM(encoder_only_config()).eval()
    sparse = VanillaTransformerForMaskedLM(encoder_only_config(sparse_prediction=True)).eval()
    sparse.load_state_dict(dense.state_dict())
    ids = random_ids(3, 9)
    labels = torch.full_like(ids, -100)
    labels[0, 2], labels[1, 5], labels[2, 0], labels[2, 8] = 7, 11, 13, 17
    reference = dense(input_ids=ids, labels=labels)
    output = sparse(input_ids=ids, labels=labels)
    torch.testing.assert_close(output.loss, reference.loss)
    assert output.logits.shape == (4, VOCAB)  # only the masked positions, in row-major order
    torch.testing.assert_close(output.logits, reference.logits[labels != -100])
    output.loss.backward()
    assert sparse.model.encoder.embed_tokens.weight.grad.abs().sum() > 0
    # Without labels (fill-mask) the head runs everywhere.
    assert sparse(input_ids=ids).logits.shape == (3, 9, VOCAB)
    with pytest.raises(ValueError, match=r"`labels` shape \(3, 8\) does not match the input \(3, 9\)"):
        sparse(input_ids=ids, labels=labels[:, :8])


# -- prepare_for_inference (vanilla_transformer.inference) ----------------------------------------


def test_a_model_computes_with_plain_nn_linear_layers_only():
    """The paper's model file keeps no inference-time copies: nothing is written into module state
    during a forward in eval mode."""
    model = seq2seq()
    before = {name: dict(vars(module)).keys() for name, module in model.named_modules()}
    with torch.no_grad():
        model.generate(random_ids(2, 5), max_new_tokens=4)
    after = {name: dict(vars(module)).keys() for name, module in model.named_modules()}
    assert before == after


@pytest.mark.parametrize("make", [seq2seq, causal_lm])
def test_int8_and_bf16_inference_stay_close_to_fp32(make):
    import copy
    import warnings

    from vanilla_transformer.inference import prepare_for_inference

    model = make()
    ids = random_ids(4, 12)
    inputs = {"input_ids": ids, "decoder_input_ids": ids[:, :4]} if make is seq2seq else {"input_ids": ids}
    with torch.no_grad():
        reference = model(**inputs).logits
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # torch.ao.quantization's notice
            int8 = prepare_for_inference(copy.deepcopy(model), quantize="int8")
        assert type(int8.lm_head) is not torch.nn.Linear  # really quantised
        quantised = int8(**inputs).logits
        bf16 = prepare_for_inference(copy.deepcopy(model), dtype=torch.bfloat16)
        assert bf16.lm_head.weight.dtype == torch.bfloat16
        halved = bf16(**inputs).logits.float()
    scale = reference.abs().max()
    for approximate in (quantised, halved):
        assert (approximate - reference).abs().max() < 0.05 * scale
        # random tiny weights give near-ties; most predictions must still be the same token
        assert (approximate.argmax(-1) == reference.argmax(-1)).float().mean() > 0.75
    with pytest.raises(ValueError, match="`quantize` must be one of"):
        prepare_for_inference(model, quantize="int4")


# -- bf16 ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_bf16_with_a_row_that_is_all_padding_stays_finite_and_matches_fp32(implementation):
    """bf16 weights and bf16 autocast (what ``mixed_precision: bf16`` runs) through both attention paths,
    with one row that is all padding (where fully masked softmax rows give NaN if the mask uses -inf):
    every output and gradient is finite, and the real rows agree with fp32."""
    model = seq2seq()
    model.set_attn_implementation(implementation)
    ids = random_ids(3, 6)
    mask = torch.ones_like(ids)
    mask[1] = 0  # nothing to attend to
    mask[2, 3:] = 0
    inputs = dict(input_ids=ids, attention_mask=mask, decoder_input_ids=ids, decoder_attention_mask=mask)
    with torch.no_grad():
        reference = model(**inputs).logits
        halved = copy_in(model, torch.bfloat16)(**inputs).logits.float()
    assert torch.isfinite(halved).all()
    scale = reference.abs().max()
    real = mask.bool()
    assert (halved - reference)[real].abs().max() < 0.05 * scale

    model.train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(**inputs, labels=ids.masked_fill(mask == 0, -100)).loss
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    assert model.lm_head.weight.dtype == torch.float32  # autocast computes in bf16, weights stay fp32


def copy_in(model, dtype):
    import copy

    return copy.deepcopy(model).to(dtype)
