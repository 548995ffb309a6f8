"""A demo page for a saved model, as a Hub Space shows it (Gradio; ``pip install 'vanilla-transformer[demo]'``).

For a translation model: a text box, the translation (beam size, length penalty and maximum new tokens
adjustable; the defaults are the model's own, §6.1), and the three uses of attention of §3.2.3 (encoder
self-attention, masked decoder self-attention, encoder-decoder attention) of a chosen layer and head as
pictures: the weights ``softmax(QK^T / sqrt(d_k))`` of Eq. 1. For a classifier: the label with its scores.
For a causal language model: a continuation. A text longer than the model reads is cut to it, as every
command cuts (``long_inputs``), and the page says so. Bad input (empty text, a folder that holds no model of
ours: another architecture, missing or damaged weights, a tokenizer larger than the vocabulary) gets a
message on the page; the server keeps serving.

    vanilla-transformer demo --model DIR_OR_HUB_ID [--port N] [--host H] [--trust-remote-code] [--device D] [--dtype T]
    python -m vanilla_transformer.demo --model DIR_OR_HUB_ID

With the package installed, the page serves a folder or Hub id with the package's own classes and
text-classification pipeline: none of the folder's ``.py`` files runs (a changed ``modeling_*.py`` or
pipeline file included) unless the user asks with ``--trust-remote-code`` (``trust_remote_code=True`` in
Python), as transformers itself requires; then the folder's own code loads through the Auto classes.

The same file runs as a Space's ``app.py`` (``vanilla-transformer push --with-demo`` uploads it with the
modules it imports, ``hub.SPACE_MODULES``, and a ``requirements.txt``): there the package need not be
installed, the model is ``$VT_DEMO_MODEL`` (a Hub id or folder) or the folder the file sits in, and it loads
through the Auto classes with the model's own remote code, the code its owner uploaded beside this file.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import torch

if importlib.util.find_spec("vanilla_transformer") is not None:
    from vanilla_transformer.attention_maps import KINDS, attention_weights, draw_weights
    from vanilla_transformer.long_inputs import reading_limit, text_cut_warning
    from vanilla_transformer.model_tasks import MODEL_TASKS
else:  # a Space's app.py: attention_maps.py, long_inputs.py and model_tasks.py were uploaded beside it
    from attention_maps import KINDS, attention_weights, draw_weights
    from long_inputs import reading_limit, text_cut_warning
    from model_tasks import MODEL_TASKS

logger = logging.getLogger(__name__)

MODEL_ENV = "VT_DEMO_MODEL"
# The classes the page serves -> (what it does with them, the Auto class a folder's remote code names).
TASKS = {name: (task.demo_page, task.auto_class) for name, task in MODEL_TASKS.items() if task.demo_page}


def _gradio():
    try:
        import gradio
    except ImportError as error:
        raise ImportError(
            "The demo needs gradio: pip install 'vanilla-transformer[demo]' (or pip install gradio)."
        ) from error
    return gradio


# ------------------------------------------------------------------------------------------------
# Loading, and the checks that turn bad input into a sentence
# ------------------------------------------------------------------------------------------------


@dataclass
class Loaded:
    """A model the page serves, its tokenizer and the longest text it reads (in tokens); for a classifier,
    also the folder's own text-classification pipeline (it reads long texts as the model was evaluated)."""

    model: torch.nn.Module
    tokenizer: object
    task: str
    limit: int
    limit_name: str
    classifier: object | None = None


