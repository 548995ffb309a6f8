"""Exporting a translation model to CTranslate2, the C++ engine Marian / OPUS-MT models are served with.

The encoder-decoder of §3 is CTranslate2's ``TransformerSpec``: each of our parameters has a place in
it (``q_proj``/``k_proj``/``v_proj`` fused into one projection for self-attention, into query and
key-value projections for encoder-decoder attention; ``fc1``/``fc2``; the sub-layer LayerNorms; the
final LayerNorms of a pre-LN stack; ``lm_head`` as the output projection). Post-LN (§3.1) and pre-LN,
ReLU (Eq. 2) or the GELU/SiLU variants, the §3.4 sqrt(d_model) scale, shared and tied embeddings and
attention without biases are all expressible. CTranslate2 stores equal tensors once, so the shared
embedding and the tied pre-softmax matrix stay one matrix in ``model.bin``.

Where the two conventions differ, the export makes CTranslate2 compute what ``generate()`` computes:

- **Positions (§3.5).** When no table is stored, CTranslate2 builds tensor2tensor's sinusoid: the
  sines in the first half of the features and the cosines in the second (we interleave them), the
  frequencies spaced by log(10000) / (d/2 - 1) (we use 2i/d), and positions counted from 1 (ours
  from 0). So the export always stores an explicit table, ``position_encodings/encodings``, of
  ``config.max_position_embeddings`` rows: §3.5's sinusoids for positions 0, 1, ... (computed by the
  model's own ``sinusoidal_position_encoding``), or the learned position embeddings (Table 3 row E).
  CTranslate2 adds row ``t`` to the ``t``-th source token and row ``step`` to the decoder input of
  step ``step`` (0 for the start token), which is where our encoder and decoder count from. CTranslate2
  cannot read beyond the table (our sinusoids extrapolate), so :class:`CTranslate2Translator` cuts longer
  sources to it, with the warning of every engine (``long_inputs``), and stops decoding at its last row.
- **Start and end tokens.** Decoding starts from ``config.decoder_start_token_id`` (BOS by default),
  written as ``decoder_start_token`` into CTranslate2's ``config.json``, and ends at
  ``config.eos_token_id``. The source side is given exactly the tokens our tokenizer produces, ``</s>``
  included, so ``add_source_bos`` and ``add_source_eos`` are off (as in CTranslate2's conversion of
  Hugging Face's Marian models).
- **Minimum length.** ``translate_batch`` forbids the end token at the first step by default
  (``min_decoding_length=1``); ``generate()`` does not, so :func:`translate_ctranslate2` passes 0.

The output folder holds ``model.bin``, CTranslate2's ``config.json``, ``shared_vocabulary.json`` (the
tokenizer's tokens in id order), the tokenizer's own files and our ``generation_config.json`` (the §6.1
decoding defaults that :func:`translate_ctranslate2` reads), and the marker of an export
(``outputs.MARKER``), by which ``force`` recognises an earlier export it may replace.

A folder the export cannot read (another architecture, missing or damaged weights, a tokenizer larger
than the model's vocabulary) is refused before anything is converted, with the file or field named.

CTranslate2 is optional: ``pip install "vanilla-transformer[ctranslate2]"``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from .long_inputs import CutLines, encode_within, reading_limit, report_cut
from .modeling_vanilla_transformer import (
    MAX_NEW_TOKENS_OVER_SOURCE,
    PAPER_LENGTH_PENALTY,
    PAPER_NUM_BEAMS,
    UNSET_MAX_LENGTH,
)
from .outputs import check_folder_output, folder_output

INSTALL_HINT = 'pip install "vanilla-transformer[ctranslate2]"'
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
# Our config's activation names -> CTranslate2's Activation enum member names.
ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "gelu_new": "GELUTanh", "silu": "SWISH"}
# §6.1 decoding, used when the exported folder has no generation config.
PAPER_DECODING = {
    "num_beams": PAPER_NUM_BEAMS,
    "length_penalty": PAPER_LENGTH_PENALTY,
    "max_new_tokens_over_source": MAX_NEW_TOKENS_OVER_SOURCE,
}


def _import_ctranslate2():
    try:
        import ctranslate2
    except ImportError as error:
        raise ImportError(
            f"The CTranslate2 export needs the `ctranslate2` package: {INSTALL_HINT}"
        ) from error
    return ctranslate2


# ------------------------------------------------------------------------------------------------
# Export
# ------------------------------------------------------------------------------------------------


def export_ctranslate2(
    model_dir: str | Path,
    output_dir: str | Path,
    quantization: str | None = "float32",
    force: bool = False,
    reduce_range: bool = True,
    check: Callable[[Path], None] | None = None,
) -> Path:
    """Convert a saved translation model folder (weights, config, tokenizer) into a CTranslate2 model.

    Args:
        model_dir: a folder saved from ``VanillaTransformerForConditionalGeneration`` with its tokenizer.
        output_dir: the CTranslate2 model folder to write.
        quantization: the type the weights are stored in: ``"float32"``, ``"float16"``, ``"bfloat16"``,
            ``"int8"``, ``"int8_float32"``, ``"int8_float16"``, ``"int8_bfloat16"``, ``"int16"``, or None
            to keep the saved dtype. CTranslate2 can still pick another compute type when loading.
        force: replace an earlier export in ``output_dir`` (recognised by the marker it leaves there, and
            holding nothing else). A folder holding a model, a training run or anything else, or one that is
            ``model_dir`` or holds it, is never replaced (``outputs.check_folder_output``). The export is
            written beside ``output_dir`` and renamed into place when complete.
        reduce_range: with an int8 ``quantization``, store weights in 7 bits (-63..63 per row, as PyTorch's
            ``reduce_range``) instead of CTranslate2's 8. On x86 CPUs without VNNI (AVX2 only) CTranslate2
            multiplies unsigned 8-bit activations by signed 8-bit weights with instructions that add pairs of
            products into saturating 16-bit sums; full-range weights overflow them and change most
            translations, where 7-bit ones mostly agree with float32's (measured: docs/results.md). The cost
            is one bit of weight precision everywhere, GPUs included (their int8 products do not
            saturate). ``False`` keeps CTranslate2's own 8-bit weights: for a model served only on GPUs or on
            CPUs with VNNI (AVX512-VNNI, AVX-VNNI, AMX).
        check: called with the complete export, still in its staging folder, before it is renamed into
            ``output_dir`` (the ``export-ct2`` command's parity check, ``parity/``, writes its report there);
            an exception it raises leaves ``output_dir`` as it was.

    Returns:
        ``output_dir``.

    Raises:
        ImportError: ``ctranslate2`` is not installed.
        FileNotFoundError: ``model_dir`` does not exist or has no ``config.json``, weights or tokenizer.
        FileExistsError: ``output_dir`` holds an earlier export and ``force`` is not set.
        ValueError: the folder is not a translation model of this package (another architecture's
            ``model_type``, a classifier), its weights are damaged, its tokenizer has more tokens than
            ``vocab_size``, or a setting CTranslate2 cannot express; or ``output_dir`` is never replaced (an
            input, a model, a run, another command's output, a folder holding files the export did not write).
    """
    ctranslate2 = _import_ctranslate2()
    model_dir, output_dir = Path(model_dir), Path(output_dir)
    check_folder_output(output_dir, "export-ct2", [model_dir], force)  # before anything is read
    check_translation_folder(model_dir)
    if quantization is not None and quantization not in ctranslate2.specs.model_spec.ACCEPTED_MODEL_TYPES:
        choices = ", ".join(ctranslate2.specs.model_spec.ACCEPTED_MODEL_TYPES)
        raise ValueError(f"Unknown quantization {quantization!r}; choose one of {choices} (or None).")
    with folder_output(output_dir, "export-ct2", [model_dir], force) as staging:
        _convert(ctranslate2, model_dir, staging, quantization, reduce_range)
        if check is not None:
            check(staging)
    return output_dir


def _convert(ctranslate2, model_dir: Path, output_dir: Path, quantization: str | None, reduce_range: bool):
    """Write the CTranslate2 model of ``model_dir`` into the new, empty folder ``output_dir``."""
    from transformers import AutoTokenizer

    from .loading import load_saved_model
    from .modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration

    model = load_saved_model(model_dir, dtype=torch.float32).eval()
    if not isinstance(model, VanillaTransformerForConditionalGeneration):
        raise ValueError(
            f"{model_dir} holds a {type(model).__name__}; the CTranslate2 export needs a translation model "
            "(VanillaTransformerForConditionalGeneration)."
        )
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    vocabulary = _vocabulary(tokenizer, model.config.vocab_size)

    # CTranslate2 needs an unknown token; every source token comes from this vocabulary, so it is never used.
    unk_token = (
        tokenizer.unk_token if tokenizer.unk_token in vocabulary else vocabulary[model.config.pad_token_id]
    )

    class VanillaTransformerConverter(ctranslate2.converters.Converter):
        def _load(self):
            spec = transformer_spec(model, vocabulary, unk_token)
            if reduce_range and quantization is not None and quantization.startswith("int8"):
                _store_int8_weights_in_seven_bits(spec)
            return spec

    with torch.no_grad():  # force: convert() replaces the (empty) staging folder it is given
        VanillaTransformerConverter().convert(str(output_dir), quantization=quantization, force=True)
    # convert() empties the folder first, so the tokenizer and decoding defaults go in afterwards.
    tokenizer.save_pretrained(output_dir)
    model.generation_config.save_pretrained(output_dir)


def _store_int8_weights_in_seven_bits(spec) -> None:
    """Make ``spec.optimize`` (which CTranslate2's converter calls to quantize) write int8 weights in the
    range -63..63: each row quantized from its float values with the scale 63 / max|row| (see
    ``export_ctranslate2``'s ``reduce_range``). CTranslate2 scales the float arrays in place while it
    quantizes, so the floats are copied first; weights it leaves unquantized are untouched."""
    import numpy as np
    from ctranslate2.specs.model_spec import NumpyVariable, Variable, visit_spec

    floats: dict[tuple[int, str], np.ndarray] = {}

    def keep_floats(layer, name, value):
        key = name.split("/")[-1]
        if isinstance(value, Variable) and not value.is_scalar() and hasattr(layer, f"{key}_scale"):
            floats[id(layer), key] = value.to("float32").numpy().copy()

    def requantize(layer, name, value):
        key = name.split("/")[-1]
        weights = floats.get((id(layer), key))
        if weights is None or not isinstance(value, Variable) or value.dtype != "int8":
            return
        rows = weights.reshape(weights.shape[0], -1)
        amax = np.abs(rows).max(axis=1)
        amax[amax == 0] = 63.0
        scale = (63.0 / amax).astype(np.float32)
        quantized = np.rint(rows * scale[:, None]).astype(np.int8).reshape(weights.shape)
        setattr(layer, key, NumpyVariable(quantized))
        setattr(layer, f"{key}_scale", NumpyVariable(scale))

    class SevenBitSpec(type(spec)):  # the spec's own class, with quantization followed by the 7-bit pass
        def optimize(self, quantization=None):
            visit_spec(self, keep_floats)
            super().optimize(quantization)
            visit_spec(self, requantize)

    spec.__class__ = SevenBitSpec


def check_translation_folder(model_dir: Path) -> None:
    """Fail before loading anything when the folder cannot be a saved translation model with a tokenizer:
    the checks of every command (``loading.check_model_folder``), then the export's own."""
    from .loading import check_model_folder

    config = check_model_folder(model_dir, needs_tokenizer=True)
    if not config.is_encoder_decoder:
        raise ValueError(
            f"{model_dir} holds a single-stack model (is_encoder_decoder=False); the CTranslate2 export needs "
            "a translation model (VanillaTransformerForConditionalGeneration)."
        )
    if not any((model_dir / name).is_file() for name in TOKENIZER_FILES):
        raise FileNotFoundError(
            f"{model_dir} has no tokenizer ({' or '.join(TOKENIZER_FILES)}); CTranslate2 needs its vocabulary. "
            "Save it next to the model with tokenizer.save_pretrained(folder)."
        )


def _vocabulary(tokenizer, vocab_size: int) -> list[str]:
    """The tokenizer's tokens in id order, one per row of the embedding matrix (``check_translation_folder`` has
    refused a tokenizer with more tokens than ``vocab_size``)."""
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    # Rows no token maps to (a vocabulary padded to a round size) still need a unique name.
    tokens = [token if token is not None else f"<unused_{i}>" for i, token in enumerate(tokens)]
    tokens += [f"<unused_{i}>" for i in range(len(tokens), vocab_size)]
    if len(set(tokens)) != len(tokens):
        raise ValueError("The tokenizer maps two ids to the same token; CTranslate2 needs unique tokens.")
    return tokens


def transformer_spec(model, vocabulary: list[str], unk_token: str = "<unk>"):
    """A filled ``ctranslate2.specs.TransformerSpec`` holding ``model``'s weights (see the module docstring).

    ``model`` is a ``VanillaTransformerForConditionalGeneration``; ``vocabulary`` its tokens in id order.
    """
    _import_ctranslate2()
    from ctranslate2.specs import common_spec, transformer_spec

    config = model.config
    if config.d_k != config.d_v:
        raise ValueError(
            f"CTranslate2 needs equal query/key and value head widths; this model has d_k={config.d_k}, "
            f"d_v={config.d_v}."
        )
    if config.activation not in ACTIVATIONS:
        raise ValueError(
            f"`activation`={config.activation!r} has no CTranslate2 equivalent; supported: {sorted(ACTIVATIONS)}."
        )
    pre_norm = config.norm_position == "pre"
    shape = dict(
        num_heads=config.num_heads,
        pre_norm=pre_norm,
        activation=common_spec.Activation[ACTIVATIONS[config.activation]],
        # Only a head width other than d_model / h (Table 3 row B) needs saying.
        head_dim=config.d_k if config.d_k * config.num_heads != config.d_model else None,
    )
    spec = transformer_spec.TransformerSpec(
        transformer_spec.TransformerEncoderSpec(config.num_encoder_layers, **shape),
        transformer_spec.TransformerDecoderSpec(config.num_decoder_layers, **shape),
    )
    encoder, decoder = model.get_encoder(), model.get_decoder()
    _set_stack_inputs(spec.encoder, encoder, config, embeddings=spec.encoder.embeddings[0])
    _set_stack_inputs(spec.decoder, decoder, config, embeddings=spec.decoder.embeddings)
    for layer_spec, layer in zip(spec.encoder.layer, encoder.layers, strict=True):
        _set_attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_layer_norm)
        _set_ffn(layer_spec.ffn, layer.ffn, layer.final_layer_norm)
    for layer_spec, layer in zip(spec.decoder.layer, decoder.layers, strict=True):
        _set_attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_layer_norm)
        _set_attention(layer_spec.attention, layer.encoder_attn, layer.encoder_attn_layer_norm)
        _set_ffn(layer_spec.ffn, layer.ffn, layer.final_layer_norm)
    _set_linear(spec.decoder.projection, model.lm_head)  # the pre-softmax linear transformation (§3.4)

    spec.register_source_vocabulary(vocabulary)
    spec.register_target_vocabulary(vocabulary)
    spec.config.unk_token = unk_token
    spec.config.bos_token = _token(vocabulary, config.bos_token_id)
    spec.config.eos_token = _token(vocabulary, config.eos_token_id)
    spec.config.decoder_start_token = _token(vocabulary, config.decoder_start_token_id)
    spec.config.add_source_bos = False  # the tokenizer's own tokens are passed, </s> included
    spec.config.add_source_eos = False
    spec.config.layer_norm_epsilon = config.layer_norm_eps
    # Not read by CTranslate2; translate_ctranslate2 bounds sources and outputs by the position table.
    spec.config.add_attribute("max_position_embeddings", config.max_position_embeddings)
    return spec


def _token(vocabulary: list[str], token_id: int | None) -> str:
    if token_id is None:
        raise ValueError("CTranslate2 needs `bos_token_id`, `eos_token_id` and `decoder_start_token_id` set.")
    return vocabulary[token_id]


def _set_stack_inputs(spec, stack, config, embeddings) -> None:
    """Token embedding, its §3.4 scale, the explicit §3.5 position table and (pre-LN) the final LayerNorm."""
    embeddings.weight = stack.embed_tokens.weight.detach()
    spec.scale_embeddings = bool(config.scale_embedding)  # True: x sqrt(d_model), as our embedding does
    spec.position_encodings.encodings = _position_table(stack, config)
    if stack.layer_norm is not None:
        _set_layer_norm(spec.layer_norm, stack.layer_norm)


def _position_table(stack, config) -> torch.Tensor:
    """(max_position_embeddings, D): row p is what our stack adds at position p (from 0)."""
    from .modeling_vanilla_transformer import sinusoidal_position_encoding

    if config.position_encoding == "learned":
        return stack.embed_positions.weight.detach().float()
    positions = torch.arange(config.max_position_embeddings)
    return sinusoidal_position_encoding(positions, config.d_model)  # sin/cos interleaved, §3.5


def _set_attention(spec, attention, layer_norm) -> None:
    """Self-attention: one fused Q|K|V projection; encoder-decoder attention: Q, then fused K|V."""
    from ctranslate2.converters import utils
    from ctranslate2.specs import common_spec

    q, k, v = (common_spec.LinearSpec() for _ in range(3))
    _set_linear(q, attention.q_proj)
    _set_linear(k, attention.k_proj)
    _set_linear(v, attention.v_proj)
    if attention.is_cross_attention:
        utils.fuse_linear(spec.linear[0], [q])
        utils.fuse_linear(spec.linear[1], [k, v])
    else:
        utils.fuse_linear(spec.linear[0], [q, k, v])
    _set_linear(spec.linear[-1], attention.out_proj)
    _set_layer_norm(spec.layer_norm, layer_norm)


def _set_ffn(spec, ffn, layer_norm) -> None:
    _set_linear(spec.linear_0, ffn.fc1)
    _set_linear(spec.linear_1, ffn.fc2)
    _set_layer_norm(spec.layer_norm, layer_norm)


def _set_linear(spec, linear: torch.nn.Linear) -> None:
    spec.weight = linear.weight.detach()  # (out, in), the layout CTranslate2 expects
    if linear.bias is not None:
        spec.bias = linear.bias.detach()


def _set_layer_norm(spec, layer_norm: torch.nn.LayerNorm) -> None:
    spec.gamma = layer_norm.weight.detach()
    spec.beta = layer_norm.bias.detach()


# ------------------------------------------------------------------------------------------------
# Translation
# ------------------------------------------------------------------------------------------------


class CTranslate2Translator:
    """An exported CTranslate2 model loaded once (its tokenizer, decoding defaults and ``ctranslate2.Translator``),
    called on list after list of sentences, as ``translate`` does with a stream of input."""

    def __init__(self, ct2_dir: str | Path, device: str = "cpu", compute_type: str = "default"):
        ctranslate2 = _import_ctranslate2()
        from transformers import AutoTokenizer

        self.folder = Path(ct2_dir)
        if not (self.folder / "model.bin").is_file():
            raise FileNotFoundError(
                f"{self.folder} has no model.bin; export it with export_ctranslate2 first."
            )
        self.decoding = _decoding_defaults(self.folder)
        self.num_positions = json.loads((self.folder / "config.json").read_text(encoding="utf-8")).get(
            "max_position_embeddings", math.inf
        )
        self.tokenizer = AutoTokenizer.from_pretrained(self.folder)
        self.translator = ctranslate2.Translator(str(self.folder), device=device, compute_type=compute_type)

    def __call__(
        self,
        sentences: Sequence[str],
        beam_size: int | None = None,
        length_penalty: float | None = None,
        max_decoding_length: int | None = None,
        batch_size: int = 32,
        *,
        first_line: int = 1,
        cut_lines: CutLines | None = None,
    ) -> list[str]:
        """Detokenized translations of ``sentences`` in input order (arguments as :func:`translate_ctranslate2`).

        A sentence longer than the model reads (the exported position table or the tokenizer's
        ``model_max_length``, the smaller) is cut to it, as ``inference.translate`` cuts it: one warning
        names the sentences cut as lines, the first being line ``first_line``, and the limit; with
        ``cut_lines`` they are added to it instead, for the caller's one warning at the input's end."""
        decoding, tokenizer, num_positions = self.decoding, self.tokenizer, self.num_positions
        beam_size = decoding["num_beams"] if beam_size is None else beam_size
        length_penalty = decoding["length_penalty"] if length_penalty is None else length_penalty
        if not sentences:
            return []
        source_limit, limit_name = reading_limit(num_positions, tokenizer.model_max_length)
        source_ids, cut = encode_within(tokenizer, sentences, source_limit)
        report_cut(list(cut), first_line, source_limit, limit_name, cut_lines)
        sources = [tokenizer.convert_ids_to_tokens(row) for row in source_ids]
        order = sorted(range(len(sources)), key=lambda i: len(sources[i]), reverse=True)
        results = [""] * len(sources)
        for start in range(0, len(order), batch_size):
            indices = order[start : start + batch_size]
            batch = [sources[i] for i in indices]
            limit = max_decoding_length or decoding["max_new_tokens"]
            if limit is None:
                limit = max(len(tokens) for tokens in batch) + decoding["max_new_tokens_over_source"]
            outputs = self.translator.translate_batch(
                batch,
                beam_size=beam_size,
                length_penalty=length_penalty,
                max_decoding_length=min(limit, num_positions),  # the decoder reads one position per step
                min_decoding_length=0,  # generate() may end at the first step; CTranslate2's default forbids it
                max_input_length=0,  # sources are cut above, with the warning; none silently here
            )
            for index, output in zip(indices, outputs, strict=True):
                ids = tokenizer.convert_tokens_to_ids(output.hypotheses[0])
                results[index] = tokenizer.decode(ids, skip_special_tokens=True).strip()
        return results


def translate_ctranslate2(
    ct2_dir: str | Path,
    sentences: Sequence[str],
    beam_size: int | None = None,
    length_penalty: float | None = None,
    max_decoding_length: int | None = None,
    batch_size: int = 32,
    device: str = "cpu",
    compute_type: str = "default",
) -> list[str]:
    """Translate ``sentences`` with an exported CTranslate2 model; detokenized text in input order.

    Decoding defaults come from the exported generation config, §6.1's unless the model was saved with
    others: beam size 4, length penalty 0.6, and at most (longest source of the batch in tokens) + 50
    output tokens, as ``generate()`` bounds them. Sentences are batched by length, ``batch_size`` at a time.

    Args:
        ct2_dir: a folder written by :func:`export_ctranslate2`.
        sentences: raw text, one sentence each.
        beam_size: 1 is greedy decoding.
        length_penalty: alpha of the length normalisation score / length**alpha, the form transformers'
            beam search uses (both count ``</s>`` in the length; the model card's departures).
        max_decoding_length: at most this many output tokens (``</s>`` included), instead of source + 50.
        batch_size: sentences per ``translate_batch`` call.
        device: ``"cpu"``, ``"cuda"`` or ``"auto"``.
        compute_type: CTranslate2's compute type (``"default"`` keeps the exported one where supported).
    """
    translator = CTranslate2Translator(ct2_dir, device=device, compute_type=compute_type)
    return translator(sentences, beam_size, length_penalty, max_decoding_length, batch_size)


def _decoding_defaults(folder: Path) -> dict:
    """Beam size, length penalty and length bound as the exported generation config states them (§6.1's
    where it states none). ``max_new_tokens`` is a fixed bound where the config sets one, as in
    ``generate()``, else None (source length + ``max_new_tokens_over_source``)."""
    path = folder / "generation_config.json"
    saved = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    defaults = {
        key: default if saved.get(key) is None else saved[key] for key, default in PAPER_DECODING.items()
    }
    fixed = saved.get("max_new_tokens")
    if fixed is None and saved.get("max_length") not in (None, UNSET_MAX_LENGTH):
        fixed = saved["max_length"] - 1  # max_length counts the decoder start token
    return {**defaults, "max_new_tokens": fixed}


__all__ = [
    "export_ctranslate2",
    "check_translation_folder",
    "translate_ctranslate2",
    "CTranslate2Translator",
    "transformer_spec",
    "INSTALL_HINT",
]
