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

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

from .configuration_vanilla_transformer import check_token_ids
from .inference import ONE_LINE
from .long_inputs import CutLines, encode_within, reading_limit, report_cut
from .modeling_vanilla_transformer import CACHE_FIELD, MAX_NEW_TOKENS_OVER_SOURCE, UNSET_MAX_LENGTH

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
    """``generate()`` over the three exported graphs in onnxruntime (numpy in, numpy out): greedy decoding,
    or beam search with the model's saved settings (§6.1: beam 4, the length penalty, the length bound).

    The beam search is transformers' own (``GenerationMixin._beam_search``, transformers 5), written again in
    numpy step for step, so that its tokens are ``generate()``'s: at each step the ``2 * num_beams`` best
    continuations over all beams of a row by summed log-probability; those ending in ``</s>`` (or reaching the
    length bound) among the first ``num_beams`` become finished hypotheses scored by log-probability /
    length**``length_penalty`` (the length counting ``</s>`` and not the start token); the best ``num_beams``
    unfinished ones continue, the decoder's keys/values reordered to follow them. A row stops when
    ``early_stopping`` is set and it holds ``num_beams`` finished hypotheses, or (otherwise) when the best
    running beam cannot beat the worst finished one (transformers' heuristic). Why not ONNX Runtime's contrib
    ``BeamSearch`` operator: docs/serving.md.
    """

    def __init__(self, folder: str | Path, providers: list[str] | None = None):
        import onnxruntime
        from transformers import GenerationConfig

        from .configuration_vanilla_transformer import VanillaTransformerConfig

        folder = Path(folder)
        _check_seq2seq_export(folder)
        providers = providers or ["CPUExecutionProvider"]
        options = onnxruntime.SessionOptions()
        # Between two runs the search does its own work (top-k, reordering the keys/values): threads left
        # spinning for the next run would take the cores from it (docs/results.md, E8).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.encoder, self.first, self.later = (
            onnxruntime.InferenceSession(str(folder / name), options, providers=providers)
            for name in SEQ2SEQ_FILES
        )
        self.config = VanillaTransformerConfig.from_pretrained(folder)  # the package's class: no folder code
        saved = (folder / "generation_config.json").is_file()
        self.generation_config = GenerationConfig.from_pretrained(folder) if saved else None
        # The tokens generate() starts, ends and pads with: the generation config's where it names them.
        self.start_id = self._setting("decoder_start_token_id", None, self.config.decoder_start_token_id)
        self.eos_id = _one_token(self._setting("eos_token_id", None, self.config.eos_token_id), folder)
        self.pad_id = self._setting("pad_token_id", None, self.config.pad_token_id)
        _check_decoding(self.generation_config, folder)

    def _setting(self, name: str, value, default):
        if value is not None:
            return value
        saved = getattr(self.generation_config, name, None) if self.generation_config is not None else None
        return default if saved is None else saved

    def max_new_tokens(self, attention_mask: np.ndarray) -> int:
        """``generate()``'s default bound: the saved ``max_new_tokens`` (or ``max_length`` - 1) where set, else
        the longest source of the batch + ``max_new_tokens_over_source`` (§6.1's 50)."""
        config = self.generation_config
        if config is not None and config.max_new_tokens is not None:
            return config.max_new_tokens
        if config is not None and config.max_length not in (None, UNSET_MAX_LENGTH):
            return config.max_length - 1
        over = getattr(config, "max_new_tokens_over_source", None) if config is not None else None
        bound = int(attention_mask.sum(-1).max()) + (MAX_NEW_TOKENS_OVER_SOURCE if over is None else over)
        if self.config.position_encoding == "learned":  # as generate(): no longer than the decoder's table
            bound = min(bound, self.config.max_position_embeddings)
        return bound

    def generate(
        self,
        input_ids: np.ndarray,
        attention_mask: np.ndarray,
        max_new_tokens: int | None = None,
        min_new_tokens: int | None = None,
        num_beams: int | None = None,
        length_penalty: float | None = None,
        early_stopping: bool | str | None = None,
    ) -> np.ndarray:
        """Tokens (B, 1 + up to ``max_new_tokens``) starting with the decoder start token, as ``generate()``
        returns them. Unset arguments take the exported generation config's values (§6.1's where it has
        none). Greedy (``num_beams=1``): rows that produced EOS continue with padding, and decoding stops once
        every row has; EOS cannot be chosen before ``min_new_tokens`` tokens (nor before the saved
        ``min_length`` less the start token: generate() applies both). Beam search: the best hypothesis of
        each row, shorter ones padded. A bound past a learned position table is refused (generate() fails
        there); the default bound stops at it, as generate()'s does."""
        input_ids, attention_mask = input_ids.astype(np.int64), attention_mask.astype(np.int64)
        if max_new_tokens is None:
            max_new_tokens = self.max_new_tokens(attention_mask)
        table = self.config.max_position_embeddings
        if self.config.position_encoding == "learned" and max_new_tokens > table:
            raise ValueError(
                f"max_new_tokens {max_new_tokens}: the decoder's learned positions hold {table}, so a "
                f"translation has at most {table} tokens; bound it there."
            )
        min_new_tokens = max(
            self._setting("min_new_tokens", min_new_tokens, 0),
            (self._setting("min_length", None, 0) or 0) - 1,
        )
        num_beams = self._setting("num_beams", num_beams, 1)
        (encoded,) = self.encoder.run(None, {"input_ids": input_ids, "attention_mask": attention_mask})
        tokens = np.full((input_ids.shape[0], 1), self.start_id, dtype=np.int64)
        first = self.first.run(
            None,
            {
                "decoder_input_ids": tokens,
                "encoder_hidden_states": encoded,
                "encoder_attention_mask": attention_mask,
            },
        )
        if num_beams == 1:
            return self._greedy(tokens, attention_mask, first, max_new_tokens, min_new_tokens)
        return self._beam_search(
            tokens,
            attention_mask,
            first,
            max_new_tokens,
            min_new_tokens,
            num_beams,
            self._setting("length_penalty", length_penalty, 1.0),
            self._setting("early_stopping", early_stopping, False),
        )

    def _step(self, tokens, attention_mask, keys, values, cross_keys, cross_values):
        return self.later.run(
            None,
            {
                "decoder_input_ids": tokens,
                "encoder_attention_mask": attention_mask,
                "past_keys": keys,
                "past_values": values,
                "cross_keys": cross_keys,
                "cross_values": cross_values,
            },
        )

    def _greedy(self, tokens, attention_mask, first, max_new_tokens: int, min_new_tokens: int) -> np.ndarray:
        logits, keys, values, cross_keys, cross_values = first
        finished = np.zeros(tokens.shape[0], dtype=bool)
        eos, pad = self.eos_id, self.pad_id
        for step in range(max_new_tokens):
            if step < min_new_tokens:
                logits[:, eos] = -np.inf
            next_tokens = np.where(finished, pad, logits.argmax(-1))
            tokens = np.concatenate([tokens, next_tokens[:, None]], axis=1)
            finished |= next_tokens == eos
            if finished.all() or tokens.shape[1] > max_new_tokens:
                break
            logits, keys, values = self._step(
                next_tokens[:, None], attention_mask, keys, values, cross_keys, cross_values
            )
        return tokens

    def _beam_search(
        self,
        start,
        attention_mask,
        first,
        max_new_tokens: int,
        min_new_tokens: int,
        num_beams: int,
        length_penalty: float,
        early_stopping: bool | str,
    ) -> np.ndarray:
        """transformers' ``_beam_search`` (see the class docstring), one row of ``num_beams`` per input."""
        logits, keys, values, cross_keys, cross_values = first
        batch, beams, eos = start.shape[0], num_beams, self.eos_id
        max_length = 1 + max_new_tokens  # the start token counts, as generate()'s max_length does
        keep = 2 * beams  # continuations kept per row: enough that `beams` stay unfinished
        rows = np.arange(batch)[:, None]
        # Every beam starts as the first: the same logits and keys/values, repeated along the batch.
        logits = np.repeat(logits, beams, axis=0)
        keys, values = np.repeat(keys, beams, axis=1), np.repeat(values, beams, axis=1)
        cross_keys, cross_values = (
            np.repeat(cross_keys, beams, axis=1),
            np.repeat(cross_values, beams, axis=1),
        )
        mask = np.repeat(attention_mask, beams, axis=0)
        running = np.full((batch, beams, max_length), self.pad_id, dtype=np.int64)
        running[:, :, 0] = start
        running_scores = np.zeros((batch, beams), dtype=np.float32)
        running_scores[:, 1:] = -1e9  # only the first beam's continuations count at the first step
        finished = running.copy()
        finished_scores = np.full((batch, beams), -1e9, dtype=np.float32)
        finished_lengths = np.zeros((batch, beams), dtype=np.int64)
        is_finished = np.zeros((batch, beams), dtype=bool)
        improvable = np.ones((batch, 1), dtype=bool)
        top_beams = np.arange(keep) < beams  # only the first `beams` of the kept may finish
        length = 1
        while True:
            log_probs = _log_softmax(logits.astype(np.float32))
            if length - 1 < min_new_tokens:
                log_probs[:, eos] = -np.inf
            vocab = log_probs.shape[-1]
            scores = (log_probs.reshape(batch, beams, vocab) + running_scores[:, :, None]).reshape(batch, -1)
            candidates = _top_k(scores, keep)
            candidate_scores = np.take_along_axis(scores, candidates, axis=1)
            origin, token = candidates // vocab, candidates % vocab
            sequences = running[rows, origin]  # (batch, keep, max_length), a copy
            sequences[:, :, length] = token
            ends = (token == eos) | (length + 1 >= max_length)

            # The best `beams` continuations that did not end run on.
            going = candidate_scores + ends.astype(np.float32) * -1e9
            chosen = _top_k(going, beams)
            running = sequences[rows, chosen]
            running_scores = np.take_along_axis(going, chosen, axis=1)
            running_origin = np.take_along_axis(origin, chosen, axis=1)

            # Those that ended join the finished hypotheses, scored with the length penalty.
            just_finished = ends & top_beams[None, :]
            normalised = candidate_scores / np.float32(length**length_penalty)
            if early_stopping is True:
                normalised = normalised + is_finished.all(axis=1, keepdims=True) * np.float32(-1e9)
            normalised = normalised + (~improvable) * np.float32(-1e9) + (~just_finished) * np.float32(-1e9)
            merged_scores = np.concatenate([finished_scores, normalised], axis=1)
            best = _top_k(merged_scores, beams)
            finished = np.concatenate([finished, sequences], axis=1)[rows, best]
            finished_scores = np.take_along_axis(merged_scores, best, axis=1)
            finished_lengths = np.take_along_axis(
                np.concatenate([finished_lengths, np.full((batch, keep), length + 1)], axis=1), best, axis=1
            )
            is_finished = np.take_along_axis(
                np.concatenate([is_finished, just_finished], axis=1), best, axis=1
            )

            length += 1
            if early_stopping == "never" and length_penalty > 0.0:
                hopeful_length = max_length - 1
            else:
                hopeful_length = length - 1
            best_running = running_scores[:, :1] / np.float32(hopeful_length**length_penalty)
            worst_finished = np.where(
                is_finished, finished_scores.min(axis=1, keepdims=True), np.float32(-1e9)
            )
            improvable &= (best_running > worst_finished).any(axis=1, keepdims=True)
            open_beams = not (is_finished.all() and early_stopping is True)
            if not (improvable.any() and open_beams and not ends.all()):
                break
            # The keys/values follow the beams they continue.
            follow = (rows * beams + running_origin).reshape(-1)
            keys, values = keys[:, follow], values[:, follow]
            logits, keys, values = self._step(
                running[:, :, length - 1].reshape(-1, 1), mask, keys, values, cross_keys, cross_values
            )
        output = finished[:, 0, : finished_lengths[:, 0].max()]
        positions = np.arange(output.shape[1])[None, :]
        return np.where(positions < finished_lengths[:, :1], output, self.pad_id)


