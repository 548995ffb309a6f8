"""The filled model card (``README.md``) written next to every trained model.

The Hub metadata (license, pipeline tag, data sets, a ``model-index`` with the run's results) comes from
``huggingface_hub.ModelCardData``; the body states this run's numbers, data, length and hardware, then
repeats the project's template (``model_card.md``: architecture, faithfulness, deviations, intended use).
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import EvalResult, ModelCard, ModelCardData

from .classification_pipeline import LongText
from .configuration_vanilla_transformer import VanillaTransformerConfig
from .model_tasks import auto_class_for

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


def _transformers_version() -> str:
    import transformers

    return transformers.__version__


__all__ = ["Result", "write_model_card", "deviations"]
