"""The filled model card (``README.md``) written next to every trained model, and the card of an export.

The Hub metadata (license, pipeline tag, data sets, a ``model-index`` with the run's results) comes from
``huggingface_hub.ModelCardData``; the body states this run's numbers, data, length and hardware, then
repeats the project's template (``model_card.md``: architecture, faithfulness, deviations, intended use).

An export's card (:func:`write_export_card`: a CTranslate2 or ONNX folder) names the model it came from and
carries that model's license, data sets and languages, the parity report's table (how faithfully the export
reproduces the model, ``parity.table``) and the command that runs it.
"""

from __future__ import annotations

import json
import os
import platform
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import torch
import yaml
from huggingface_hub import EvalResult, ModelCard, ModelCardData

from .classification_pipeline import LongText
from .configuration_vanilla_transformer import VanillaTransformerConfig
from .model_tasks import MODEL_TASKS, auto_class_for

PAPER_FLAGS = {  # the paper's value of every deviation flag (model_card.md, "Faithfulness")
    "norm_position": "post",
    "position_encoding": "sinusoidal",
    "activation": "relu",
    "scale_embedding": True,
    "share_embeddings": True,
    "tie_word_embeddings": True,
    "attention_bias": False,
}


@dataclass
class Result:
    """One measured number of the run, as it goes into ``model-index``."""

    task_type: str  # "translation" | "text-classification" | "fill-mask"
    metric_type: str  # "bleu" | "accuracy" | "f1" ...
    metric_name: str
    value: float
    dataset_name: str
    dataset_type: str
    dataset_split: str


def hardware() -> str:
    if torch.cuda.is_available():
        return f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
    model = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    threads = torch.get_num_threads()
    return f"CPU: {model}, {os.cpu_count()} cores, {threads} torch thread(s)"


def template_body() -> str:
    """``model_card.md`` from its "Architecture" section on (its own front matter and title dropped)."""
    text = resources.files(__package__).joinpath("model_card_template.md").read_text(encoding="utf-8")
    start = text.find("## Architecture")
    return text[start:] if start >= 0 else text


def deviations(config: VanillaTransformerConfig) -> list[str]:
    """The deviation flags this model sets differently from the paper, and its sizes against Table 3 base."""
    lines = [
        f"`{name}` = `{getattr(config, name)!r}` (paper: `{paper!r}`)"
        for name, paper in PAPER_FLAGS.items()
        if hasattr(config, name) and getattr(config, name) != paper
    ]
    base = VanillaTransformerConfig.from_preset("base")
    sizes = ("d_model", "d_ff", "num_heads", "num_encoder_layers", "num_decoder_layers", "dropout")
    changed = [
        f"{n} {getattr(config, n)} (base: {getattr(base, n)})"
        for n in sizes
        if getattr(config, n) != getattr(base, n)
    ]
    if changed:
        lines.append("sizes differ from Table 3 base: " + ", ".join(changed))
    return lines


