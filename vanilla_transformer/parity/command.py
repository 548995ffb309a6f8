"""The parity check as the commands run it (``export-ct2``, ``export-onnx``, ``parity``): from their options
(``cli._add_check_options``) to the sample, the measurement, the bounds, the files beside the export and the
two printed lines."""

from __future__ import annotations

import json
from collections.abc import Callable
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


COMPARED = ("translation", "classification")  # the kinds of model whose outputs the check compares


def sample_for(options):
    """The sample an export is checked on (``parity.translation_sample`` / ``classification_sample``), or
    None with ``--no-check`` or for a model whose outputs the check does not compare (a masked LM). Options
    that mean nothing for the model, or a bound the sample cannot measure, are refused here, before any
    work: a bound the user set is never skipped in silence."""
    from .sample import classification_sample, translation_sample

    if getattr(options, "no_check", False):
        return None
    kind = options.model_kind = getattr(options, "model_kind", None) or model_kind(options.model)
    overrides = parse_overrides(options.set)
    if kind == "classification":
        given = [
            flag
            for flag, value in (
                ("--beams", options.beams),
                ("--length-penalty", options.length_penalty),
                ("--max-bleu-drop", options.max_bleu_drop),
            )
            if value is not None
        ]
        if given:
            raise ValueError(
                f"{given[0]}: {options.model} is a classifier, checked on its labels (no decoding, no BLEU); "
                "drop the option, or bound the agreement with --min-identical."
            )
    if kind == "translation":
        config = json.loads((Path(options.model) / "config.json").read_text(encoding="utf-8"))
        sample = translation_sample(
            options.check_file,
            options.recipe,
            options.split,
            config.get("source_lang"),
            config.get("target_lang"),
            overrides,
            options.check_lines,
            options.model,
        )
        if options.max_bleu_drop is not None and sample.references is None:
            raise ValueError(
                f"--max-bleu-drop: the sample ({sample.name}) has no references to score BLEU against: give a "
                "data file of pairs (JSON Lines, CSV, TSV, parquet) or --recipe NAME, or bound the agreement "
                "with --min-identical."
            )
        return sample
    if kind == "classification":
        return classification_sample(
            options.check_file, options.recipe, options.split, overrides, options.check_lines
        )
    return None


def measure(options, sample, candidate) -> dict:
    from .sides import check_classification, check_translation

    kind = getattr(options, "model_kind", None) or model_kind(options.model)
    if kind not in COMPARED:
        raise ValueError(
            f"{options.model} is a {kind}: the parity check compares a translation model's translations or a "
            "classifier's labels, not its outputs."
        )
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


def keep_report(options, report: dict, write_card: Callable[[Path], object]) -> Path | None:
    """Where ``parity`` keeps its report (after the bounds passed: a refused check writes nothing, as its line
    says): ``--report DIR``, else an earlier export's own folder. An export this package wrote (its marker,
    ``outputs.MARKER``) gets its card rewritten by ``write_card(folder)`` (the command's: the card is
    ``model_card``'s, which stands above this package) and the files added to its marker, so that ``--force``
    can replace the export later; else the report is kept nowhere."""
    from ..outputs import MARKER
    from .report import REPORT_FILE, TABLE_FILE, write_report

    if options.report:
        Path(options.report).mkdir(parents=True, exist_ok=True)
        return write_report(report, options.report)
    if not options.export:
        return None
    folder = Path(options.export)
    path = write_report(report, folder)
    try:
        record = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return path  # not written here (a downloaded export): its own card stays as it is
    if isinstance(record, dict) and isinstance(record.get("files"), list):
        write_card(folder)
        record["files"] = sorted(set(record["files"]) | {REPORT_FILE, TABLE_FILE, "README.md"})
        (folder / MARKER).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return path


def print_report(report: dict | None, folder) -> None:
    from .report import REPORT_FILE, TABLE_FILE, lines

    if report is None:
        print("Parity: not measured (--no-check, or a model whose outputs the check does not compare).")
        return
    for line in lines(report, f"{Path(folder) / REPORT_FILE} and {TABLE_FILE}" if folder else None):
        print(line)


