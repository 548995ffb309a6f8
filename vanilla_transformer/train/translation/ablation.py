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

Each row is one ordinary training run of the translation task (the one run, ``train/run.py``), in this
process, writing into ``OUTPUT/<row>``; ``commands()`` / ``--print-commands`` give each row's equivalent
``vanilla-transformer train`` line, to run side by side. The study never reads the test split. A row is
*trained* when its folder has ``results.json`` (skipped on a re-run), *started* when it has checkpoints
(resumed), and *measured* when it has ``table3_row.json``: the run's own validation of its last update (the
translation task's validation hook, on the device and in the precision the run picked): dev perplexity (per
BPE token, without label smoothing, as the paper's per-wordpiece perplexity) and dev BLEU with §6.1's beam
search on the whole dev split (every row validates all of it: ``eval_bleu_samples``), and, as in §6.2, no
checkpoint averaging. ``collect()`` measures whatever rows are trained and writes ``table3.md`` (laid out
as the paper's table: blank where a row keeps the base value), ``table3.json`` and the plots.
"""

from __future__ import annotations

import json
import shlex
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ...recipes import parse_yaml
from ..common.checkpoints import latest_checkpoint

BASE = "base"
GROUPS = ("A", "B", "C", "D", "E")
ROW_RESULT = "table3_row.json"
DEV_HYPOTHESES = "dev_hypotheses.txt"  # a row's dev translations (its last validation's)
STUDY_KEYS = {"recipe", "settings", "rows"}
# Every row validates the whole dev split with beam search at its last update: that validation is its row.
WHOLE_SPLIT = 10**9

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
        values["eval_bleu_samples"] = WHOLE_SPLIT
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
    """Train ``row`` through the one run, in this process (continuing it if it has checkpoints: its
    settings say ``resume: auto``)."""
    from ..run import train_recipe

    folder = output / row.name
    resume = latest_checkpoint(folder / "checkpoints") is not None
    print(f"[table3] {row.name} ({_describe(row.overrides)}){' resumed' if resume else ''}:")
    print("  " + shlex.join(training_command(study, row, output, minutes)))
    train_recipe(str(study.recipe), study.overrides(row, output, minutes) | {"resume": "auto"})


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
    from ...plots import plot_ablation

    plot_ablation(measured, output / "table3.png", output / "table3_curves.png")
    print((output / "table3.md").read_text(encoding="utf-8"))
    return table


def measure_row(study: Study, row: Row, output: Path) -> dict:
    """A trained row's dev perplexity and dev BLEU: its run's validation of its last update (the translation
    task's own, on the whole dev split); written to ``<row>/table3_row.json``."""
    from ...configuration_vanilla_transformer import VanillaTransformerConfig
    from .trainer import VALIDATION_HYPOTHESES

    folder = output / row.name
    results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    history = results.get("history") or []
    last = history[-1] if history else None
    if last is None or last.get("step") != results["updates"]:
        raise ValueError(
            f"Table 3 row {row.name}: {folder / 'results.json'} holds no validation of its last update "
            f"({results['updates']}); a row is measured by it. Train the row again (overwrite: true)."
        )
    config = VanillaTransformerConfig.from_pretrained(folder / "model")
    written = folder / VALIDATION_HYPOTHESES  # the last validation's translations: the row's dev output
    if written.is_file():
        shutil.copyfile(written, folder / DEV_HYPOTHESES)
    result = asdict(row) | {
        "config": {name: value(config) for name, value in ARCHITECTURE_COLUMNS},
        "parameters": results["parameters"],
        "updates": results["updates"],
        "training_minutes": results["training_minutes"],
        "dev_perplexity": last["perplexity"],
        "dev_sacrebleu": last["sacrebleu"],
        "dev_bleu_lc_tok": last["bleu_lc_tok"],
        "dev_sentences": last.get("bleu_sentences"),
        "evaluation_minutes": last.get("runtime", 0.0) / 60,
        "history": history,
    }
    (folder / ROW_RESULT).write_text(json.dumps(result, indent=2), encoding="utf-8")
    print(
        f"[table3] {row.name}: dev perplexity {result['dev_perplexity']:.2f}, dev BLEU "
        f"{result['dev_sacrebleu']:.2f}, {result['parameters'] / 1e6:.2f}M parameters"
    )
    return result


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
]
