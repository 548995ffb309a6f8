"""Table 3 of the paper ("Variations on the Transformer architecture") re-run on one machine.

The paper varies one thing at a time around the base model, trains every row for the same number of
steps and reports dev perplexity, dev BLEU and parameters (§6.2, Table 3): heads at constant
computation (row A), the key size alone (B), model size (C), dropout and label smoothing (D) and
learned positional embeddings instead of sinusoids (E).

A *study* file (``training/configs/table3_multi30k.yaml``) names the translation recipe every row
starts from, the settings every row shares (the budget: updates, or minutes), and the rows as
``--set``-style overrides, grouped A-E::

    recipe: multi30k_en_de.yaml          # relative to the study file
    settings: {max_steps: 400, average_last: 1, test_file: null}
    rows:
      A:
        - {model.num_heads: 1, model.d_k: 256, model.d_v: 256}

Each row is one ordinary ``vanilla-transformer train`` command (``commands()`` / ``--print-commands``)
writing into ``OUTPUT/<row>``; the study never reads the test split. A row is *trained* when its
folder has ``results.json`` (skipped on a re-run), *started* when it has checkpoints (resumed), and
*measured* when it has ``table3_row.json``: dev perplexity (per BPE token, without label smoothing, as
the paper's per-wordpiece perplexity) and dev BLEU with §6.1's beam search, but, as in §6.2, no
checkpoint averaging. ``collect()`` measures whatever rows are trained and writes ``table3.md`` (laid
out as the paper's table: blank where a row keeps the base value), ``table3.json`` and the plots.
"""

from __future__ import annotations

import json
import math
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..common.checkpoints import latest_checkpoint
from ..common.recipes import parse_yaml

BASE = "base"
GROUPS = ("A", "B", "C", "D", "E")
ROW_RESULT = "table3_row.json"
STUDY_KEYS = {"recipe", "settings", "rows"}

# Table 3's columns: (header, how to read it from a row's config). Blank where a row keeps the base value.
ARCHITECTURE_COLUMNS = (
    (
        "N",
        lambda c: (
            f"{c.num_encoder_layers}"
            if c.num_encoder_layers == c.num_decoder_layers
            else f"{c.num_encoder_layers}/{c.num_decoder_layers}"
        ),
    ),
    ("d_model", lambda c: f"{c.d_model}"),
    ("d_ff", lambda c: f"{c.d_ff}"),
    ("h", lambda c: f"{c.num_heads}"),
    ("d_k", lambda c: f"{c.d_k}"),
    ("d_v", lambda c: f"{c.d_v}"),
    ("P_drop", lambda c: f"{c.dropout:g}"),
    ("ε_ls", lambda c: f"{c.label_smoothing:g}"),
    ("positions", lambda c: c.position_encoding),
)


@dataclass
class Row:
    """One line of the table: its name (``base``, ``A1`` ...), group and overrides of the shared recipe."""

    name: str
    group: str
    overrides: dict = field(default_factory=dict)


@dataclass
class Study:
    """A study file, read: the recipe every row starts from, the shared settings and the rows."""

    path: Path
    recipe: Path
    settings: dict
    rows: list[Row]

    def select(self, wanted: str | None) -> list[Row]:
        """The base row and the rows ``wanted`` names (``"A,C"``: groups; ``"A1,C3"``: single rows)."""
        if not wanted:
            return list(self.rows)
        names = [name.strip() for name in wanted.split(",") if name.strip()]
        known = {row.name for row in self.rows} | set(GROUPS)
        unknown = [name for name in names if name not in known]
        if unknown:
            raise ValueError(
                f"--rows: unknown row(s) {', '.join(unknown)} in {self.path}; rows: "
                f"{', '.join(row.name for row in self.rows)} (or a group: {', '.join(GROUPS)})."
            )
        return [row for row in self.rows if row.name == BASE or row.name in names or row.group in names]

    def overrides(self, row: Row, output: Path, minutes: float | None = None) -> dict:
        """The ``--set`` values of ``row``'s training command: shared settings, the row's, its folder."""
        values = {**self.settings, **row.overrides, "output_dir": str(output / row.name)}
        if minutes is not None:  # a wall-clock budget per row replaces the shared number of updates
            values |= {"run_minutes": minutes, "max_steps": 10**9}
        return values


