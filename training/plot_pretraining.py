"""Loss curves of pre-training runs against wall-clock minutes: the picture that compares objectives.

Reads each run's ``pretrain_log.jsonl`` (written by the ``masked-lm`` and ``electra`` tasks' runs: every
logged step of every invocation, with the minutes trained so far) and its task (``pretrain_results.json``,
else ``run.json``'s settings), and draws two panels:

* the masked-LM loss: the MLM objective's loss, and ELECTRA's generator loss (a smaller model);
* ELECTRA's discriminator loss, beside the loss of always answering the rate of replaced tokens (the
  binary entropy of that rate): below that line the discriminator tells replaced tokens apart.

With ``--unigram-tokenizer`` and ``--unigram-texts`` the masked-LM panel also shows the unigram entropy of
that tokenizer on those texts: the loss of a model that predicts every masked token from token frequencies
alone. Below that line a masked-LM uses context.

    python training/plot_pretraining.py --run mlm=runs/imdb-mlm-packed --run electra=runs/imdb-electra \
        --output docs/imdb_pretraining.png --unigram-tokenizer runs/imdb-electra/tokenizer \
        --unigram-texts path/to/data/imdb/unsupervised.jsonl.gz
"""

from __future__ import annotations

import argparse
import json
import math
from collections import Counter
from pathlib import Path

LOG_NAME = "pretrain_log.jsonl"


def read_log(path: Path) -> dict:
    """``{"objective": "mlm" | "electra", "log_history": [row, ...]}`` of a run folder (or its log file)."""
    folder, log = (path, path / LOG_NAME) if path.is_dir() else (path.parent, path)
    rows = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = [{key.removeprefix("train/"): value for key, value in row.items()} for row in rows]
    results = folder / "pretrain_results.json"
    task = json.loads(results.read_text(encoding="utf-8")).get("task") if results.is_file() else None
    if task is None and (folder / "run.json").is_file():
        task = json.loads((folder / "run.json").read_text(encoding="utf-8")).get("pretrain", {}).get("task")
    return {"objective": "electra" if task == "electra" else "mlm", "log_history": rows}


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


def unigram_entropy(tokenizer, texts) -> float:
    """The entropy (nats) of the token frequencies of ``texts`` under ``tokenizer``, special tokens left
    out (they are never masked): the masked-LM loss of predicting from frequencies alone."""
    counts = Counter()
    special = set(tokenizer.all_special_ids)
    for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]:
        counts.update(token for token in ids if token not in special)
    total = sum(counts.values())
    if not total:
        raise ValueError("No tokens to count: the unigram entropy needs at least one non-empty text.")
    return -sum(n / total * math.log(n / total) for n in counts.values())


def plot_pretraining(
    runs: dict[str, Path], output: Path, title: str = "", unigram: float | None = None
) -> Path:
    """One PNG comparing the runs (``{label: run folder or log file}``), with the ``unigram`` entropy as
    a reference line on the masked-LM panel when given; returns its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (mlm_axis, disc_axis) = plt.subplots(1, 2, figsize=(11, 4), dpi=120)
    for label, path in runs.items():
        path = Path(path)
        log = read_log(path)
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
    if unigram is not None:
        mlm_axis.axhline(
            unigram, color="grey", linestyle="--", label=f"unigram entropy {unigram:.2f} (no context)"
        )
    mlm_axis.set_title("masked-LM loss (cross-entropy at masked tokens)")
    disc_axis.set_title("ELECTRA discriminator loss (binary, every token)")
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
    parser.add_argument(
        "--unigram-tokenizer", help="A tokenizer folder (a run's tokenizer/) for the unigram line."
    )
    parser.add_argument("--unigram-texts", help="A JSON Lines file (.gz too) whose `text` it counts on.")
    parser.add_argument("--unigram-max-texts", type=int, default=3000, help="The first N texts of that file.")
    options = parser.parse_args(argv)
    if (options.unigram_tokenizer is None) != (options.unigram_texts is None):
        parser.error("--unigram-tokenizer and --unigram-texts go together.")
    runs = dict(item.split("=", 1) if "=" in item else (Path(item).name, item) for item in options.run)
    unigram = None
    if options.unigram_tokenizer:
        from transformers import AutoTokenizer

        texts = _texts(Path(options.unigram_texts), options.unigram_max_texts)
        unigram = unigram_entropy(AutoTokenizer.from_pretrained(options.unigram_tokenizer), texts)
        print(f"Unigram entropy on {len(texts):,} texts: {unigram:.3f} nats")
    print(f"Wrote {plot_pretraining(runs, Path(options.output), options.title, unigram)}")


def _texts(path: Path, limit: int) -> list[str]:
    """The first ``limit`` texts of a JSON Lines file (.gz too), cleaned as pre-training cleans them;
    streamed, so a large file is neither read whole nor cached."""
    from datasets import load_dataset

    from vanilla_transformer.classification_pipeline import clean_text

    if not path.is_file():
        raise FileNotFoundError(f"--unigram-texts: no such file {path}")
    rows = load_dataset("json", data_files=str(path), split="train", streaming=True).take(limit)
    return [clean_text(row["text"]) for row in rows]


if __name__ == "__main__":
    main()
