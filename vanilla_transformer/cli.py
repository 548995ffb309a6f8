"""The ``vanilla-transformer`` command: thin wrappers that parse arguments and call the library.

vanilla-transformer train [--recipe FILE.yaml] [--set key=value ...] [--set model.field=value ...]
vanilla-transformer evaluate --model DIR [--recipe FILE.yaml] [--set key=value ...] [--split test] [--beams N] [--length-penalty A] [--output FILE] [--force] [--device D] [--dtype T]
vanilla-transformer translate --model DIR [--input FILE] [--output FILE] [--force] [--batch-size N] [--beams N] [--length-penalty A] [--engine pytorch|ctranslate2|onnx] [--quantize int8] [--device D] [--dtype T]
vanilla-transformer average CHECKPOINT [CHECKPOINT ...] [--last N] --output DIR [--force]
vanilla-transformer ablate [--recipe STUDY.yaml] [--rows A,C] [--minutes-per-row N] [--output DIR] [--print-commands | --collect]
vanilla-transformer attention --model DIR --text SENTENCE [--target SENTENCE] [--output DIR] [--force] [--device D] [--dtype T]
vanilla-transformer demo --model DIR_OR_HUB_ID [--port N] [--host H] [--trust-remote-code] [--device D] [--dtype T]
vanilla-transformer classify {pretrain,train,evaluate} [--recipe FILE.yaml] [--set key=value ...] [--model DIR] [--file FILE] [--split test|validation] [--device D] [--dtype T]
vanilla-transformer export-onnx --model DIR --output DIR [--force] [--check-file FILE | --recipe FILE.yaml [--split S]] [--check-lines N] [--min-identical P] [--accept-disagreement] [--no-check]
vanilla-transformer export-ct2 --model DIR --output DIR [--quantization TYPE] [--force] [--check-file FILE | --recipe FILE.yaml] [--max-bleu-drop B]
vanilla-transformer parity --model DIR (--export DIR | --quantize int8 | --dtype bf16|fp16) [--check-file FILE | --recipe FILE.yaml] [--beams N] [--length-penalty A] [--report DIR]
vanilla-transformer push --model DIR --repo-id USER/NAME [--private] [--revision BRANCH] [--create-pr] [--message TEXT] [--token TOKEN] [--with-demo]

(``tests/test_cli.py`` holds these lines to the parser: every command and option named here exists.)

What a command writes is checked before it starts (``outputs.py``): never an input, a model, a training run
or a folder holding anything else; ``--force`` replaces only the same command's own earlier output.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

from .interruption import RunInterrupted
from .recipes import find_recipe, parse_overrides


def cmd_train(options, task: str | None = None) -> None:
    """Any task's run (the recipe's ``task:``, or ``task`` for the ``classify`` aliases); one JSON summary
    line at the end."""
    from .train.run import train_recipe

    recipe = find_recipe(options.recipe) if options.recipe else None
    overrides = parse_overrides(options.set) | _training_device_overrides(options)
    device = None if options.device in (None, "auto", "cpu") else options.device
    results = train_recipe(recipe, overrides, task, device=device)
    from accelerate import PartialState

    if PartialState().is_main_process:  # one summary under `accelerate launch`, not one per process
        print(json.dumps(_summary(results)))


def _training_device_overrides(options) -> dict:
    """``--device`` / ``--dtype`` on a training command, as the recipe settings that mean them: ``--dtype``
    is ``mixed_precision`` (fp32: no); ``--device cpu`` is ``use_cpu``; another device must be the one the
    run trains on (``train_recipe`` compares, once the run has chosen it)."""
    overrides = {}
    if options.dtype is not None:
        overrides["mixed_precision"] = "no" if options.dtype == "fp32" else options.dtype
    if options.device == "cpu":
        overrides["use_cpu"] = True
    return overrides


def _summary(results: dict) -> dict:
    """The run's end in one line: what it trained, how far, where the model is, its test scores."""
    keys = ("task", "output_dir", "model", "updates", "training_minutes", "stopped", "checkpoint", "test")
    return {key: results[key] for key in keys if results.get(key) is not None}


