"""The hardware users train on: one function picks the device (``devices.pick_device``), and
``mixed_precision: auto`` picks bf16 where the device multiplies it natively, fp16 (with loss scaling) on
CUDA GPUs below compute capability 8.0 and on Apple GPUs, fp32 elsewhere. What cannot run here (CUDA, mps)
is tested through the selection logic with torch's answers replaced; the fp16 path itself runs here, on the
CPU, with torch's fp16 autocast and ``GradScaler("cpu")``."""

import functools
import json

import pytest
import torch
from safetensors.torch import load_file
from test_training import logged_losses, run

from vanilla_transformer import devices, fused_output_loss, precision
from vanilla_transformer.train.common.checkpoints import checkpoint_dirs


@pytest.fixture
def cuda_of_capability(monkeypatch):
    """Make torch report a CUDA GPU of the given compute capability."""

    def make(capability):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: f"GPU {capability}")

    return make


@pytest.mark.parametrize(
    ("capability", "expected"), [((7, 5), "fp16"), ((7, 0), "fp16"), ((8, 0), "bf16"), ((9, 0), "bf16")]
)
def test_auto_is_fp16_below_compute_capability_8_and_bf16_from_it(cuda_of_capability, capability, expected):
    cuda_of_capability(capability)
    assert precision.resolve_mixed_precision("auto", "cuda") == expected
    reason = precision.precision_reason("auto", expected, "cuda")
    assert ("fp16 tensor cores" in reason) if expected == "fp16" else ("natively" in reason)


def test_auto_on_a_cpu_follows_its_bf16_unit_and_never_picks_fp16(monkeypatch):
    for flags, expected in (({"avx512_bf16": True}, "bf16"), ({"amx_bf16": True}, "bf16"), ({}, "no")):
        monkeypatch.setattr(torch.cpu, "get_capabilities", lambda flags=flags: flags)
        assert precision.resolve_mixed_precision("auto", "cpu") == expected


def test_fp16_is_accepted_and_bad_settings_named():
    assert precision.resolve_mixed_precision("no", "cpu") == "no"
    with pytest.warns(UserWarning, match="fp16' on a CPU"):
        assert precision.resolve_mixed_precision("fp16", "cpu") == "fp16"
    with pytest.raises(
        ValueError, match=r"`mixed_precision` must be one of auto \| no \| bf16 \| fp16, got 'fp8'"
    ):
        precision.resolve_mixed_precision("fp8", "cpu")


def test_the_accelerator_torch_finds_is_the_default_device_and_mps_gets_fp16(monkeypatch):
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda *args, **kwargs: torch.device("mps"))
    assert devices.pick_device() == torch.device("mps") and devices.available_devices() == ["mps", "cpu"]
    assert devices.pick_device("auto") == torch.device("mps") and devices.pick_device("cpu").type == "cpu"
    assert precision.resolve_mixed_precision("auto") == "fp16"  # the default device: mps
    with pytest.raises(
        ValueError, match=r"--device 'cuda': there is no such device here; available: mps, cpu"
    ):
        devices.pick_device("cuda")


def test_without_an_accelerator_the_cpu_is_chosen_and_a_gpu_request_is_refused(monkeypatch):
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)
    assert devices.pick_device() == torch.device("cpu")
    with pytest.raises(ValueError, match=r"--device 'cuda:1': there is no such device here; available: cpu"):
        devices.pick_device("cuda:1")
    with pytest.raises(ValueError, match=r"--device 'gpu' is not a device name"):
        devices.pick_device("gpu")


# -- the fp16 path, run on the CPU ---------------------------------------------------------------------------


