"""The GPU check (benchmarks/gpu_check.py) between GPU loans: its CPU dry run writes every section, a
section past its time or raising is recorded without stopping the others, and the peak table reads GPU
names as torch spells them."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import gpu_check

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """``python -m benchmarks.gpu_check --dry-run`` as a user runs it (about 30 s on 2 cores)."""
    out = tmp_path_factory.mktemp("gpu_check")
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_check", "--dry-run", "--out", str(out)],
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=180,
    )
    return result, out


def test_the_dry_run_writes_every_section_in_json_and_markdown(dry_run):
    result, out = dry_run
    report = json.loads((out / "gpu_check.json").read_text())
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-2000:], report)
    assert report["dry_run"] is True and report["device"] == "cpu"
    sections = report["sections"]
    assert list(sections) == list(gpu_check.SECTIONS)
    for name, record in sections.items():
        assert record["status"] == "ok", (name, record.get("error"), record.get("traceback"))
        assert record["seconds"] <= record["budget_s"]

    environment = sections["environment"]
    for package in ("python", "torch", "transformers", "accelerate", "vanilla_transformer"):
        assert environment["versions"][package], package
    assert environment["device_name"] and "compute_capability" in environment

    tests = sections["tests"]
    assert tests["environment"] == {gpu_check.TEST_DEVICE_VARIABLE: "cpu"}
    assert tests["counts"].get("passed", 0) >= 1 and "ran_on" in tests and not tests["failures"]

    training = sections["training"]
    assert {(c["preset"], c["precision"]) for c in training["cases"]} == {
        (preset, precision) for preset in ("small", "base") for precision in ("bf16", "fp16")
    }
    for case in training["cases"]:
        assert "error" not in case, case
        for system in ("ours", "marian"):
            row = case[system]
            assert row["tokens_per_s"] > 0 and row["tflops"] > 0 and row["losses_finite"], (case, system)
            assert "utilisation" in row  # None: the CPU has no entry in the peak table
        assert case["ours_over_marian"]["median"] > 0

    decoding = sections["decoding"]
    assert {(row["batch"], row["beams"]) for row in decoding["rows"]} == {(1, 1), (1, 4), (2, 1), (2, 4)}
    for row in decoding["rows"]:
        assert row["ours_tokens_per_s"] > 0 and row["marian_tokens_per_s"] > 0
        assert row["ours_over_marian"]["median"] > 0

    multi30k = sections["multi30k"]
    assert multi30k["updates"] == 5 and multi30k["peak_memory_mib"]["host"] > 0
    assert "test_sacrebleu" in multi30k and multi30k["run_minutes"] > 0

    text = (out / "gpu_check.md").read_text()
    for title in gpu_check.TITLES.values():
        assert f"## {title}" in text, title


def _settings(tmp_path, **values) -> gpu_check.Settings:
    return gpu_check.Settings.for_dry_run(out=tmp_path, **values)


def test_a_section_past_its_time_is_killed_with_what_it_measured(tmp_path, monkeypatch):
    def slow(settings, section):
        section.result["measured"] = 1
        section.save()
        time.sleep(60)

    monkeypatch.setitem(gpu_check.RUNNERS, "training", slow)
    started = time.monotonic()
    record = gpu_check.run_section("training", _settings(tmp_path), tmp_path, time.monotonic() + 1)
    assert time.monotonic() - started < 10
    assert record["status"] == "timeout" and record["measured"] == 1


def test_a_failing_section_is_recorded_and_the_next_one_runs(tmp_path, monkeypatch):
    def failing(settings, section):
        raise RuntimeError("no such kernel")

    def fine(settings, section):
        section.result["value"] = 2

    monkeypatch.setitem(gpu_check.RUNNERS, "environment", fine)
    monkeypatch.setitem(gpu_check.RUNNERS, "tests", failing)
    for name in ("training", "decoding", "multi30k"):
        monkeypatch.setitem(gpu_check.RUNNERS, name, fine)
    report = gpu_check.run_check(_settings(tmp_path))
    sections = report["sections"]
    assert sections["tests"]["status"] == "failed" and "no such kernel" in sections["tests"]["error"]
    assert [sections[name]["status"] for name in ("training", "decoding", "multi30k")] == ["ok"] * 3
    assert "no such kernel" in (tmp_path / "gpu_check.md").read_text()


def test_sections_named_on_the_command_line_run_alone_after_the_environment(tmp_path, monkeypatch):
    """A rerun within what is left of a GPU loan: ``--sections decoding`` runs the environment (the others
    need its device) and decoding, nothing else, and the report shows only those."""
    ran = []

    def run_section(name, settings, folder, deadline):
        ran.append(name)
        return {"status": "ok", "seconds": 0.0}

    monkeypatch.setattr(gpu_check, "run_section", run_section)
    monkeypatch.setattr(gpu_check, "preload", lambda: None)
    assert gpu_check.main(["--dry-run", "--out", str(tmp_path), "--sections", "decoding"]) == 0
    assert ran == ["environment", "decoding"]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert list(report["sections"]) == ["environment", "decoding"]
    assert "Training" not in (tmp_path / "gpu_check.md").read_text()


def test_multi30k_is_skipped_with_a_reason_without_its_data(tmp_path):
    settings = gpu_check.Settings(out=tmp_path, data_dir=tmp_path / "absent")
    section = gpu_check.Section("multi30k", tmp_path / "multi30k.json", time.monotonic() + 60)
    gpu_check.multi30k_section(settings, section)
    assert "no Multi30k data" in section.result["skipped"]


def test_the_gpu_runs_multi30k_settings_are_the_recipes_and_load():
    from vanilla_transformer.train.translation.arguments import load_arguments

    recipe, overrides = gpu_check.multi30k_job(gpu_check.Settings(out=Path("out")), minutes=2.5)
    assert recipe == ROOT / "training" / "configs" / "multi30k_de_en.yaml"
    args = load_arguments(str(recipe), overrides)
    assert args.run_minutes == 2.5 and args.source_lang == "de" and args.target_lang == "en"


@pytest.mark.parametrize(
    "name, bf16, fp16",
    [
        ("NVIDIA H100 80GB HBM3", 989.5, 989.5),
        ("NVIDIA H100 PCIe", 756.5, 756.5),
        ("NVIDIA H200", 989.5, 989.5),
        ("NVIDIA A100-SXM4-80GB", 312.0, 312.0),
        ("NVIDIA A10", 125.0, 125.0),
        ("NVIDIA L4", 121.0, 121.0),
        ("NVIDIA L40S", 362.05, 362.05),
        ("Tesla V100-SXM2-16GB", None, 125.0),
        ("Tesla V100-PCIE-32GB", None, 112.0),
        ("Tesla T4", None, 65.0),
    ],
)
def test_the_peak_table_reads_gpu_names_as_torch_spells_them(name, bf16, fp16):
    peak = gpu_check.peak_tflops(name)
    assert (peak["bf16"], peak["fp16"]) == (bf16, fp16) and peak["source"]


def test_an_unknown_gpu_has_no_peak():
    assert gpu_check.peak_tflops("NVIDIA GeForce RTX 4090") is None
    assert gpu_check.peak_tflops("AMD EPYC 9B45") is None


def test_training_flops_at_the_checks_batch_scale_the_suites_count():
    from benchmarks.presets import PRESETS, SOURCE_LENGTH, TARGET_LENGTH, TRAIN_BATCH, training_flops

    preset = PRESETS["base"]
    assert training_flops(preset) == training_flops(preset, TRAIN_BATCH, SOURCE_LENGTH, TARGET_LENGTH)
    assert training_flops(preset, 16 * TRAIN_BATCH) == pytest.approx(16 * training_flops(preset))
