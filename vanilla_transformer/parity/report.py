"""The parity report: ``parity.json`` (every figure, the machine, the date and the versions), ``PARITY.md`` (the
table an export's card carries), the two lines a command prints, and the bounds that turn it into a refusal."""

from __future__ import annotations

import json
import platform
from datetime import UTC, datetime
from pathlib import Path

from .sample import Sample

REPORT_FILE, TABLE_FILE = "parity.json", "PARITY.md"
FLOAT32_MIN_IDENTICAL = 0.99  # a float32 export computes what the model computes: only rounding may differ
FULL_PRECISIONS = ("float32", "fp32")
ENGINES = {"pytorch": "PyTorch", "ctranslate2": "CTranslate2", "onnx": "ONNX Runtime"}


class ParityError(ValueError):
    """An export or serving path that disagrees with its model beyond the bound: one line naming the first
    differing input and what to do."""


def machine() -> str:
    """The CPU in words for the speeds beside it: its model name, family and model (which tell AMD's
    generations apart where the name is only "AMD EPYC"), and its bf16 / int8 matrix units."""
    try:
        fields = dict(
            line.split(":", 1)
            for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").split("\n\n")[0].splitlines()
            if ":" in line
        )
    except OSError:
        return platform.processor() or platform.machine()
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    flags = set(fields.get("flags", "").split())
    units = [
        name
        for flag, name in (("amx_bf16", "AMX"), ("avx512_bf16", "AVX512-BF16"), ("avx512_vnni", "VNNI"))
        if flag in flags
    ]
    units = units or (["AVX2 only"] if "avx2" in flags else [])
    return f"{fields.get('model name', platform.machine())} (family {fields.get('cpu family', '?')}, model {fields.get('model', '?')}; {', '.join(units) or 'no AVX2'})"