def placement(device: str | None = None, dtype: str = "fp32") -> tuple[torch.device, torch.dtype]:
    """Where the page runs the model and in which type (``--device``, ``--dtype``): with the package installed,
    as every command decides (``inference.placement``); in a Space's app.py, the accelerator torch finds
    (else the CPU) and the type named (``auto`` there: float32)."""
    if importlib.util.find_spec("vanilla_transformer") is not None:
        from vanilla_transformer.inference import placement as serving_placement

        return serving_placement(device, dtype)
    if device in (None, "auto"):
        found = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
        chosen = found or torch.device("cpu")
    else:
        chosen = torch.device(device)
    return chosen, {"bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype, torch.float32)


def load_for_demo(
    model_path: str | Path, *, trust_remote_code: bool = False, device: str | None = None, dtype: str = "fp32"
) -> Loaded:
    """Load a saved folder or Hub id; a ``ValueError`` (``FileNotFoundError`` for a missing file) that says
    what is wrong when it is not a translation model, classifier or causal LM of this package (or cannot be
    read). With the package installed, a local folder first gets the checks every command runs
    (``loading.check_model_folder``: another architecture, missing or damaged weights, a tokenizer that is
    not the model's), and the package's own classes and pipeline serve it: the folder's ``.py`` files run
    only with ``trust_remote_code`` (the user's choice), and it loads as every command loads a model
    (``inference.load_for_inference``). Without the package (a Space's ``app.py``), the folder's own code is
    the only code there is. ``device`` / ``dtype``: where and in which type the model runs
    (:func:`placement`)."""
    from transformers import AutoTokenizer, PretrainedConfig

    model_path = str(model_path)
    folder = Path(model_path).expanduser()
    package = importlib.util.find_spec("vanilla_transformer") is not None
    remote_code = trust_remote_code or not package
    if package and folder.exists():
        from vanilla_transformer.loading import check_model_folder

        check_model_folder(folder, trust_remote_code=trust_remote_code)
    if folder.is_dir() and not (folder / "config.json").is_file():
        raise ValueError(f"{model_path!r} is not a saved model folder: it has no config.json.")
    if not folder.exists() and (model_path.startswith(("/", ".", "~")) or model_path.count("/") != 1):
        raise ValueError(f"No such model folder: {model_path!r} (nor is it a Hub id, USER/NAME).")
    try:
        config, _ = PretrainedConfig.get_config_dict(model_path)
    except (OSError, ValueError, json.JSONDecodeError) as error:
        raise ValueError(f"Cannot read the config.json of {model_path!r}: {error}") from error
    if config.get("model_type") != "vanilla_transformer":
        raise ValueError(
            f"{model_path!r} holds a model of type {config.get('model_type')!r} (config.json's model_type), "
            "not 'vanilla_transformer': the demo serves models saved by this package."
        )
    architecture = next((name for name in config.get("architectures") or [] if name in TASKS), None)
    if architecture is None:
        raise ValueError(
            f"{model_path!r} is a {', '.join(config.get('architectures') or ['bare model'])}: the demo serves "
            f"{', '.join(TASKS)} (config.json's architectures)."
        )
    task, auto_class = TASKS[architecture]
    if not remote_code:
        from vanilla_transformer.inference import load_for_inference
        from vanilla_transformer.loading import MODEL_CLASSES

        model, tokenizer = load_for_inference(
            model_path, device, dtype, model_class=MODEL_CLASSES[architecture], allow_hub_id=True
        )
    else:  # the folder's own modeling_*.py
        import transformers

        try:
            tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=True)
        except (OSError, ValueError) as error:
            raise ValueError(f"{model_path!r} has no readable tokenizer (tokenizer.json): {error}") from error
        model = getattr(transformers, auto_class).from_pretrained(model_path, trust_remote_code=True)
        model.to(*placement(device, dtype)).eval()
    # The most the model reads, as every command decides it: a longer text is cut to it (long_inputs).
    limit, limit_name = reading_limit(model.config.max_position_embeddings, tokenizer.model_max_length)
    classifier = None
    if task == "classification" and remote_code:
        from transformers import pipeline

        # The pipeline the folder names (config.custom_pipelines): its own classification_pipeline.py, on
        # the model's device and in its type.
        classifier = pipeline(
            "text-classification",
            model=model_path,
            trust_remote_code=True,
            device=model.device,
            dtype=model.dtype,
        )
    elif task == "classification":  # the same pipeline, the package's own copy
        from vanilla_transformer.classification_pipeline import LongTextClassificationPipeline

        classifier = LongTextClassificationPipeline(
            model=model, tokenizer=tokenizer, task="text-classification"
        )
    return Loaded(model, tokenizer, task, limit, limit_name, classifier)


def check_text(loaded: Loaded, text: str) -> None:
    """Raise a ``ValueError`` for text the model cannot read: empty. (A long one is cut: :func:`cut_note`.)"""
    if not text or not text.strip():
        raise ValueError("The text is empty: type a sentence first.")