class OnnxTranslator:
    """An exported translation model in onnxruntime, loaded once with its tokenizer: ``lines -> translations``
    (detokenized, in input order), decoded as ``generate()`` decodes with the saved settings unless
    ``num_beams`` / ``length_penalty`` say otherwise. The engine of ``translate --engine onnx``.

    A line longer than the model reads is cut to it, as ``inference.translate`` cuts it (``long_inputs``):
    one warning names the lines cut, the first being line ``first_line``; with ``cut_lines`` they are added
    to it instead, for the caller's one warning at the input's end. A blank line translates to ``""``."""

    def __init__(self, folder: str | Path, providers: list[str] | None = None):
        from transformers import AutoTokenizer

        self.runner = OnnxSeq2Seq(folder, providers)
        self.tokenizer = AutoTokenizer.from_pretrained(folder)

    def __call__(
        self,
        sentences: Sequence[str],
        num_beams: int | None = None,
        length_penalty: float | None = None,
        batch_size: int = 32,
        *,
        first_line: int = 1,
        cut_lines: CutLines | None = None,
    ) -> list[str]:
        tokenizer, config = self.tokenizer, self.runner.config
        results = [""] * len(sentences)
        order = [index for index in range(len(sentences)) if sentences[index].strip()]
        limit, limit_name = reading_limit(config.max_position_embeddings, tokenizer.model_max_length)
        ids, cut = encode_within(tokenizer, [sentences[index] for index in order], limit)
        report_cut(sorted(order[k] for k in cut), first_line, limit, limit_name, cut_lines)
        # Batches as translate() makes them (the longest text first), so that each line is decoded beside
        # the same others, under the same length bound, as with the PyTorch engine.
        by_length = sorted(range(len(order)), key=lambda k: len(sentences[order[k]]), reverse=True)
        for start in range(0, len(by_length), batch_size):
            chosen = by_length[start : start + batch_size]
            batch = tokenizer.pad({"input_ids": [ids[k] for k in chosen]}, return_tensors="np")
            check_token_ids(torch.from_numpy(batch["input_ids"]), config.vocab_size, "input_ids")
            tokens = self.runner.generate(
                batch["input_ids"],
                batch["attention_mask"],
                num_beams=num_beams,
                length_penalty=length_penalty,
            )
            texts = tokenizer.batch_decode(tokens, skip_special_tokens=True)
            for k, text in zip(chosen, texts, strict=True):
                results[order[k]] = text.translate(ONE_LINE).strip()
        return results


