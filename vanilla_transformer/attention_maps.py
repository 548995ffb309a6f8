"""Attention heat maps: what each head of each layer looks at, for one sentence.

The three uses of attention in the model (§3.2.3) each get a picture: encoder self-attention (source
against source), masked decoder self-attention (target against earlier target) and encoder-decoder
attention (target against source). A picture is a grid of layers (rows) by heads (columns), the
weights ``softmax(QK^T / sqrt(d_k))`` of Eq. 1 as returned by the eager attention path.
"""

from __future__ import annotations

from pathlib import Path

import torch

KINDS = {
    "encoder_attentions": ("encoder self-attention", "source", "source"),
    "decoder_attentions": ("decoder self-attention (masked)", "target", "target"),
    "cross_attentions": ("encoder-decoder attention", "source", "target"),
}


def token_labels(tokenizer, ids) -> list[str]:
    """Readable axis labels: each token decoded on its own (byte-level BPE symbols such as ``Ġ`` or
    ``Ã¼`` become text), its raw form where it decodes to nothing but space."""
    ids = [int(i) for i in ids]
    return [tokenizer.decode([i]).strip() or tokenizer.convert_ids_to_tokens(i) for i in ids]


def attention_weights(model, tokenizer, source: str, target: str | None = None) -> dict:
    """Run one sentence (and, for the seq2seq model, its translation: ``target`` or the model's own
    beam-search output) through the eager path; returns the tokens and every attention tensor."""
    if not source.strip():
        raise ValueError("The sentence to draw attention for is empty.")
    model.set_attn_implementation("eager")  # SDPA does not return the probabilities
    model.eval()
    encoded = tokenizer(source, return_tensors="pt").to(model.device)
    inputs = {"input_ids": encoded["input_ids"]}
    tokens = {"source": token_labels(tokenizer, encoded["input_ids"][0])}
    with torch.no_grad():
        if model.config.is_encoder_decoder:
            if target is None:
                generated = model.generate(**encoded)[0]
                decoder_ids = generated[generated != model.config.pad_token_id].unsqueeze(0)
            else:
                labels = tokenizer(text_target=target, return_tensors="pt")["input_ids"].to(model.device)
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
    return {"tokens": tokens, "weights": weights}


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
    """Write one PNG per kind of attention into ``output_dir``; returns their paths."""
    from matplotlib.figure import Figure

    found = attention_weights(model, tokenizer, source, target)
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
        figure.suptitle(f"{title}: {source}", fontsize=10)
        figure.tight_layout()
        path = output_dir / f"{kind.removesuffix('s')}.png"
        figure.savefig(path)
        paths.append(path)
    return paths