def cmd_evaluate(options) -> None:
    import contextlib

    from .data.files import data_path
    from .data.translation import TranslationData, check_split, prepare_data
    from .evaluation import evaluate_folder
    from .loading import check_model_folder
    from .outputs import file_output

    recipe = find_recipe(options.recipe) if options.recipe else None  # a file, or a shipped recipe's name
    # The recipe's data settings alone: no device picked, no precision resolved, no model block read.
    args = TranslationData.from_recipe(recipe, parse_overrides(options.set))
    check_split(args, options.split)  # a split the data lacks is named, with those it has, before any work
    output = Path(options.output or Path(options.model) / f"{options.split}_hypotheses.txt")
    scores_file = output.with_name(f"{options.split}_scores.json")
    if output.name == scores_file.name:
        raise ValueError(f"{output} is where the scores go; --output names the hypotheses' file.")
    references = data_path(args.tokenized_test_references, args.data_dir) if options.split == "test" else None
    inputs = [options.model, recipe, references, *_data_files(args)]
    with contextlib.ExitStack() as staged:  # both outputs checked before any work, published when complete
        hypotheses = staged.enter_context(file_output(output, "evaluate", inputs, options.force))
        scores_staged = staged.enter_context(file_output(scores_file, "evaluate", inputs, options.force))
        check_model_folder(options.model)  # a bad folder is refused before the data is read
        data = prepare_data(args)
        check_split(args, options.split, data)  # where the splits were known only once read (a Hub data set)
        split = data[options.split]
        scores, samples = evaluate_folder(
            options.model,
            split,
            hypotheses,
            target_lang=args.target_lang,
            batch_size=args.per_device_eval_batch_size,
            tokenized_references=references,
            num_beams=options.beams,
            length_penalty=options.length_penalty,
            device=options.device,
            dtype=options.dtype,
        )
        for source, hypothesis, reference in samples:
            print(f"source:     {source}\nhypothesis: {hypothesis}\nreference:  {reference}\n")
        report = {"split": options.split, "sentences": len(split), **scores}
        print(json.dumps(report, indent=2))
        scores_staged.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"Hypotheses written to {output}, scores to {scores_file}")


def _data_files(args) -> list[str]:
    """The local files a recipe's splits are read from (a text layout's ``<prefix>.<lang>`` pairs)."""
    from .data.files import data_path

    files = [
        data_path(getattr(args, f"{split}_file"), args.data_dir) for split in ("train", "validation", "test")
    ]
    if args.dataset == "text":
        return [f"{file}.{lang}" for file in files if file for lang in (args.source_lang, args.target_lang)]
    return [file for file in files if file]


def cmd_translate(options) -> None:
    """Translate as the input arrives: a chunk of lines is read, translated, written and flushed before the
    next is read, so memory stays flat however long the input, and a pipe or a terminal gets each
    translation while its input is still open. The input is read as UTF-8 (an invalid byte is an error
    naming the line and column); empty input writes nothing. An ``--output`` file is checked before the
    model loads and written beside its place, then renamed into it once complete (``outputs.file_output``).
    A line longer than the model reads is cut to it, never refused, with either engine (``long_inputs``):
    once the input ends, one warning on stderr names those lines, numbered as in the input, and the limit."""
    import contextlib

    from .inference import line_chunks
    from .long_inputs import CutLines
    from .outputs import file_output

    where = options.input or "<stdin>"
    with contextlib.ExitStack() as files:
        inputs = [options.model, options.input]
        staged = options.output and files.enter_context(
            file_output(options.output, "translate", inputs, options.force)
        )
        source = files.enter_context(open(options.input, "rb")) if options.input else sys.stdin.buffer
        engine = {"ctranslate2": _ctranslate2_translator, "onnx": _onnx_translator}.get(
            options.engine, _pytorch_translator
        )
        translate = engine(options)  # the model loads before the first line is read
        output = files.enter_context(open(staged, "w", encoding="utf-8")) if staged else sys.stdout
        count = 0  # chunks of 16 batches: translate() sorts a chunk's lines by length into its batches
        cut = CutLines()  # the lines cut to the model's limit, over every chunk, for one warning at the end
        for lines in line_chunks(source, where, size=16 * max(options.batch_size, 1)):
            translations = translate(lines, first_line=count + 1, cut_lines=cut)
            output.write("".join(f"{text}\n" for text in translations))
            output.flush()
            count += len(lines)
    cut.warn()
    if options.input and not count:
        print(f"{where} is empty: nothing to translate.", file=sys.stderr)