def test_an_fp16_run_learns_tracks_fp32_and_records_its_precision(tmp_path):
    """fp16 autocast with dynamic loss scaling: the loss falls, stays finite, and tracks the fp32 run of the
    same seed within 3 % at every update (fp16's 10-bit mantissa against fp32's; the largest gap seen here
    was 0.063 nats, 1.6 %);
    the saved weights are fp32; results.json and the card say fp16 and why."""
    settings = dict(max_steps=30, warmup_steps=10, save_steps=30, eval_steps=1000)
    fp16, folder = run(tmp_path, "fp16", mixed_precision="fp16", **settings)
    run(tmp_path, "fp32", mixed_precision="no", **settings)
    half, full = logged_losses(folder), logged_losses(tmp_path / "fp32")
    assert sorted(half) == sorted(full) == list(range(1, 31))
    assert max(abs(half[step] - full[step]) / full[step] for step in half) < 0.03
    assert half[30] < half[1] - 1.0  # it learns
    assert fp16["mixed_precision"] | {"hardware": None} == {
        "setting": "fp16",
        "used": "fp16",
        "hardware": None,
        "reason": "as the recipe sets it",
    }
    weights = load_file(folder / "model" / "model.safetensors")
    assert {tensor.dtype for tensor in weights.values()} == {torch.float32}
    assert "fp16 autocast with dynamic loss scaling" in (folder / "model" / "README.md").read_text()
    state = json.loads((folder / "run.json").read_text())["train"]["settings"]
    assert state["mixed_precision"] == "fp16"


def test_an_fp16_update_whose_gradients_overflow_is_skipped_by_the_scaler(tmp_path, monkeypatch):
    """Update 3's loss is multiplied by 1e5: finite in fp32, but its scaled fp16 gradients overflow. The
    scaler skips that update (the weights after it are those after update 2) and halves its scale; the run
    goes on and ends with finite weights: not a NaN model."""
    real, calls = fused_output_loss.fused_output_loss, []

    @functools.wraps(real)
    def huge_at_the_third(*args, **kwargs):
        calls.append(1)
        loss = real(*args, **kwargs)
        return loss * 1e5 if len(calls) == 3 else loss

    monkeypatch.setattr(fused_output_loss, "fused_output_loss", huge_at_the_third)
    scales = []
    from vanilla_transformer.train.common.run_trainer import RunTrainer

    original = RunTrainer.guard_update

    def record_scale(self, model):
        original(self, model)
        scales.append(self.accelerator.scaler.get_scale())

    monkeypatch.setattr(RunTrainer, "guard_update", record_scale)
    run(tmp_path, "run", mixed_precision="fp16", max_steps=5, save_steps=1, eval_steps=1000)
    saved = {
        int(p.name.split("-")[1]): load_file(p / "model.safetensors")
        for p in checkpoint_dirs(tmp_path / "run" / "checkpoints")
    }
    name = "model.encoder.embed_tokens.weight"
    assert torch.equal(saved[3][name], saved[2][name])  # the overflowing update did not move the weights
    assert not torch.equal(saved[4][name], saved[3][name])
    assert all(torch.isfinite(tensor).all() for tensor in saved[5].values())
    # the scale each update started with: halved after the overflow of update 3, unchanged before it
    assert scales[3] == scales[2] / 2 and scales[0] == scales[1] == scales[2]


# ------------------------------------------------------------------------------------------------
# Serving in a chosen type: the same choices on every command that runs a model, and in the pipelines
# ------------------------------------------------------------------------------------------------


def test_inference_dtype_is_the_type_mixed_precision_would_compute_in(cuda_of_capability, monkeypatch):
    cuda_of_capability((7, 5))
    assert precision.inference_dtype("auto", "cuda") == torch.float16
    cuda_of_capability((8, 0))
    assert precision.inference_dtype("auto", "cuda") == torch.bfloat16
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: {})
    assert precision.inference_dtype("auto", "cpu") == torch.float32
    assert precision.inference_dtype("bf16", "cpu") == torch.bfloat16  # forced: no training-speed warning
    assert precision.inference_dtype("no", "cpu") == precision.inference_dtype("fp32", "cpu") == torch.float32
    with pytest.raises(
        ValueError, match=r"--dtype must be one of auto \| no \| fp32 \| bf16 \| fp16, got 'int4'"
    ):
        precision.inference_dtype("int4", "cpu")