def cut_note(loaded: Loaded, text: str, result: str, **tokenizing) -> str:
    """The page's sentence for a text longer than the model reads, which is cut to it (``long_inputs``'
    policy, as every command): its length, the limit and ``result``, what the cut means; empty when it fits.
    ``tokenizing``: as the page tokenizes the text (e.g. ``add_special_tokens=False``)."""
    length = len(loaded.tokenizer(text, verbose=False, **tokenizing)["input_ids"])
    if length <= loaded.limit:
        return ""
    return f"✂️ {text_cut_warning(length, loaded.limit, loaded.limit_name, result)}"


# ------------------------------------------------------------------------------------------------
# What each task computes
# ------------------------------------------------------------------------------------------------


def translate(loaded: Loaded, text: str, num_beams: int, length_penalty: float, max_new_tokens: int) -> str:
    """Beam search (§6.1) with the page's settings; ``max_new_tokens`` 0 keeps the model's own bound
    (source length + 50)."""
    check_text(loaded, text)
    encoded = loaded.tokenizer(text, truncation=True, max_length=loaded.limit, return_tensors="pt")
    encoded = encoded.to(loaded.model.device)  # a long text cut to what the model reads (cut_note says so)
    settings = {"num_beams": int(num_beams)}
    if int(num_beams) > 1:
        settings["length_penalty"] = float(length_penalty)
    if int(max_new_tokens) > 0:
        settings["max_new_tokens"] = int(max_new_tokens)
    with torch.no_grad():
        output = loaded.model.generate(**encoded, **settings)[0]
    return loaded.tokenizer.decode(output, skip_special_tokens=True)


def classify(loaded: Loaded, text: str) -> tuple[dict[str, float], str]:
    """Each label's probability from the folder's own text-classification pipeline, which reads a long
    text as the saved classifier says (``config.classifier_long_text``: head + tail, or windows with
    averaged logits), as ``classify evaluate`` scored it; and a note saying how a long text was read."""
    if not text or not text.strip():
        raise ValueError("The text is empty: type a sentence first.")
    config = loaded.model.config
    scores = {row["label"]: row["score"] for row in loaded.classifier(text, top_k=None)}
    scores = {name: scores[name] for name in config.id2label.values()}  # the labels' own order
    reads = config.classifier_max_length or config.max_position_embeddings  # tokens per view, </s> included
    length = len(loaded.tokenizer(text)["input_ids"])
    note = ""
    if length > reads:
        note = (
            f"A long text ({length} tokens, the model reads {reads} at a time): read as the model was "
            f"evaluated (classifier_long_text: {config.classifier_long_text})."
        )
    return scores, note


def continue_text(loaded: Loaded, text: str, num_beams: int, max_new_tokens: int) -> str:
    """The causal LM's continuation of the prompt (no end-of-sequence token appended to it)."""
    check_text(loaded, text)
    encoded = loaded.tokenizer(
        text, return_tensors="pt", add_special_tokens=False, truncation=True, max_length=loaded.limit
    ).to(loaded.model.device)  # a long prompt cut to what the model reads (cut_note says so)
    with torch.no_grad():
        output = loaded.model.generate(
            **encoded, num_beams=int(num_beams), max_new_tokens=max(1, int(max_new_tokens))
        )[0]
    return loaded.tokenizer.decode(output[encoded["input_ids"].shape[-1] :], skip_special_tokens=True)


def attention(loaded: Loaded, text: str, target: str | None = None) -> dict:
    """``attention_maps.attention_weights`` for the text (and its translation), leaving the model on the
    attention implementation it had (the maps need the eager path)."""
    before = loaded.model.config._attn_implementation
    try:
        return attention_weights(loaded.model, loaded.tokenizer, text, target)
    finally:
        if before and before != "eager":
            loaded.model.set_attn_implementation(before)


def draw_head(found: dict | None, kind: str, layer: int, head: int):
    """One head's weights (queries down, keys across) as a PIL image; None when ``found`` lacks ``kind``.
    A layer past the stack's depth shows its last layer (the title says which)."""
    from matplotlib.figure import Figure
    from PIL import Image

    if not found or kind not in found["weights"]:
        return None
    weights = found["weights"][kind]  # (layers, heads, queries, keys)
    layer = min(int(layer), weights.shape[0])
    head = min(int(head), weights.shape[1])
    title, key_side, query_side = KINDS[kind]
    keys, queries = found["tokens"][key_side], found["tokens"][query_side]
    size = min(9.0, max(3.2, 0.3 * max(len(keys), len(queries)) + 1.2))
    figure = Figure(figsize=(size, size), dpi=100)
    axis = figure.subplots()
    shown = draw_weights(
        axis,
        weights[layer - 1, head - 1],
        keys,
        queries,
        f"{title}\nlayer {layer}, head {head}",
        fontsize=8,
        title_fontsize=9,
    )
    axis.set_xlabel(f"{key_side} (keys)", fontsize=8)
    axis.set_ylabel(f"{query_side} (queries)", fontsize=8)
    figure.colorbar(shown, ax=axis, fraction=0.046, pad=0.04)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    buffer.seek(0)
    return Image.open(buffer)


