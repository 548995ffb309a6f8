"""Parity: how faithfully an export or a faster serving path reproduces the PyTorch model it came from.

Every ``export-ct2`` (each quantization), ``export-onnx`` and the ``parity`` command (PyTorch int8, bf16,
fp16 serving, or an existing export) runs the model and what it is checked against on the same sample, with
the same decoding (the model's saved beam size and length penalty unless the command says otherwise), and
reports:

- translation: the share of identical outputs; where outputs differ, how far apart they are in tokens (the
  edit distance of their tokenizations over the longer one's length, averaged); sacreBLEU of both against
  the references where the sample has them, and the difference; the first differing line (and the first
  :data:`SHOWN_DIFFERENCES` in ``parity.json``);
- classification: the share of identical labels and the largest difference of a class probability;
- speed: lines per second of both on this machine, measured in interleaved chunks (the model, then the
  candidate, chunk after chunk), since a shared machine's speed drifts by more than the difference measured.

The report is ``parity.json`` (every figure, the machine, the date and the versions) and ``PARITY.md`` (the
table the export's card carries), and two printed lines. :func:`check_bounds` turns it into a refusal: a
float32 export must agree on :data:`FLOAT32_MIN_IDENTICAL` of the sample unless the user accepts less; a
quantized or half-precision one fails only past bounds the user sets.

The sample (:func:`translation_sample`, :func:`classification_sample`) is the user's ``--check-file`` (plain
lines, or a data file whose references or labels are scored too), or a recipe's split (``--recipe``, the test
split by default).
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

REPORT_FILE, TABLE_FILE = "parity.json", "PARITY.md"
FLOAT32_MIN_IDENTICAL = 0.99  # a float32 export computes what the model computes: only rounding may differ
CHUNK = 64  # lines per timed round of each side
SHOWN_DIFFERENCES = 20  # differing outputs kept in parity.json, for a reader to look at
FULL_PRECISIONS = ("float32", "fp32")
DATA_SUFFIXES = (".jsonl", ".json", ".csv", ".tsv", ".parquet")
ENGINES = {"pytorch": "PyTorch", "ctranslate2": "CTranslate2", "onnx": "ONNX Runtime"}


class ParityError(ValueError):
    """An export or serving path that disagrees with its model beyond the bound: one line naming the first
    differing input and what to do."""


@dataclass
class Sample:
    """What both sides run on: ``inputs`` (sentences or texts), their line numbers in ``name``'s file,
    and the ``references`` (translations) or ``labels`` where the sample has them."""

    name: str
    inputs: list[str]
    lines: list[int]
    references: list[str] | None = None
    labels: list[int] | None = None


# -- the sample ------------------------------------------------------------------------------------------------


def _is_data_file(path: Path) -> bool:
    name = path.name.removesuffix(".gz")
    return any(name.endswith(suffix) for suffix in DATA_SUFFIXES)


def _kind(path: Path) -> str:
    name = path.name.removesuffix(".gz")
    return "json" if name.endswith((".jsonl", ".json")) else "parquet" if name.endswith(".parquet") else "csv"


def _plain_lines(path: Path) -> Sample:
    from .data.files import read_lines

    lines = read_lines(path)
    kept = [(number, text) for number, text in enumerate(lines, 1) if text.strip()]
    if not kept:
        raise ValueError(f"--check-file: {path} has no line with text to check the export on.")
    return Sample(f"{path.name}", [text for _, text in kept], [number for number, _ in kept])


def translation_sample(
    check_file: str | None,
    recipe: str | None,
    split: str,
    source_lang: str | None,
    target_lang: str | None,
    overrides: dict | None = None,
    limit: int | None = None,
    model_dir: str | Path | None = None,
) -> Sample:
    """The sentences to check on: ``check_file`` (one sentence a line; or a JSON Lines / CSV / TSV / parquet
    file of pairs in the model's languages, whose targets become the references), else ``split`` of
    ``recipe``'s data (``overrides``: its ``--set`` data settings), else the validation split of the run
    ``model_dir`` came from, where it records one (:func:`recorded_run`: the model's own held-out data, read
    from where training read it, nothing copied). At most ``limit`` sentences, the first."""
    if check_file:
        path = Path(check_file)
        if not path.is_file():
            raise FileNotFoundError(f"--check-file: {path} does not exist.")
        if not _is_data_file(path):
            sample = _plain_lines(path)
        else:
            from .data.translation import load_translation_splits

            if not (source_lang and target_lang):
                raise ValueError(
                    f"--check-file: {path} is a data file of pairs, but the model's config names no "
                    "source_lang / target_lang to read it with: give the sentences as plain lines."
                )
            pairs = load_translation_splits(_kind(path), source_lang, target_lang, {"check": str(path)})[
                "check"
            ]
            sample = Sample(
                path.name, list(pairs["source"]), list(range(1, len(pairs) + 1)), list(pairs["target"])
            )
    elif recipe:
        from .data.translation import TranslationData, check_split, prepare_data
        from .recipes import find_recipe

        args = TranslationData.from_recipe(find_recipe(recipe), overrides)
        check_split(args, split)
        data = prepare_data(args)
        check_split(args, split, data)
        pairs = data[split]
        sample = Sample(
            f"{recipe} {split}", list(pairs["source"]), list(range(1, len(pairs) + 1)), list(pairs["target"])
        )
    elif model_dir is not None and recorded_run(model_dir, "translation") is not None:
        from .data.translation import TranslationData, prepare_data

        run, settings = recorded_run(model_dir, "translation")
        data = prepare_data(TranslationData(**settings))
        if "validation" not in data:
            raise ValueError(f"{run}: the run's data has no validation split to check on: {NO_SAMPLE}")
        pairs = data["validation"]
        sample = Sample(
            f"validation split of {run.parent.name}",
            list(pairs["source"]),
            list(range(1, len(pairs) + 1)),
            list(pairs["target"]),
        )
    else:
        raise ValueError(NO_SAMPLE)
    return _first(sample, limit)


def recorded_run(model_dir: str | Path, task: str) -> tuple[Path, dict] | None:
    """``(run.json, its data settings)`` of the training run a model folder is the ``model/`` of, where the
    run trained ``task`` on data with a validation split (a data file, a Hub data set, or the built-in
    synthetic task); None otherwise (a folder from the Hub, an averaged checkpoint elsewhere)."""
    import dataclasses
    import os

    from .data.translation import TranslationData

    run = Path(model_dir).resolve().parent / "run.json"
    try:
        train = json.loads(run.read_text(encoding="utf-8")).get("train", {})
    except (OSError, ValueError, AttributeError):
        return None
    settings = train.get("settings") or {}
    local = settings.get("dataset") in ("json", "csv", "parquet", "text")  # files named by *_file settings
    if train.get("task") != task or (local and not settings.get("validation_file")):
        return None
    names = {field.name for field in dataclasses.fields(TranslationData)}
    chosen = {key: value for key, value in settings.items() if key in names}
    if (
        chosen.get("data_dir") is None
        and os.environ.get("VT_DATA_DIR") is None
        and chosen.get("dataset") != "synthetic"
    ):
        relative = [chosen.get(key) for key in ("validation_file",) if chosen.get(key)]
        if any(not Path(value).is_absolute() and not Path(value).exists() for value in relative):
            return None  # read relative to a data folder this machine does not name
    return run, chosen


def classification_sample(
    check_file: str | None,
    recipe: str | None,
    split: str,
    overrides: dict | None = None,
    limit: int | None = None,
) -> Sample:
    """The texts to check a classifier on: ``check_file`` (one text a line, or a labelled data file read
    with the recipe's columns), else the recipe's ``test_file`` (``split`` must be ``test``)."""
    if check_file and not _is_data_file(Path(check_file)):
        if not Path(check_file).is_file():
            raise FileNotFoundError(f"--check-file: {check_file} does not exist.")
        return _first(_plain_lines(Path(check_file)), limit)
    if not (check_file or recipe):
        raise ValueError(NO_SAMPLE)
    from .data.classification import ClassificationData, load_labelled
    from .recipes import find_recipe

    args = ClassificationData.from_recipe(find_recipe(recipe) if recipe else None, overrides)
    if not check_file and split != "test":
        raise ValueError(
            f"--split {split}: a classifier is checked on its recipe's test_file (--split test)."
        )
    source = check_file or args.test_file
    if not source:
        raise ValueError(f"the recipe {recipe} names no test_file to check on: give --check-file.")
    data = load_labelled(args, source)
    texts, labels = list(data[args.text_column]), [int(label) for label in data[args.label_column]]
    return _first(Sample(Path(source).name, texts, list(range(1, len(texts) + 1)), labels=labels), limit)


NO_SAMPLE = (
    "nothing to check the export on: give --check-file FILE (one sentence a line, or a data file with "
    "references) or --recipe NAME (its test split); --no-check skips the check. (A model in a training run's "
    "folder is checked on the run's validation split.)"
)


def _first(sample: Sample, limit: int | None) -> Sample:
    if limit is None or len(sample.inputs) <= limit:
        return sample
    cut = slice(0, limit)
    return Sample(
        sample.name,
        sample.inputs[cut],
        sample.lines[cut],
        sample.references[cut] if sample.references is not None else None,
        sample.labels[cut] if sample.labels is not None else None,
    )


# -- measuring --------------------------------------------------------------------------------------------------


def _interleaved(model_side: Callable, candidate_side: Callable, inputs: Sequence[str]):
    """Both sides' outputs on ``inputs`` and their seconds, chunk by chunk in turn."""
    outputs, seconds = ([], []), [0.0, 0.0]
    for start in range(0, len(inputs), CHUNK):
        chunk = list(inputs[start : start + CHUNK])
        for side, run in enumerate((model_side, candidate_side)):
            began = time.perf_counter()
            outputs[side].extend(run(chunk))
            seconds[side] += time.perf_counter() - began
    return outputs, seconds


def token_disagreement(tokenizer, first: str, second: str) -> float:
    """How far two outputs are apart in tokens: the edit distance between their token sequences (insertions,
    deletions and substitutions) over the longer one's length, so that a word inserted early counts once and
    not as every later position shifted."""
    a, b = (tokenizer(text_target=text, add_special_tokens=False)["input_ids"] for text in (first, second))
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1] / max(len(a), len(b), 1)


def compare_translations(
    model_translate: Callable[[list[str]], list[str]],
    candidate_translate: Callable[[list[str]], list[str]],
    sample: Sample,
    tokenizer,
    target_lang: str = "en",
) -> dict:
    """Both sides' translations of ``sample`` and the figures of the module docstring (a dict)."""
    (expected, got), seconds = _interleaved(model_translate, candidate_translate, sample.inputs)
    differing = [index for index, (a, b) in enumerate(zip(expected, got, strict=True)) if a != b]
    report = {
        "sentences": len(sample.inputs),
        "identical": len(sample.inputs) - len(differing),
        "identical_share": 1 - len(differing) / len(sample.inputs),
        "token_disagreement": (
            float(np.mean([token_disagreement(tokenizer, expected[i], got[i]) for i in differing]))
            if differing
            else None
        ),
        "first_difference": _difference(sample, differing, expected, got),
        "differences": [
            _difference(sample, [index], expected, got) for index in differing[:SHOWN_DIFFERENCES]
        ],
        "speed": _speed(len(sample.inputs), seconds),
        "bleu": None,
    }
    if sample.references is not None:
        from .metrics import bleu_scores

        model_bleu = bleu_scores(expected, sample.references, target_lang)["sacrebleu"]
        candidate_bleu = bleu_scores(got, sample.references, target_lang)["sacrebleu"]
        report["bleu"] = {
            "model": model_bleu,
            "candidate": candidate_bleu,
            "difference": candidate_bleu - model_bleu,
        }
    return report


def compare_classifications(
    model_probabilities: Callable[[list[str]], np.ndarray],
    candidate_probabilities: Callable[[list[str]], np.ndarray],
    sample: Sample,
) -> dict:
    """Both sides' class probabilities on ``sample``: identical labels, the largest probability difference,
    accuracy of both where the sample is labelled, and speed."""
    (expected, got), seconds = _interleaved(model_probabilities, candidate_probabilities, sample.inputs)
    expected, got = np.asarray(expected), np.asarray(got)
    labels_a, labels_b = expected.argmax(-1), got.argmax(-1)
    differing = np.flatnonzero(labels_a != labels_b).tolist()
    report = {
        "texts": len(sample.inputs),
        "identical": len(sample.inputs) - len(differing),
        "identical_share": 1 - len(differing) / len(sample.inputs),
        "largest_probability_difference": float(np.abs(expected - got).max()),
        "first_difference": _difference(sample, differing, labels_a.tolist(), labels_b.tolist()),
        "speed": _speed(len(sample.inputs), seconds),
        "accuracy": None,
    }
    if sample.labels is not None:
        truth = np.asarray(sample.labels)
        report["accuracy"] = {
            "model": float((labels_a == truth).mean()),
            "candidate": float((labels_b == truth).mean()),
            "difference": float((labels_b == truth).mean() - (labels_a == truth).mean()),
        }
    return report


def _difference(sample: Sample, differing: list[int], expected, got) -> dict | None:
    if not differing:
        return None
    index = differing[0]
    return {
        "line": sample.lines[index],
        "input": sample.inputs[index],
        "model": expected[index],
        "candidate": got[index],
    }


def _speed(count: int, seconds: list[float]) -> dict:
    model, candidate = (count / max(value, 1e-9) for value in seconds)
    return {"model": model, "candidate": candidate, "ratio": candidate / model, "seconds": list(seconds)}


# -- the report -------------------------------------------------------------------------------------------------


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


# -- the two sides ------------------------------------------------------------------------------------------------


@dataclass
class Candidate:
    """What is checked against the PyTorch float32 model: an ``engine`` (``pytorch``, ``ctranslate2``,
    ``onnx``) with its weights' ``precision``, in ``folder`` (an export) or, for PyTorch, served from the
    model's folder with ``dtype`` (``bf16``, ``fp16``) or ``quantize`` (``int8``)."""

    engine: str
    precision: str
    folder: str | Path | None = None
    dtype: str = "fp32"
    quantize: str | None = None


def decoding_of(model, num_beams: int | None = None, length_penalty: float | None = None) -> dict:
    """The decoding both sides use: the model's saved beam size and length penalty unless given."""
    config = model.generation_config
    return {
        "num_beams": config.num_beams if num_beams is None else num_beams,
        "length_penalty": config.length_penalty if length_penalty is None else length_penalty,
    }


def _translator(candidate: Candidate, model_dir, decoding: dict, batch_size: int, cut_lines):
    import functools

    if candidate.engine == "ctranslate2":
        from .ctranslate2_export import CTranslate2Translator

        engine = CTranslate2Translator(candidate.folder)
        return lambda chunk: engine(
            chunk,
            decoding["num_beams"],
            decoding["length_penalty"],
            batch_size=batch_size,
            cut_lines=cut_lines,
        )
    if candidate.engine == "onnx":
        from .onnx_export import OnnxTranslator

        engine = OnnxTranslator(candidate.folder)
        return lambda chunk: engine(
            chunk,
            decoding["num_beams"],
            decoding["length_penalty"],
            batch_size=batch_size,
            cut_lines=cut_lines,
        )
    from transformers import AutoModelForSeq2SeqLM

    from .inference import load_for_inference, translate

    model, tokenizer = load_for_inference(
        model_dir, "cpu", candidate.dtype, candidate.quantize, model_class=AutoModelForSeq2SeqLM
    )
    return functools.partial(
        translate, model, tokenizer, batch_size=batch_size, cut_lines=cut_lines, **decoding
    )


def check_translation(
    model_dir: str | Path,
    candidate: Candidate,
    sample: Sample,
    *,
    num_beams: int | None = None,
    length_penalty: float | None = None,
    batch_size: int = 32,
) -> dict:
    """The report of ``candidate`` against the saved translation model in ``model_dir`` (float32, on the CPU)
    on ``sample``, both decoding alike (:func:`decoding_of`)."""
    import functools

    from transformers import AutoModelForSeq2SeqLM

    from .inference import load_for_inference, translate
    from .long_inputs import CutLines

    model, tokenizer = load_for_inference(model_dir, "cpu", "fp32", model_class=AutoModelForSeq2SeqLM)
    decoding = decoding_of(model, num_beams, length_penalty)
    cut, ignored = CutLines(), CutLines()  # both sides cut the same lines: one warning, the model's
    model_side = functools.partial(
        translate, model, tokenizer, batch_size=batch_size, cut_lines=cut, **decoding
    )
    candidate_side = _translator(candidate, model_dir, decoding, batch_size, ignored)
    comparison = compare_translations(
        model_side, candidate_side, sample, tokenizer, getattr(model.config, "target_lang", None) or "en"
    )
    cut.warn()
    return build_report(
        comparison,
        engine=candidate.engine,
        precision=candidate.precision,
        model=str(model_dir),
        sample=sample,
        decoding=decoding,
    )


def check_classification(
    model_dir: str | Path, candidate: Candidate, sample: Sample, batch_size: int = 32
) -> dict:
    """The report of a classifier ``candidate`` (an ONNX export, or the PyTorch model served in another type)
    against the saved classifier in ``model_dir`` on ``sample``'s texts, each cut to what the model reads."""
    import torch

    from .inference import load_for_inference
    from .long_inputs import reading_limit

    model, tokenizer = load_for_inference(model_dir, "cpu", "fp32")
    limit, _ = reading_limit(model.config.max_position_embeddings, tokenizer.model_max_length)

    def batches(texts: list[str]):
        for start in range(0, len(texts), batch_size):
            yield tokenizer(
                texts[start : start + batch_size],
                padding=True,
                truncation=limit is not None,
                max_length=limit,
                return_tensors="np",
            )

    def torch_side(served):
        def probabilities(texts: list[str]) -> np.ndarray:
            rows = []
            with torch.no_grad():
                for batch in batches(texts):
                    logits = served(
                        input_ids=torch.from_numpy(batch["input_ids"]),
                        attention_mask=torch.from_numpy(batch["attention_mask"]),
                    ).logits
                    rows.append(torch.softmax(logits.float(), -1).numpy())
            return np.concatenate(rows)

        return probabilities

    if candidate.engine == "onnx":
        import onnxruntime

        from .onnx_export import ENCODER_ONLY_FILE

        session = onnxruntime.InferenceSession(
            str(Path(candidate.folder) / ENCODER_ONLY_FILE), providers=["CPUExecutionProvider"]
        )

        def candidate_side(texts: list[str]) -> np.ndarray:
            rows = []
            for batch in batches(texts):
                (logits,) = session.run(
                    None,
                    {
                        "input_ids": batch["input_ids"].astype(np.int64),
                        "attention_mask": batch["attention_mask"].astype(np.int64),
                    },
                )
                shifted = np.exp(logits - logits.max(-1, keepdims=True))
                rows.append(shifted / shifted.sum(-1, keepdims=True))
            return np.concatenate(rows)
    else:
        served, _ = load_for_inference(model_dir, "cpu", candidate.dtype, candidate.quantize)
        candidate_side = torch_side(served)
    comparison = compare_classifications(torch_side(model), candidate_side, sample)
    return build_report(
        comparison,
        engine=candidate.engine,
        precision=candidate.precision,
        model=str(model_dir),
        sample=sample,
        decoding=None,
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


__all__ = [
    "Sample",
    "Candidate",
    "check_translation",
    "check_classification",
    "ParityError",
    "translation_sample",
    "classification_sample",
    "compare_translations",
    "compare_classifications",
    "build_report",
    "write_report",
    "read_report",
    "check_bounds",
    "lines",
    "table",
    "FLOAT32_MIN_IDENTICAL",
    "REPORT_FILE",
    "TABLE_FILE",
]