def _pytorch_translator(options):
    """``lines -> translations`` with the saved model (loaded once) and the command's decoding options."""
    import functools

    from transformers import AutoModelForSeq2SeqLM

    from .inference import load_for_inference, translate

    # int8 (--quantize) runs on the CPU in float32; a half type asked for with it is refused before loading.
    model, tokenizer = load_for_inference(
        options.model, options.device, options.dtype, options.quantize, model_class=AutoModelForSeq2SeqLM
    )
    kwargs = {"num_beams": options.beams} if options.beams else {}
    if options.length_penalty is not None:
        kwargs["length_penalty"] = options.length_penalty
    # translate() cuts a line longer than the model reads to its limit (long_inputs' policy).
    return functools.partial(translate, model, tokenizer, batch_size=options.batch_size, **kwargs)


def _ctranslate2_translator(options):
    """``lines -> translations`` with an exported CTranslate2 model (loaded once); it cuts a line longer than
    the model reads as ``translate()`` does (long_inputs' policy)."""
    import functools

    from .ctranslate2_export import CTranslate2Translator

    return functools.partial(
        CTranslate2Translator(options.model),
        beam_size=options.beams,
        length_penalty=options.length_penalty,
        batch_size=options.batch_size,
    )


def _onnx_translator(options):
    """``lines -> translations`` with an ONNX export (loaded once), decoded as ``generate()`` decodes (beam
    search included); it cuts a line longer than the model reads as ``translate()`` does."""
    import functools

    from .onnx_export import OnnxTranslator

    return functools.partial(
        OnnxTranslator(options.model),
        num_beams=options.beams,
        length_penalty=options.length_penalty,
        batch_size=options.batch_size,
    )


def cmd_average(options) -> None:
    from .averaging import average_checkpoints, checkpoint_dirs, model_folder  # checkpoint_dirs: --last
    from .outputs import folder_output

    folders = list(options.checkpoints)
    if options.last:
        if len(folders) != 1:
            raise SystemExit("--last N takes one run folder (its checkpoints/ holds the checkpoints).")
        run = Path(folders[0])
        folders = checkpoint_dirs(run / "checkpoints" if (run / "checkpoints").is_dir() else run)[
            -options.last :
        ]
        if not folders:
            raise SystemExit(f"No checkpoints found under {run}.")
    # The folders read: a run folder named without --last stands for its model/ (as average_checkpoints reads).
    inputs = [model_folder(folder) for folder in folders]
    with folder_output(options.output, "average", inputs, options.force) as staging:
        average_checkpoints(folders, staging)
    print(f"Averaged {len(folders)} checkpoints into {options.output}")


def cmd_ablate(options) -> None:
    from .train.translation.ablation import collect, commands, read_study, run_study

    study = read_study(find_recipe(options.recipe))
    rows, output = study.select(options.rows), Path(options.output)
    if options.print_commands:
        print("\n".join(commands(study, rows, output, options.minutes_per_row)))
    elif options.collect:
        collect(study, rows, output)
    else:
        table = run_study(study, rows, output, options.minutes_per_row)
        print(f"Table 3 ({len(table['rows'])} rows, {table['wall_minutes']:.1f} min): {output / 'table3.md'}")


def cmd_attention(options) -> None:
    from .attention_maps import plot_attention
    from .inference import load_for_inference
    from .outputs import folder_output

    with folder_output(options.output, "attention", [options.model], options.force) as staging:
        model, tokenizer = load_for_inference(options.model, options.device, options.dtype)
        names = [
            path.name for path in plot_attention(model, tokenizer, options.text, staging, options.target)
        ]
    for name in names:
        print(f"Wrote {Path(options.output) / name}")


def cmd_demo(options) -> None:
    from .demo import launch

    # A folder that holds no model of ours is one line here, not a served page that says so (as a Space).
    launch(
        options.model,
        host=options.host,
        port=options.port,
        fail_on_bad_model=True,
        trust_remote_code=options.trust_remote_code,
        device=options.device,
        dtype=options.dtype,
    )


def cmd_classify(options) -> None:
    if options.stage in ("pretrain", "train"):  # aliases of `train` with the task named
        return cmd_train(options, "pretraining" if options.stage == "pretrain" else "classification")
    from .data.classification import ClassificationData
    from .evaluation import evaluate_on_recipe_data
    from .outputs import check_writable

    recipe = find_recipe(options.recipe) if options.recipe else None
    # The recipe's data settings alone (as `evaluate` reads a translation recipe's): no training arguments.
    args = ClassificationData.from_recipe(recipe, parse_overrides(options.set))
    options.dtype = options.dtype or "fp32"  # the evaluated weights' type
    if not options.model:
        raise SystemExit("classify evaluate needs --model")
    # Its report (eval_results*.json, confusion_matrix*.png) goes next to the model: writable before any work.
    check_writable(Path(options.model) / "eval_results.json")
    metrics = evaluate_on_recipe_data(
        options.model, args, options.file, options.split, options.device, options.dtype
    )
    print(json.dumps(metrics, indent=2))


