"""Loading a saved model folder into the class it was saved from, after checking that it holds one.

Not remote code: this module belongs to the installed package (the CLI, the Hub upload, the attention maps
and the benchmarks use it), so the model file stays free of package imports.

Every command that loads a model (``translate``, ``evaluate``, ``attention``, ``average``, ``classify
evaluate``, ``export-onnx``, ``export-ct2``, ``push``, ``demo``) goes through :func:`check_model_folder`
before ``from_pretrained`` reads anything: a missing folder, a folder of another architecture (BERT,
Marian), missing or damaged weights, a ``generation_config.json`` that cannot be read, a config that
describes a model too large for the machine's memory, or a tokenizer that is not the model's (more tokens
than its ``vocab_size``, or another vocabulary than the one it was trained with) is one error that names
the file or field, a ``ValueError`` or ``FileNotFoundError`` that the CLI prints as one line.
:func:`load_saved_model` then refuses weights that leave a tensor unloaded or differ in shape from the
config (a flipped bit in a tensor's name, an edited config.json), instead of filling in random values.

Loading runs none of a folder's own Python files: the package's classes read the folder (a tokenizer that
names custom code is refused); only ``trust_remote_code=True``, given by the user, lets transformers import
them, as transformers itself requires.

:func:`parameter_count` counts a config's parameters arithmetically, and :func:`check_fits_memory` refuses,
before anything is allocated, a model whose weights (or, to train it, weights, gradients and Adam's two
moments) exceed the memory available: a typo such as ``d_model=100000000`` is one line naming the fields.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from safetensors import SafetensorError, safe_open

from . import modeling_vanilla_transformer
from .configuration_vanilla_transformer import VanillaTransformerConfig
from .model_tasks import MODEL_TASKS
from .modeling_vanilla_transformer import VanillaTransformerModel, VanillaTransformerPreTrainedModel

# {class name: class}, for every class of the one table of tasks.
MODEL_CLASSES = {name: getattr(modeling_vanilla_transformer, name) for name in MODEL_TASKS}
WEIGHTS, WEIGHTS_INDEX = "model.safetensors", "model.safetensors.index.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
GENERATION_CONFIG = "generation_config.json"
SAVE_HINT = "Pass a folder that save_pretrained or a training run wrote (the run's model/ folder)."
CTRANSLATE2_FILE = "model.bin"
ONNX_FILES = ("model.onnx", "encoder_model.onnx")  # an encoder-only export's, a translation export's first

# Each model class in a user's words, and what takes a folder of it: what a refusal says when a command is
# given a folder of another kind.
MODEL_KINDS = {
    "VanillaTransformerForConditionalGeneration": (
        "a translation model",
        "`translate`, `evaluate`, `attention`, `average`, `export-ct2`, `export-onnx` and `demo` take it",
    ),
    "VanillaTransformerForSequenceClassification": (
        "a sentence classifier",
        "`classify evaluate`, `demo` and pipeline('text-classification') take it",
    ),
    "VanillaTransformerForCausalLM": (
        "a language model (decoder only)",
        "`demo` and pipeline('text-generation') take it",
    ),
    "VanillaTransformerForMaskedLM": (
        "a pre-trained encoder (masked LM)",
        "`classify train` takes it as `init_from`",
    ),
    "VanillaTransformerModel": ("a Transformer without a task head", "AutoModel takes it in Python"),
}


def load_saved_model(
    folder, model_class=None, *, allow_hub_id: bool = False, needs_tokenizer: bool = False, **kwargs
) -> VanillaTransformerPreTrainedModel:
    """Load a saved folder into ``model_class``, by default the class it was saved from
    (``config.architectures``; the bare ``VanillaTransformerModel`` when that names none of ours), on the
    CPU. ``kwargs`` go to ``from_pretrained``. To serve it on a device and in a type (``--device``,
    ``--dtype``): ``inference.load_for_inference``, which loads through this.

    The folder is checked first (:func:`check_model_folder`; ``needs_tokenizer``: it must hold its
    tokenizer), and a ``model_class`` given is checked against the class it was saved from
    (:func:`check_model_kind`); with ``allow_hub_id`` (the demo), a Hub id (``USER/NAME`` that names no
    local path) goes to ``from_pretrained`` unchecked instead. Weights that
    leave a tensor of the model unloaded (a bit flipped in a tensor's name, another model's file) or that
    differ in shape from what ``config.json`` describes raise a ``ValueError`` naming the file, instead of
    loading random values with a warning.
    """
    trust = bool(kwargs.get("trust_remote_code"))  # the user's choice: a tokenizer's own code may then run
    hub = allow_hub_id and is_hub_id(folder)
    config = (
        None if hub else check_model_folder(folder, trust_remote_code=trust, needs_tokenizer=needs_tokenizer)
    )
    if model_class is None:
        config = config or VanillaTransformerConfig.from_pretrained(folder)
        names = [name for name in (config.architectures or []) if name in MODEL_CLASSES]
        model_class = MODEL_CLASSES[names[0]] if names else VanillaTransformerModel
    elif config is not None:
        check_model_kind(folder, config, model_class)
    strict = not kwargs.pop("ignore_mismatched_sizes", False)
    model, info = model_class.from_pretrained(
        folder, output_loading_info=True, ignore_mismatched_sizes=True, **kwargs
    )
    _check_loaded(folder, model, info, strict)
    return model


def _check_loaded(folder, model, info: dict, strict: bool) -> None:
    """Refuse a model that ``from_pretrained`` filled in part: tensors the weights lack (random values) or
    hold in another shape than the config describes."""
    weights = Path(folder) / (WEIGHTS_INDEX if (Path(folder) / WEIGHTS_INDEX).is_file() else WEIGHTS)
    missing, unexpected = sorted(info["missing_keys"]), sorted(info["unexpected_keys"])
    if missing:
        extra = f" and holds {len(unexpected)} it has not ({_few(unexpected)})" if unexpected else ""
        raise ValueError(
            f"{weights} lacks {len(missing)} tensor(s) of the {type(model).__name__} that "
            f"config.json describes ({_few(missing)}){extra}: the file is damaged or holds another model. "
            "Copy or save the model again."
        )
    mismatched = sorted(info["mismatched_keys"]) if strict else []
    if mismatched:
        name, saved, expected = mismatched[0]
        raise ValueError(
            f"{weights} does not fit config.json: {name} is {list(saved)} in the file but "
            f"{list(expected)} in the model the config describes"
            + (f" ({len(mismatched) - 1} more tensors differ)" if len(mismatched) > 1 else "")
            + ". Restore the config.json the weights were saved with, or save the model again."
        )


def check_model_kind(folder, config, model_class) -> None:
    """Refuse a folder saved from another head than ``model_class`` (one of ours, or the Auto class that
    loads it) names, in a user's words: a classifier given to ``translate`` is "a sentence classifier ...
    `classify evaluate` ... take it; this command needs a translation model", not a list of missing tensors.
    A folder that records none of our classes, and the bare ``AutoModel`` / ``VanillaTransformerModel``
    (any of ours loads into it), are not checked."""
    from .model_tasks import MODEL_TASKS

    wanted = [
        name
        for name, task in MODEL_TASKS.items()
        if model_class.__name__ in (name, task.auto_class) and name != "VanillaTransformerModel"
    ]
    saved = [name for name in (config.architectures or []) if name in MODEL_KINDS]
    if not wanted or not saved or saved[0] in wanted:
        return
    what, takers = MODEL_KINDS[saved[0]]
    raise ValueError(
        f"{folder} holds {what} ({saved[0]}): {takers}. This command needs {MODEL_KINDS[wanted[0]][0]}."
    )


def folder_kind(folder: Path) -> str | None:
    """What a folder that is not a saved model is, in a user's words and with the command or path that takes
    it (a run's folder, a run without its final model yet, a tokenizer, a CTranslate2 or ONNX export); None
    when it is none of these."""
    if (folder / "model" / "config.json").is_file():
        return f"{folder} is a training run's folder: its model is {folder / 'model'}. Pass that folder."
    if (folder / "run.json").is_file() or (folder / "checkpoints").is_dir():
        return (
            f"{folder} is a training run's folder without its final model/ yet: pass one of its "
            "checkpoints/checkpoint-N folders, or finish the run (the same command with resume: true)."
        )
    if (folder / CTRANSLATE2_FILE).is_file():
        return (
            f"{folder} is a CTranslate2 export ({CTRANSLATE2_FILE}): `translate --engine ctranslate2 --model "
            f"{folder}` runs it; the other commands take the model folder it was exported from."
        )
    onnx = [name for name in ONNX_FILES if (folder / name).is_file()]
    if onnx and not (folder / WEIGHTS).is_file():
        return (
            f"{folder} is an ONNX export ({onnx[0]}): ONNX Runtime runs it (onnx_export.OnnxSeq2Seq, "
            "docs/serving.md); this command takes the model folder it was exported from."
        )
    if (folder / "tokenizer.json").is_file() and not (folder / "config.json").is_file():
        return (
            f"{folder} holds a tokenizer but no model (a run's tokenizer/ folder): pass the run's model/ "
            "folder."
        )
    return None


def _few(names: list[str]) -> str:
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


def is_hub_id(name) -> bool:
    """``USER/NAME`` that names no local path: ``from_pretrained`` downloads it from the Hub."""
    text = str(name)
    return (
        text.count("/") == 1 and not text.startswith(("/", ".", "~")) and not Path(text).expanduser().exists()
    )


def check_model_folder(
    folder, *, trust_remote_code: bool = False, needs_tokenizer: bool = False
) -> VanillaTransformerConfig:
    """Check a saved folder before anything loads it; returns its config.

    A folder that is something else (a training run's folder, a tokenizer, a CTranslate2 or ONNX export) is
    named as what it is, with what takes it (:func:`folder_kind`). A folder with ``tokenizer_config.json``
    but no ``tokenizer.json`` (copied in part), or with no tokenizer where ``needs_tokenizer`` (every command
    that reads text), is refused naming ``tokenizer.json`` as missing.

    Raises ``FileNotFoundError`` when the folder, its ``config.json`` or its weights (``model.safetensors``,
    or the shards ``model.safetensors.index.json`` lists) are missing, and ``ValueError`` when
    ``config.json`` is not a vanilla-transformer model's (``model_type`` ``bert``, ``marian``, ...), a
    weights file cannot be read (:func:`check_weights`), ``generation_config.json`` cannot be read
    (:func:`check_generation_config`), the model would not fit the memory available
    (:func:`check_fits_memory`), or the folder's tokenizer is not the model's: more tokens than its
    ``vocab_size`` (:func:`check_tokenizer_fits`) or another vocabulary than the one the config's
    ``tokenizer_fingerprint`` records (:func:`check_tokenizer_belongs`). Each message names the file or
    field. A tokenizer that names custom code is refused unless ``trust_remote_code`` (the user's choice).
    """
    folder = Path(folder).expanduser()
    if not folder.exists():
        raise FileNotFoundError(f"No such model folder: {folder} (no config.json to read). {SAVE_HINT}")
    if not folder.is_dir():
        raise NotADirectoryError(f"{folder} is a file, not a model folder. {SAVE_HINT}")
    config_file = folder / "config.json"
    kind = folder_kind(folder)
    if kind is not None:
        raise (FileNotFoundError if not config_file.is_file() else ValueError)(kind)
    if not config_file.is_file():
        raise FileNotFoundError(f"{folder} has no config.json: it is not a saved model folder. {SAVE_HINT}")
    try:
        model_type = json.loads(config_file.read_text(encoding="utf-8")).get("model_type")
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as error:
        raise ValueError(
            f"{config_file} is not a JSON object ({error}). Copy or save the model again."
        ) from error
    expected = VanillaTransformerConfig.model_type
    if model_type != expected:
        found = f"model_type {model_type!r}" if model_type else "no model_type"
        raise ValueError(
            f"{folder} is not a vanilla-transformer model folder: its config.json has {found}, not "
            f"{expected!r}. This command reads models saved by this package; load other models with their "
            "own transformers classes."
        )
    _check_weight_files(folder)
    check_weights(folder)
    check_generation_config(folder)
    config = VanillaTransformerConfig.from_pretrained(folder)
    check_fits_memory(config, training=False, source=str(config_file))
    _check_tokenizer_files(folder, needs_tokenizer)
    if any((folder / name).is_file() for name in TOKENIZER_FILES):
        tokenizer = _load_tokenizer(folder, trust_remote_code)
        check_tokenizer_fits(tokenizer, config, folder)
        check_tokenizer_belongs(tokenizer, config, folder)
    return config


def _check_tokenizer_files(folder: Path, needs_tokenizer: bool) -> None:
    """``tokenizer.json`` exists where the folder has the rest of a tokenizer, or where the command reads
    text; missing, it is named as missing (transformers would otherwise try to rebuild it from a
    sentencepiece model and ask for packages to be installed)."""
    if (folder / "tokenizer.json").is_file():
        return
    partial = (folder / "tokenizer_config.json").is_file()
    if partial or needs_tokenizer:
        found = " (tokenizer_config.json is there: the folder was copied in part)" if partial else ""
        raise FileNotFoundError(
            f"{folder} has no tokenizer.json, the model's tokenizer{found}. Copy it from the folder the "
            "model was saved in (a run's model/ or tokenizer/), or save it there with "
            "tokenizer.save_pretrained."
        )


def _check_weight_files(folder: Path) -> None:
    """The weights exist: ``model.safetensors``, or each shard that ``model.safetensors.index.json`` lists."""
    index = folder / WEIGHTS_INDEX
    if (folder / WEIGHTS).is_file() or not index.is_file():
        if not (folder / WEIGHTS).is_file():
            raise FileNotFoundError(
                f"{folder} has no {WEIGHTS} (the model's weights; nor a sharded {WEIGHTS_INDEX}). Copy the "
                "whole folder again, or save the model into it with save_pretrained."
            )
        return
    try:
        shards = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"{index} cannot be read ({error!r}). Copy or save the model again.") from error
    missing = sorted(name for name in shards if not (folder / name).is_file())
    if missing:
        raise FileNotFoundError(
            f"{folder} lacks {', '.join(missing)}, which {WEIGHTS_INDEX} lists. Copy the whole folder again."
        )


def check_weights(folder) -> None:
    """Raise a ``ValueError`` naming each ``*.safetensors`` file of ``folder`` that cannot be read (cut short
    by a full disk or an interrupted copy, a flipped bit or bad JSON in its header), instead of safetensors'
    bare "incomplete metadata"."""
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


def check_generation_config(folder) -> None:
    """Raise a ``ValueError`` naming ``generation_config.json`` when the folder has one that cannot be read
    (cut short, not JSON, a value transformers refuses): ``from_pretrained`` would otherwise fall back to
    default decoding (greedy search, no length penalty) without a word, and every translation would change."""
    path = Path(folder) / GENERATION_CONFIG
    if not path.is_file():
        return
    from transformers import GenerationConfig

    try:
        values = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(values, dict):
            raise ValueError(f"it holds a JSON {type(values).__name__}, not an object")
        GenerationConfig.from_pretrained(folder)
    except (OSError, ValueError, TypeError, UnicodeDecodeError) as error:
        reason = " ".join(str(error).split())  # one line
        raise ValueError(
            f"{path} cannot be read ({reason}): without it the model would decode with transformers' "
            "defaults (greedy search) instead of its own. Copy or save the model again."
        ) from error


def check_tokenizer_fits(tokenizer, config, folder) -> None:
    """Raise a ``ValueError`` when ``tokenizer`` has more tokens than ``config.vocab_size``: its highest ids
    would have no embedding row (an error, or nonsense, only when such a token first appears)."""
    if len(tokenizer) > config.vocab_size:
        raise ValueError(
            f"The tokenizer of {folder} has {len(tokenizer)} tokens but its config.json has "
            f"vocab_size={config.vocab_size}: ids from {config.vocab_size} on have no embedding. Put the "
            "tokenizer the model was trained with into the folder."
        )


def check_tokenizer_belongs(tokenizer, config, folder) -> None:
    """Raise a ``ValueError`` naming ``tokenizer.json`` when the config records the fingerprint of the
    tokenizer the model was trained with (``tokenizer_fingerprint``) and ``tokenizer`` has another one:
    another model's tokenizer of the same size would give its ids other meanings, and nonsense out. A config
    without a fingerprint (an older save, another tool's) is not checked."""
    from .tokenization import tokenizer_fingerprint

    expected = getattr(config, "tokenizer_fingerprint", None)
    if expected is None:
        return
    found = tokenizer_fingerprint(tokenizer)
    if found != expected:
        raise ValueError(
            f"{Path(folder) / 'tokenizer.json'} is not the tokenizer this model was trained with: its "
            f"vocabulary and special tokens differ (fingerprint {found[:12]}, where config.json's "
            f"tokenizer_fingerprint is {expected[:12]}). Put the model's own tokenizer into the folder."
        )


def _load_tokenizer(folder: Path, trust_remote_code: bool = False):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)
    except Exception as error:  # tokenizers raises bare Exceptions for a damaged tokenizer.json
        reason = " ".join(str(error).split())  # one line
        if not trust_remote_code and "trust_remote_code" in reason:
            raise ValueError(
                f"The tokenizer of {folder} (tokenizer_config.json) names custom code, which runs only when "
                "asked (the demo's --trust-remote-code, trust_remote_code=True in Python). Save the model's "
                "own tokenizer into the folder again, or ask for the code only if you trust the folder."
            ) from error
        raise ValueError(
            f"The tokenizer of {folder} ({', '.join(TOKENIZER_FILES)}) cannot be read ({reason}). Save the "
            "tokenizer into the folder again."
        ) from error


# -- the size of a model, from its config ------------------------------------------------------------------

# Bytes a parameter takes: fp32 weights; training adds its gradient and Adam's two moments (fp32 each).
WEIGHT_BYTES, TRAINING_BYTES = 4, 16
# The config fields a model's size follows, as errors name them.
SIZE_FIELDS = (
    "vocab_size",
    "d_model",
    "d_ff",
    "num_heads",
    "d_k",
    "d_v",
    "num_encoder_layers",
    "num_decoder_layers",
)


def parameter_count(config, architecture: str | None = None, *, vocabulary: bool = True) -> int:
    """The parameters of the model ``config`` describes, counted from its fields (nothing is allocated);
    tied matrices once, as ``model.num_parameters()`` counts them.

    ``architecture``: the class name (``VanillaTransformerForConditionalGeneration``, ...); by default
    the config's ``architectures``, else the head its shape takes (translation for an encoder-decoder, a
    causal LM for a decoder, a sequence classifier for an encoder). ``vocabulary=False`` leaves out every
    matrix of ``vocab_size`` rows (embeddings, output layer): a lower bound while the vocabulary is not
    known yet."""
    architecture = architecture or _architecture(config)
    width, inner, heads = config.d_model, config.d_ff, config.num_heads
    d_k = config.d_k or max(width // heads, 1)
    d_v = config.d_v or max(width // heads, 1)
    vocab = config.vocab_size if vocabulary else 0
    bias = bool(config.attention_bias)
    projections = 2 * width * heads * d_k + 2 * width * heads * d_v  # q_proj, k_proj; v_proj, out_proj
    attention = projections + bias * (2 * heads * d_k + heads * d_v + width)
    feed_forward = 2 * width * inner + inner + width  # fc1 and fc2, with biases
    norm = 2 * width  # a LayerNorm's weight and bias
    positions = config.max_position_embeddings * width if config.position_encoding == "learned" else 0
    final_norm = norm if config.norm_position == "pre" else 0
    if architecture == "VanillaTransformerForCausalLM":
        has_encoder, has_decoder = False, True
    elif architecture in ("VanillaTransformerForSequenceClassification", "VanillaTransformerForMaskedLM"):
        has_encoder, has_decoder = True, False
    else:
        has_encoder = config.is_encoder_decoder or not config.is_decoder
        has_decoder = config.is_encoder_decoder or config.is_decoder
    cross = has_encoder and has_decoder
    total = 0
    if has_encoder:
        layer = attention + feed_forward + 2 * norm
        total += config.num_encoder_layers * layer + positions + final_norm + vocab * width
    if has_decoder:
        layer = (2 if cross else 1) * attention + feed_forward + (3 if cross else 2) * norm
        shared = cross and config.share_embeddings
        total += config.num_decoder_layers * layer + positions + final_norm + (0 if shared else vocab * width)
    output = 0 if config.tie_word_embeddings else vocab * width
    if architecture in ("VanillaTransformerForConditionalGeneration", "VanillaTransformerForCausalLM"):
        total += output
    elif architecture == "VanillaTransformerForMaskedLM":
        total += width * width + width + norm + output + vocab  # transform, its LayerNorm, the output layer
    elif architecture == "VanillaTransformerForSequenceClassification":
        total += (width + 1) * config.num_labels
    return total


def _architecture(config) -> str:
    """The class a config's model is: the first of ``architectures`` this package has, else by its shape."""
    names = [name for name in (getattr(config, "architectures", None) or []) if name in MODEL_CLASSES]
    if names:
        return names[0]
    if config.is_encoder_decoder:
        return "VanillaTransformerForConditionalGeneration"
    if config.is_decoder:
        return "VanillaTransformerForCausalLM"
    return "VanillaTransformerForSequenceClassification"


def available_memory() -> int | None:
    """Bytes of main memory a new model can take now: ``MemAvailable`` of ``/proc/meminfo``, less where a
    cgroup (a container's limit) leaves less; elsewhere the machine's physical memory (``os.sysconf``).
    None where none of these can be read."""
    found = []
    try:
        for line in Path("/proc/meminfo").read_text(encoding="ascii").splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),  # cgroup v2
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ):
        try:
            limit = Path(limit_file).read_text(encoding="ascii").strip()
            if limit != "max" and int(limit) < 1 << 60:  # v1 writes "no limit" as a huge number
                found.append(max(int(limit) - int(Path(usage_file).read_text(encoding="ascii")), 0))
        except (OSError, ValueError):
            pass
    if not found:
        try:
            found.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (OSError, ValueError, AttributeError):
            return None
    return min(found)


def _gpu_memory() -> int | None:
    """Free bytes of this process's CUDA device (``LOCAL_RANK`` under a multi-process launch), where torch
    sees one (None elsewhere)."""
    import torch

    if not torch.cuda.is_available():
        return None
    try:
        device = int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count()
        return torch.cuda.mem_get_info(device)[0]
    except (RuntimeError, ValueError):
        return None


def check_fits_memory(
    config, *, training: bool, source: str | None = None, vocabulary: bool = True, prefix: str = ""
) -> None:
    """Raise a ``ValueError`` before anything is allocated when the model ``config`` describes would not fit:
    its fp32 weights in main memory (loading it; building it to train, too), and to train it, weights,
    gradients and Adam's two moments (16 bytes a parameter) in the GPU's free memory where CUDA is
    available, else in main memory. Activations come on top, so a model that passes may still not train;
    one that fails cannot. ``source`` names the file the config came from (``config.json``), ``prefix`` the
    fields' prefix where they were set (``model.``: a recipe's model block); ``vocabulary=False``: the vocabulary is not
    known yet, and the count leaves it out (:func:`parameter_count`)."""
    count = parameter_count(config, vocabulary=vocabulary)
    gpu = _gpu_memory() if training else None
    needs = [(WEIGHT_BYTES * count, available_memory(), "memory", "to hold its fp32 weights")]
    if training:
        purpose = "to train (fp32 weights, gradients and Adam's two moments: 16 bytes a parameter)"
        needs.append((TRAINING_BYTES * count, gpu, "GPU memory", purpose))
        if gpu is None:
            needs = [(TRAINING_BYTES * count, available_memory(), "memory", purpose)]
    for need, available, place, purpose in needs:
        if available is not None and need > available:
            fields = ", ".join(
                f"{'' if name == 'vocab_size' else prefix}{name}={getattr(config, name)}"
                for name in SIZE_FIELDS
                if vocabulary or name != "vocab_size"
            )
            at_least = "at least " if not vocabulary else ""
            without = " before its vocabulary" if not vocabulary else ""
            raise ValueError(
                f"{f'{source}: the' if source else 'The'} model is too large for this machine: {at_least}{count:,} parameters{without} "
                f"({fields}) need {_bytes(need)} of {place} {purpose}, but {_bytes(available)} is available. "
                "Make the model smaller (check these fields for a typo)."
            )


def _bytes(size: int) -> str:
    """``size`` bytes in the largest binary unit that leaves at least 1 (GiB, MiB or KiB)."""
    unit = next(unit for unit in (3, 2, 1) if size >= 1024**unit or unit == 1)
    return f"{size / 1024**unit:,.1f} {'KMG'[unit - 1]}iB"


__all__ = [
    "load_saved_model",
    "check_model_folder",
    "check_weights",
    "check_generation_config",
    "check_tokenizer_fits",
    "check_tokenizer_belongs",
    "check_fits_memory",
    "parameter_count",
    "available_memory",
    "is_hub_id",
    "MODEL_CLASSES",
]
