"""Loading a saved model folder into the class it was saved from.

Not remote code: this module belongs to the installed package (the CLI, the Hub upload, the
attention maps and the benchmarks use it), so the model file stays free of package imports.
"""

from __future__ import annotations

from .configuration_vanilla_transformer import VanillaTransformerConfig
from .modeling_vanilla_transformer import (
    VanillaTransformerForCausalLM,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerForMaskedLM,
    VanillaTransformerForSequenceClassification,
    VanillaTransformerModel,
    VanillaTransformerPreTrainedModel,
)

MODEL_CLASSES = {
    model_class.__name__: model_class
    for model_class in (
        VanillaTransformerModel,
        VanillaTransformerForConditionalGeneration,
        VanillaTransformerForCausalLM,
        VanillaTransformerForSequenceClassification,
        VanillaTransformerForMaskedLM,
    )
}


def load_saved_model(folder, **kwargs) -> VanillaTransformerPreTrainedModel:
    """Load a saved folder into the class it was saved from (``config.architectures``; the bare
    ``VanillaTransformerModel`` when that names none of ours). ``kwargs`` go to ``from_pretrained``."""
    config = VanillaTransformerConfig.from_pretrained(folder)
    names = [name for name in (config.architectures or []) if name in MODEL_CLASSES]
    model_class = MODEL_CLASSES[names[0]] if names else VanillaTransformerModel
    return model_class.from_pretrained(folder, **kwargs)


__all__ = ["load_saved_model", "MODEL_CLASSES"]