def write_model_card(
    folder: str | Path,
    model,
    *,
    task: str,
    summary: str,
    results: list[Result],
    datasets: list[str],
    training: dict[str, Any],
    language: list[str] | None = None,
    name: str | None = None,
    base_model: str | None = None,
) -> Path:
    """Write ``folder/README.md`` for a trained model; returns its path. Parses with ``ModelCard.load``.
    ``base_model``: the model it was fine-tuned from. A Hub id becomes the card's ``base_model`` metadata (the
    Hub links the two); a local path cannot (the Hub refuses a card whose ``base_model`` is not a model id),
    so it is named only in the card's text by the caller's ``summary``."""
    from .loading import is_hub_id

    config = model.config
    name = name or Path(folder).resolve().name
    data = ModelCardData(
        model_name=name,
        license="apache-2.0",
        library_name="transformers",
        pipeline_tag=task,
        language=language,
        base_model=base_model if base_model and is_hub_id(base_model) else None,
        tags=["vanilla-transformer", "transformer", "attention-is-all-you-need", "custom_code", task],
        datasets=datasets or None,
        metrics=sorted({r.metric_type for r in results}) or None,
        eval_results=[
            EvalResult(
                task_type=r.task_type,
                dataset_type=r.dataset_type,
                dataset_name=r.dataset_name,
                dataset_split=r.dataset_split,
                metric_type=r.metric_type,
                metric_name=r.metric_name,
                metric_value=round(float(r.value), 4),
            )
            for r in results
        ]
        or None,
    )
    rows = "\n".join(
        f"| {r.dataset_name} ({r.dataset_split}) | {r.metric_name} | {r.value:.2f} |" for r in results
    )
    settings = "\n".join(f"| {key} | {value} |" for key, value in training.items())
    architecture = (
        f"d_model {config.d_model}, d_ff {config.d_ff}, h {config.num_heads}, "
        f"{config.num_encoder_layers} encoder / {config.num_decoder_layers} decoder layers, "
        f"vocabulary {config.vocab_size}, {model.num_parameters():,} parameters"
    )
    auto_class = auto_class_for(task)
    flags = "\n".join(f"- {line}" for line in deviations(config)) or "- none"
    usage = long_text_usage(name, config) if task == "text-classification" else ""
    body = f"""
# {name}

{summary}

Model class: `{type(model).__name__}` ({architecture}).

## Results

| data | metric | value |
| --- | --- | --- |
{rows}

## Training

| setting | value |
| --- | --- |
{settings}
| hardware | {hardware()} |
| torch / transformers | {torch.__version__} / {_transformers_version()} |

## Deviations from the paper in this model

{flags}

## How to use

```python
from transformers import {auto_class}, AutoTokenizer

model = {auto_class}.from_pretrained("{name}", trust_remote_code=True)  # or a local folder
tokenizer = AutoTokenizer.from_pretrained("{name}", trust_remote_code=True)  # no prompt for the config's code
```
{usage}
{template_body()}"""
    card = ModelCard(f"---\n{data.to_yaml()}\n---\n{body}")
    path = Path(folder) / "README.md"
    card.save(path)
    return path


def long_text_usage(name: str, config) -> str:
    """What the classifier's pipeline does with a long text, and the arguments that change it."""
    reading = LongText.from_config(config)
    return f"""
### Long texts

`pipeline("text-classification", model="{name}", trust_remote_code=True)` reads a text longer than
{reading.max_length} tokens as this model was evaluated: {reading.describe()}. Call it as any
text-classification pipeline, e.g. `classify(texts, batch_size=32, truncation=True)`; `truncation=False`
refuses such a text instead, `max_length` sets the tokens per view for one call, and
`long_text="head" | "head_tail" | "windows"` reads it another way.
"""


# The engines an export is written for: the command that writes it, the extra that installs its runtime.
EXPORT_COMMANDS = {"ctranslate2": ("export-ct2", "ctranslate2"), "onnx": ("export-onnx", "onnx")}


def export_task(folder: str | Path, engine: str, report: dict | None = None) -> str:
    """The pipeline tag of an export: ``translation`` for a CTranslate2 export and ONNX's seq2seq graphs (or
    a report on sentences), else the task of the model class its ``config.json`` names (an encoder-only ONNX
    graph: ``text-classification`` for the classifier)."""
    from .onnx_export import SEQ2SEQ_FILES

    folder = Path(folder)
    if engine == "ctranslate2" or any((folder / name).is_file() for name in SEQ2SEQ_FILES):
        return "translation"
    if report is not None and "sentences" in report:
        return "translation"
    config = folder / "config.json"
    names = (
        json.loads(config.read_text(encoding="utf-8")).get("architectures") if config.is_file() else None
    ) or []
    known = [name for name in names if name in MODEL_TASKS]
    if (report is not None and "texts" in report) or not known:
        return "text-classification"
    return MODEL_TASKS[known[0]].pipeline_tag


def _source_card(model_dir: str | Path) -> tuple[str, ModelCardData]:
    """The source model's name (its card's title, else its folder's name; a run's ``model/`` folder is named
    by the run) and its card's metadata (empty where it has no card that parses)."""
    folder = Path(model_dir)
    resolved = folder.resolve()
    name = resolved.parent.name if resolved.name == "model" else resolved.name
    path = folder / "README.md"
    if not path.is_file():
        return name, ModelCardData()
    try:
        card = ModelCard.load(path, ignore_metadata_errors=True)
    except (ValueError, yaml.YAMLError):  # a source card that does not parse lends nothing
        return name, ModelCardData()
    title = re.search(r"^# (.+)$", card.text, re.MULTILINE)
    return (title.group(1).strip() if title else name), card.data