def candidate_for(options):
    """What ``parity`` checks: an earlier export (``--export``: one of this kind of model, its weights' type
    read from its report, else from the export itself), or the PyTorch model served another way. A folder
    that is not an export of a model of ``--model``'s kind is refused in one line saying what it is."""
    from .report import read_report
    from .sides import Candidate

    if not options.export:
        if options.quantize:
            return Candidate("pytorch", "int8", quantize="int8")
        return Candidate("pytorch", options.dtype, dtype=options.dtype)
    folder = Path(options.export)
    kind = options.model_kind = getattr(options, "model_kind", None) or model_kind(options.model)
    engine, exported = _export_of(folder)
    if kind not in COMPARED:
        raise ValueError(
            f"{options.model} is a {kind}: the parity check compares a translation model's translations or a "
            "classifier's labels, not its outputs."
        )
    if engine == "onnx":
        _same_model(folder, options.model)
    if exported != kind:
        raise ValueError(
            f"--export: {folder} is an export of a {exported} model, and --model {options.model} is a {kind} "
            "model: name the export of this model (export-ct2 / export-onnx wrote it)."
        )
    earlier = read_report(folder) or {}
    precision = earlier.get("precision") or (
        _ctranslate2_precision(folder) if engine == "ctranslate2" else None
    )
    return Candidate(engine, precision or "float32", folder)


def _export_of(folder: Path) -> tuple[str, str]:
    """``(engine, kind of model)`` of an export folder; anything else refused, named as what it is."""
    from ..loading import CTRANSLATE2_FILE, WEIGHTS
    from ..onnx_export import ENCODER_ONLY_FILE, SEQ2SEQ_FILES

    if not folder.is_dir():
        raise FileNotFoundError(f"--export: {folder} does not exist.")
    if (folder / CTRANSLATE2_FILE).is_file():
        return "ctranslate2", "translation"
    if (folder / WEIGHTS).is_file() or (folder / "pytorch_model.bin").is_file():
        raise ValueError(
            f"--export: {folder} is a model folder, not an export: export it with export-ct2 or export-onnx "
            "(which check it), or check a serving type of it with --quantize / --dtype."
        )
    if all((folder / name).is_file() for name in SEQ2SEQ_FILES):
        return "onnx", "translation"
    if (folder / ENCODER_ONLY_FILE).is_file():
        return "onnx", "classification"
    raise FileNotFoundError(
        f"--export: {folder} is neither a CTranslate2 export ({CTRANSLATE2_FILE}) nor an ONNX export "
        f"({', '.join(SEQ2SEQ_FILES)}, or {ENCODER_ONLY_FILE})."
    )


def _same_model(folder: Path, model_dir) -> None:
    """Refuse an ONNX export of another kind of model than ``model_dir`` (a masked LM's ``model.onnx`` beside a
    classifier's), read from the config each was saved with."""
    names = []
    for config in (folder / "config.json", Path(model_dir) / "config.json"):
        try:
            names.append(json.loads(config.read_text(encoding="utf-8")).get("architectures") or [])
        except (OSError, ValueError, AttributeError):
            return
    if names[0] and names[1] and names[0] != names[1]:
        raise ValueError(
            f"--export: {folder} was exported from a {names[0][0]}, and --model {model_dir} is a "
            f"{names[1][0]}: name the export of this model."
        )


CT2_TYPES = ("float32", "int8", "int16", "int32", "float16", "bfloat16")  # CTranslate2's DataType, in order


def _ctranslate2_precision(folder: Path) -> str | None:
    """The type a CTranslate2 export stores its weights in (``export-ct2 --quantization``), read from its
    ``model.bin``: ``int8`` (``int8 (8-bit weights)`` where they use the full range, ``--full-int8-range``),
    ``int16``, ``float16``, ``bfloat16`` or ``float32``; None where the file is not in the layout read
    (CTranslate2's binary version 6)."""
    import struct

    import numpy as np

    types, widest = set(), 0
    try:
        with open(folder / "model.bin", "rb") as handle:

            def read(layout: str):
                size = struct.calcsize(layout)
                return struct.unpack(layout, handle.read(size))

            def string() -> str:
                (length,) = read("H")
                return handle.read(length)[:-1].decode("utf-8")

            version = read("I")[0]
            if version != 6:
                return None
            string(), read("I")  # the spec's name and revision
            (count,) = read("I")
            for _ in range(count):
                name = string()
                (rank,) = read("B")
                read("I" * rank)
                (type_id,), (size,) = read("B"), read("I")
                data = handle.read(size)
                if rank == 2 and name.endswith("weight"):
                    types.add(CT2_TYPES[type_id])
                    if CT2_TYPES[type_id] == "int8":
                        widest = max(widest, int(np.abs(np.frombuffer(data, np.int8).astype(np.int16)).max()))
    except (OSError, struct.error, IndexError, UnicodeDecodeError):
        return None
    for kind in ("int8", "int16", "bfloat16", "float16"):
        if kind in types:
            return "int8 (8-bit weights)" if kind == "int8" and widest > 63 else kind
    return "float32" if types else None
