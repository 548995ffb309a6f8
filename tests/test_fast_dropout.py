"""The int16 dropout mask (fast_dropout.py): F.dropout's contract, the model's use of it, and when it is on."""

import pytest
import torch
import torch.nn.functional as F
from conftest import random_ids, tiny_config

from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.fast_dropout import int16_dropout, torch_dropout_is_serial, use_fast_dropout


def test_drop_rate_and_scale_are_dropouts():
    torch.manual_seed(0)
    x = torch.ones(1_000_003)  # not a multiple of four: the last word is cut
    y = int16_dropout(x, p=0.1)
    cut = round(0.1 * 65536)
    rate = cut / 65536
    dropped = (y == 0).double().mean().item()
    sigma = (rate * (1 - rate) / x.numel()) ** 0.5
    assert abs(dropped - rate) < 5 * sigma  # binomial: 0.1 within 0.0015
    assert torch.allclose(y[y != 0], torch.tensor(65536 / (65536 - cut)))
    assert abs(y.double().mean().item() - 1.0) < 5 * sigma / (1 - rate)  # expectation kept
    # every quarter of the 64-bit words is uniform, the sign-carrying one included
    quarters = (y.view(-1)[:1_000_000].view(-1, 4) == 0).double().mean(0)
    assert torch.all((quarters - rate).abs() < 5 * (rate * (1 - rate) / 250_000) ** 0.5)


@pytest.mark.parametrize("p", [0.3, 0.5])
def test_other_rates(p):
    torch.manual_seed(1)
    y = int16_dropout(torch.ones(400_000), p=p)
    assert abs((y == 0).double().mean().item() - p) < 0.005


def test_identity_when_not_training_or_zero_rate_and_zero_at_one():
    x = torch.randn(5, 7)
    assert int16_dropout(x, p=0.5, training=False) is x
    assert int16_dropout(x, p=0.0) is x
    assert torch.equal(int16_dropout(x, p=1.0), torch.zeros_like(x))
    with pytest.raises(ValueError, match="between 0 and 1, but got 1.5"):
        int16_dropout(x, p=1.5)


def test_gradient_is_the_mask_times_the_scale_and_dtype_is_kept():
    torch.manual_seed(2)
    x = torch.randn(64, 33, requires_grad=True)
    y = int16_dropout(x, p=0.2)
    y.sum().backward()
    scale = 65536 / (65536 - round(0.2 * 65536))
    assert torch.allclose(x.grad, (y != 0).float() * scale)
    assert torch.allclose(y, x.detach() * x.grad)
    assert int16_dropout(torch.randn(4, 8, dtype=torch.bfloat16), p=0.1).dtype == torch.bfloat16


def test_the_seed_decides_the_mask():
    torch.manual_seed(3)
    first = int16_dropout(torch.ones(1000), p=0.5)
    torch.manual_seed(3)
    assert torch.equal(int16_dropout(torch.ones(1000), p=0.5), first)
    torch.manual_seed(4)
    assert not torch.equal(int16_dropout(torch.ones(1000), p=0.5), first)


def tiny_model(**extra) -> VanillaTransformerForConditionalGeneration:
    """conftest's 2 + 2-layer model with a different rate at each kind of dropout site."""
    config = tiny_config(dropout=0.1, attention_dropout=0.2, activation_dropout=0.3, **extra)
    return VanillaTransformerForConditionalGeneration(config)


def test_the_model_calls_the_installed_kernel_at_every_dropout(monkeypatch):
    model = tiny_model(attn_implementation="eager")
    calls = []

    def spy(x, p, training):
        calls.append((p, training))
        return int16_dropout(x, p=p, training=training)

    for module in model.modules():
        module.dropout_kernel = spy
    monkeypatch.setattr(F, "dropout", lambda *a, **k: pytest.fail("F.dropout called despite the kernel"))
    ids = random_ids(2, 6)
    model.train()(input_ids=ids, labels=ids).loss.backward()
    # encoder: embeddings + 2 layers x (attention probs, attention out, activation, ffn out);
    # decoder: embeddings + 2 layers x (2 x (probs, out), activation, ffn out)
    assert sorted(p for p, _ in calls) == sorted(
        [0.1] * 2 + [0.2, 0.1, 0.3, 0.1] * 2 + [0.2, 0.1, 0.2, 0.1, 0.3, 0.1] * 2
    )
    assert all(training for _, training in calls)


def test_eval_outputs_do_not_change_and_nothing_is_saved(tmp_path):
    model = tiny_model().eval()
    ids = random_ids(2, 6)
    before = model(input_ids=ids, labels=ids).logits
    for module in model.modules():
        module.dropout_kernel = int16_dropout
    assert torch.equal(model(input_ids=ids, labels=ids).logits, before)
    model.save_pretrained(tmp_path)
    loaded = VanillaTransformerForConditionalGeneration.from_pretrained(tmp_path)
    assert not any(hasattr(module, "dropout_kernel") for module in loaded.modules())


@pytest.mark.parametrize(
    ("cpu_name", "mkl", "serial"),
    [
        ("AMD EPYC", True, True),
        ("Intel(R) Xeon(R) Platinum 8480+", True, False),
        ("Intel(R) Xeon(R)", False, True),
    ],
)
def test_on_where_torch_draws_masks_serially(monkeypatch, cpu_name, mkl, serial):
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: {"cpu_name": cpu_name})
    monkeypatch.setattr(torch.backends.mkl, "is_available", lambda: mkl)
    assert torch_dropout_is_serial("cpu") is serial
    model = tiny_model()
    assert use_fast_dropout(model, torch.device("cpu")) is serial
    assert all(
        getattr(m, "dropout_kernel", None) is (int16_dropout if serial else None) for m in model.modules()
    )
    assert torch_dropout_is_serial("cuda") is False