def read_study(path: str | Path) -> Study:
    """Read and check a study file; every row's settings are parsed now, so that a bad override fails
    before any row trains, with the row and the key named."""
    from .arguments import load_arguments

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No such study file: {path}")
    values = parse_yaml(path.read_text(encoding="utf-8")) or {}
    if not isinstance(values, dict) or "recipe" not in values:
        raise ValueError(f"{path}: a study is a mapping with `recipe`, `settings` and `rows`.")
    unknown = sorted(set(values) - STUDY_KEYS)
    if unknown:
        raise ValueError(
            f"{path}: unknown key(s) {', '.join(unknown)}; a study has {', '.join(sorted(STUDY_KEYS))}."
        )
    recipe = Path(values["recipe"])
    if not recipe.is_absolute():
        recipe = path.parent / recipe
    settings = values.get("settings") or {}
    groups = values.get("rows") or {}
    if not isinstance(settings, dict) or not isinstance(groups, dict):
        raise ValueError(f"{path}: `settings` and `rows` must be mappings.")
    rows = [Row(BASE, BASE)]
    for group, variations in groups.items():
        if group not in GROUPS:
            raise ValueError(f"{path}: rows are grouped as in Table 3 ({', '.join(GROUPS)}), not {group!r}.")
        if not isinstance(variations, list) or not all(isinstance(v, dict) for v in variations):
            raise ValueError(f"{path}: row group {group} must be a list of mappings of overrides.")
        rows += [Row(f"{group}{index}", group, dict(v)) for index, v in enumerate(variations, start=1)]
    study = Study(path, recipe, settings, rows)
    for row in rows:
        try:
            load_arguments(str(recipe), study.overrides(row, Path("ablation")))
        except (ValueError, TypeError) as error:
            raise ValueError(f"{path}: row {row.name} ({_describe(row.overrides)}): {error}") from error
    return study


def _describe(overrides: dict) -> str:
    return ", ".join(f"{key}={value}" for key, value in overrides.items()) or "the base model"


def training_command(study: Study, row: Row, output: Path, minutes: float | None = None):
    """The ordinary training command of ``row`` (argv), with ``resume: auto``: the same command starts the
    row, and continues it after a stop (a requeue, a signal, a crash)."""
    overrides = study.overrides(row, output, minutes) | {"resume": "auto"}
    command = ["vanilla-transformer", "train", "--recipe", str(study.recipe)]
    for key, value in overrides.items():
        command += ["--set", f"{key}={_yaml_scalar(value)}"]
    return command


