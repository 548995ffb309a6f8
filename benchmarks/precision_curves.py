"""Validation BLEU of translation runs that differ in one setting (by default: precision), against updates
and minutes.

    VT_DATA_DIR=path/to/data vanilla-transformer train --recipe training/configs/multi30k_de_en.yaml \
        --set mixed_precision=no --set max_steps=1200 --set run_minutes=null --set eval_steps=300 \
        --set output_dir=runs/precision/no            # and again with mixed_precision=bf16
    python -m benchmarks.precision_curves runs/precision/no runs/precision/bf16 --output bleu_precision.png

Reads each run's ``results.json`` (its validation history and the precision it used), prints a table
of validation BLEU at every evaluated update, and draws both curves. Where the run's final model was
scored on the test split by ``vanilla-transformer evaluate`` (``<run>/model/test_scores.json``), that
score is drawn as a star at the run's last minute. ``--metric bleu_lc_tok`` plots the lowercased
tokenized convention (English->German) instead of sacreBLEU.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

METRICS = {"sacrebleu": "sacreBLEU", "bleu_lc_tok": "lowercased tokenized BLEU"}


def load_run(folder: Path, metric: str = "sacrebleu") -> tuple[str, list[dict], dict | None]:
    """The run's precision label, its validation history and its test score (None if not evaluated)."""
    path = folder / "results.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: is {folder} a finished training run?")
    results = json.loads(path.read_text(encoding="utf-8"))
    used = results.get("mixed_precision", {}).get("used", "?")
    label = "fp32" if used == "no" else used
    history = [row for row in results.get("history", []) if metric in row]
    test = None
    scores = folder / "model" / "test_scores.json"
    if scores.is_file():
        test = json.loads(scores.read_text(encoding="utf-8"))
        test["minutes"], test["updates"] = results["training_minutes"], results["updates"]
    return label, history, test


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="Run folders (output_dir of each training run).")
    parser.add_argument("--output", type=Path, default=Path("bleu_precision.png"))
    parser.add_argument("--labels", nargs="+", help="One legend label per run (default: its precision).")
    parser.add_argument("--metric", choices=sorted(METRICS), default="sacrebleu")
    parser.add_argument("--title", default="Same recipe, same updates: fp32 against bf16 mixed precision")
    args = parser.parse_args(argv)
    metric = args.metric
    runs = [load_run(folder, metric) for folder in args.runs]
    if args.labels:
        if len(args.labels) != len(runs):
            parser.error(f"--labels names {len(args.labels)} runs, but {len(runs)} were given.")
        runs = [(label, history, test) for label, (_, history, test) in zip(args.labels, runs, strict=True)]

    print("| update | " + " | ".join(f"{label} BLEU | {label} min" for label, _, _ in runs) + " |")
    print("| --- |" + " --- | --- |" * len(runs))
    steps = sorted({row["step"] for _, history, _ in runs for row in history})
    for step in steps:
        cells = []
        for _, history, _ in runs:
            row = next((row for row in history if row["step"] == step), None)
            cells += [f"{row[metric]:.2f}", f"{row['elapsed_minutes']:.1f}"] if row else ["—", "—"]
        print(f"| {step} | " + " | ".join(cells) + " |")
    for label, _, test in runs:
        if test:
            print(
                f"{label}: test {METRICS[metric]} {test[metric]:.2f} after {test['updates']} updates, "
                f"{test['minutes']:.1f} min (beam {test['num_beams']}, length penalty {test['length_penalty']})"
            )

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (by_update, by_minute) = plt.subplots(1, 2, figsize=(10, 4), dpi=110, sharey=True)
    for label, history, test in runs:
        (line,) = by_update.plot(
            [r["step"] for r in history], [r[metric] for r in history], "o-", label=label
        )
        by_minute.plot(
            [r["elapsed_minutes"] for r in history], [r[metric] for r in history], "o-", label=label
        )
        if test:
            for axis, x in ((by_update, test["updates"]), (by_minute, test["minutes"])):
                axis.plot(
                    [x], [test[metric]], "*", markersize=14, color=line.get_color(), label=f"{label}: test"
                )
    by_update.set_xlabel("updates")
    by_minute.set_xlabel("wall-clock minutes of training")
    # Two lines: the long convention name in one line would not fit the figure's height.
    by_update.set_ylabel(f"{METRICS[metric]}\n(validation sample during training)")
    for axis in (by_update, by_minute):
        axis.grid(alpha=0.3)
        axis.legend()
    figure.suptitle(args.title)
    figure.tight_layout()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(args.output)
    print(f"Plot written to {args.output}")


if __name__ == "__main__":
    main()
