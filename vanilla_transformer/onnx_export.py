"""Exporting to ONNX (``torch.onnx.export(dynamo=True)``) and decoding with onnxruntime.

Encoder-only models (the classifier, the masked LM, the bare encoder) become one graph,
``model.onnx``, with a dynamic batch and sequence length. The encoder-decoder becomes the three graphs
of Optimum's seq2seq layout, so the work of §3.2.3's three attentions is done once where it can be:

- ``encoder_model.onnx``: ``input_ids``, ``attention_mask`` -> ``encoder_hidden_states``;
- ``decoder_model.onnx``, the first step: the start token and the encoder output -> ``logits`` of
  the next token, the decoder self-attention keys/values, and the encoder-decoder attention
  keys/values, projected from the encoder output once per input;
- ``decoder_with_past_model.onnx``, every later step: one token per row, the keys/values so far and
  the cross-attention keys/values -> ``logits`` and the self-attention keys/values grown by one.

Keys and values travel as one tensor per kind: (layers, batch, heads, length, d_k). :class:`OnnxSeq2Seq`
runs greedy decoding with the three sessions the way ``generate(num_beams=1)`` does (finished rows
continue with padding), so its tokens can be compared with ``generate()``'s.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

from .modeling_vanilla_transformer import CACHE_FIELD

ENCODER_ONLY_FILE = "model.onnx"
SEQ2SEQ_FILES = ("encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx")
OPSET = 18


class _EncoderOnly(nn.Module):
    """(input_ids, attention_mask) -> the model's first output (logits, or hidden states)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        output = self.model(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
        return output.logits if hasattr(output, "logits") else output.last_hidden_state


class _Encoder(nn.Module):
    def __init__(self, model: nn.Module):
        super().__init__()
        self.encoder = model.get_encoder()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def _stack(cache: DynamicCache) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.stack([layer.keys for layer in cache.layers]), torch.stack(
        [layer.values for layer in cache.layers]
    )


def _cache_from(keys: torch.Tensor, values: torch.Tensor, config) -> DynamicCache:
    cache = DynamicCache(config=config)
    for index in range(keys.shape[0]):
        cache.update(keys[index], values[index], index)
    return cache


def _decode_step(model, tokens, encoder_states, encoder_mask, cache: EncoderDecoderCache):
    """One decoder call of the seq2seq model on ``tokens`` (B, 1), growing ``cache``."""
    return model(
        attention_mask=encoder_mask,
        encoder_outputs=(encoder_states,),
        decoder_input_ids=tokens,
        cache=cache,
        use_cache=True,
        return_dict=True,
    )


class _FirstDecoderStep(nn.Module):
    """Start tokens (B, 1) and the encoder output -> next-token logits (B, V), self K/V, cross K/V."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, decoder_input_ids, encoder_hidden_states, encoder_attention_mask):
        config = self.model.config
        cache = EncoderDecoderCache(DynamicCache(config=config), DynamicCache(config=config))
        output = _decode_step(
            self.model, decoder_input_ids, encoder_hidden_states, encoder_attention_mask, cache
        )
        return (
            output.logits[:, -1],
            *_stack(getattr(output, CACHE_FIELD).self_attention_cache),
            *_stack(getattr(output, CACHE_FIELD).cross_attention_cache),
        )


class _DecoderStepWithPast(nn.Module):
    """One token per row (B, 1), the self K/V so far and the cross K/V -> logits (B, V), grown self K/V."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(
        self, decoder_input_ids, encoder_attention_mask, past_keys, past_values, cross_keys, cross_values
    ):
        config = self.model.config
        cache = EncoderDecoderCache(
            _cache_from(past_keys, past_values, config), _cache_from(cross_keys, cross_values, config)
        )
        for index in range(cross_keys.shape[0]):
            cache.is_updated[index] = True  # the cross keys/values are given: never re-projected
        # Only the cross-attention reads the encoder output, and it reads it from the cache.
        placeholder = cross_keys.new_zeros(cross_keys.shape[1], cross_keys.shape[3], config.d_model)
        output = _decode_step(self.model, decoder_input_ids, placeholder, encoder_attention_mask, cache)
        return (output.logits[:, -1], *_stack(getattr(output, CACHE_FIELD).self_attention_cache))


def _export(module: nn.Module, inputs: tuple, path: Path, names: list[str], outputs: list[str], shapes: dict):
    program = torch.onnx.export(
        module.eval(),
        inputs,
        input_names=names,
        output_names=outputs,
        dynamic_shapes=shapes,
        opset_version=OPSET,
        dynamo=True,
        external_data=False,
    )
    program.save(str(path))
    return path