def _check_seq2seq_export(folder: Path) -> None:
    """Refuse, in one line saying what it is, a folder that is not an ONNX export of a translation model."""
    from .loading import CTRANSLATE2_FILE, WEIGHTS

    missing = [name for name in SEQ2SEQ_FILES if not (folder / name).is_file()]
    if not missing:
        return
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} does not exist.")
    if (folder / CTRANSLATE2_FILE).is_file():
        raise ValueError(
            f"{folder} is a CTranslate2 export ({CTRANSLATE2_FILE}), not an ONNX one: translate it with "
            "--engine ctranslate2."
        )
    if (folder / WEIGHTS).is_file():
        raise ValueError(
            f"{folder} is a model folder, not an ONNX export: translate it with --engine pytorch, or export it "
            f"first (vanilla-transformer export-onnx --model {folder} --output DIR)."
        )
    what = (
        f"an ONNX export of an encoder-only model ({ENCODER_ONLY_FILE}), which does not translate: it"
        if (folder / ENCODER_ONLY_FILE).is_file()
        else "not an ONNX export of a translation model: it"
    )
    raise FileNotFoundError(
        f"{folder} is {what} lacks {', '.join(missing)}. Export a translation model folder with "
        "vanilla-transformer export-onnx (or export_onnx)."
    )


