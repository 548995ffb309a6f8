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

The modules: ``sample`` (what both sides run on: ``--check-file``, a recipe's split, or the validation split
of the run a model folder belongs to), ``sides`` (the PyTorch model and the candidate, decoding alike),
``compare`` (running both, alternating chunk by chunk, and the figures), ``report`` (the files, the lines and
the bounds) and ``command`` (the check as the commands run it, from their options).
"""

from .compare import SHOWN_DIFFERENCES, compare_classifications, compare_translations, token_disagreement
from .report import (
    ENGINES,
    FLOAT32_MIN_IDENTICAL,
    REPORT_FILE,
    TABLE_FILE,
    ParityError,
    build_report,
    check_bounds,
    describe,
    lines,
    machine,
    read_report,
    table,
    write_report,
)
from .sample import NO_SAMPLE, Sample, classification_sample, recorded_run, translation_sample
from .sides import Candidate, check_classification, check_translation, decoding_of

__all__ = [
    "Sample",
    "Candidate",
    "ParityError",
    "translation_sample",
    "classification_sample",
    "recorded_run",
    "check_translation",
    "check_classification",
    "compare_translations",
    "compare_classifications",
    "token_disagreement",
    "decoding_of",
    "build_report",
    "write_report",
    "read_report",
    "check_bounds",
    "describe",
    "lines",
    "table",
    "machine",
    "ENGINES",
    "FLOAT32_MIN_IDENTICAL",
    "NO_SAMPLE",
    "REPORT_FILE",
    "SHOWN_DIFFERENCES",
    "TABLE_FILE",
]