def export_onnx(model, folder: str | Path, tokenizer=None) -> list[Path]:
    """Export ``model`` into ``folder`` (plus its config, generation config and ``tokenizer``).

    Returns the graph files written: ``model.onnx`` for encoder-only models, the three seq2seq graphs
    (see the module docstring) for the encoder-decoder. The model is switched to eval mode and fp32 in
    place; attention is traced as the model is configured (SDPA by default). Raises ``ValueError`` for
    the decoder-only model.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model = model.eval().float()
    config = model.config
    if config.is_decoder and not config.is_encoder_decoder:
        raise ValueError(
            "ONNX export covers encoder-only and encoder-decoder models; this one is decoder-only."
        )
    batch, source = torch.export.Dim("batch", min=1), torch.export.Dim("source_length", min=1)
    ids = torch.full((2, 7), 5, dtype=torch.long)
    mask = torch.ones_like(ids)
    with torch.no_grad():
        if not config.is_encoder_decoder:
            path = folder / ENCODER_ONLY_FILE
            shapes = {"input_ids": {0: batch, 1: source}, "attention_mask": {0: batch, 1: source}}
            files = [
                _export(
                    _EncoderOnly(model),
                    (ids, mask),
                    path,
                    ["input_ids", "attention_mask"],
                    ["logits"],
                    shapes,
                )
            ]
        else:
            files = _export_seq2seq(model, folder, ids, mask, batch, source)
    config.save_pretrained(folder)
    if getattr(model, "generation_config", None) is not None and config.is_encoder_decoder:
        model.generation_config.save_pretrained(folder)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    return files


def _export_seq2seq(model, folder: Path, ids, mask, batch, source) -> list[Path]:
    past = torch.export.Dim("past_length", min=1)
    encoder_path, first_path, later_path = (folder / name for name in SEQ2SEQ_FILES)
    encoder_shapes = {"input_ids": {0: batch, 1: source}, "attention_mask": {0: batch, 1: source}}
    _export(
        _Encoder(model),
        (ids, mask),
        encoder_path,
        ["input_ids", "attention_mask"],
        ["encoder_hidden_states"],
        encoder_shapes,
    )

    start = torch.full((ids.shape[0], 1), model.config.decoder_start_token_id, dtype=torch.long)
    encoded = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
    first_shapes = {
        "decoder_input_ids": {0: batch},
        "encoder_hidden_states": {0: batch, 1: source},
        "encoder_attention_mask": {0: batch, 1: source},
    }
    kv = ["present_keys", "present_values"]
    cross = ["cross_keys", "cross_values"]
    _export(
        _FirstDecoderStep(model),
        (start, encoded, mask),
        first_path,
        list(first_shapes),
        ["logits", *kv, *cross],
        first_shapes,
    )

    _, keys, values, cross_keys, cross_values = _FirstDecoderStep(model)(start, encoded, mask)
    step = torch.full_like(start, 5)
    later_shapes = {
        "decoder_input_ids": {0: batch},
        "encoder_attention_mask": {0: batch, 1: source},
        "past_keys": {1: batch, 3: past},
        "past_values": {1: batch, 3: past},
        "cross_keys": {1: batch, 3: source},
        "cross_values": {1: batch, 3: source},
    }
    # Trace with two past positions so that the past length is not specialised to 1.
    keys, values = torch.cat([keys, keys], dim=3), torch.cat([values, values], dim=3)
    _export(
        _DecoderStepWithPast(model),
        (step, mask, keys, values, cross_keys, cross_values),
        later_path,
        list(later_shapes),
        ["logits", *kv],
        later_shapes,
    )
    return [encoder_path, first_path, later_path]


class OnnxSeq2Seq:
    """Greedy decoding with the three exported graphs in onnxruntime (numpy in, numpy out)."""

    def __init__(self, folder: str | Path, providers: list[str] | None = None):
        import onnxruntime

        from .configuration_vanilla_transformer import VanillaTransformerConfig

        folder = Path(folder)
        missing = [name for name in SEQ2SEQ_FILES if not (folder / name).is_file()]
        if missing:
            raise FileNotFoundError(f"{folder} lacks {', '.join(missing)}; export it with export_onnx first.")
        providers = providers or ["CPUExecutionProvider"]
        self.encoder, self.first, self.later = (
            onnxruntime.InferenceSession(str(folder / name), providers=providers) for name in SEQ2SEQ_FILES
        )
        self.config = VanillaTransformerConfig.from_pretrained(folder)  # the package's class: no folder code

    def generate(
        self, input_ids: np.ndarray, attention_mask: np.ndarray, max_new_tokens: int, min_new_tokens: int = 0
    ) -> np.ndarray:
        """Greedy tokens (B, 1 + up to max_new_tokens), starting with the decoder start token; rows that
        produced EOS continue with padding, and decoding stops once every row has. As ``generate()``'s
        ``min_new_tokens``, EOS cannot be chosen before ``min_new_tokens`` tokens."""
        input_ids, attention_mask = input_ids.astype(np.int64), attention_mask.astype(np.int64)
        (encoded,) = self.encoder.run(None, {"input_ids": input_ids, "attention_mask": attention_mask})
        tokens = np.full((input_ids.shape[0], 1), self.config.decoder_start_token_id, dtype=np.int64)
        logits, keys, values, cross_keys, cross_values = self.first.run(
            None,
            {
                "decoder_input_ids": tokens,
                "encoder_hidden_states": encoded,
                "encoder_attention_mask": attention_mask,
            },
        )
        finished = np.zeros(input_ids.shape[0], dtype=bool)
        eos, pad = self.config.eos_token_id, self.config.pad_token_id
        for step in range(max_new_tokens):
            if step < min_new_tokens:
                logits[:, eos] = -np.inf
            next_tokens = np.where(finished, pad, logits.argmax(-1))
            tokens = np.concatenate([tokens, next_tokens[:, None]], axis=1)
            finished |= next_tokens == eos
            if finished.all() or tokens.shape[1] > max_new_tokens:
                break
            logits, keys, values = self.later.run(
                None,
                {
                    "decoder_input_ids": next_tokens[:, None],
                    "encoder_attention_mask": attention_mask,
                    "past_keys": keys,
                    "past_values": values,
                    "cross_keys": cross_keys,
                    "cross_values": cross_values,
                },
            )
        return tokens


__all__ = ["export_onnx", "OnnxSeq2Seq", "ENCODER_ONLY_FILE", "SEQ2SEQ_FILES"]
