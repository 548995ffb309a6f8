"""Two systems in one process, their steps alternating: speed ratios that a drifting shared CPU cannot skew.

    python -m benchmarks.paired --preset small --systems ours marian --rounds 40 [--threads 2]

``python -m benchmarks`` measures every system in a fresh process, round-robin over a few rounds; on a
shared CPU whose speed swings by tens of percent within minutes, its ratios carry that swing. Here both
systems are built in one process and take turns: each round times one training step (or one generation)
of each, first one then the other, in an order that flips every round, and the ratio of the two times is
taken within the round, seconds apart. A figure is the median of those per-round ratios, with quartiles
(the spread the noise leaves). The two systems share the process's allocator, caches and thread pool,
which the fresh-process suite keeps apart: the two measurements complement each other.

The workloads are the suite's (``measure.py``): a training step of 32 sentences x 24 + 24 tokens, and
greedy and beam-4 generation of 32 new tokens at batch 1 and 32. Batch-32 generations run a quarter of
the rounds (at least 3): they take seconds each.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from .measure import generation_workloads, training_batch
from .presets import NEW_TOKENS, PRESETS
from .systems import MEASURES, SYSTEMS, build


def alternate(functions: dict[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    """Seconds of each call, ``rounds`` calls per function: in the given order in even rounds, reversed in
    odd ones, so neither system always runs right after the other's allocations."""
    order = list(functions)
    times: dict[str, list[float]] = {name: [] for name in order}
    for index in range(rounds):
        for name in order if index % 2 == 0 else reversed(order):
            start = time.perf_counter()
            functions[name]()
            times[name].append(time.perf_counter() - start)
    return times


def paired_ratio(times: list[float], baseline_times: list[float]) -> dict:
    """Speed relative to the baseline: the median over rounds of (baseline's time / this time) within
    each round, with its quartiles."""
    if len(times) != len(baseline_times) or not times:
        raise ValueError(f"paired rounds: {len(times)} times against {len(baseline_times)} for the baseline.")
    ratios = sorted(base / own for own, base in zip(times, baseline_times, strict=True))
    quartiles = statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else ratios * 3
    return {
        "median": statistics.median(ratios),
        "q1": quartiles[0],
        "q3": quartiles[2],
        "rounds": len(ratios),
    }


def workloads(
    systems: dict, preset: dict, measures: list[str], rounds: int
) -> list[tuple[str, dict, int, bool]]:
    """(label, {system: one timed call}, rounds, whether it trains) for every workload both systems run."""
    jobs = []
    if "train" in measures:
        steps = {}
        for name, system in systems.items():
            batch = training_batch(system, preset)
            system.model.train()
            steps[name] = lambda system=system, batch=batch: system.train_step(*batch)
        jobs.append(("training step", steps, rounds, True))
    if "generate" in measures:
        for batch, beams, source in generation_workloads(list(systems.values()), preset):
            calls = {
                name: lambda system=system, beams=beams, source=source: system.generate(
                    source, beams, NEW_TOKENS
                )
                for name, system in systems.items()
            }
            label = f"{'greedy' if beams == 1 else f'beam {beams}'}, batch {batch}"
            jobs.append((label, calls, rounds if batch == 1 else max(3, rounds // 4), False))
    return jobs


def run(systems: dict, preset: dict, measures: list[str], rounds: int, warmup: int = 3) -> list[dict]:
    """One record per workload: each system's median seconds and the first system's paired speed ratio
    to the second's."""
    name, baseline = list(systems)
    records = []
    for label, calls, count, trains in workloads(systems, preset, measures, rounds):
        # Generation runs without autograd, as measure.py and serving do.
        with torch.enable_grad() if trains else torch.inference_mode():
            alternate(calls, warmup)
            times = alternate(calls, count)
        records.append(
            {
                "workload": label,
                "seconds": {system: statistics.median(values) for system, values in times.items()},
                "ratio": paired_ratio(times[name], times[baseline]),
                "times": times,
            }
        )
    return records


def table(records: list[dict], name: str, baseline: str, preset: str) -> str:
    lines = [
        f"| {preset}: {name} / {baseline} | {name} (median) | {baseline} (median) | paired speed ratio (quartiles) | rounds |",
        "| --- | --- | --- | --- | --- |",
    ]
    for record in records:
        ratio = record["ratio"]
        lines.append(
            f"| {record['workload']} | {1e3 * record['seconds'][name]:,.1f} ms "
            f"| {1e3 * record['seconds'][baseline]:,.1f} ms "
            f"| {ratio['median']:.3f} ({ratio['q1']:.3f}-{ratio['q3']:.3f}) | {ratio['rounds']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--systems",
        nargs=2,
        choices=SYSTEMS,
        default=["ours", "marian"],
        metavar=("SYSTEM", "BASELINE"),
        help="The system measured, then the one it is compared with.",
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="small")
    parser.add_argument("--measures", nargs="+", choices=["train", "generate"], default=["train", "generate"])
    parser.add_argument(
        "--rounds", type=int, default=40, help="Alternating rounds (batch-32 generation: a quarter)."
    )
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--output", help="A JSON file for every round's times and the ratios.")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    name, baseline = args.systems
    if name == baseline:
        parser.error("--systems: name two different systems")
    measures = [m for m in args.measures if m in MEASURES[name] and m in MEASURES[baseline]]
    if not measures:
        parser.error(f"{name} and {baseline} share none of the measures {', '.join(args.measures)}")

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    preset = PRESETS[args.preset]
    systems = {system: build(system, preset, args.threads) for system in (name, baseline)}
    started = time.time()
    records = run(systems, preset, measures, args.rounds)
    print(table(records, name, baseline, args.preset))
    print(f"({time.time() - started:.0f} s, {args.threads} threads, torch {torch.__version__})")
    if args.output:
        payload = {
            "preset": args.preset,
            "systems": [name, baseline],
            "threads": args.threads,
            "records": records,
        }
        Path(args.output).write_text(json.dumps(payload, indent=2))
    return records


if __name__ == "__main__":
    main()
