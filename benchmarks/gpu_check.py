"""The GPU check: what one lent GPU says about the package, in at most 6 minutes, with nothing downloaded.

    python -m benchmarks.gpu_check [--out DIR] [--dry-run] [--data-dir DIR]

writes ``DIR/gpu_check.json`` and ``DIR/gpu_check.md`` (default ``DIR``: ``gpu_check/``) with one section
each for

- ``environment``: the GPU (name, compute capability, memory), the versions of Python, torch (and its CUDA),
  transformers, accelerate, pytest and this package the check ran on;
- ``tests``: ``tests/test_on_device.py`` (the model against the CPU, generation, half precision, the
  pipelines, a training run, and no synchronising call from the package's files under CUDA's sync debug
  mode), run by pytest in a subprocess with ``VT_TEST_DEVICE`` naming the device;
- ``training``: training tokens/s of our model and of transformers' Marian of the same shape, in one
  process and alternating (``paired.py``), for the small and base presets under bf16 and fp16 autocast
  (fp16 with a ``GradScaler``), and the utilisation: achieved FLOP/s (counted as ``presets.training_flops``
  counts them) over the GPU's dense peak for that format (``PEAK_TFLOPS``; unknown GPUs: none);
- ``decoding``: tokens/s of greedy and beam-4 generation at batch 1 and 64 (32 new tokens, EOS
  suppressed) of both models, weights in bf16 (fp16 below compute capability 8.0);
- ``multi30k``: a short run of the Multi30k De->En recipe (``training/configs/multi30k_de_en.yaml``,
  ``run_minutes`` from the section's time) through the ``train`` command: test BLEU, updates, peak memory;
  skipped, with the reason, when the data folder (``--data-dir``, ``$VT_DATA_DIR`` or ``../shared/data``)
  has no Multi30k.

Each section runs in a forked child process with its own time box (``GPU_BUDGETS``, 350 s in all): a
section past its time is killed and recorded as ``timeout`` with what it had measured so far; one that
raises is recorded as ``failed`` with the error; neither stops the others. The parent process never
touches CUDA (a child forked after CUDA is initialised cannot use it).

``--dry-run`` runs every section's code path on the CPU at tiny sizes (tiny presets, short decodes, one
test file, the built-in synthetic translation job in place of Multi30k) in well under a minute, so the
check cannot rot between GPU loans (``tests/test_gpu_check.py``). It imports only what the lent machines'
images hold (torch, transformers; accelerate and pytest where installed) and runs with the package
installed by ``pip install --no-deps``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import json
import multiprocessing
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST_DEVICE_VARIABLE = "VT_TEST_DEVICE"
SECTIONS = ("environment", "tests", "training", "decoding", "multi30k")
TITLES = {
    "environment": "Environment",
    "tests": "Tests on the device",
    "training": "Training: ours against Marian",
    "decoding": "Decoding: ours against Marian",
    "multi30k": "Multi30k De->En",
}

# Dense (no structured sparsity) tensor-core peaks in TFLOP/s: (tokens that must all appear in
# torch.cuda.get_device_name(), bf16, fp16, source). Most specific first; None: no such tensor cores.
# Datasheets quote "with sparsity" figures for Ampere and newer: the dense peak is half of those.
PEAK_TFLOPS: tuple[tuple[tuple[str, ...], float | None, float | None, str], ...] = (
    # NVIDIA H200 NVL product brief: BF16/FP16 Tensor Core 1,671 TFLOPS with sparsity
    (("H200", "NVL"), 835.5, 835.5, "NVIDIA H200 NVL datasheet (1,671 with sparsity)"),
    # NVIDIA H200 datasheet, SXM: BF16/FP16 Tensor Core 1,979 TFLOPS with sparsity
    (("H200",), 989.5, 989.5, "NVIDIA H200 SXM datasheet (1,979 with sparsity)"),
    # NVIDIA H100 datasheet, H100 NVL column: 1,671 TFLOPS with sparsity
    (("H100", "NVL"), 835.5, 835.5, "NVIDIA H100 NVL datasheet (1,671 with sparsity)"),
    # NVIDIA H100 datasheet, H100 PCIe column: 1,513 TFLOPS with sparsity
    (("H100", "PCIE"), 756.5, 756.5, "NVIDIA H100 PCIe datasheet (1,513 with sparsity)"),
    # NVIDIA H100 datasheet, H100 SXM column ("NVIDIA H100 80GB HBM3"): 1,979 TFLOPS with sparsity
    (("H100",), 989.5, 989.5, "NVIDIA H100 SXM datasheet (1,979 with sparsity)"),
    # NVIDIA L40S datasheet: BF16/FP16 Tensor Core 362.05 | 733 TFLOPS (dense | sparse)
    (("L40S",), 362.05, 362.05, "NVIDIA L40S datasheet (362.05 dense)"),
    # NVIDIA L4 datasheet: BF16/FP16 Tensor Core 242 TFLOPS with sparsity
    (("L4",), 121.0, 121.0, "NVIDIA L4 datasheet (242 with sparsity)"),
    # NVIDIA A100 datasheet (SXM and PCIe alike): BF16/FP16 Tensor Core 312 | 624 TFLOPS
    (("A100",), 312.0, 312.0, "NVIDIA A100 datasheet (312 dense)"),
    # NVIDIA A10 datasheet: BF16/FP16 Tensor Core 125 | 250 TFLOPS
    (("A10",), 125.0, 125.0, "NVIDIA A10 datasheet (125 dense)"),
    # NVIDIA V100S datasheet: Tensor Performance 130 TFLOPS; Volta has no bf16 tensor cores
    (("V100S",), None, 130.0, "NVIDIA V100S datasheet (fp16 only)"),
    # NVIDIA V100 datasheet, PCIe column: Tensor Performance 112 TFLOPS
    (("V100", "PCIE"), None, 112.0, "NVIDIA V100 PCIe datasheet (fp16 only)"),
    # NVIDIA V100 datasheet, SXM2 column: Tensor Performance 125 TFLOPS
    (("V100",), None, 125.0, "NVIDIA V100 SXM2 datasheet (fp16 only)"),
    # NVIDIA T4 datasheet: Mixed Precision (FP16/FP32) 65 TFLOPS; Turing has no bf16 tensor cores
    (("T4",), None, 65.0, "NVIDIA T4 datasheet (fp16 only)"),
)


def peak_tflops(device_name: str) -> dict | None:
    """``{"bf16": ..., "fp16": ..., "source": ...}`` for a GPU of ``PEAK_TFLOPS`` by its name (tokens
    matched whole, so an A100 is not an A10), else None."""
    tokens = set(re.split(r"[^A-Z0-9]+", device_name.upper()))
    for required, bf16, fp16, source in PEAK_TFLOPS:
        if set(required) <= tokens:
            return {"bf16": bf16, "fp16": fp16, "source": source}
    return None


@dataclasses.dataclass
class Settings:
    """What the check runs: the GPU sizes, or ``dry_run()``'s tiny CPU ones."""

    device: str = "cuda"
    dry_run: bool = False
    out: Path = Path("gpu_check")
    data_dir: Path | None = None
    budgets: dict = dataclasses.field(
        default_factory=lambda: {
            "environment": 15,
            "tests": 75,
            "training": 70,
            "decoding": 45,
            "multi30k": 145,
        }
    )
    total_s: float = 360.0
    # The sections to run (environment always runs: the others need its device): all by default, a few to
    # rerun what a first check found failing within what is left of a GPU loan.
    sections: tuple[str, ...] = SECTIONS
    # The tests that take the device from VT_TEST_DEVICE: model, generation, pipelines, training, host syncs.
    test_files: tuple[str, ...] = ("tests/test_on_device.py",)
    presets: dict | None = None  # None: benchmarks.presets.PRESETS
    train_batch: int = 512  # sentences a step: 512 x (24 + 24) tokens, about the paper's 25k per side
    train_rounds: int = 8
    train_warmup: int = 3
    decode_preset: str = "base"
    decode_batches: tuple[int, ...] = (1, 64)
    decode_beams: tuple[int, ...] = (1, 4)
    new_tokens: int = 32
    decode_rounds: int = 4
    multi30k_overhead_s: float = 60.0  # start-up, tokenizer, test-set decoding, saving: not training

    @classmethod
    def for_dry_run(cls, **values) -> Settings:
        tiny = dict(num_heads=2, num_encoder_layers=1, num_decoder_layers=1)
        return cls(
            **{"device": "cpu", **values},
            dry_run=True,
            budgets={"environment": 20, "tests": 60, "training": 30, "decoding": 30, "multi30k": 60},
            total_s=200.0,
            test_files=(
                "tests/test_on_device.py::test_a_forward_on_the_device_computes_what_the_cpu_computes",
            ),
            presets={
                "small": dict(d_model=16, d_ff=32, vocab_size=64, **tiny),
                "base": dict(d_model=32, d_ff=64, vocab_size=128, **tiny),
            },
            train_batch=4,
            train_rounds=2,
            train_warmup=1,
            decode_batches=(1, 2),
            new_tokens=4,
            decode_rounds=2,
        )


