"""Run the whole comparison: every system x preset x measurement in a fresh subprocess, then write a
markdown table (ratios to Marian) and the raw JSON.

    python -m benchmarks [--presets small base] [--systems ours marian ...] [--threads 2] [--repeats 5]
                         [--rounds 3]

The job list runs ``--rounds`` times, round-robin: a shared or throttled CPU drifts by tens of percent
within minutes, and running every system once per round spreads each one's measurements over the
whole run. A figure is the median over rounds; a ratio is the median over rounds of the ratio to
Marian measured in the same round.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tqdm import tqdm

from .presets import NEW_TOKENS, PRESETS, SOURCE_LENGTH, TARGET_LENGTH, TRAIN_BATCH
from .systems import BASELINES, MEASURES, SYSTEMS

ROWS = [  # (label, key, higher is better)
    ("train tok/s", "train_tokens_per_s", True),
    ("train MFU (% of fp32 matmul peak)", "train_mfu", True),
    ("train MFU (% of bf16 matmul peak)", "train_mfu_bf16", True),
    ("train peak RSS (MB)", "peak_rss_mb", False),
    ("greedy, batch 1, tok/s", "greedy_batch1_tokens_per_s", True),
    ("greedy, batch 32, tok/s", "greedy_batch32_tokens_per_s", True),
    ("beam 4, batch 1, tok/s", "beam4_batch1_tokens_per_s", True),
    ("beam 4, batch 32, tok/s", "beam4_batch32_tokens_per_s", True),
    ("greedy agreement with reference", "greedy_agreement", True),
]


def run_one(system: str | None, preset: str, measure: str, threads: int, repeats: int) -> dict:
    command = [sys.executable, "-m", "benchmarks.measure", "--preset", preset, "--measure", measure]
    command += ["--threads", str(threads), "--repeats", str(repeats)]
    if system:
        command += ["--system", system]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="false")
    result = subprocess.run(
        command, capture_output=True, text=True, env=env, cwd=Path(__file__).parent.parent, check=False
    )
    if result.returncode != 0:
        return {"system": system, "preset": preset, "measure": measure, "error": result.stderr[-2000:]}
    return json.loads(result.stdout.strip().splitlines()[-1])


def combine(rounds: list[dict], presets: list[str]) -> tuple[dict, dict]:
    """Medians over rounds of every figure, and medians over rounds of each figure's ratio to Marian of
    the same precision (``BASELINES``; fp32 Marian for the rest)."""
    results: dict = {preset: {} for preset in presets}
    ratios: dict = {preset: {} for preset in presets}
    for preset in presets:
        systems = {system for one in rounds for system in one[preset]}
        for system in systems:
            records = [one[preset][system] for one in rounds if system in one[preset]]
            merged = dict(records[-1])
            for _, key, _ in ROWS:
                values = [record[key] for record in records if record.get(key) is not None]
                if values:
                    merged[key] = statistics.median(values)
                baseline = BASELINES.get(system, "marian")
                relative = [
                    one[preset][system][key] / one[preset][baseline][key]
                    for one in rounds
                    if one[preset].get(system, {}).get(key) is not None
                    and one[preset].get(baseline, {}).get(key)
                ]
                if relative and system != baseline and key != "greedy_agreement":
                    ratios[preset].setdefault(system, {})[key] = statistics.median(relative)
            merged["rounds"] = records
            results[preset][system] = merged
    return results, ratios


def table(results: dict, ratios: dict, preset: str, systems: list[str]) -> str:
    merged = results[preset]
    head = "| " + preset + " | " + " | ".join(systems) + " |\n| --- |" + " --- |" * len(systems) + "\n"
    lines = []
    for label, key, _ in ROWS:
        cells = []
        for system in systems:
            value = merged.get(system, {}).get(key)
            if value is None:
                cells.append("—")
                continue
            text = (
                f"{value:.2%}"
                if key == "greedy_agreement"
                else f"{value:,.1f}"
                if value < 100
                else f"{value:,.0f}"
            )
            ratio = ratios[preset].get(system, {}).get(key)
            if ratio is not None:
                text += f" ({ratio:.2f}×)"
            cells.append(text)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return head + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--presets", nargs="+", choices=sorted(PRESETS), default=["small", "base"])
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeats", type=int, default=5, help="Timed repeats in each measurement.")
    parser.add_argument("--rounds", type=int, default=3, help="Round-robin passes over all systems.")
    parser.add_argument(
        "--output", default="benchmarks/results", help="Folder for results.md and results.json."
    )
    args = parser.parse_args(argv)

    jobs = [(None, args.presets[0], "peak")]
    for preset in args.presets:
        for system in args.systems:
            jobs += [(system, preset, measure) for measure in MEASURES[system]]
    rounds: list[dict] = []
    peaks: list[float] = []
    peaks_bf16: list[float] = []
    started = time.time()
    progress = tqdm(total=len(jobs) * args.rounds, desc="benchmarks", unit="run")
    for _ in range(args.rounds):
        one: dict = {preset: {} for preset in args.presets}
        peak = peak_bf16 = None
        for system, preset, measure in jobs:
            record = run_one(system, preset, measure, args.threads, args.repeats)
            progress.update()
            if "error" in record:
                tqdm.write(f"{system} {preset} {measure} failed:\n{record['error']}")
            if measure == "peak":
                peak, peak_bf16 = record.get("matmul_gflops"), record.get("bf16_matmul_gflops")
                peaks += [peak] if peak else []
                peaks_bf16 += [peak_bf16] if peak_bf16 else []
                continue
            one[preset].setdefault(system, {}).update(record)
            if peak and "train_gflops" in record:
                one[preset][system]["train_mfu"] = 100 * record["train_gflops"] / peak
            if peak_bf16 and "train_gflops" in record:
                one[preset][system]["train_mfu_bf16"] = 100 * record["train_gflops"] / peak_bf16
        rounds.append(one)
    progress.close()
    results, ratios = combine(rounds, args.presets)
    peak = statistics.median(peaks) if peaks else float("nan")
    peak_bf16 = statistics.median(peaks_bf16) if peaks_bf16 else float("nan")

    header = (
        f"# Benchmarks ({time.strftime('%Y-%m-%d %H:%M')}, {platform.processor() or platform.machine()}, "
        f"{args.threads} threads, {args.rounds} round-robin rounds of {args.repeats} repeats)\n\n"
        f"Measured 2048^3 matmul peaks: fp32 {peak:,.1f} GFLOP/s (rounds: {', '.join(f'{p:,.0f}' for p in peaks)}), "
        + (
            f"bf16 {peak_bf16:,.1f} GFLOP/s (rounds: {', '.join(f'{p:,.0f}' for p in peaks_bf16)}). "
            if peaks_bf16
            else "bf16 not measured (no native bf16 on this CPU). "
        )
        + "Figures are medians over rounds; ratios are medians of the per-round ratio to Marian of the same "
        "precision (bf16 systems to marian-bf16, the rest to fp32 Marian). "
        f"Training: {TRAIN_BATCH} sentences x {SOURCE_LENGTH} + {TARGET_LENGTH} tokens, forward + "
        "label-smoothed loss + backward + Adam. "
        f"Generation: {SOURCE_LENGTH}-token sources, {NEW_TOKENS} new tokens (EOS suppressed).\n\n"
    )
    markdown = header + "\n".join(table(results, ratios, preset, args.systems) for preset in args.presets)
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    (output / "results.md").write_text(markdown)
    payload = {
        "peak_gflops": peak,
        "peaks_gflops": peaks,
        "bf16_peak_gflops": peak_bf16,
        "bf16_peaks_gflops": peaks_bf16,
        "threads": args.threads,
        "repeats": args.repeats,
        "rounds": args.rounds,
        "results": results,
        "ratios_to_marian": ratios,
    }
    (output / "results.json").write_text(json.dumps(payload, indent=2))
    print(markdown)
    print(f"({time.time() - started:.0f} s; written to {output}/results.md and results.json)")


if __name__ == "__main__":
    main()