def cmd_export_onnx(options) -> None:
    from transformers import AutoTokenizer

    from .loading import load_saved_model
    from .model_card import write_export_card
    from .onnx_export import export_onnx
    from .outputs import check_folder_output, folder_output
    from .parity import Candidate
    from .parity import command as parity_command

    check_folder_output(options.output, "export-onnx", [options.model], options.force)
    sample = parity_command.sample_for(options)  # the sample is read (or refused) before any work
    with folder_output(options.output, "export-onnx", [options.model], options.force) as staging:
        model = load_saved_model(options.model)
        tokenizer = AutoTokenizer.from_pretrained(options.model) if _has_tokenizer(options.model) else None
        names = [path.name for path in export_onnx(model, staging, tokenizer)]
        report = parity_command.check_export(options, sample, Candidate("onnx", "float32", staging), staging)
        write_export_card(staging, options.model, "onnx", "float32", report)
    for name in names:
        print(f"Wrote {Path(options.output) / name}")
    parity_command.print_report(report, options.output)


def cmd_export_ct2(options) -> None:
    from .ctranslate2_export import check_translation_folder, export_ctranslate2
    from .model_card import write_export_card
    from .outputs import check_folder_output
    from .parity import Candidate
    from .parity import command as parity_command

    check_folder_output(options.output, "export-ct2", [options.model], options.force)
    check_translation_folder(Path(options.model))  # a classifier is named as one, before a sample is sought
    sample = parity_command.sample_for(options)  # the sample is read (or refused) before any work
    precision = {"bf16": "bfloat16"}.get(options.quantization, options.quantization)
    if options.full_int8_range and precision.startswith("int8"):
        precision += " (8-bit weights)"
    reports = []

    def check(staging: Path) -> None:  # on the complete export, before it is renamed into place
        candidate = Candidate("ctranslate2", precision, staging)
        reports.append(parity_command.check_export(options, sample, candidate, staging))
        write_export_card(staging, options.model, "ctranslate2", precision, reports[-1])

    path = export_ctranslate2(
        options.model,
        options.output,
        quantization=precision.removesuffix(" (8-bit weights)"),  # CTranslate2's name: bfloat16, not bf16
        force=options.force,
        reduce_range=not options.full_int8_range,
        check=check,
    )
    print(f"Wrote {path} (translate with: vanilla-transformer translate --engine ctranslate2 --model {path})")
    parity_command.print_report(reports[0], path)


def cmd_parity(options) -> None:
    """The parity report of an export folder, or of the PyTorch model served in int8 / bf16 / fp16, against
    the model (``vanilla_transformer/parity/``); the two lines, and the report where ``--report`` names a
    folder (an export's own folder by default)."""
    from .model_card import write_export_card
    from .parity import ParityError
    from .parity import command as parity_command

    candidate = parity_command.candidate_for(options)
    sample = parity_command.sample_for(options)
    report = parity_command.measure(options, sample, candidate)
    try:
        parity_command.bounds(options, report)
    except ParityError:  # the figures, then the one line that refuses it; no report is kept
        parity_command.print_report(report, None)
        raise
    where = parity_command.keep_report(
        options,
        report,
        lambda folder: write_export_card(
            folder, options.model, candidate.engine, candidate.precision, report
        ),
    )
    parity_command.print_report(report, where.parent if where else None)