def _versions(engine: str) -> dict:
    import importlib.metadata

    names = ["torch", "transformers", {"ctranslate2": "ctranslate2", "onnx": "onnxruntime"}.get(engine)]
    versions = {}
    for name in filter(None, names):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def build_report(
    comparison: dict, *, engine: str, precision: str, model: str, sample: Sample, decoding: dict | None
) -> dict:
    """The comparison with what was compared, on what, how, where and when: ``parity.json``'s content."""
    return {
        "engine": engine,
        "precision": precision,
        "model": str(model),
        "sample": sample.name,
        "decoding": decoding,
        **comparison,
        "machine": machine(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "versions": _versions(engine),
    }


def describe(report: dict) -> str:
    """``CTranslate2 int8``: the candidate in a user's words."""
    return f"{ENGINES.get(report['engine'], report['engine'])} {report['precision']}"


def lines(report: dict, where: str | None = None) -> tuple[str, str]:
    """The two lines a command prints at its end: agreement, then speed (and where the report is)."""
    count = report.get("sentences", report.get("texts"))
    unit = "lines" if "sentences" in report else "texts"
    decoding = report.get("decoding") or {}
    how = f", beam {decoding['num_beams']}, length penalty {decoding['length_penalty']:g}" if decoding else ""
    first = (
        f"Parity of {describe(report)} with the PyTorch model{how}, on {count:,} {unit} ({report['sample']}): "
        f"{report['identical']:,} identical ({report['identical_share']:.1%})"
    )
    if report.get("token_disagreement") is not None:
        first += f"; where they differ, {report['token_disagreement']:.1%} of tokens (edit distance)"
    if report.get("largest_probability_difference") is not None:
        first += f"; largest probability difference {report['largest_probability_difference']:.2g}"
    if report.get("bleu"):
        bleu = report["bleu"]
        first += f"; BLEU {bleu['model']:.2f} -> {bleu['candidate']:.2f} ({bleu['difference']:+.2f})"
    if report.get("accuracy"):
        accuracy = report["accuracy"]
        first += f"; accuracy {accuracy['model']:.2%} -> {accuracy['candidate']:.2%}"
    speed = report["speed"]
    second = (
        f"Speed on {report['machine']}: PyTorch {speed['model']:.1f}, {describe(report)} "
        f"{speed['candidate']:.1f} {unit}/s ({speed['ratio']:.2f}x)."
    )
    if where:
        second += f" Report: {where}"
    return first + ".", second


def table(report: dict) -> str:
    """``PARITY.md``: the report as the short markdown table an export's card carries."""
    unit = "lines" if "sentences" in report else "texts"
    count = report.get("sentences", report.get("texts"))
    candidate = describe(report)
    rows = [
        f"| | PyTorch model (float32) | {candidate} |",
        "| --- | --- | --- |",
        f"| identical outputs | | {report['identical']:,} of {count:,} ({report['identical_share']:.1%}) |",
    ]
    if report.get("token_disagreement") is not None:
        rows.append(f"| token edit distance, where outputs differ | | {report['token_disagreement']:.1%} |")
    if report.get("largest_probability_difference") is not None:
        rows.append(f"| largest probability difference | | {report['largest_probability_difference']:.2g} |")
    if report.get("bleu"):
        bleu = report["bleu"]
        rows.append(
            f"| sacreBLEU | {bleu['model']:.2f} | {bleu['candidate']:.2f} ({bleu['difference']:+.2f}) |"
        )
    if report.get("accuracy"):
        accuracy = report["accuracy"]
        rows.append(f"| accuracy | {accuracy['model']:.2%} | {accuracy['candidate']:.2%} |")
    speed = report["speed"]
    rows.append(f"| {unit} / s | {speed['model']:.1f} | {speed['candidate']:.1f} ({speed['ratio']:.2f}x) |")
    decoding = report.get("decoding")
    how = (
        f"beam {decoding['num_beams']}, length penalty {decoding['length_penalty']:g}, both sides"
        if decoding
        else "both sides"
    )
    versions = ", ".join(f"{name} {version}" for name, version in report["versions"].items())
    notes = [
        f"Sample: {report['sample']} ({count:,} {unit}); decoding: {how}.",
        f"Measured {report['date']} on {report['machine']} ({versions}); speeds interleaved, chunk by chunk.",
    ]
    difference = report.get("first_difference")
    if difference:
        notes.append(
            f"First difference: line {difference['line']}: {difference['input']!r}: the model "
            f"{difference['model']!r}, {candidate} {difference['candidate']!r}."
        )
    return "\n".join(rows) + "\n\n" + "\n".join(notes) + "\n"


def write_report(report: dict, folder: str | Path) -> Path:
    """``parity.json`` and ``PARITY.md`` into ``folder``; returns the JSON file."""
    folder = Path(folder)
    (folder / TABLE_FILE).write_text(table(report), encoding="utf-8")
    path = folder / REPORT_FILE
    path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def read_report(folder: str | Path) -> dict | None:
    """An export's ``parity.json``, or None where it has none."""
    path = Path(folder) / REPORT_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def check_bounds(
    report: dict,
    *,
    min_identical: float | None = None,
    max_bleu_drop: float | None = None,
    accept: bool = False,
) -> None:
    """Raise :class:`ParityError` where the agreement is under a bound: ``min_identical`` where the user set
    one, else :data:`FLOAT32_MIN_IDENTICAL` for a float32 candidate (``accept`` lifts that default); and a
    BLEU drop past ``max_bleu_drop``. The line names the first differing input and the flags."""
    bound = min_identical
    if bound is None and report["precision"] in FULL_PRECISIONS and not accept:
        bound = FLOAT32_MIN_IDENTICAL
    count = report.get("sentences", report.get("texts"))
    difference = report.get("first_difference")
    first = ""
    if difference:
        model_side, candidate_side = _where_they_part(str(difference["model"]), str(difference["candidate"]))
        first = (
            f"; first difference: line {difference['line']} {_short(difference['input'])}: the model "
            f"{model_side}, the export {candidate_side}"
        )
    if bound is not None and report["identical_share"] < bound:
        flag = "--accept-disagreement" if min_identical is None else "a lower --min-identical"
        raise ParityError(
            f"{describe(report)} agrees with the model on {report['identical_share']:.1%} of {count:,} inputs "
            f"({report['sample']}), under the {bound:.0%} bound{first}. Nothing was written; check the export, "
            f"or accept it with {flag}."
        )
    bleu = report.get("bleu")
    if max_bleu_drop is not None and bleu and -bleu["difference"] > max_bleu_drop:
        raise ParityError(
            f"{describe(report)} costs {-bleu['difference']:.2f} BLEU ({bleu['model']:.2f} -> "
            f"{bleu['candidate']:.2f} on {report['sample']}), more than --max-bleu-drop {max_bleu_drop:g}{first}. "
            "Nothing was written; keep a wider type, or raise the bound."
        )


def _where_they_part(first: str, second: str, context: int = 3, width: int = 50) -> tuple[str, str]:
    """Two outputs shown from a few words before their first different word (``'...und drei'``)."""
    a, b = first.split(" "), second.split(" ")
    same = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    start = max(same - context, 0)
    shown = []
    for words in (a, b):
        text = " ".join(words[start:])
        text = text if len(text) <= width else text[: width - 3] + "..."
        shown.append(repr(("..." if start else "") + text))
    return shown[0], shown[1]


def _short(value, width: int = 60) -> str:
    text = str(value)
    return repr(text if len(text) <= width else text[: width - 3] + "...")
