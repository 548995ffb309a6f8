"""Pictures of a training run: validation BLEU and loss against wall-clock time."""

from __future__ import annotations

from pathlib import Path


def plot_history(history: list[dict], path: Path, title: str = "") -> Path | None:
    """Write a PNG of validation BLEU (left axis) and loss (right axis) over training minutes."""
    points = [row for row in history if row.get("sacrebleu") == row.get("sacrebleu")]  # drop NaN rows
    if not points:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = [row["elapsed_minutes"] for row in points]
    figure, bleu_axis = plt.subplots(figsize=(7, 4), dpi=120)
    bleu_axis.plot(minutes, [row["sacrebleu"] for row in points], "o-", color="tab:blue", label="sacreBLEU")
    bleu_axis.set_xlabel("wall-clock minutes of training")
    bleu_axis.set_ylabel("validation sacreBLEU (beam search)", color="tab:blue")
    loss_axis = bleu_axis.twinx()
    loss_axis.plot(minutes, [row["loss"] for row in points], "s--", color="tab:red", label="loss")
    loss_axis.set_ylabel("validation loss (label-smoothed)", color="tab:red")
    for row in points[-1:]:
        bleu_axis.annotate(
            f"{row['sacrebleu']:.1f}",
            (row["elapsed_minutes"], row["sacrebleu"]),
            textcoords="offset points",
            xytext=(-10, 6),
        )
    bleu_axis.set_title(title or "Validation BLEU and loss during training")
    bleu_axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path


__all__ = ["plot_history"]
