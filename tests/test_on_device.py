"""The model, generation, the pipelines and training on the device ``$VT_TEST_DEVICE`` names (default: the
CPU). The GPU check (``benchmarks/gpu_check.py``) runs this file with ``VT_TEST_DEVICE=cuda``; here it runs on
the CPU, so it cannot rot between GPU loans. Each test compares the device with the CPU where the result is
the same computation (fp32), and holds half precision to what it must give: finite values close to fp32's.
On CUDA, the forward and the cached decoding step also run under ``torch.cuda.set_sync_debug_mode``: a
synchronising call from the package's own files fails the test."""

import os
import warnings

import pytest
import torch
from conftest import random_ids, tiny_config, with_short_translations
from test_host_reads import PACKAGE, HostReads
from test_training import logged_losses, run

from vanilla_transformer import (
    VanillaTransformerForConditionalGeneration,
    modeling_vanilla_transformer,
    precision,
)


def on(device: torch.device, model):
    return model.to(device).eval()


@pytest.fixture
def models(test_device):
    """The same untrained tiny translation model on the CPU and on the device."""
    cpu = VanillaTransformerForConditionalGeneration(tiny_config()).eval()
    device = VanillaTransformerForConditionalGeneration(tiny_config()).eval()
    device.load_state_dict(cpu.state_dict())
    return cpu, on(test_device, device)


def test_a_forward_on_the_device_computes_what_the_cpu_computes(models, test_device):
    cpu, model = models
    source, target = random_ids(2, 7), random_ids(2, 5, seed=1)
    mask = torch.ones_like(source)
    mask[1, 5:] = 0  # a padded sentence: the masks' path on the device too
    with torch.no_grad():
        expected = cpu(input_ids=source, attention_mask=mask, decoder_input_ids=target).logits
        got = model(
            input_ids=source.to(test_device),
            attention_mask=mask.to(test_device),
            decoder_input_ids=target.to(test_device),
        ).logits
    assert got.device.type == test_device.type
    torch.testing.assert_close(got.cpu(), expected, atol=1e-4, rtol=1e-4)


def test_a_forward_and_a_cached_step_read_nothing_back_to_the_host(models, test_device, monkeypatch):
    """No tensor value read into Python from the package's files (``HostReads``), and on CUDA no
    synchronising call from them (torch's sync debug mode warns at each; the warnings name the caller). On
    the CPU the forward checks its ids (free there): the test then takes the tensors for an accelerator's."""
    if test_device.type == "cpu":
        monkeypatch.setattr(modeling_vanilla_transformer, "host_reads_free", lambda tensor: False)
    _, model = models
    source, mask = random_ids(2, 6).to(test_device), torch.ones(2, 6, dtype=torch.long, device=test_device)
    cuda = test_device.type == "cuda"
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught, HostReads() as reads:
        warnings.simplefilter("always")
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("warn")
        try:
            out = model(
                input_ids=source,
                attention_mask=mask,
                decoder_input_ids=random_ids(2, 3).to(test_device),
                use_cache=True,
            )
            model(
                encoder_outputs=(out.encoder_last_hidden_state,),
                attention_mask=mask,
                decoder_input_ids=random_ids(2, 1, seed=1).to(test_device),
                cache=out.past_key_values,
                use_cache=True,
            )
        finally:
            if cuda:
                torch.cuda.set_sync_debug_mode("default")
    assert reads.reads == []
    synchronising = [
        f"{os.path.basename(w.filename)}:{w.lineno}: {w.message}"
        for w in caught
        if "synchroniz" in str(w.message) and w.filename.startswith(PACKAGE)
    ]
    assert synchronising == []


@pytest.mark.parametrize("num_beams", [1, 4])
def test_generation_on_the_device_gives_the_cpu_tokens(models, test_device, num_beams):
    cpu, model = (with_short_translations(m) for m in models)
    source = random_ids(3, 6)
    mask = torch.ones_like(source)
    mask[2, 4:] = 0
    expected = cpu.generate(input_ids=source, attention_mask=mask, num_beams=num_beams)
    got = model.generate(
        input_ids=source.to(test_device), attention_mask=mask.to(test_device), num_beams=num_beams
    )
    assert torch.equal(got.cpu(), expected)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_on_the_device_stays_finite_and_close_to_fp32(models, test_device, dtype):
    """Autocast (training's compute) and half weights (serving): finite logits within half precision's
    rounding of fp32's (the tolerance is a few of bf16's 8-bit-mantissa steps on logits of size ~3), and
    generation runs with half weights."""
    _, model = models
    source = random_ids(2, 7).to(test_device)
    target = random_ids(2, 5, seed=1).to(test_device)
    with torch.no_grad():
        full = model(input_ids=source, decoder_input_ids=target).logits.float()
        with torch.autocast(test_device.type, dtype=dtype):
            mixed = model(input_ids=source, decoder_input_ids=target).logits.float()
        half = model.to(dtype)
        served = half(input_ids=source, decoder_input_ids=target).logits.float()
        tokens = with_short_translations(half).generate(input_ids=source, num_beams=2)
    for logits in (mixed, served):
        assert torch.isfinite(logits).all()
        torch.testing.assert_close(logits, full, atol=0.1, rtol=0.05)
    assert tokens.shape[0] == 2 and tokens.device.type == test_device.type


def test_the_pipelines_on_the_device_give_the_cpu_results(translation_model, classifier_folder, test_device):
    from transformers import pipeline

    sentences = ["ein hund läuft", "zwei katzen schlafen"]
    translations = {
        device: pipeline("translation", model=str(translation_model), trust_remote_code=True, device=device)(
            sentences
        )
        for device in (torch.device("cpu"), test_device)
    }
    assert translations[test_device] == translations[torch.device("cpu")]
    texts = ["a wonderful film", "a boring film that never ends"]
    scores = {}
    for device in (torch.device("cpu"), test_device):
        classify = pipeline(
            "text-classification", model=str(classifier_folder), trust_remote_code=True, device=device
        )
        assert classify.model.device.type == device.type
        scores[device] = [
            {row["label"]: row["score"] for row in rows} for rows in classify(texts, top_k=None)
        ]
    for on_device, on_cpu in zip(scores[test_device], scores[torch.device("cpu")], strict=True):
        assert on_device.keys() == on_cpu.keys()
        for label in on_cpu:
            assert on_device[label] == pytest.approx(on_cpu[label], abs=1e-4)


@pytest.mark.parametrize("setting", ["auto", "fp16"])
def test_a_run_on_the_device_learns_in_the_precision_auto_or_fp16_picks(tmp_path, test_device, setting):
    """The `train` command's core on the device: the precision it records is what ``resolve_mixed_precision``
    says for the device, the loss falls and stays finite (fp16: with the scaler's loss scaling)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fp16 on a CPU warns that it is no faster there
        expected = precision.resolve_mixed_precision(setting, test_device)
    results, folder = run(
        tmp_path,
        setting,
        mixed_precision=setting,
        use_cpu=test_device.type == "cpu",
        max_steps=25,
        warmup_steps=8,
        save_steps=25,
        eval_steps=1000,
    )
    assert results["mixed_precision"]["used"] == expected
    losses = logged_losses(folder)
    assert all(map(torch.isfinite, torch.tensor(list(losses.values()))))
    assert losses[25] < losses[1] - 1.0
