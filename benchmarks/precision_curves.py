"""Validation BLEU of translation runs that differ only in precision, against updates and minutes.

    VT_DATA_DIR=../shared/data vanilla-transformer train --recipe training/configs/multi30k_de_en.yaml \
        --set mixed_precision=no --set max_steps=1200 --set max_minutes=null --set eval_every=300 \
        --set output_dir=runs/precision/no            # and again with mixed_precision=bf16
    python -m benchmarks.precision_curves runs/precision/no runs/precision/bf16 --output bleu_precision.png

Reads each run's ``results.json`` (its validation history and the precision it used), prints a table
of validation BLEU at every evaluated update, and draws both curves.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def load_run(folder: Path) -> tuple[str, list[dict]]:
    path = folder / "results.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: is {folder} a finished training run?")
    results = json.loads(path.read_text(encoding="utf-8"))
    used = results.get("mixed_precision", {}).get("used", "?")
    label = "fp32" if used == "no" else used
    return label, [row for row in results.get("history", []) if "sacrebleu" in row]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="Run folders (output_dir of each training run).")
    parser.add_argument("--output", type=Path, default=Path("bleu_precision.png"))
    args = parser.parse_args(argv)
    runs = [load_run(folder) for folder in args.runs]

    print("| update | " + " | ".join(f"{label} BLEU | {label} min" for label, _ in runs) + " |")
    print("| --- |" + " --- | --- |" * len(runs))
    steps = sorted({row["step"] for _, history in runs for row in history})
    for step in steps:
        cells = []
        for _, history in runs:
            row = next((row for row in history if row["step"] == step), None)
            cells += [f"{row['sacrebleu']:.2f}", f"{row['elapsed_minutes']:.1f}"] if row else ["—", "—"]
        print(f"| {step} | " + " | ".join(cells) + " |")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (by_update, by_minute) = plt.subplots(1, 2, figsize=(10, 4), dpi=110, sharey=True)
    for label, history in runs:
        by_update.plot([r["step"] for r in history], [r["sacrebleu"] for r in history], "o-", label=label)
        by_minute.plot(
            [r["elapsed_minutes"] for r in history], [r["sacrebleu"] for r in history], "o-", label=label
        )
    by_update.set_xlabel("updates")
    by_minute.set_xlabel("wall-clock minutes of training")
    by_update.set_ylabel("validation sacreBLEU (beam 4)")
    for axis in (by_update, by_minute):
        axis.grid(alpha=0.3)
        axis.legend()
    figure.suptitle("Same recipe, same updates: fp32 against bf16 mixed precision")
    figure.tight_layout()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(args.output)
    print(f"Plot written to {args.output}")


if __name__ == "__main__":
    main()