@pytest.mark.parametrize(
    "command",
    [
        ["translate", "--model", "m"],
        ["evaluate", "--model", "m"],
        ["attention", "--model", "m", "--text", "t"],
        ["classify", "evaluate", "--model", "m"],
        ["demo", "--model", "m"],
    ],
)
def test_every_command_that_runs_a_model_takes_the_same_dtype_choices(command, capsys):
    from vanilla_transformer.cli import build_parser

    for choice in precision.DTYPE_CHOICES:
        assert build_parser().parse_args([*command, "--dtype", choice, "--device", "cpu"]).dtype == choice
    with pytest.raises(SystemExit):
        build_parser().parse_args([*command, "--dtype", "fp8"])
    assert "--dtype" in capsys.readouterr().err


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_translate_serves_in_half_precision_with_the_float32_translations(translation_model, tmp_path, dtype):
    from vanilla_transformer.cli import main

    source = tmp_path / "source.txt"
    source.write_text("\n".join(["ein hund läuft", "zwei katzen", "ein mann schläft", "das haus"]) + "\n")
    outputs = {}
    for choice in ("fp32", dtype):
        outputs[choice] = tmp_path / f"{choice}.txt"
        main(
            ["translate", "--model", str(translation_model), "--input", str(source)]
            + ["--output", str(outputs[choice]), "--dtype", choice, "--device", "cpu"]
        )
    full, half = (outputs[choice].read_text().splitlines() for choice in ("fp32", dtype))
    assert len(half) == 4 and all(half)
    # Rounding may flip a near-tie between two beams; most sentences must come out the same.
    assert sum(a == b for a, b in zip(full, half, strict=True)) >= 3, (full, half)


def test_the_pipelines_serve_in_the_type_given_with_float32_results(translation_model, classifier_folder):
    from transformers import pipeline

    translate = pipeline(
        "translation",
        model=str(translation_model),
        trust_remote_code=True,
        dtype=precision.inference_dtype("bf16", "cpu"),
        device="cpu",
    )
    assert translate.model.dtype == torch.bfloat16
    translations = [row["translation_text"] for row in translate(["ein hund läuft", "zwei katzen"])]
    assert len(translations) == 2 and all(translations)  # the tiny model's words may differ from fp32's
    texts = ["a wonderful film", "a boring film that never ends"]
    classify = {
        dtype: pipeline(
            "text-classification", model=str(classifier_folder), trust_remote_code=True, dtype=dtype
        )
        for dtype in (torch.float32, torch.float16)
    }
    assert classify[torch.float16].model.dtype == torch.float16
    for text in texts:
        scores = {
            dtype: {row["label"]: row["score"] for row in classifier(text, top_k=None)}
            for dtype, classifier in classify.items()
        }
        assert set(scores[torch.float16]) == set(scores[torch.float32])
        for label, score in scores[torch.float32].items():
            assert scores[torch.float16][label] == pytest.approx(score, abs=5e-3)


def test_attention_maps_and_the_demo_run_in_the_type_given(translation_model, tmp_path):
    from vanilla_transformer.cli import main
    from vanilla_transformer.demo import load_for_demo, translate

    main(
        ["attention", "--model", str(translation_model), "--text", "ein hund läuft"]
        + ["--output", str(tmp_path / "maps"), "--dtype", "bf16"]
    )
    assert (
        sorted(path.suffix for path in (tmp_path / "maps").iterdir() if path.suffix == ".png") == [".png"] * 3
    )
    loaded = load_for_demo(translation_model, device="cpu", dtype="fp16")
    assert {parameter.dtype for parameter in loaded.model.parameters()} == {torch.float16}
    assert translate(loaded, "ein hund läuft", num_beams=2, length_penalty=0.6, max_new_tokens=0)


def test_int8_translation_takes_auto_as_float32_and_refuses_a_half_type_before_loading(
    translation_model, tmp_path, monkeypatch
):
    """int8 dynamic quantisation runs on float32 activations: `--dtype auto` with `--quantize int8` is fp32
    even on a CPU whose auto is bf16; `--dtype bf16` with it is one line naming both options, before the
    model loads."""
    from vanilla_transformer import loading
    from vanilla_transformer.cli import main

    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: {"avx512_bf16": True})  # auto would be bf16
    source = tmp_path / "source.txt"
    source.write_text("ein hund läuft\n")
    main(["translate", "--model", str(translation_model), "--input", str(source)]
         + ["--output", str(tmp_path / "out.txt"), "--quantize", "int8", "--dtype", "auto"])  # fmt: skip
    assert (tmp_path / "out.txt").read_text().strip()
    loads = []
    monkeypatch.setattr(loading, "load_saved_model", lambda *args, **kwargs: loads.append(args))
    with pytest.raises(SystemExit, match="--quantize int8 runs on float32 activations: drop --dtype bf16"):
        main(["translate", "--model", str(translation_model), "--input", str(source), "--quantize", "int8"]
             + ["--dtype", "bf16"])  # fmt: skip
    assert loads == []
