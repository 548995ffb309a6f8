"""vanilla-transformer: the Transformer of "Attention Is All You Need" as a Hugging Face model package.

Importing the package registers the config and models with transformers' Auto classes, in-process
(``AutoModelForSeq2SeqLM.from_pretrained(folder)`` works without ``trust_remote_code``), and with
``register_for_auto_class`` so that ``save_pretrained`` / ``push_to_hub`` copy the code next to the
weights and write an ``auto_map``: such a folder loads with ``trust_remote_code=True`` where this
package is not installed.
"""

import transformers
from transformers import AutoConfig, AutoModelForSeq2SeqLM
from transformers.pipelines import PIPELINE_REGISTRY

from .configuration_vanilla_transformer import PRESETS, VanillaTransformerConfig
from .loading import MODEL_CLASSES
from .model_tasks import MODEL_TASKS
from .modeling_vanilla_transformer import (
    VanillaTransformerForCausalLM,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerForMaskedLM,
    VanillaTransformerForSequenceClassification,
    VanillaTransformerModel,
    VanillaTransformerPreTrainedModel,
)
from .translation_pipeline import REGISTERED_TASK, TranslationPipeline

__version__ = "0.1.0"

AutoConfig.register(VanillaTransformerConfig.model_type, VanillaTransformerConfig, exist_ok=True)
VanillaTransformerConfig.register_for_auto_class()
for _name, _model_class in MODEL_CLASSES.items():
    _auto_class = getattr(transformers, MODEL_TASKS[_name].auto_class)
    _auto_class.register(VanillaTransformerConfig, _model_class, exist_ok=True)
    _model_class.register_for_auto_class(_auto_class.__name__)
# transformers refuses the task name "translation" in-process (it removed that pipeline); saved folders
# serve it under that name with trust_remote_code, and this registration under "vanilla-translation".
PIPELINE_REGISTRY.register_pipeline(
    REGISTERED_TASK, pipeline_class=TranslationPipeline, pt_model=AutoModelForSeq2SeqLM, type="text"
)

__all__ = [
    "PRESETS",
    "VanillaTransformerConfig",
    "VanillaTransformerPreTrainedModel",
    "VanillaTransformerModel",
    "VanillaTransformerForConditionalGeneration",
    "VanillaTransformerForSequenceClassification",
    "VanillaTransformerForCausalLM",
    "VanillaTransformerForMaskedLM",
    "TranslationPipeline",
]
