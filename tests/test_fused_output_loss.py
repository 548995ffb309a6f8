"""The fused projection + label-smoothed loss (fused_output_loss.py): the unfused path's loss and
gradients, without logits, in the model's training forward only."""

import pytest
import torch
import torch.nn.functional as F
from conftest import PAD, decoder_only_config, encoder_only_config, random_ids, tiny_config

from vanilla_transformer import (
    VanillaTransformerForCausalLM,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerForMaskedLM,
)
from vanilla_transformer.fused_output_loss import fused_output_loss, use_fused_output_loss
from vanilla_transformer.modeling_vanilla_transformer import label_smoothed_nll_loss


def _states_weight_labels(rows: int = 37, width: int = 24, vocab: int = 301, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(3, rows, width, generator=generator)
    weight = torch.randn(vocab, width, generator=generator) * 0.3
    labels = torch.randint(0, vocab, (3, rows), generator=generator)
    labels[0, -5:] = -100  # padding
    labels[2, 10:] = -100
    return hidden, weight, labels


@pytest.mark.parametrize("epsilon", [0.0, 0.1])
@pytest.mark.parametrize("num_items", [None, 200])
@pytest.mark.parametrize("chunk_rows", [7, 64, None])  # several chunks, a ragged last one, and one
@pytest.mark.parametrize("with_bias", [False, True])  # the masked-LM head has one
def test_loss_and_gradients_are_the_unfused_ones(epsilon, num_items, chunk_rows, with_bias):
    hidden, weight, labels = _states_weight_labels()
    bias = torch.randn(weight.shape[0]) if with_bias else None
    grads = []
    for fused in (False, True):
        tensors = [t.clone().requires_grad_() for t in (hidden, weight) + ((bias,) if with_bias else ())]
        h, w, b = (*tensors, None) if not with_bias else tensors
        if fused:
            loss = fused_output_loss(h, w, labels, epsilon, num_items, chunk_rows=chunk_rows, bias=b)
        else:
            loss = expected = label_smoothed_nll_loss(F.linear(h, w, b), labels, epsilon, num_items)
        (2.5 * loss).backward()  # the incoming gradient scales every one
        grads.append([t.grad for t in tensors])
    torch.testing.assert_close(loss, expected)
    for fused_grad, expected_grad in zip(grads[1], grads[0], strict=True):
        torch.testing.assert_close(fused_grad, expected_grad)
    assert torch.all(grads[1][0][labels == -100] == 0)  # ignored rows get nothing


def test_under_bf16_autocast_it_matches_the_unfused_path_in_bf16():
    hidden, weight, labels = _states_weight_labels(rows=50, width=32, vocab=500)
    results = []
    for loss_of in (
        lambda h, w: label_smoothed_nll_loss(h @ w.t(), labels, 0.1),
        lambda h, w: fused_output_loss(h, w, labels, 0.1),
    ):
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = loss_of(h, w)
        loss.backward()
        results.append((loss.float(), h.grad, w.grad))
    (loss_u, h_u, w_u), (loss_f, h_f, w_f) = results
    assert h_f.dtype == w_f.dtype == torch.float32  # the parameters' and states' own dtype
    exact = label_smoothed_nll_loss(hidden @ weight.t(), labels, 0.1)
    assert abs(loss_f.item() - exact.item()) < 0.02 * exact.item()  # bf16 products, not something else
    torch.testing.assert_close(loss_f, loss_u, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(h_f, h_u, rtol=0.05, atol=2e-4)
    torch.testing.assert_close(w_f, w_u, rtol=0.05, atol=2e-4)


def test_without_gradients_it_returns_the_loss_alone():
    hidden, weight, labels = _states_weight_labels()
    with torch.no_grad():
        loss = fused_output_loss(hidden.requires_grad_(), weight, labels, 0.1)
    assert not loss.requires_grad
    torch.testing.assert_close(loss, label_smoothed_nll_loss(hidden.detach() @ weight.t(), labels, 0.1))


def test_a_batch_of_padding_alone_gives_what_the_unfused_path_gives():
    hidden, weight, labels = _states_weight_labels()
    labels = torch.full_like(labels, -100)
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    loss = fused_output_loss(h, w, labels, 0.1, num_items_in_batch=4)
    loss.backward()
    assert loss.item() == label_smoothed_nll_loss(hidden @ weight.t(), labels, 0.1, 4).item() == 0.0
    assert not h.grad.any() and not w.grad.any()
    assert fused_output_loss(hidden, weight, labels, 0.1).isnan()  # a mean over nothing, as F.cross_entropy


def test_mismatched_shapes_are_named():
    hidden, weight, labels = _states_weight_labels()
    with pytest.raises(ValueError, match=r"`labels` shape \(3, 36\) does not match the states \(3, 37\)"):
        fused_output_loss(hidden, weight, labels[:, 1:], 0.1)
    with pytest.raises(ValueError, match=r"weight \(301, 24\) does not take states of width 23"):
        fused_output_loss(hidden[..., 1:], weight, labels, 0.1)


def _seq2seq_batch():
    source, target = random_ids(4, 9, seed=1), random_ids(4, 7, seed=2)
    target[1, 5:] = -100
    return {"input_ids": source, "attention_mask": source != PAD, "labels": target}


def _causal_batch(shifted: bool):
    ids = random_ids(4, 9, seed=3)
    labels = ids.masked_fill(torch.arange(9) >= 7, -100)
    if shifted:  # targets already aligned with the states, as sequence-parallel trainers pass them
        return {"input_ids": ids, "shift_labels": torch.cat([labels[:, 1:], labels[:, :1] * 0 - 100], 1)}
    return {"input_ids": ids, "labels": labels}


def _masked_batch():
    ids = random_ids(4, 9, seed=4)
    labels = torch.full_like(ids, -100)
    labels[:, 2::3] = ids[:, 2::3]
    return {"input_ids": ids, "labels": labels}


HEADS = {
    "seq2seq": (
        VanillaTransformerForConditionalGeneration,
        lambda: tiny_config(label_smoothing=0.1),
        _seq2seq_batch,
    ),
    "causal": (
        VanillaTransformerForCausalLM,
        lambda: decoder_only_config(label_smoothing=0.1),
        lambda: _causal_batch(False),
    ),
    "causal, shift_labels": (
        VanillaTransformerForCausalLM,
        lambda: decoder_only_config(label_smoothing=0.1),
        lambda: _causal_batch(True),
    ),
    "masked, sparse": (
        VanillaTransformerForMaskedLM,
        lambda: encoder_only_config(sparse_prediction=True),
        _masked_batch,
    ),
    "masked, dense": (VanillaTransformerForMaskedLM, encoder_only_config, _masked_batch),
}


@pytest.mark.parametrize("head", list(HEADS))
def test_each_vocabulary_head_trains_to_the_same_weights_with_it_and_returns_no_logits_while_training(head):
    model_class, config_of, batch_of = HEADS[head]
    config, batch = config_of(), batch_of()
    models = []
    for fused in (False, True):
        torch.manual_seed(0)
        model = model_class(config).train()
        assert use_fused_output_loss(model, "cpu") if fused else True
        # SGD: Adam would blow the rounding noise of zero gradients (key biases) up to full steps
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        for _ in range(3):
            output = model(**batch)
            output.loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        assert (output.logits is None) == fused
        models.append(model)
    unfused, fused = models
    for (name, a), b in zip(unfused.named_parameters(), fused.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5, msg=name)
    # evaluation computes logits as written, with the same loss
    output = fused.eval()(**batch)
    assert output.logits is not None and output.logits.shape[-1] == config.vocab_size
    torch.testing.assert_close(output.loss, unfused.eval()(**batch).loss)


def test_installed_on_cpus_only_and_never_saved(tmp_path):
    model = VanillaTransformerForConditionalGeneration(tiny_config())
    assert not use_fused_output_loss(model, "cuda")
    assert "output_loss_kernel" not in model.__dict__
    assert use_fused_output_loss(model, "cpu")
    model.save_pretrained(tmp_path)
    loaded = VanillaTransformerForConditionalGeneration.from_pretrained(tmp_path).train()
    assert "output_loss_kernel" not in loaded.__dict__
    assert loaded(input_ids=random_ids(2, 5), labels=random_ids(2, 4)).logits is not None
