"""Attention heat maps: what each head of each layer looks at, for one sentence.

The three uses of attention in the model (§3.2.3) each get a picture: encoder self-attention (source
against source), masked decoder self-attention (target against earlier target) and encoder-decoder
attention (target against source). A picture is a grid of layers (rows) by heads (columns), the
weights ``softmax(QK^T / sqrt(d_k))`` of Eq. 1 as returned by the eager attention path.

A text longer than the model reads is cut to it, with a warning, as every command cuts (``long_inputs``);
``plot_attention`` draws at most ``MAX_DRAWN_TOKENS`` tokens a side (more would be labels too small to read
on a picture of hundreds of megapixels), so a longer text is cut to that, saying so the same way.
"""

from __future__ import annotations

from pathlib import Path

import torch

if __package__:  # the package's module; in a Space, long_inputs.py is uploaded beside this file and app.py
    from .long_inputs import encode_within, reading_limit, text_cut_warning, warn
else:
    from long_inputs import encode_within, reading_limit, text_cut_warning, warn

KINDS = {
    "encoder_attentions": ("encoder self-attention", "source", "source"),
    "decoder_attentions": ("decoder self-attention (masked)", "target", "target"),
    "cross_attentions": ("encoder-decoder attention", "source", "target"),
}
# The most tokens a side plot_attention draws: at 0.22 inch a token, a 6 x 8 grid of 64-token maps is already
# 11,000 x 8,500 pixels; a 2,000-word text would need billions (the renderer runs out of memory).
MAX_DRAWN_TOKENS = 64


def token_labels(tokenizer, ids) -> list[str]:
    """Readable axis labels: each token decoded on its own (byte-level BPE symbols such as ``Ġ`` or
    ``Ã¼`` become text), its raw form where it decodes to nothing but space."""
    ids = [int(i) for i in ids]
    return [tokenizer.decode([i]).strip() or tokenizer.convert_ids_to_tokens(i) for i in ids]


def attention_weights(
    model, tokenizer, source: str, target: str | None = None, max_tokens: int | None = None
) -> dict:
    """Run one sentence (and, for the seq2seq model, its translation: ``target`` or the model's own
    beam-search output) through the eager path; returns the tokens, every attention tensor and what was cut.

    A source longer than the model reads (``long_inputs.reading_limit``), or than ``max_tokens`` where that
    is smaller, is cut to its first tokens, and so is the target, given or generated; ``found["cut"]`` holds
    the policy's warning for each side cut (``"source"``, ``"target"``), and is empty when none was."""
    if not source.strip():
        raise ValueError("The sentence to draw attention for is empty.")
    limit, limit_name = reading_limit(model.config.max_position_embeddings, tokenizer.model_max_length)
    reader = "this model reads"
    if max_tokens is not None and (limit is None or max_tokens < limit):
        limit_name = "this model reads more" if limit is None else f"this model reads {limit}"
        limit, reader = max_tokens, "an attention picture shows legibly"

    def said(length: int, what: str) -> str:
        return text_cut_warning(length, limit, limit_name, "the maps show only that part", reader, what)

    model.set_attn_implementation("eager")  # SDPA does not return the probabilities
    model.eval()
    (source_ids,), source_cut = encode_within(tokenizer, [source], limit)
    cut = {"source": said(source_cut[0], "the text")} if source_cut else {}
    input_ids = torch.tensor([source_ids], device=model.device)
    inputs = {"input_ids": input_ids}
    tokens = {"source": token_labels(tokenizer, input_ids[0])}
    with torch.no_grad():
        if model.config.is_encoder_decoder:
            if target is None:
                generated = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids))[0]
                decoder_ids = generated[generated != model.config.pad_token_id].unsqueeze(0)
                if limit is not None and decoder_ids.shape[-1] > limit:  # causal: its first tokens are exact
                    cut["target"] = said(decoder_ids.shape[-1], "the model's translation")
                    decoder_ids = decoder_ids[:, :limit]
            else:
                (labels,), target_cut = encode_within(tokenizer, [target], limit, as_target=True)
                if target_cut:
                    cut["target"] = said(target_cut[0], "the target")
                labels = torch.tensor([labels], device=model.device)
                decoder_ids = model.prepare_decoder_input_ids_from_labels(labels)
            inputs["decoder_input_ids"] = decoder_ids
            tokens["target"] = token_labels(tokenizer, decoder_ids[0])
        else:
            tokens["target"] = tokens["source"]  # one stack: its tokens are both queries and keys
        outputs = model(**inputs, output_attentions=True)
    if not model.config.is_encoder_decoder:  # the one stack's self-attention, named for the half it is
        outputs = {
            "decoder_attentions" if model.config.is_decoder else "encoder_attentions": outputs.attentions
        }
    weights = {
        # (layers, heads, queries, keys), float32 on the CPU for drawing whatever the model's device and type
        kind: torch.stack([layer[0] for layer in outputs[kind]]).float().cpu()
        for kind in KINDS
        if outputs.get(kind) is not None
    }
    return {"tokens": tokens, "weights": weights, "cut": cut}


def draw_weights(
    axis, weights, keys: list[str], queries: list[str], title: str, fontsize: int = 6, title_fontsize: int = 8
):
    """Draw one head's weights (a ``(queries, keys)`` tensor of Eq. 1's softmax) on a matplotlib ``Axes``:
    queries down, keys across, on one colour scale for every picture (0 to 1, viridis), titled ``title``.
    Uses only the axis it is given (no pyplot), so a server may draw from several threads, and imports
    nothing, so it runs where this file was uploaded beside a Space's app.py. Returns the image (for a
    colour bar)."""
    shown = axis.imshow(weights.float().numpy(), cmap="viridis", vmin=0.0, vmax=1.0)
    axis.set_xticks(range(len(keys)), keys, rotation=90, fontsize=fontsize)
    axis.set_yticks(range(len(queries)), queries, fontsize=fontsize)
    axis.set_title(title, fontsize=title_fontsize)
    return shown


def plot_attention(
    model, tokenizer, source: str, output_dir: str | Path, target: str | None = None
) -> list[Path]:
    """Write one PNG per kind of attention into ``output_dir``; returns their paths. A text (or target)
    longer than the model reads or than ``MAX_DRAWN_TOKENS`` is cut to it, with one warning (stderr)."""
    from matplotlib.figure import Figure

    found = attention_weights(model, tokenizer, source, target, max_tokens=MAX_DRAWN_TOKENS)
    if found["cut"]:
        warn(" ".join(found["cut"].values()))
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for kind, weights in found["weights"].items():
        title, key_side, query_side = KINDS[kind]
        keys, queries = found["tokens"][key_side], found["tokens"][query_side]
        layers, heads = weights.shape[:2]
        size = max(1.6, 0.22 * max(len(keys), len(queries)))
        figure = Figure(figsize=(size * heads, size * layers), dpi=100)
        axes = figure.subplots(layers, heads, squeeze=False)
        for layer in range(layers):
            for head in range(heads):
                draw_weights(
                    axes[layer][head],
                    weights[layer, head],
                    keys,
                    queries,
                    f"layer {layer + 1}, head {head + 1}",
                )
        shown = source if len(source) <= 100 else f"{source[:100]}…"  # a title, not the whole of a long text
        figure.suptitle(f"{title}: {shown}", fontsize=10)
        figure.tight_layout()
        path = output_dir / f"{kind.removesuffix('s')}.png"
        figure.savefig(path)
        paths.append(path)
    return paths
