"""What each model class is for, in one table that every consumer reads: the pipeline tag its model card
declares, the transformers Auto class that loads a saved folder of it, and the demo page that serves it.

Plain names only, no imports: the package reads this module (registration, cards, Hub uploads, the demo),
and so does a Space's ``app.py``, which runs without the package and finds this file uploaded beside it.
"""

from __future__ import annotations

from typing import NamedTuple


class ModelTask(NamedTuple):
    pipeline_tag: str  # the Hub's task, written in the model card
    auto_class: str  # the transformers Auto class that loads a saved folder (and that `auto_map` names)
    demo_page: str | None  # what the demo page does with the model; None where it serves none


MODEL_TASKS = {
    "VanillaTransformerModel": ModelTask("feature-extraction", "AutoModel", None),
    "VanillaTransformerForConditionalGeneration": ModelTask(
        "translation", "AutoModelForSeq2SeqLM", "translation"
    ),
    "VanillaTransformerForSequenceClassification": ModelTask(
        "text-classification", "AutoModelForSequenceClassification", "classification"
    ),
    "VanillaTransformerForCausalLM": ModelTask("text-generation", "AutoModelForCausalLM", "generation"),
    "VanillaTransformerForMaskedLM": ModelTask("fill-mask", "AutoModelForMaskedLM", None),
}


def auto_class_for(pipeline_tag: str) -> str:
    """The Auto class that loads a model declared for ``pipeline_tag`` (``AutoModel`` for any other)."""
    return next(
        (task.auto_class for task in MODEL_TASKS.values() if task.pipeline_tag == pipeline_tag), "AutoModel"
    )


__all__ = ["MODEL_TASKS", "ModelTask", "auto_class_for"]