def _has_tokenizer(folder: str) -> bool:
    return any((Path(folder) / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json"))


def cmd_push(options) -> None:
    """A model folder (``hub.push_folder``) or a CTranslate2 / ONNX export (``hub.push_export``, after its
    two parity lines); either without its card gets one written first, where what it needs is known."""
    from .hub import (
        check_export,
        ensure_export_card,
        ensure_model_card,
        export_engine,
        missing_export_files,
        missing_files,
        push_export,
        push_folder,
        read_export_report,
    )
    from .parity import REPORT_FILE, lines

    commit_options = dict(
        private=options.private or None,
        token=options.token,
        revision=options.revision,
        create_pr=options.create_pr,
        commit_message=options.message,
    )
    engine = export_engine(options.model)
    if engine is None:
        if missing_files(options.model) == ["README.md"]:  # e.g. an averaged checkpoint: write its card
            print(f"Wrote {ensure_model_card(options.model)} (no results recorded with these weights)")
        commit = push_folder(options.model, options.repo_id, with_demo=options.with_demo, **commit_options)
    else:
        if options.with_demo:
            raise ValueError(
                f"--with-demo: {options.model} is an export; the demo page serves a model folder."
            )
        report = read_export_report(options.model)
        if report is not None and missing_export_files(options.model, engine, report) == ["README.md"]:
            print(f"Wrote {ensure_export_card(options.model, report)} (from its {REPORT_FILE})")
        check_export(options.model)  # an incomplete export is refused before its figures are shown
        unmeasured = (
            f"{options.model} carries no parity report ({REPORT_FILE}): how faithfully it reproduces its "
            "model was not measured."
        )
        print("\n".join(lines(report) if report else [unmeasured]))
        commit = push_export(options.model, options.repo_id, **commit_options)
    print(f"Pushed {options.model} to {commit.commit_url}")


# -- option values, checked where they enter: one line naming the option, exit status 2 --------------------------


class OneLineErrors(argparse.ArgumentParser):
    """argparse, with a bad command line refused in one line (``PROG: error: argument --batch-size: ...``)
    instead of the whole usage block above it; ``--help`` shows the usage."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def positive_int(text: str) -> int:
    """A count or a size: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def finite_float(text: str) -> float:
    """A real number (not nan or inf)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """A budget: a finite number above 0."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text!r}")
    return value


def port(text: str) -> int:
    """A TCP port: 1 to 65535."""
    value = positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be a port from 1 to 65535, got {value}")
    return value


FORCE_FOLDER = (
    "Replace this command's own earlier output in --output (recognised by the .vanilla-transformer-output.json "
    "it leaves there). An input, a model, a training run or a folder holding anything else is never replaced."
)
FORCE_FILE = (
    "Replace an existing --output file. An input, or a file of a model or a run (config.json, weights, "
    "tokenizer, results.json ...), is never replaced."
)


def _add_device_options(parser) -> None:
    """``--device`` and ``--dtype``: where a command runs the model and in which type (the same choices as
    a recipe's ``mixed_precision``)."""
    from .precision import DTYPE_CHOICES

    parser.add_argument(
        "--device",
        help="Where the model runs: cpu, cuda, cuda:1, mps, xpu (default: the accelerator torch finds, else the "
        "CPU; devices.pick_device).",
    )
    parser.add_argument(
        "--dtype",
        choices=DTYPE_CHOICES,
        default="fp32",
        help="The weights' type: auto (bf16 where the device multiplies it natively, fp16 on GPUs without "
        "bf16 such as T4 / V100 and on Apple GPUs, else fp32), bf16, fp16, or fp32 (= no, the default).",
    )


def _add_training_device_options(parser) -> None:
    """``--device`` and ``--dtype`` of a command that trains: the recipe settings they stand for
    (``_training_device_overrides``), never ignored."""
    from .precision import DTYPE_CHOICES

    parser.add_argument(
        "--device",
        help="cpu (= --set use_cpu=true), or the accelerator the run finds (cuda, mps, xpu: the default); "
        "a device the run would not use is refused.",
    )
    parser.add_argument(
        "--dtype",
        choices=DTYPE_CHOICES,
        default=None,
        help="Training: the recipe's mixed_precision (auto | no | bf16 | fp16; fp32 = no). classify evaluate: "
        "the weights' type (default fp32).",
    )


# -- the parser: one function per command -------------------------------------------------------------


def add_train_command(commands) -> None:
    train = commands.add_parser(
        "train",
        help="Train any task: the recipe's `task:` (translation, classification, masked-lm, electra, "
        "causal-lm; default: the built-in synthetic translation job).",
    )
    train.add_argument(
        "--recipe",
        help="A shipped recipe by name (multi30k_de_en, imdb_causal_lm, ...) or a YAML file's path.",
    )
    train.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Override a recipe setting; model.FIELD=VALUE a field of its model block.",
    )
    _add_training_device_options(train)
    train.set_defaults(func=cmd_train)


