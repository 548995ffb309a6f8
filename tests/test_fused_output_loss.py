"""The fused projection + label-smoothed loss (fused_output_loss.py): the unfused path's loss and
gradients, without logits, in the model's training forward only."""

import pytest
import torch
from conftest import PAD, random_ids, tiny_config

from vanilla_transformer import VanillaTransformerForConditionalGeneration
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
def test_loss_and_gradients_are_the_unfused_ones(epsilon, num_items, chunk_rows):
    hidden, weight, labels = _states_weight_labels()
    expected_h, expected_w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    expected = label_smoothed_nll_loss(expected_h @ expected_w.t(), labels, epsilon, num_items)
    (2.5 * expected).backward()  # the incoming gradient scales both
    fused_h, fused_w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    loss = fused_output_loss(fused_h, fused_w, labels, epsilon, num_items, chunk_rows=chunk_rows)
    (2.5 * loss).backward()
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(fused_h.grad, expected_h.grad)
    torch.testing.assert_close(fused_w.grad, expected_w.grad)
    assert torch.all(fused_h.grad[labels == -100] == 0)  # ignored rows get nothing


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


def test_the_model_trains_to_the_same_weights_with_it_and_returns_no_logits_while_training():
    config = tiny_config(label_smoothing=0.1, dropout=0.0)
    source, target = random_ids(4, 9, seed=1), random_ids(4, 7, seed=2)
    target[1, 5:] = -100
    models = []
    for fused in (False, True):
        torch.manual_seed(0)
        model = VanillaTransformerForConditionalGeneration(config).train()
        assert use_fused_output_loss(model, "cpu") if fused else True
        # SGD: Adam would blow the rounding noise of zero gradients (key biases) up to full steps
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        for _ in range(3):
            output = model(input_ids=source, attention_mask=source != PAD, labels=target)
            output.loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        assert (output.logits is None) == fused
        models.append(model)
    unfused, fused = models
    for (name, a), b in zip(unfused.named_parameters(), fused.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5, msg=name)
    # evaluation and generation compute logits as written
    fused.eval()
    output = fused(input_ids=source, labels=target)
    assert output.logits.shape == (4, 7, config.vocab_size)
    torch.testing.assert_close(output.loss, unfused.eval()(input_ids=source, labels=target).loss)


def test_installed_on_cpus_only_and_never_saved(tmp_path):
    model = VanillaTransformerForConditionalGeneration(tiny_config())
    assert not use_fused_output_loss(model, "cuda")
    assert "output_loss_kernel" not in model.__dict__
    assert use_fused_output_loss(model, "cpu")
    model.save_pretrained(tmp_path)
    loaded = VanillaTransformerForConditionalGeneration.from_pretrained(tmp_path).train()
    assert "output_loss_kernel" not in loaded.__dict__
    assert loaded(input_ids=random_ids(2, 5), labels=random_ids(2, 4)).logits is not None