# ------------------------------------------------------------------------------------------------
# The page
# ------------------------------------------------------------------------------------------------


def _failure(error: Exception) -> str:
    """The sentence the page shows for an error: bad input says what to change; anything else is logged
    with its traceback on the server and named on the page."""
    if isinstance(error, ValueError):
        return f"⚠️ {error}"
    logger.exception("The demo failed on an input")
    return f"⚠️ The model failed on this input ({type(error).__name__}: {error})."


def _describe(model_path: str, loaded: Loaded) -> str:
    config = loaded.model.config
    parameters = sum(p.numel() for p in loaded.model.parameters())
    lines = [f"# {model_path}", ""]
    facts = [
        type(loaded.model).__name__,
        f"{parameters / 1e6:.1f}M parameters",
        f"d_model {config.d_model}, {config.num_heads} heads",
    ]
    if loaded.task == "translation":
        if config.source_lang and config.target_lang:
            facts.insert(1, f"{config.source_lang} → {config.target_lang}")
        facts.append(f"{config.num_encoder_layers} + {config.num_decoder_layers} layers")
    else:
        facts.append(f"{config.num_hidden_layers} layers")
    facts.append(f"reads at most {loaded.limit} tokens")
    lines.append(" · ".join(facts))
    return "\n".join(lines)


def build_demo(
    model_path: str | Path,
    *,
    fail_on_bad_model: bool = False,
    trust_remote_code: bool = False,
    device: str | None = None,
    dtype: str = "fp32",
):
    """The Gradio Blocks page for ``model_path`` (a saved folder or Hub id). A path that holds no model
    of ours gives a page that says so, instead of an exception; with ``fail_on_bad_model`` (the ``demo``
    command) the exception is raised, before any server starts. ``trust_remote_code``: serve the folder
    with its own ``.py`` files (:func:`load_for_demo`); ``device`` / ``dtype``: where and in which type the
    model runs (:func:`placement`)."""
    gr = _gradio()
    model_path = str(model_path)
    try:
        loaded = load_for_demo(model_path, trust_remote_code=trust_remote_code, device=device, dtype=dtype)
    except (ValueError, OSError, ImportError, RuntimeError) as error:  # e.g. weights of another shape
        if fail_on_bad_model:
            raise
        expected = isinstance(error, (ValueError, FileNotFoundError, NotADirectoryError))  # said in one line
        logger.error("Cannot serve %s: %s", model_path, error, exc_info=not expected)
        with gr.Blocks(title="vanilla-transformer demo") as demo:
            gr.Markdown(f"# {model_path}")
            gr.Markdown(f"⚠️ Cannot serve this model. {error}", elem_id="vt-message")
        return demo
    with gr.Blocks(title=f"{Path(model_path).name or model_path} · vanilla-transformer") as demo:
        gr.Markdown(_describe(model_path, loaded))
        {"translation": _translation_page, "classification": _classification_page, "generation": _lm_page}[
            loaded.task
        ](gr, loaded)
    return demo


def _pick_one(gr, count: int, label: str, elem_id: str):
    """A slider over 1..count; a fixed number where there is only one (a one-layer or one-head model: a
    slider's minimum must lie below its maximum)."""
    if count > 1:
        return gr.Slider(1, count, value=1, step=1, label=label, elem_id=elem_id)
    return gr.Number(1, label=f"{label} (the only one)", precision=0, interactive=False, elem_id=elem_id)