def add_evaluate_command(commands) -> None:
    evaluate = commands.add_parser("evaluate", help="Translate a split with beam search and score BLEU.")
    evaluate.add_argument("--model", required=True, help="A saved model folder.")
    evaluate.add_argument("--recipe", help="The recipe that names the data (default: the synthetic task).")
    evaluate.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    evaluate.add_argument("--split", default="test")
    evaluate.add_argument(
        "--beams", type=positive_int, help="Beam size (default: the model's generation config)."
    )
    evaluate.add_argument(
        "--length-penalty",
        type=finite_float,
        help="Beam length penalty alpha (default: the model's generation config).",
    )
    evaluate.add_argument(
        "--output",
        help="Where to write the hypotheses (default: <model>/<split>_hypotheses.txt); the scores go beside "
        "it, as <split>_scores.json.",
    )
    evaluate.add_argument("--force", action="store_true", help=FORCE_FILE)
    _add_device_options(evaluate)
    evaluate.set_defaults(func=cmd_evaluate)


def add_translate_command(commands) -> None:
    translate = commands.add_parser("translate", help="Translate lines from a file or standard input.")
    translate.add_argument("--model", required=True)
    translate.add_argument("--input", help="One sentence a line (default: standard input).")
    translate.add_argument("--output", help="Default: standard output.")
    translate.add_argument("--force", action="store_true", help=FORCE_FILE)
    translate.add_argument(
        "--batch-size", type=positive_int, default=64, help="Sentences a batch (default: 64)."
    )
    translate.add_argument(
        "--beams", type=positive_int, help="Beam size (default: the model's generation config, 4)."
    )
    translate.add_argument(
        "--length-penalty",
        type=finite_float,
        help="Beam length penalty alpha (default: the model's generation config, 0.6).",
    )
    translate.add_argument(
        "--engine",
        choices=["pytorch", "ctranslate2", "onnx"],
        default="pytorch",
        help="ctranslate2: --model is a folder written by `export-ct2`; onnx: by `export-onnx`.",
    )
    translate.add_argument(
        "--quantize",
        choices=["int8"],
        help="pytorch engine, CPU: int8 dynamic quantisation of the linear layers.",
    )
    _add_device_options(translate)
    translate.set_defaults(func=cmd_translate)


def add_average_command(commands) -> None:
    average = commands.add_parser("average", help="Average checkpoints (§6.1) into a new model folder.")
    average.add_argument(
        "checkpoints", nargs="+", help="Checkpoint or model folders, or one run folder with --last."
    )
    average.add_argument(
        "--last", type=positive_int, help="Average the last N checkpoints of the run folder."
    )
    average.add_argument("--output", required=True, help="The new model folder.")
    average.add_argument("--force", action="store_true", help=FORCE_FOLDER)
    average.set_defaults(func=cmd_average)


def add_ablate_command(commands) -> None:
    ablate = commands.add_parser(
        "ablate", help="Table 3: train the paper's model variations for the same budget; tabulate and plot."
    )
    ablate.add_argument(
        "--recipe", default="table3_multi30k", help="The study: a shipped one by name, or a file's path."
    )
    ablate.add_argument("--rows", help="Groups or rows to run besides the base row, e.g. A,C or A1,D3.")
    ablate.add_argument(
        "--minutes-per-row",
        type=positive_float,
        help="A wall-clock budget per row instead of the study's updates.",
    )
    ablate.add_argument("--output", default="runs/table3", help="One folder per row, and the table.")
    what = ablate.add_mutually_exclusive_group()
    what.add_argument("--print-commands", action="store_true", help="Print each row's training command.")
    what.add_argument("--collect", action="store_true", help="Only measure trained rows and build the table.")
    ablate.set_defaults(func=cmd_ablate)


def add_attention_command(commands) -> None:
    attention = commands.add_parser(
        "attention", help="Heat maps of every head's attention (§3.2.3) for one sentence, as PNG."
    )
    attention.add_argument("--model", required=True, help="A saved model folder (any of the variants).")
    attention.add_argument("--text", required=True, help="The source sentence.")
    attention.add_argument("--target", help="Its translation (default: the model's own, by beam search).")
    attention.add_argument(
        "--output", default="attention", help="Folder for the PNGs (default: ./attention)."
    )
    attention.add_argument("--force", action="store_true", help=FORCE_FOLDER)
    _add_device_options(attention)
    attention.set_defaults(func=cmd_attention)


