"""Loading a saved model folder into the class it was saved from.

Not remote code: this module belongs to the installed package (the CLI, the Hub upload, the
attention maps and the benchmarks use it), so the model file stays free of package imports.
"""

from __future__ import annotations

from pathlib import Path

from safetensors import SafetensorError, safe_open

from . import modeling_vanilla_transformer
from .configuration_vanilla_transformer import VanillaTransformerConfig
from .model_tasks import MODEL_TASKS
from .modeling_vanilla_transformer import VanillaTransformerModel, VanillaTransformerPreTrainedModel

# {class name: class}, for every class of the one table of tasks.
MODEL_CLASSES = {name: getattr(modeling_vanilla_transformer, name) for name in MODEL_TASKS}


def load_saved_model(folder, model_class=None, **kwargs) -> VanillaTransformerPreTrainedModel:
    """Load a saved folder into ``model_class``, by default the class it was saved from
    (``config.architectures``; the bare ``VanillaTransformerModel`` when that names none of ours).
    ``kwargs`` go to ``from_pretrained``.

    A damaged weights file (cut short by a full disk or an interrupted copy) raises a ``ValueError`` that
    names the file, instead of safetensors' bare "incomplete metadata" message.
    """
    if model_class is None:
        config = VanillaTransformerConfig.from_pretrained(folder)
        names = [name for name in (config.architectures or []) if name in MODEL_CLASSES]
        model_class = MODEL_CLASSES[names[0]] if names else VanillaTransformerModel
    check_weights(folder)
    return model_class.from_pretrained(folder, **kwargs)


def check_weights(folder) -> None:
    """Raise a ``ValueError`` naming each ``*.safetensors`` file of ``folder`` that cannot be read (cut
    short by a full disk or an interrupted copy), instead of safetensors' bare "incomplete metadata"."""
    for path in sorted(Path(folder).glob("*.safetensors")):
        try:
            with safe_open(str(path), framework="pt") as weights:
                for name in weights.keys():
                    weights.get_slice(name)
        except SafetensorError as error:
            raise ValueError(
                f"{path} is damaged and cannot be read ({error}). Copy or save the model again (a training "
                "run's checkpoints/ hold earlier complete copies)."
            ) from error


__all__ = ["load_saved_model", "check_weights", "MODEL_CLASSES"]