class Section:
    """One section's record as its child process builds it: saved to disk after every step, so that a
    section killed at its time limit still reports what it measured."""

    def __init__(self, name: str, path: Path, deadline: float):
        self.name, self.path, self.deadline = name, path, deadline
        self.result: dict = {}

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def save(self) -> None:
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(self.result, indent=2, default=str))
        temporary.replace(self.path)


# -- the sections (each runs in its own child process) ----------------------------------------------------


def version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "CPU"


def synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def environment_section(settings: Settings, section: Section) -> None:
    import torch

    import vanilla_transformer

    result = section.result
    result["versions"] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "transformers": version("transformers"),
        "accelerate": version("accelerate"),
        "pytest": version("pytest"),
        "flash_attn": version("flash-attn") or version("flash_attn"),
        "vanilla_transformer": getattr(vanilla_transformer, "__version__", None),
        "vanilla_transformer_distribution": version("vanilla-transformer"),
    }
    result["package_path"] = str(Path(vanilla_transformer.__file__).parent)
    result["device"] = settings.device
    device = torch.device(settings.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("CUDA is not available to torch: no GPU to check (use --dry-run on a CPU).")
        properties = torch.cuda.get_device_properties(device)
        result["device_name"] = torch.cuda.get_device_name(device)
        result["compute_capability"] = "{}.{}".format(*torch.cuda.get_device_capability(device))
        result["memory_gib"] = round(properties.total_memory / 2**30, 1)
        result["gpu_count"] = torch.cuda.device_count()
    else:
        result["device_name"] = cpu_name()
        result["compute_capability"] = None
    result["peak_tflops"] = peak_tflops(result["device_name"]) if device.type == "cuda" else None
    result["cpu"] = cpu_name()


def run_logged(command: list[str], environment: dict, log: Path, seconds: float) -> int | None:
    """Run ``command`` from the checkout in its own session, its output in ``log``; its exit status, or None
    when it outlived ``seconds`` (then it and its children are killed)."""
    with log.open("w") as output:
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=environment,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            return process.wait(timeout=max(1.0, seconds))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return None


def tests_section(settings: Settings, section: Section) -> None:
    result = section.result
    conftest = ROOT / "tests" / "conftest.py"
    if not conftest.exists():
        raise FileNotFoundError(f"No test suite at {ROOT / 'tests'}: run the check from a checkout.")
    log = settings.out / "tests.log"
    command = [sys.executable, "-m", "pytest", "-v", "-o", "addopts=", "-p", "no:cacheprovider"]
    command += list(settings.test_files)
    result |= {
        "command": " ".join(command[1:]),
        "environment": {TEST_DEVICE_VARIABLE: settings.device},
        "ran_on": settings.device,  # tests/conftest.py's `test_device` reads the variable
        "log": log.name,
    }
    section.save()
    environment = {**os.environ, TEST_DEVICE_VARIABLE: settings.device, "HF_HUB_OFFLINE": "1"}
    if settings.dry_run:
        environment["OMP_NUM_THREADS"] = "1"
    result["returncode"] = run_logged(command, environment, log, section.left() - 3)
    result["timed_out"] = result["returncode"] is None
    text = log.read_text(errors="replace")
    outcomes = re.findall(r"^(tests/\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)", text, re.MULTILINE)
    counts: dict[str, int] = {}
    for _, outcome in outcomes:
        counts[outcome.lower()] = counts.get(outcome.lower(), 0) + 1
    result["counts"] = counts
    result["failures"] = [name for name, outcome in outcomes if outcome in ("FAILED", "ERROR")]
    summary = [line for line in text.splitlines() if re.match(r"^=+ .*\d+ (passed|failed|error)", line)]
    result["summary"] = summary[-1].strip("= ") if summary else None
    result["output_tail"] = text[-2000:]
    if result.get("timed_out"):
        raise TimeoutError(f"pytest ran past the section's time; {len(outcomes)} tests had finished.")
    if not outcomes:
        raise RuntimeError(f"pytest ran no test (exit status {result['returncode']}); see {log}.")


def half_dtype(device):
    """The device's fast half format: bf16 where it multiplies bf16 natively (or on a CPU), else fp16."""
    import torch

    if device.type == "cuda" and torch.cuda.get_device_capability(device) < (8, 0):
        return torch.float16
    return torch.bfloat16


def training_section(settings: Settings, section: Section) -> None:
    import torch

    from .paired import paired_ratio
    from .presets import PRESETS, SOURCE_LENGTH, TARGET_LENGTH, training_flops

    device = torch.device(settings.device)
    presets = settings.presets or PRESETS
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    peak = peak_tflops(name) if name else None
    batch = settings.train_batch
    result = section.result
    result |= {
        "workload": {
            "batch": batch,
            "source_length": SOURCE_LENGTH,
            "target_length": TARGET_LENGTH,
            "tokens_per_step": batch * (SOURCE_LENGTH + TARGET_LENGTH),
            "rounds": settings.train_rounds,
            "warmup": settings.train_warmup,
        },
        "presets": presets,
        "peak_tflops": peak,
        "cases": [],
        "not_run": [],
    }
    for preset_name, preset in presets.items():
        for precision in ("bf16", "fp16"):
            case = {"preset": preset_name, "precision": precision}
            if section.left() < 5:
                result["not_run"].append(case | {"reason": "the section's time ran out"})
                section.save()
                continue
            result["cases"].append(case)
            try:
                case |= training_case(settings, preset, precision, device)
                flops = training_flops(preset, batch, SOURCE_LENGTH, TARGET_LENGTH)
                for system in ("ours", "marian"):
                    row = case[system]
                    row["tokens_per_s"] = batch * (SOURCE_LENGTH + TARGET_LENGTH) / row["step_s"]
                    row["tflops"] = flops / row["step_s"] / 1e12
                    dense = (peak or {}).get(precision)
                    row["utilisation"] = row["tflops"] / dense if dense else None
                case["ours_over_marian"] = paired_ratio(case.pop("times")["ours"], case["marian_times"])
                case.pop("marian_times")
            except Exception as error:  # one case's failure (e.g. out of memory) is recorded, not fatal
                case["error"] = f"{type(error).__name__}: {error}"
            section.save()
            if device.type == "cuda":
                torch.cuda.empty_cache()
    if any("error" in case for case in result["cases"]):
        raise RuntimeError("some training cases failed: see their `error`.")


def training_case(settings: Settings, preset: dict, precision: str, device) -> dict:
    """Our model and Marian of ``preset``'s shape, trained in turns under ``precision`` autocast (fp16: with
    a GradScaler); each one's median step time, losses and the case's peak memory."""
    import torch

    from .measure import random_sentences
    from .paired import alternate
    from .presets import SOURCE_LENGTH, TARGET_LENGTH
    from .systems import Marian, Ours, adam

    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    torch.manual_seed(0)
    systems = {"ours": Ours(preset, device=device.type), "marian": Marian(preset)}
    steps, losses = {}, {}
    vocab = preset["vocab_size"]
    for name, system in systems.items():
        system.model.to(device).train()
        source = random_sentences(settings.train_batch, SOURCE_LENGTH, vocab, seed=1)
        target = random_sentences(settings.train_batch, TARGET_LENGTH, vocab, seed=2)
        decoder_input = torch.cat([torch.full((settings.train_batch, 1), system.start), target[:, :-1]], 1)
        tensors = tuple(t.to(device) for t in (source, decoder_input, target))
        optimizer = adam(system.model.parameters())
        scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
        losses[name] = []

        def step(system=system, tensors=tensors, optimizer=optimizer, scaler=scaler, record=losses[name]):
            with torch.autocast(device.type, dtype=dtype):
                loss = system.loss(*tensors)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            record.append(loss.detach())
            synchronize(device)

        steps[name] = step
    alternate(steps, settings.train_warmup)
    times = alternate(steps, settings.train_rounds)
    case: dict = {"times": times, "marian_times": times["marian"]}
    for name in systems:
        values = [float(loss) for loss in losses[name]]
        case[name] = {
            "step_s": statistics.median(times[name]),
            "loss_first_last": [values[0], values[-1]],
            "losses_finite": all(v == v and abs(v) != float("inf") for v in values),
        }
    if device.type == "cuda":
        case["peak_memory_mib"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    return case


def decoding_section(settings: Settings, section: Section) -> None:
    import torch

    from .measure import random_sentences
    from .paired import alternate, paired_ratio
    from .presets import PRESETS, SOURCE_LENGTH
    from .systems import Marian, Ours

    device = torch.device(settings.device)
    preset = (settings.presets or PRESETS)[settings.decode_preset]
    dtype = half_dtype(device)
    result = section.result
    result |= {
        "preset": settings.decode_preset,
        "dtype": str(dtype).removeprefix("torch."),
        "source_length": SOURCE_LENGTH,
        "new_tokens": settings.new_tokens,
        "rows": [],
        "not_run": [],
    }
    torch.manual_seed(0)
    ours, marian = Ours(preset, device=device.type), Marian(preset)
    from vanilla_transformer.inference import prepare_for_inference

    prepare_for_inference(ours.model.to(device), dtype=dtype)
    marian.model.to(device, dtype).eval()
    section.save()
    for batch in settings.decode_batches:
        source = random_sentences(batch, SOURCE_LENGTH, preset["vocab_size"], seed=10 + batch).to(device)
        for beams in settings.decode_beams:
            row = {"batch": batch, "beams": beams}
            if section.left() < 3:
                result["not_run"].append(row | {"reason": "the section's time ran out"})
                section.save()
                continue

            def call(system, source=source, beams=beams):
                return lambda: (system.generate(source, beams, settings.new_tokens), synchronize(device))

            calls = {"ours": call(ours), "marian": call(marian)}
            rounds = settings.decode_rounds if batch == 1 else max(2, settings.decode_rounds // 2)
            with torch.inference_mode():
                alternate(calls, 1)
                times = alternate(calls, rounds)
            for name in calls:
                row[f"{name}_tokens_per_s"] = batch * settings.new_tokens / statistics.median(times[name])
            row["ours_over_marian"] = paired_ratio(times["ours"], times["marian"])
            result["rows"].append(row)
            section.save()


def default_data_dir() -> Path | None:
    for candidate in (
        os.environ.get("VT_DATA_DIR"),
        ROOT.parent / "shared" / "data",
        ROOT / "shared" / "data",
    ):
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return None


RECIPE = ROOT / "training" / "configs" / "multi30k_de_en.yaml"
# The dry run's stand-in: the built-in synthetic job at a tiny size (no data folder needed).
DRY_RUN_JOB = {
    "synthetic_train_size": 400,
    "synthetic_eval_size": 4,
    "vocab_size": 400,
    "model.d_model": 16,
    "model.d_ff": 32,
    "model.num_heads": 2,
    "model.num_encoder_layers": 1,
    "model.num_decoder_layers": 1,
    "max_steps": 5,
    "max_tokens": 200,
    "warmup_steps": 2,
    "eval_bleu_samples": 2,
    "num_beams": 2,
    "mixed_precision": "no",
}


def multi30k_job(settings: Settings, minutes: float) -> tuple[Path | None, dict]:
    """The recipe (None: the built-in job) and the ``--set`` overrides the section's run takes."""
    overrides = {
        # No evaluation or checkpoint during the short run: its minutes go to training, the test set after.
        "eval_steps": 10**6,
        "save_steps": 10**6,
        "report_to": "none",
        "output_dir": str(settings.out / "multi30k"),
        "overwrite": "delete",  # the check's own folder from an earlier check
        "run_minutes": minutes,
    }
    return (None, DRY_RUN_JOB | overrides) if settings.dry_run else (RECIPE, overrides)


def multi30k_section(settings: Settings, section: Section) -> None:
    """The recipe through the ``train`` command in a subprocess (``run_minutes`` from the time left);
    in a dry run, the built-in synthetic job at a tiny size instead (no data folder needed)."""
    result = section.result
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    if settings.dry_run:
        minutes = 0.1
        environment["OMP_NUM_THREADS"] = "1"
        result["dataset"] = "synthetic (dry run: the built-in job at a tiny size, in place of Multi30k)"
    else:
        data_dir = settings.data_dir or default_data_dir()
        result |= {"recipe": str(RECIPE.relative_to(ROOT)), "data_dir": str(data_dir) if data_dir else None}
        if data_dir is None or not (data_dir / "multi30k" / "train.jsonl.gz").exists():
            result["skipped"] = (
                f"no Multi30k data: {data_dir or '--data-dir, $VT_DATA_DIR and ../shared/data'} holds no "
                "multi30k/train.jsonl.gz"
            )
            return
        if not RECIPE.exists():
            result["skipped"] = f"no recipe at {RECIPE}"
            return
        minutes = round(max(0.25, (section.left() - settings.multi30k_overhead_s) / 60), 2)
        environment["VT_DATA_DIR"] = str(data_dir)
        result["dataset"] = "multi30k de->en (test_2016_flickr)"
    recipe, overrides = multi30k_job(settings, minutes)
    arguments = (["--recipe", str(recipe)] if recipe else []) + [
        f"--set={k}={v}" for k, v in overrides.items()
    ]
    command = [sys.executable, "-m", "vanilla_transformer.cli", "train", *arguments]
    output_dir = Path(overrides["output_dir"])
    result |= {"run_minutes": minutes, "command": " ".join(command[1:]), "output_dir": str(output_dir)}
    section.save()
    log = settings.out / "multi30k.log"
    result["returncode"] = run_logged(command, environment, log, section.left() - 2)
    if result["returncode"] is None:
        result["output_tail"] = log.read_text(errors="replace")[-2000:]
        raise TimeoutError("the training run outlived the section's time")
    if result["returncode"] != 0:
        result["output_tail"] = log.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"the train command exited with status {result['returncode']}")
    results = json.loads((output_dir / "results.json").read_text())
    test = results.get("test") or {}
    result |= {
        "updates": results.get("updates"),
        "training_minutes": results.get("training_minutes"),
        "mixed_precision": results.get("mixed_precision"),
        "test_sacrebleu": test.get("sacrebleu"),
        "test_bleu_lc_tok": test.get("bleu_lc_tok"),
        "peak_memory_mib": results.get("peak_memory_mib"),
        "parameters": results.get("parameters"),
    }


RUNNERS: dict[str, Callable[[Settings, Section], None]] = {
    "environment": environment_section,
    "tests": tests_section,
    "training": training_section,
    "decoding": decoding_section,
    "multi30k": multi30k_section,
}


# -- the parent: time boxes, the report ---------------------------------------------------------------------


def _child(name: str, settings: Settings, path: Path, deadline: float) -> None:
    os.setpgid(0, 0)  # its own process group: a timeout kills its subprocesses (pytest, train) too
    section = Section(name, path, deadline)
    status = "ok"
    try:
        RUNNERS[name](settings, section)
        if "skipped" in section.result:
            status = "skipped"
    except BaseException as error:
        status = "timeout" if isinstance(error, TimeoutError) else "failed"
        section.result["error"] = f"{type(error).__name__}: {error}"
        section.result["traceback"] = traceback.format_exc()[-3000:]
    section.result["status"] = status
    section.save()


def run_section(name: str, settings: Settings, folder: Path, deadline: float) -> dict:
    """Run one section in a forked child, killed (with its process group) at ``deadline``; its record."""
    path = folder / f"{name}.json"
    path.unlink(missing_ok=True)
    started = time.monotonic()
    child = multiprocessing.get_context("fork").Process(target=_child, args=(name, settings, path, deadline))
    child.start()
    child.join(max(0.0, deadline - time.monotonic()) + 2)  # the section's own checks stop it first
    killed = child.is_alive()
    if killed:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            child.kill()
        child.join()
    record = json.loads(path.read_text()) if path.exists() else {}
    if killed:
        record |= {"status": "timeout", "error": "killed at the end of the section's time"}
    elif "status" not in record:
        record |= {"status": "failed", "error": f"the section's process died (exit code {child.exitcode})"}
    record["seconds"] = round(time.monotonic() - started, 1)
    return record


def preload() -> None:
    """Import, once, what the sections import, so that each forked child starts with it loaded. Nothing
    here touches CUDA: a child forked after CUDA is initialised cannot use it."""
    import torch  # noqa: F401
    from transformers import MarianMTModel  # noqa: F401

    import vanilla_transformer.inference  # noqa: F401

    from . import measure, paired, systems  # noqa: F401


def run_check(settings: Settings) -> dict:
    started = time.monotonic()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing downloaded, in the sections or their commands
    preload()
    settings.out.mkdir(parents=True, exist_ok=True)
    folder = settings.out / "sections"
    folder.mkdir(exist_ok=True)
    end = started + settings.total_s
    report = {
        "check": "vanilla-transformer GPU check",
        "dry_run": settings.dry_run,
        "device": settings.device,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "budget_s": settings.total_s,
        "sections": {},
    }
    for name in SECTIONS:
        if name not in settings.sections:
            continue
        budget = settings.budgets[name]
        deadline = min(time.monotonic() + budget, end)
        if deadline - time.monotonic() < 2:
            record = {"status": "timeout", "error": "no time left in the check's budget"}
        elif name != "environment" and report["sections"]["environment"]["status"] != "ok":
            record = {"status": "skipped", "skipped": "the environment section failed: no device to run on"}
        else:
            record = run_section(name, settings, folder, deadline)
        record["budget_s"] = budget
        report["sections"][name] = record
        print(f"[gpu_check] {name}: {record['status']} ({record.get('seconds', 0)} s)", flush=True)
    report["seconds"] = round(time.monotonic() - started, 1)
    (settings.out / "gpu_check.json").write_text(json.dumps(report, indent=2, default=str))
    (settings.out / "gpu_check.md").write_text(markdown(report))
    return report


def _number(value, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _percent(value) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def _ratio(ratio: dict | None) -> str:
    return "-" if not ratio else f"{ratio['median']:.2f}x ({ratio['q1']:.2f}-{ratio['q3']:.2f})"


def markdown(report: dict) -> str:
    sections = report["sections"]
    environment = sections["environment"]
    versions = environment.get("versions", {})
    lines = [
        f"# GPU check{' (dry run on the CPU)' if report['dry_run'] else ''}: "
        f"{environment.get('device_name', report['device'])}",
        "",
        f"{report['date']}; {report['seconds']} s of {report['budget_s']:.0f} s.",
        "",
        "| section | status | seconds (of) |",
        "| --- | --- | --- |",
    ]
    ran = [name for name in SECTIONS if name in sections]
    for name in ran:
        record = sections[name]
        lines.append(
            f"| {TITLES[name]} | {record['status']} | {record.get('seconds', 0)} ({record['budget_s']}) |"
        )
    for name in ran:
        record = sections[name]
        lines += ["", f"## {TITLES[name]}", "", f"Status: **{record['status']}**"]
        for key in ("skipped", "error", "note"):
            if record.get(key):
                lines.append(f"{key.capitalize()}: {record[key]}")
        lines.append("")
        lines += SECTION_MARKDOWN[name](record, versions)
    return "\n".join(lines) + "\n"


def _environment_md(record: dict, versions: dict) -> list[str]:
    peak = record.get("peak_tflops")
    rows = [
        ("device", record.get("device_name")),
        ("compute capability", record.get("compute_capability")),
        ("memory (GiB)", record.get("memory_gib")),
        (
            "dense peak TFLOP/s (bf16 / fp16)",
            f"{peak['bf16']} / {peak['fp16']} ({peak['source']})" if peak else None,
        ),
        ("CPU", record.get("cpu")),
        *((name, value) for name, value in versions.items()),
    ]
    return [
        "| | |",
        "| --- | --- |",
        *(f"| {key} | {value if value is not None else '-'} |" for key, value in rows),
    ]


def _tests_md(record: dict, versions: dict) -> list[str]:
    counts = record.get("counts", {})
    lines = [
        f"`{record.get('command', '')}` with `{TEST_DEVICE_VARIABLE}={record.get('environment', {}).get(TEST_DEVICE_VARIABLE)}`;"
        f" ran on: {record.get('ran_on', '-')}.",
        "",
        f"Outcomes: {', '.join(f'{n} {k}' for k, n in counts.items()) or '-'}; pytest: {record.get('summary') or '-'}.",
    ]
    lines += [f"- failed: `{name}`" for name in record.get("failures", [])]
    return lines


def _training_md(record: dict, versions: dict) -> list[str]:
    workload = record.get("workload", {})
    lines = [
        f"{workload.get('batch')} sentences x ({workload.get('source_length')} + {workload.get('target_length')}) "
        f"tokens a step; medians of {workload.get('rounds')} alternating rounds; utilisation against the dense "
        f"peak of the format ({(record.get('peak_tflops') or {}).get('source', 'unknown device: none')}).",
        "",
        "| preset | autocast | ours tok/s | Marian tok/s | ours / Marian | ours TFLOP/s | ours util. | Marian util. | peak MiB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for case in record.get("cases", []):
        if "error" in case:
            lines.append(f"| {case['preset']} | {case['precision']} | error: {case['error']} | | | | | | |")
            continue
        ours, marian = case["ours"], case["marian"]
        lines.append(
            f"| {case['preset']} | {case['precision']} | {_number(ours['tokens_per_s'])} | "
            f"{_number(marian['tokens_per_s'])} | {_ratio(case.get('ours_over_marian'))} | "
            f"{_number(ours['tflops'], 2)} | {_percent(ours['utilisation'])} | {_percent(marian['utilisation'])} | "
            f"{_number(case.get('peak_memory_mib'))} |"
        )
    lines += [
        f"- not run: {case['preset']} {case['precision']} ({case['reason']})"
        for case in record.get("not_run", [])
    ]
    return lines


def _decoding_md(record: dict, versions: dict) -> list[str]:
    lines = [
        f"Preset {record.get('preset')}, weights in {record.get('dtype')}, {record.get('source_length')} source "
        f"tokens, {record.get('new_tokens')} new tokens (EOS suppressed).",
        "",
        "| batch | beams | ours tok/s | Marian tok/s | ours / Marian |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in record.get("rows", []):
        lines.append(
            f"| {row['batch']} | {row['beams']} | {_number(row['ours_tokens_per_s'])} | "
            f"{_number(row['marian_tokens_per_s'])} | {_ratio(row['ours_over_marian'])} |"
        )
    lines += [
        f"- not run: batch {row['batch']}, beams {row['beams']} ({row['reason']})"
        for row in record.get("not_run", [])
    ]
    return lines


def _multi30k_md(record: dict, versions: dict) -> list[str]:
    memory = record.get("peak_memory_mib") or {}
    rows = [
        ("data", record.get("dataset")),
        ("command", f"`{record['command']}`" if record.get("command") else None),
        ("run_minutes", record.get("run_minutes")),
        ("updates", record.get("updates")),
        (
            "mixed precision",
            (record.get("mixed_precision") or {}).get("used")
            if isinstance(record.get("mixed_precision"), dict)
            else record.get("mixed_precision"),
        ),
        ("test sacreBLEU", _number(record.get("test_sacrebleu"), 2)),
        ("test BLEU (lowercased, tokenized)", _number(record.get("test_bleu_lc_tok"), 2)),
        ("peak memory (MiB)", ", ".join(f"{k} {v:,.0f}" for k, v in memory.items()) or None),
    ]
    return [
        "| | |",
        "| --- | --- |",
        *(f"| {key} | {value if value is not None else '-'} |" for key, value in rows),
    ]


SECTION_MARKDOWN = {
    "environment": _environment_md,
    "tests": _tests_md,
    "training": _training_md,
    "decoding": _decoding_md,
    "multi30k": _multi30k_md,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--out", type=Path, default=Path("gpu_check"), help="Folder for the report (default gpu_check/)."
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="Tiny sizes on the CPU: every section's code path in seconds."
    )
    parser.add_argument(
        "--device", default=None, help="The device to check (default: cuda; cpu in a dry run)."
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="Data folder holding multi30k/ (default: $VT_DATA_DIR, ../shared/data).",
    )
    parser.add_argument(
        "--sections",
        nargs="+",
        choices=SECTIONS,
        default=list(SECTIONS),
        help="Run only these sections (environment always runs); default: all.",
    )
    args = parser.parse_args(argv)
    values = {
        "out": args.out.resolve(),
        "data_dir": args.data_dir,
        "sections": tuple(dict.fromkeys(["environment", *args.sections])),
    }
    if args.device:
        values["device"] = args.device
    settings = Settings.for_dry_run(**values) if args.dry_run else Settings(**values)
    report = run_check(settings)
    print(f"[gpu_check] {report['seconds']} s; report: {settings.out / 'gpu_check.md'}")
    return 0 if all(s["status"] in ("ok", "skipped") for s in report["sections"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
