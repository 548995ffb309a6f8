"""Loss curves of pre-training runs against wall-clock minutes: the picture that compares objectives.

Reads each run's ``pretraining_log.json`` (written by ``vanilla-transformer classify pretrain``; every
logged step of every invocation, with the minutes trained so far) and draws two panels:

* the masked-LM loss: the MLM objective's loss, and ELECTRA's generator loss (a smaller model);
* ELECTRA's discriminator loss, beside the loss of always answering the rate of replaced tokens (the
  binary entropy of that rate): below that line the discriminator tells replaced tokens apart.

    python training/plot_pretraining.py --run mlm=runs/imdb-mlm-packed --run electra=runs/imdb-electra \
        --output docs/imdb_pretraining.png
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

LOG_NAME = "pretraining_log.json"


def pretraining_curves(log: dict) -> dict[str, list[tuple[float, float]]]:
    """``{curve: [(minutes, value), ...]}`` of one run's log: ``masked-LM loss``, and for ELECTRA
    ``discriminator loss`` and ``base-rate loss`` (the binary entropy of the replaced fraction)."""
    rows = [row for row in log["log_history"] if "loss" in row and "elapsed_minutes" in row]
    electra = log.get("objective") == "electra"
    curves = {
        "masked-LM loss": [(row["elapsed_minutes"], row["mlm_loss" if electra else "loss"]) for row in rows]
    }
    if electra:
        curves["discriminator loss"] = [(row["elapsed_minutes"], row["discriminator_loss"]) for row in rows]
        curves["base-rate loss"] = [
            (row["elapsed_minutes"], _entropy(row["replaced_fraction"])) for row in rows
        ]
    return curves


def _entropy(p: float) -> float:
    return 0.0 if p <= 0 or p >= 1 else -(p * math.log(p) + (1 - p) * math.log(1 - p))


def plot_pretraining(runs: dict[str, Path], output: Path, title: str = "") -> Path:
    """One PNG comparing the runs (``{label: run folder or log file}``); returns its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (mlm_axis, disc_axis) = plt.subplots(1, 2, figsize=(11, 4), dpi=120)
    for label, path in runs.items():
        path = Path(path)
        log = json.loads((path / LOG_NAME if path.is_dir() else path).read_text(encoding="utf-8"))
        curves = pretraining_curves(log)
        name = f"{label} ({log.get('objective', 'mlm')})"
        mlm_label = f"{name}: generator" if "discriminator loss" in curves else name
        mlm_axis.plot(*zip(*curves["masked-LM loss"], strict=True), label=mlm_label)
        if "discriminator loss" in curves:
            (line,) = disc_axis.plot(*zip(*curves["discriminator loss"], strict=True), label=name)
            disc_axis.plot(
                *zip(*curves["base-rate loss"], strict=True),
                ":",
                color=line.get_color(),
                label=f"{name}: always the replaced rate",
            )
    mlm_axis.set_title("masked-LM loss (cross-entropy at masked tokens)")
    disc_axis.set_title("ELECTRA discriminator loss (binary cross-entropy, every token)")
    for axis in (mlm_axis, disc_axis):
        axis.set_xlabel("wall-clock minutes of pre-training")
        axis.grid(alpha=0.3)
        if axis.lines:
            axis.legend(fontsize=8)
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output)
    plt.close(figure)
    return output


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--run", action="append", required=True, metavar="LABEL=PATH", help="A run folder or its log file."
    )
    parser.add_argument("--output", required=True, help="The PNG to write.")
    parser.add_argument("--title", default="")
    options = parser.parse_args(argv)
    runs = dict(item.split("=", 1) if "=" in item else (Path(item).name, item) for item in options.run)
    print(f"Wrote {plot_pretraining(runs, Path(options.output), options.title)}")


if __name__ == "__main__":
    main()
