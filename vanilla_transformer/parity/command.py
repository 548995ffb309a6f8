"""The parity check as the commands run it (``export-ct2``, ``export-onnx``, ``parity``): from their options
(``cli._add_check_options``) to the sample, the measurement, the bounds, the files beside the export and the
two printed lines."""

from __future__ import annotations

import json
from pathlib import Path

from ..recipes import parse_overrides


def model_kind(model_dir) -> str:
    """``translation``, ``classification`` or another kind (the class name) of a saved folder, loaded whole so
    that a damaged folder is named before a sample is looked for (``loading.load_saved_model``)."""
    from ..loading import load_saved_model

    name = type(load_saved_model(model_dir)).__name__
    if name.endswith("ConditionalGeneration"):
        return "translation"
    return "classification" if name.endswith("SequenceClassification") else name


def sample_for(options):
    """The sample an export is checked on (``parity.translation_sample`` / ``classification_sample``), or
    None with ``--no-check`` or for a model whose outputs the check does not compare (a masked LM)."""
    from .sample import classification_sample, translation_sample

    if getattr(options, "no_check", False):
        return None
    kind = options.model_kind = model_kind(options.model)
    overrides = parse_overrides(options.set)
    if kind == "translation":
        config = json.loads((Path(options.model) / "config.json").read_text(encoding="utf-8"))
        return translation_sample(
            options.check_file,
            options.recipe,
            options.split,
            config.get("source_lang"),
            config.get("target_lang"),
            overrides,
            options.check_lines,
            options.model,
        )
    if kind == "classification":
        return classification_sample(
            options.check_file, options.recipe, options.split, overrides, options.check_lines
        )
    return None


def measure(options, sample, candidate) -> dict:
    from .sides import check_classification, check_translation

    kind = getattr(options, "model_kind", None) or model_kind(options.model)
    if kind == "translation":
        return check_translation(
            options.model, candidate, sample, num_beams=options.beams, length_penalty=options.length_penalty
        )
    return check_classification(options.model, candidate, sample)


def bounds(options, report: dict) -> None:
    from .report import check_bounds

    check_bounds(
        report,
        min_identical=options.min_identical,
        max_bleu_drop=options.max_bleu_drop,
        accept=options.accept_disagreement,
    )


def check_export(options, sample, candidate, staging: Path) -> dict | None:
    """Measure the export in ``staging`` against the model (nothing without a sample), refuse it past the
    bounds (``parity.check_bounds``: the export is then never published), and write the report into it (the
    command writes the export's card, ``model_card.write_export_card``, from what this returns)."""
    from .report import ParityError, lines, write_report

    report = None
    if sample is not None:
        report = measure(options, sample, candidate)
        try:
            bounds(options, report)
        except ParityError:  # the figures, then the one line that refuses the export
            print("\n".join(lines(report)))
            raise
        write_report(report, staging)
    return report


def print_report(report: dict | None, folder) -> None:
    from .report import REPORT_FILE, TABLE_FILE, lines

    if report is None:
        print("Parity: not measured (--no-check, or a model whose outputs the check does not compare).")
        return
    for line in lines(report, f"{Path(folder) / REPORT_FILE} and {TABLE_FILE}" if folder else None):
        print(line)


def candidate_for(options):
    from ..loading import CTRANSLATE2_FILE
    from .report import read_report
    from .sides import Candidate

    if options.export:
        folder = Path(options.export)
        engine = "ctranslate2" if (folder / CTRANSLATE2_FILE).is_file() else "onnx"
        if engine == "onnx" and not any(folder.glob("*.onnx")):
            raise FileNotFoundError(f"--export: {folder} is neither a CTranslate2 nor an ONNX export.")
        earlier = read_report(folder) or {}
        return Candidate(engine, earlier.get("precision", "float32"), folder)
    if options.quantize:
        return Candidate("pytorch", "int8", quantize="int8")
    return Candidate("pytorch", options.dtype, dtype=options.dtype)
