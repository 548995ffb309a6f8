"""The package's pictures (PNG; matplotlib, imported only when one is drawn): a training run's validation
BLEU and loss against wall-clock time (``plot_history``), Table 3's rows side by side (``plot_ablation``),
and a classifier's confusion matrix (``plot_confusion_matrix``, ``classify evaluate``)."""

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


GROUP_COLOURS = {
    "base": "black",
    "A": "tab:blue",
    "B": "tab:cyan",
    "C": "tab:green",
    "D": "tab:orange",
    "E": "tab:red",
}


def plot_ablation(rows: list[dict], bars: Path, curves: Path) -> tuple[Path, Path]:
    """Table 3 as pictures: dev BLEU and dev perplexity per row, coloured by group (``bars``), and each
    row's validation loss against updates (``curves``). ``rows`` are ``ablation.measure_row`` results."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [row["name"] for row in rows]
    colours = [GROUP_COLOURS.get(row["group"], "grey") for row in rows]
    figure, (bleu_axis, ppl_axis) = plt.subplots(1, 2, figsize=(11, 4), dpi=120)
    for axis, key, label in (
        (bleu_axis, "dev_sacrebleu", "dev BLEU (beam 4, alpha 0.6)"),
        (ppl_axis, "dev_perplexity", "dev perplexity (per BPE token)"),
    ):
        values = [row[key] for row in rows]
        axis.bar(names, values, color=colours)
        axis.axhline(
            values[names.index("base")] if "base" in names else values[0], color="black", lw=0.8, ls=":"
        )
        axis.set_ylabel(label)
        axis.tick_params(axis="x", rotation=45)
        axis.grid(axis="y", alpha=0.3)
        for x, value in enumerate(values):
            axis.annotate(f"{value:.1f}", (x, value), ha="center", va="bottom", fontsize=7)
    figure.suptitle("Table 3 rows: A heads, B key size, C model size, D regularisation, E positions")
    figure.tight_layout()
    figure.savefig(bars)
    plt.close(figure)

    figure, axis = plt.subplots(figsize=(8, 4.5), dpi=120)
    styles = ["-", "--", ":", "-.", (0, (5, 1)), (0, (1, 3))]  # the rows of one group, told apart
    for index, (row, colour) in enumerate(zip(rows, colours, strict=True)):
        points = [point for point in row.get("history", []) if "loss" in point]
        if points:
            within = sum(other["group"] == row["group"] for other in rows[:index])
            axis.plot(
                [p["step"] for p in points],
                [p["loss"] for p in points],
                linestyle=styles[within % len(styles)],
                marker="o",
                markersize=3,
                color=colour,
                label=row["name"],
            )
    axis.set_xlabel("updates")
    # Each row's own training objective: rows that change label smoothing (D) change what is measured.
    axis.set_ylabel("validation loss (the row's own ε_ls)")
    axis.set_title("Learning curves of the Table 3 rows")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7, ncol=2)
    figure.tight_layout()
    figure.savefig(curves)
    plt.close(figure)
    return bars, curves


def plot_confusion_matrix(confusion: list[list[int]], names: list[str], path: Path, title: str) -> Path:
    """Write a PNG of ``confusion`` (rows: true labels, columns: predicted, both in the order of ``names``),
    each cell's count written in it, titled ``title``; returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    matrix = np.asarray(confusion)
    figure, axis = plt.subplots(figsize=(4.5, 4), dpi=120)
    axis.imshow(matrix, cmap="Blues")
    axis.set_xticks(range(len(names)), names, rotation=30)
    axis.set_yticks(range(len(names)), names)
    axis.set_xlabel("predicted")
    axis.set_ylabel("true")
    for (row, column), value in np.ndenumerate(matrix):
        color = "white" if value > matrix.max() / 2 else "black"
        axis.text(column, row, f"{value:,}", ha="center", va="center", color=color)
    axis.set_title(title)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path


__all__ = ["plot_history", "plot_ablation", "plot_confusion_matrix"]