def add_demo_command(commands) -> None:
    demo = commands.add_parser(
        "demo",
        help="A Gradio page for a saved model: translation with attention maps, classification or "
        "continuation (needs the [demo] extra).",
    )
    demo.add_argument("--model", required=True, help="A saved model folder or Hub id.")
    demo.add_argument("--port", type=port, help="Default: $GRADIO_SERVER_PORT or 7860.")
    demo.add_argument("--host", help="Default: 127.0.0.1 (0.0.0.0 serves other machines).")
    demo.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="Run the folder's own .py files (as transformers' trust_remote_code=True) instead of serving it "
        "with this package's classes and pipelines. Only for folders whose code you trust.",
    )
    _add_device_options(demo)
    demo.set_defaults(func=cmd_demo)


def add_classify_command(commands) -> None:
    classify = commands.add_parser(
        "classify",
        help="The encoder as a text classifier: pretrain (masked LM or ELECTRA), train (Trainer), evaluate.",
    )
    classify.add_argument("stage", choices=["pretrain", "train", "evaluate"])
    classify.add_argument("--recipe", help="YAML recipe, e.g. training/configs/imdb_supervised.yaml")
    classify.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    classify.add_argument("--model", help="evaluate: the classifier folder")
    classify.add_argument(
        "--file", help="evaluate: a labelled JSON Lines file (default: the recipe's test_file)"
    )
    classify.add_argument(
        "--split",
        choices=["test", "validation"],
        default="test",
        help="evaluate: validation scores the texts the recipe holds out of its training file (what "
        "training validated on; make choices there) instead of the test file",
    )
    _add_training_device_options(classify)
    classify.set_defaults(func=cmd_classify)


def _add_check_options(parser, export: bool = True) -> None:
    """The parity check's options (``parity/``, docs/serving.md): the sample, the decoding, the bounds."""
    group = parser.add_argument_group("parity check against the PyTorch model (docs/serving.md)")
    group.add_argument(
        "--check-file",
        help="The sample: one sentence (or text) a line, or a JSON Lines / CSV / TSV / parquet data file whose "
        "references or labels are scored too.",
    )
    group.add_argument(
        "--recipe", help="The sample: this recipe's --split (a shipped recipe's name, or a file)."
    )
    group.add_argument(
        "--split", choices=["validation", "test"], default="test", help="The recipe's split (default: test)."
    )
    group.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="The recipe's data settings, as train's.",
    )
    group.add_argument("--check-lines", type=positive_int, help="Check on the sample's first N lines only.")
    group.add_argument("--beams", type=positive_int, help="Beam size of both sides (default: the model's).")
    group.add_argument(
        "--length-penalty", type=finite_float, help="Length penalty of both sides (default: the model's)."
    )
    group.add_argument(
        "--min-identical",
        type=share,
        help="Fail under this share of identical outputs (default: 0.99 for float32, none for other types).",
    )
    group.add_argument(
        "--max-bleu-drop", type=finite_float, help="Fail when BLEU drops by more than this (default: none)."
    )
    group.add_argument(
        "--accept-disagreement",
        action="store_true",
        help="Keep a float32 candidate that agrees on less than 99%% of the sample (the report says so).",
    )
    if export:
        group.add_argument(
            "--no-check",
            action="store_true",
            help="Export without measuring (the card says it was not checked).",
        )


def share(text: str) -> float:
    """A share: a number in [0, 1] (0.99), or a percentage (99%)."""
    value = finite_float(text.removesuffix("%"))
    value = value / 100 if text.endswith("%") else value
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be a share in [0, 1] or a percentage, got {text!r}")
    return value


def add_export_onnx_command(commands) -> None:
    export = commands.add_parser(
        "export-onnx",
        help="Export a model folder to ONNX: model.onnx (encoder-only) or the encoder / first decoder "
        "step / decoder-with-past graphs (encoder-decoder), checked against the model (parity.json).",
    )
    export.add_argument("--model", required=True, help="A saved model folder.")
    export.add_argument("--output", required=True, help="Folder for the graphs, config and tokenizer.")
    export.add_argument("--force", action="store_true", help=FORCE_FOLDER)
    _add_check_options(export)
    export.set_defaults(func=cmd_export_onnx)