def _attention_panel(gr, loaded: Loaded, kinds: list[str]):
    """Layer and head sliders over one picture per kind of attention; returns (state, sliders, images)."""
    config = loaded.model.config
    depth = {"encoder_attentions": config.num_encoder_layers}  # decoder and cross: the decoder's layers
    layers = max(depth.get(kind, config.num_decoder_layers) for kind in kinds)
    found = gr.State(None)
    with gr.Row():
        layer = _pick_one(gr, layers, "Layer", "vt-layer")
        head = _pick_one(gr, config.num_heads, "Head", "vt-head")
    with gr.Row():
        images = [
            gr.Image(
                label=KINDS[kind][0],
                show_label=False,  # the picture's own title names it, with the layer and head
                type="pil",
                format="png",
                interactive=False,
                elem_id=f"vt-{kind.removesuffix('_attentions').replace('_', '-')}-attention",
            )
            for kind in kinds
        ]

    def redraw(found_value, layer_value, head_value):
        return [draw_head(found_value, kind, layer_value, head_value) for kind in kinds]

    for slider in (layer, head):
        slider.change(redraw, [found, layer, head], images, show_progress="hidden")
    return found, layer, head, images, redraw


def _translation_page(gr, loaded: Loaded) -> None:
    config, generation = loaded.model.config, loaded.model.generation_config
    source = f" ({config.source_lang})" if config.source_lang else ""
    target = f" ({config.target_lang})" if config.target_lang else ""
    with gr.Row():
        with gr.Column():
            text = gr.Textbox(label=f"Source{source}", lines=3, elem_id="vt-input")
            run = gr.Button("Translate", variant="primary", elem_id="vt-run")
            with gr.Accordion("Decoding (§6.1 defaults of this model)", open=False):
                beams = gr.Slider(1, 8, value=generation.num_beams or 1, step=1, label="Beam size")
                penalty = gr.Slider(
                    0.0, 2.0, value=generation.length_penalty, step=0.1, label="Length penalty α"
                )
                new_tokens = gr.Slider(
                    0, config.max_position_embeddings, value=0, step=1,
                    label="Max new tokens (0: source length + 50, §6.1)",
                )  # fmt: skip
        with gr.Column():
            output = gr.Textbox(label=f"Translation{target}", lines=3, interactive=False, elem_id="vt-output")
            message = gr.Markdown(elem_id="vt-message")
    kinds = ["encoder_attentions", "decoder_attentions", "cross_attentions"]
    found, layer, head, images, redraw = _attention_panel(gr, loaded, kinds)

    def respond(text_value, beams_value, penalty_value, new_tokens_value, layer_value, head_value):
        try:
            translation = translate(loaded, text_value, beams_value, penalty_value, new_tokens_value)
            weights = attention(loaded, text_value, translation)
            note = cut_note(loaded, text_value, "the translation and the pictures cover only that part")
        except Exception as error:  # noqa: BLE001 - every failure becomes a message on the page
            gr.Warning(_failure(error))
            return [_failure(error), "", None, *redraw(None, 1, 1)]
        note = " ".join(filter(None, [note, weights["cut"].get("target")]))  # a translation too long to draw
        return [note, translation, weights, *redraw(weights, layer_value, head_value)]

    inputs = [text, beams, penalty, new_tokens, layer, head]
    for event in (run.click, text.submit):
        event(respond, inputs, [message, output, found, *images])


def _classification_page(gr, loaded: Loaded) -> None:
    with gr.Row():
        with gr.Column():
            text = gr.Textbox(label="Text", lines=5, elem_id="vt-input")
            run = gr.Button("Classify", variant="primary", elem_id="vt-run")
        with gr.Column():
            output = gr.Label(label="Label", elem_id="vt-output")
            message = gr.Markdown(elem_id="vt-message")
    found, layer, head, images, redraw = _attention_panel(gr, loaded, ["encoder_attentions"])

    def respond(text_value, layer_value, head_value):
        try:
            scores, note = classify(loaded, text_value)
            weights = None if note else attention(loaded, text_value)
        except Exception as error:  # noqa: BLE001 - every failure becomes a message on the page
            gr.Warning(_failure(error))
            return [_failure(error), None, None, *redraw(None, 1, 1)]
        if note:
            note += f" Attention maps are drawn for texts of at most {loaded.limit} tokens."
        return [note, scores, weights, *redraw(weights, layer_value, head_value)]

    for event in (run.click, text.submit):
        event(respond, [text, layer, head], [message, output, found, *images])