def write_export_card(
    folder: str | Path, model_dir: str | Path, engine: str, precision: str, report: dict | None
) -> Path:
    """Write ``folder/README.md`` for the ``engine`` export (``"ctranslate2"`` or ``"onnx"``) in ``precision``
    of the model folder ``model_dir``; returns its path. Parses with ``ModelCard.load``.

    The metadata: ``library_name`` the engine, the task (:func:`export_task`), the source card's license, data
    sets and languages (where ``model_dir`` has a card that parses), and ``base_model`` where ``model_dir`` is
    a Hub id. The body: what was exported from what, the parity report's table (``report``: ``parity.json``'s
    content; None for an export written with ``--no-check``, or of a model whose outputs the check does not
    compare (a masked LM), which the card says) and the commands that run it, downloaded from
    :data:`HUB_PLACEHOLDER` (``hub.push_export`` puts the repository's id there)."""
    from .loading import is_hub_id
    from .parity import describe, table

    if engine not in EXPORT_COMMANDS:
        raise ValueError(f"engine {engine!r}: an export card is written for {' or '.join(EXPORT_COMMANDS)}.")
    folder = Path(folder)
    name, source = _source_card(model_dir)
    task = export_task(folder, engine, report)
    candidate = describe({"engine": engine, "precision": precision})
    data = ModelCardData(
        license=source.license,
        license_name=source.license_name,
        license_link=source.license_link,
        library_name=engine,
        pipeline_tag=task,
        language=source.language,
        datasets=source.datasets,
        base_model=str(model_dir) if is_hub_id(model_dir) else None,
        tags=["vanilla-transformer", engine, task],
    )
    command, extra = EXPORT_COMMANDS[engine]
    if report is not None:
        faithfulness = (
            "Measured when the export was written, against the PyTorch model on the same sample with the "
            f"same decoding (every figure: `parity.json`):\n\n{table(report)}"
        )
    elif task in ("translation", "text-classification"):
        faithfulness = (
            "This export was written with `--no-check`: nothing was measured of how faithfully it reproduces "
            "the PyTorch model it came from.\n"
        )
    else:  # the check compares translations and labels only
        faithfulness = f"Nothing was measured: the parity check does not compare a {task} model's outputs.\n"
    local = re.sub(r"[^\w.-]+", "-", f"{name}-{engine}-{precision}")
    body = f"""
# {name} ({candidate})

The model {name}, a Transformer (Vaswani et al., 2017) of the vanilla-transformer package, exported to
{candidate} with `vanilla-transformer {command}`.

## How faithful this export is

{faithfulness}
## Use

{_export_usage(engine, task, extra, local)}"""
    card = ModelCard(f"---\n{data.to_yaml()}\n---\n{body}")
    path = folder / "README.md"
    card.save(path)
    return path


# Where an export's card names its Hub repository before it has one; ``hub.push_export`` fills it in.
HUB_PLACEHOLDER = "USER/NAME"


def _export_usage(engine: str, task: str, extra: str, local: str) -> str:
    """The commands that run an export downloaded into ``local``: the package's ``translate`` for a
    translation, onnxruntime on ``model.onnx`` for an encoder-only graph."""
    download = f"hf download {HUB_PLACEHOLDER} --local-dir {local}"
    if task == "translation":
        return f"""```bash
pip install "vanilla-transformer[{extra}]"
{download}
vanilla-transformer translate --engine {engine} --model {local} < source.txt > translations.txt
```
"""
    labels = (
        "\n`config.json`'s `id2label` names the columns of `logits`.\n"
        if task == "text-classification"
        else ""
    )
    return f"""```bash
pip install onnxruntime transformers
{download}
```

```python
import onnxruntime
from transformers import PreTrainedTokenizerFast

tokenizer = PreTrainedTokenizerFast.from_pretrained("{local}")  # the tokenizer alone: no model code runs
session = onnxruntime.InferenceSession("{local}/model.onnx")
batch = tokenizer(["a text"], return_tensors="np")
inputs = {{"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}}
logits = session.run(["logits"], inputs)[0]
```
{labels}"""


def _transformers_version() -> str:
    import transformers

    return transformers.__version__


__all__ = ["Result", "write_model_card", "write_export_card", "export_task", "deviations", "HUB_PLACEHOLDER"]