def add_export_ct2_command(commands) -> None:
    export_ct2 = commands.add_parser(
        "export-ct2",
        help="Convert a translation model folder to CTranslate2 (the engine Marian/OPUS-MT models are served "
        "with), with its tokenizer and generation defaults, checked against the model (parity.json).",
    )
    export_ct2.add_argument("--model", required=True, help="A saved translation model folder.")
    export_ct2.add_argument("--output", required=True, help="Folder for the CTranslate2 model.")
    export_ct2.add_argument(
        "--quantization",
        default="float32",
        choices=["float32", "bf16", "bfloat16", "float16", "int8", "int8_float32", "int8_bfloat16", "int16"],
        help="Weight type CTranslate2 stores (default: float32).",
    )
    export_ct2.add_argument(
        "--full-int8-range",
        action="store_true",
        help="int8: store weights in CTranslate2's full 8 bits instead of 7, for a model served only on GPUs or "
        "CPUs with VNNI. The 7-bit default keeps int8 translations right on x86 CPUs without VNNI (AVX2 only), "
        "whose int8 products saturate on 8-bit weights.",
    )
    export_ct2.add_argument("--force", action="store_true", help=FORCE_FOLDER)
    _add_check_options(export_ct2)
    export_ct2.set_defaults(func=cmd_export_ct2)


def add_parity_command(commands) -> None:
    parity = commands.add_parser(
        "parity",
        help="Measure how an export, or the model served in int8 / bf16 / fp16, agrees with the PyTorch "
        "float32 model: identical outputs, BLEU, speed.",
    )
    parity.add_argument("--model", required=True, help="The saved model folder (the reference).")
    against = parity.add_mutually_exclusive_group(required=True)
    against.add_argument("--export", help="An export-ct2 or export-onnx folder of this model.")
    against.add_argument("--quantize", choices=["int8"], help="The PyTorch model, int8 dynamic quantisation.")
    against.add_argument("--dtype", choices=["bf16", "fp16"], help="The PyTorch model in this type.")
    parity.add_argument(
        "--report",
        help="Folder for parity.json and PARITY.md (default: the export's folder; none otherwise).",
    )
    _add_check_options(parity, export=False)
    parity.set_defaults(func=cmd_parity)


def add_push_command(commands) -> None:
    push = commands.add_parser(
        "push",
        help="Upload a model folder to the Hub in one commit: weights, tokenizer, remote code, card, "
        "generation config and pipeline; or an export-ct2 / export-onnx folder, with its parity report.",
    )
    push.add_argument(
        "--model",
        required=True,
        help="A saved model folder (a training run's model/), or an export-ct2 / export-onnx folder.",
    )
    push.add_argument("--repo-id", required=True, help="USER/NAME or ORG/NAME on the Hub.")
    push.add_argument("--private", action="store_true", help="Create the repository as private.")
    push.add_argument("--revision", help="Branch to push to (default: main).")
    push.add_argument("--create-pr", action="store_true", help="Open a pull request instead of committing.")
    push.add_argument("--message", help="Commit message.")
    push.add_argument("--token", help="Hub token (default: the one `hf auth login` stored).")
    push.add_argument(
        "--with-demo",
        action="store_true",
        help="Also upload app.py (the `demo` page for this model), the modules it reads (attention_maps.py, "
        "long_inputs.py, model_tasks.py) and requirements.txt: the files a Gradio Space runs.",
    )
    push.set_defaults(func=cmd_push)


COMMANDS = (
    add_train_command,
    add_evaluate_command,
    add_translate_command,
    add_average_command,
    add_ablate_command,
    add_attention_command,
    add_demo_command,
    add_classify_command,
    add_export_onnx_command,
    add_export_ct2_command,
    add_parity_command,
    add_push_command,
)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrors(prog="vanilla-transformer", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for add_command in COMMANDS:
        add_command(commands)
    return parser


def main(argv: list[str] | None = None) -> None:
    options = build_parser().parse_args(argv)
    try:
        options.func(options)
    except BrokenPipeError:  # the reader went away (`... | head`): stop quietly, as other filters do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        raise SystemExit(141) from None
    except RunInterrupted as stop:  # a signal: the checkpoint is written, the exit status says which
        _close_progress_bars()
        print(stop, file=sys.stderr)
        raise SystemExit(stop.exit_status) from None
    except (ValueError, OSError, ImportError) as error:  # bad input, a missing file, a full disk: one line
        _close_progress_bars()
        raise SystemExit(f"error: {error}") from error


def _close_progress_bars() -> None:
    """End the progress bars an error interrupted, so that its line starts a line of its own."""
    from tqdm import tqdm

    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


if __name__ == "__main__":
    main()