def _lm_page(gr, loaded: Loaded) -> None:
    with gr.Row():
        with gr.Column():
            text = gr.Textbox(label="Prompt", lines=3, elem_id="vt-input")
            run = gr.Button("Continue", variant="primary", elem_id="vt-run")
            with gr.Accordion("Decoding", open=False):
                beams = gr.Slider(1, 8, value=1, step=1, label="Beam size")
                new_tokens = gr.Slider(
                    1, loaded.limit, value=min(30, loaded.limit), step=1, label="Max new tokens"
                )
        with gr.Column():
            output = gr.Textbox(label="Continuation", lines=3, interactive=False, elem_id="vt-output")
            message = gr.Markdown(elem_id="vt-message")
    found, layer, head, images, redraw = _attention_panel(gr, loaded, ["decoder_attentions"])

    def respond(text_value, beams_value, new_tokens_value, layer_value, head_value):
        try:
            continuation = continue_text(loaded, text_value, beams_value, new_tokens_value)
            weights = attention(loaded, text_value)
            note = cut_note(
                loaded, text_value, "the continuation follows only that part", add_special_tokens=False
            )
        except Exception as error:  # noqa: BLE001 - every failure becomes a message on the page
            gr.Warning(_failure(error))
            return [_failure(error), "", None, *redraw(None, 1, 1)]
        return [note, continuation, weights, *redraw(weights, layer_value, head_value)]

    for event in (run.click, text.submit):
        event(respond, [text, beams, new_tokens, layer, head], [message, output, found, *images])


def theme():
    """Gradio's default theme on the system's fonts: the page loads nothing from outside the server."""
    gr = _gradio()
    fonts = ["ui-sans-serif", "system-ui", "sans-serif"]
    return gr.themes.Default(font=fonts, font_mono=["ui-monospace", "monospace"])


def launch(
    model_path: str | Path,
    host: str | None = None,
    port: int | None = None,
    *,
    fail_on_bad_model: bool = False,
    trust_remote_code: bool = False,
    device: str | None = None,
    dtype: str = "fp32",
    **kwargs,
):
    """Serve the page (blocking unless ``prevent_thread_lock=True``); host and port default to Gradio's
    (127.0.0.1:7860, or ``GRADIO_SERVER_NAME`` / ``GRADIO_SERVER_PORT`` as a Space sets them).
    ``fail_on_bad_model``: raise, instead of serving a page that says what is wrong with the model.
    ``trust_remote_code``: run the folder's own ``.py`` files (by default the package's classes serve it).
    ``device`` / ``dtype``: where and in which type the model runs (:func:`placement`)."""
    demo = build_demo(
        model_path,
        fail_on_bad_model=fail_on_bad_model,
        trust_remote_code=trust_remote_code,
        device=device,
        dtype=dtype,
    )
    demo.launch(server_name=host, server_port=port, theme=theme(), **kwargs)
    return demo


# ------------------------------------------------------------------------------------------------
# A Space: this file as app.py
# ------------------------------------------------------------------------------------------------


def default_model() -> str | None:
    """``$VT_DEMO_MODEL``, else the folder this file sits in when it holds a config.json (app.py uploaded
    beside the weights)."""
    if os.environ.get(MODEL_ENV):
        return os.environ[MODEL_ENV]
    here = Path(__file__).resolve().parent
    return str(here) if (here / "config.json").is_file() else None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--model",
        default=default_model(),
        help=f"A saved model folder or Hub id (default: ${MODEL_ENV}, else this file's folder).",
    )
    parser.add_argument("--port", type=int, help="Default: $GRADIO_SERVER_PORT or 7860.")
    parser.add_argument(
        "--host", help="Default: $GRADIO_SERVER_NAME or 127.0.0.1 (0.0.0.0 serves other machines)."
    )
    parser.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="With the package installed: run the folder's own .py files instead of the package's classes.",
    )
    parser.add_argument(
        "--device", help="cpu, cuda, mps, xpu ... (default: the accelerator torch finds, else the CPU)."
    )
    parser.add_argument(
        "--dtype", choices=("auto", "no", "fp32", "bf16", "fp16"), default="fp32", help="The weights' type."
    )
    options = parser.parse_args(argv)
    if not options.model:
        parser.error(f"no model: pass --model DIR_OR_HUB_ID or set ${MODEL_ENV}")
    launch(
        options.model,
        host=options.host,
        port=options.port,
        trust_remote_code=options.trust_remote_code,
        device=options.device,
        dtype=options.dtype,
    )


if __name__ == "__main__":
    main()