# generate() settings the ONNX decoding does not apply, with the value at which they change nothing.
NEUTRAL_SETTINGS = {
    "do_sample": False,
    "num_return_sequences": 1,
    "num_beam_groups": 1,
    "diversity_penalty": 0.0,
    "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0,
    "bad_words_ids": None,
    "force_words_ids": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "exponential_decay_length_penalty": None,
    "sequence_bias": None,
    "stop_strings": None,
}


def _check_decoding(config, folder: Path) -> None:
    """Refuse an export whose saved generation config asks generate() for more than this decoding does
    (sampling, repetition penalties, forced or banned tokens, ...): its tokens would not be generate()'s."""
    if config is None:
        return
    for name, neutral in NEUTRAL_SETTINGS.items():
        value = getattr(config, name, None)
        if value is None or value == neutral or (neutral is None and not value):
            continue
        raise ValueError(
            f"{folder / 'generation_config.json'} sets {name}={value!r}, which the ONNX decoding does not "
            "apply (it decodes greedily or with beam search as generate() does, nothing more): its output "
            "would not be the model's. Remove the setting, or serve the model with --engine pytorch."
        )


def _one_token(value, folder: Path) -> int:
    """The one end-of-sequence id (a list of one, as some configs write it)."""
    if isinstance(value, list | tuple):
        if len(value) != 1:
            raise ValueError(
                f"{folder}: the generation config names {len(value)} end-of-sequence tokens {list(value)}; the "
                "ONNX decoding ends on one (the model's </s>)."
            )
        value = value[0]
    return int(value)


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest scores of each row, largest first: ``torch.topk`` itself (on the array's
    memory, no copy), so that ties fall as in ``generate()``, and several times faster than numpy's
    partition over a row of beams x vocabulary."""
    return torch.topk(torch.from_numpy(np.ascontiguousarray(scores)), k).indices.numpy()


__all__ = ["export_onnx", "OnnxSeq2Seq", "OnnxTranslator", "ENCODER_ONLY_FILE", "SEQ2SEQ_FILES"]