def _yaml_scalar(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def commands(study: Study, rows: list[Row], output: Path, minutes: float | None = None) -> list[str]:
    """One shell line per row, to run side by side (``accelerate launch`` or a scheduler)."""
    return [shlex.join(training_command(study, row, output, minutes)) for row in rows]


# -- running ------------------------------------------------------------------------------------------


def run_study(study: Study, rows: list[Row], output: Path, minutes: float | None = None) -> dict:
    """Train and measure every row not yet trained (resuming a started one), then :func:`collect` the table."""
    output.mkdir(parents=True, exist_ok=True)
    start = time.time()
    for row in rows:
        folder = output / row.name
        if (folder / "results.json").is_file():
            print(f"[table3] {row.name}: trained already, skipped.")
        else:
            train_row(study, row, output, minutes)
        if not (folder / ROW_RESULT).is_file():
            measure_row(study, row, output)  # now, so that an interrupted study keeps every measured row
    return collect(study, rows, output, wall_minutes=(time.time() - start) / 60)


def train_row(study: Study, row: Row, output: Path, minutes: float | None = None) -> None:
    """Run ``row``'s training command in a fresh process (resuming it if it has checkpoints)."""
    folder = output / row.name
    resume = latest_checkpoint(folder / "checkpoints") is not None
    command = training_command(study, row, output, minutes)
    print(f"[table3] {row.name} ({_describe(row.overrides)}){' resumed' if resume else ''}:")
    print("  " + shlex.join(command))
    completed = subprocess.run([sys.executable, "-m", "vanilla_transformer.cli", *command[1:]])
    if completed.returncode != 0:
        raise RuntimeError(
            f"Table 3 row {row.name} failed (exit {completed.returncode}); re-run the same command to "
            f"resume it from its last checkpoint under {folder / 'checkpoints'}."
        )


def collect(study: Study, rows: list[Row], output: Path, wall_minutes: float | None = None) -> dict:
    """Measure trained rows that are not measured yet, then write ``table3.md``, ``table3.json`` and plots."""
    measured = []
    for row in rows:
        folder = output / row.name
        if (folder / ROW_RESULT).is_file():
            measured.append(json.loads((folder / ROW_RESULT).read_text(encoding="utf-8")))
        elif (folder / "model").is_dir() and (folder / "results.json").is_file():
            measured.append(measure_row(study, row, output))
        else:
            print(f"[table3] {row.name}: not trained yet (no {folder / 'results.json'}); left out.")
    if not any(result["name"] == BASE for result in measured):
        raise ValueError(
            f"The base row is not trained yet under {output / BASE}: it is what the table compares to."
        )
    table = {
        "study": str(study.path),
        "recipe": str(study.recipe),
        "settings": study.settings,
        "rows": measured,
    }
    if wall_minutes is not None:  # the study's own run (``run_study``), not a later ``--collect``
        table["wall_minutes"] = wall_minutes
    (output / "table3.json").write_text(json.dumps(table, indent=2), encoding="utf-8")
    (output / "table3.md").write_text(markdown_table(measured), encoding="utf-8")
    from ..common.plots import plot_ablation

    plot_ablation(measured, output / "table3.png", output / "table3_curves.png")
    print((output / "table3.md").read_text(encoding="utf-8"))
    return table


def measure_row(study: Study, row: Row, output: Path) -> dict:
    """Dev perplexity and dev BLEU of a trained row's final model; written to ``<row>/table3_row.json``."""
    from transformers import AutoTokenizer

    from ...inference import translate
    from ...modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration
    from .arguments import load_arguments
    from .data import prepare_data
    from .evaluation import bleu_scores

    folder = output / row.name
    args = load_arguments(str(study.recipe), study.overrides(row, output))
    results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    model = VanillaTransformerForConditionalGeneration.from_pretrained(folder / "model").eval()
    tokenizer = AutoTokenizer.from_pretrained(folder / "model")
    validation = prepare_data(args)["validation"]
    start = time.time()
    bf16 = results.get("mixed_precision", {}).get("used") == "bf16"
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        perplexity = dev_perplexity(model, tokenizer, validation, args)
        hypotheses = translate(
            model,
            tokenizer,
            validation["source"],
            args.per_device_eval_batch_size,
            args.max_source_length,
            progress=True,
        )
    scores = bleu_scores(hypotheses, validation["target"], args.target_lang)
    (folder / "dev_hypotheses.txt").write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
    result = asdict(row) | {
        "config": {name: value(model.config) for name, value in ARCHITECTURE_COLUMNS},
        "parameters": model.num_parameters(),
        "updates": results["updates"],
        "training_minutes": results["training_minutes"],
        "dev_perplexity": perplexity,
        "dev_sacrebleu": scores["sacrebleu"],
        "dev_bleu_lc_tok": scores["bleu_lc_tok"],
        "dev_sentences": len(validation),
        "evaluation_minutes": (time.time() - start) / 60,
        "history": results.get("history", []),
    }
    (folder / ROW_RESULT).write_text(json.dumps(result, indent=2), encoding="utf-8")
    print(
        f"[table3] {row.name}: dev perplexity {perplexity:.2f}, dev BLEU {scores['sacrebleu']:.2f}, "
        f"{result['parameters'] / 1e6:.2f}M parameters"
    )
    return result


@torch.no_grad()
def dev_perplexity(model, tokenizer, split, args, batch_size: int = 64) -> float:
    """Perplexity, as validation logs it too: exp of the mean negative log-likelihood per target token (BPE
    pieces and EOS) without label smoothing (``sequence_losses`` with epsilon 0), the paper's per-wordpiece
    perplexity. (The training loss smooths labels, §5.4, which raises it.)"""
    from transformers import DataCollatorForSeq2Seq

    from ...modeling_vanilla_transformer import sequence_losses
    from .data import tokenize_pairs

    encoded = tokenize_pairs(split, tokenizer, args.max_source_length, args.max_target_length)
    collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100, return_tensors="pt")
    total, tokens = 0.0, 0
    for start in range(0, len(encoded), batch_size):
        features = [encoded[i] for i in range(start, min(start + batch_size, len(encoded)))]
        batch = collator([{key: f[key] for key in ("input_ids", "labels")} for f in features])
        nll, count = sequence_losses(model(**batch).logits, batch["labels"], 0.0)
        total, tokens = total + float(nll.sum()), tokens + int(count.sum())
    return math.exp(total / max(tokens, 1))


# -- the table -------------------------------------------------------------------------------------------


def markdown_table(rows: list[dict]) -> str:
    """Table 3's layout: one line per row, grouped A-E; architecture cells blank where the base value holds."""
    base = next(row for row in rows if row["name"] == BASE)
    headers = [name for name, _ in ARCHITECTURE_COLUMNS]
    lines = [
        "| | " + " | ".join(headers) + " | train steps | PPL (dev) | BLEU (dev) | params ×10⁶ |",
        "|---|" + "---|" * (len(headers) + 4),
    ]
    previous_group = None
    for row in sorted(rows, key=lambda r: (r["group"] != BASE, r["group"], _index(r["name"]))):
        label = row["group"] if row["group"] != previous_group and row["group"] != BASE else ""
        label = label or (BASE if row["name"] == BASE else "")
        previous_group = row["group"]
        cells = [
            row["config"][name] if row is base or row["config"][name] != base["config"][name] else ""
            for name in headers
        ]
        steps = f"{row['updates']}" if row is base or row["updates"] != base["updates"] else ""
        lines.append(
            f"| {label} | " + " | ".join(cells) + f" | {steps} | {row['dev_perplexity']:.2f} | "
            f"{row['dev_sacrebleu']:.1f} | {row['parameters'] / 1e6:.1f} |"
        )
    return "\n".join(lines) + "\n"


def _index(name: str) -> int:
    return int(name[1:]) if name[1:].isdigit() else 0


__all__ = [
    "Row",
    "Study",
    "read_study",
    "commands",
    "run_study",
    "collect",
    "markdown_table",
    "dev_perplexity",
]
