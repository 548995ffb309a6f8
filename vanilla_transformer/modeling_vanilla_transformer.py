"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017), section 3.

Building blocks come before what is built from them, so the file reads bottom-up through §3:
positional encoding (§3.5), embeddings (§3.4), scaled dot-product and multi-head attention (§3.2.1,
Eq. 1; §3.2.2), the position-wise feed-forward network (§3.3, Eq. 2), encoder and decoder layers
(§3.1, §3.2.3, with §5.4's residual dropout), the two stacks (§3.1), and then the model classes:
weight initialisation and tying (§3.4), the bare model (Figure 1), the loss (§5.4 label smoothing)
and the heads with §6.1's decoding defaults. Nothing here is an inference-only speed-up: those live
in ``vanilla_transformer.inference``, switched on by the user.

Shape legend used in comments:
    B  batch size              T  target / query length        S  source / key length
    D  d_model                 H  number of heads (h)          Dk, Dv  per-head widths d_k, d_v
    F  d_ff                    V  vocabulary size              P  positions already in the cache

Masks: every public ``attention_mask`` is Hugging Face's 2-D ``(B, S)`` padding mask with
**1 = attend, 0 = padding**. Each stack converts it once per forward (``transformers.masking_utils``)
into the form the selected attention function wants, and hands the same mask to every layer.

This file is copied next to saved checkpoints (remote code): it imports only torch, public
transformers API and its siblings (the configuration and the translation and classification pipelines).
"""

from __future__ import annotations

import copy
import inspect
import json
import math
import os
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.generation import GenerationConfig, GenerationMixin
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    CausalLMOutputWithPast,
    MaskedLMOutput,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
    SequenceClassifierOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, PreTrainedModel
from transformers.utils import can_return_tuple, logging

# The pipelines are imported (not only named in config.json) because transformers' remote-code loader
# fetches exactly the modules the model file imports: a model loaded with trust_remote_code and saved
# again must still carry its pipeline files, and its save_pretrained must be able to name them.
from .classification_pipeline import custom_pipelines_entry as classification_pipelines_entry
from .configuration_vanilla_transformer import VanillaTransformerConfig, check_token_ids
from .translation_pipeline import custom_pipelines_entry

logger = logging.get_logger(__name__)

# transformers 5.24 renamed the key/value cache from `past_key_values` to `cache`: the argument that
# `generate()` passes to `forward`, the argument of the mask builders and the field of the output
# classes. The forwards below take either name, and outputs and masks use the installed version's,
# so this one file (also copied next to saved checkpoints) decodes the same on 5.17 and the newest 5.x.
CACHE_FIELD = "cache" if "cache" in Seq2SeqLMOutput.__dataclass_fields__ else "past_key_values"
_MASK_CACHE_ARGUMENT = (
    "cache" if "cache" in inspect.signature(create_causal_mask).parameters else "past_key_values"
)


def _one_cache(cache: Cache | None, past_key_values: Cache | None) -> Cache | None:
    """The cache a caller passed, under the new name (``cache``) or the old one (``past_key_values``).

    Where the installed transformers has renamed it, the old name warns as transformers' own models do."""
    if past_key_values is None:
        return cache
    if cache is not None and cache is not past_key_values:
        raise ValueError("Pass the key/value cache once, as `cache` (or `past_key_values`), not as both.")
    if CACHE_FIELD == "cache":
        warnings.warn(
            "`past_key_values` is deprecated in this transformers version: pass the key/value cache as `cache`.",
            FutureWarning,
            stacklevel=3,
        )
    return past_key_values


# ------------------------------------------------------------------------------------------------
# §5.4 Dropout
# ------------------------------------------------------------------------------------------------


def apply_dropout(module: nn.Module, x: torch.Tensor, p: float) -> torch.Tensor:
    """§5.4 dropout with rate ``p`` while ``module`` trains, the identity otherwise: ``F.dropout``, or the
    ``dropout_kernel`` a training run gave the module (``fast_dropout.use_fast_dropout``: the same contract
    with a faster mask on CPUs where torch draws it element by element). Outside training nothing is looked
    up: decoding steps pay no more than ``F.dropout``'s identity."""
    if not module.training:
        return x
    kernel = module.__dict__.get("dropout_kernel", F.dropout)  # a plain attribute: no nn.Module lookup
    return kernel(x, p=p, training=True)


# ------------------------------------------------------------------------------------------------
# §3.5 Positional encoding
# ------------------------------------------------------------------------------------------------


def sinusoidal_position_encoding(position_ids: torch.Tensor, d_model: int) -> torch.Tensor:
    """§3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)).

    Computed on the fly (nothing is stored in checkpoints) for any integer positions.

    Args:
        position_ids: integer tensor of any shape ``(...)``.
        d_model: width of the encoding.

    Returns:
        float32 tensor of shape ``(..., d_model)``; even features are sines, odd features cosines.
    """
    two_i = torch.arange(0, d_model, 2, device=position_ids.device, dtype=torch.float32)  # (ceil(D/2),)
    inv_freq = torch.exp(two_i * (-math.log(10000.0) / d_model))
    angles = position_ids.to(torch.float32).unsqueeze(-1) * inv_freq  # (..., ceil(D/2))
    encoding = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)  # (..., 2*ceil(D/2)) interleaved
    return encoding[..., :d_model]


def host_reads_free(tensor: torch.Tensor) -> bool:
    """Whether reading ``tensor``'s values into Python costs no device synchronisation: a CPU tensor. The
    forward checks the values of its inputs (token ids, positions, labels) where this holds, and on an
    accelerator only under the opt-in ``check_inputs``."""
    return tensor.device.type == "cpu"


class VanillaTransformerPositionalEncoding(nn.Module):
    """§3.5 sinusoidal encoding, or learned position embeddings (Table 3, row E).

    A sequence longer than the learned table is refused from its shape; a position past the table that
    only its value shows (a cached decoding step) always on the CPU, and on an accelerator only under the
    model's opt-in ``check_inputs``: there, reading a tensor's value on the host would synchronise the
    device at every call."""

    check_inputs = False  # set through the model's ``check_inputs``

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__()
        self.d_model = config.d_model
        self.max_positions = config.max_position_embeddings
        self.learned = config.position_encoding == "learned"
        if self.learned:
            self.weight = nn.Parameter(torch.empty(config.max_position_embeddings, config.d_model))

    def forward(self, position_ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """position_ids: (B, T) or (T,) integers -> (..., D) encodings in ``dtype``."""
        if not self.learned:
            return sinusoidal_position_encoding(position_ids, self.d_model).to(dtype)
        if position_ids.shape[-1] > self.max_positions:  # a shape, not a value: no host read
            raise ValueError(
                f"Sequence of {position_ids.shape[-1]} positions, but learned position embeddings hold only "
                f"`max_position_embeddings`={self.max_positions} positions. Truncate the input or use "
                "`position_encoding='sinusoidal'`."
            )
        checked = self.check_inputs or host_reads_free(position_ids)
        if checked and not torch.compiler.is_compiling() and position_ids.numel():
            needed = int(position_ids.max())  # a host read: on an accelerator the opt-in debug check only
            if needed >= self.max_positions:
                raise ValueError(
                    f"Sequence needs position {needed}, but learned position embeddings hold only "
                    f"`max_position_embeddings`={self.max_positions} positions. Truncate the input or use "
                    "`position_encoding='sinusoidal'`."
                )
        return F.embedding(position_ids, self.weight).to(dtype)


def position_ids_from_mask(
    attention_mask: torch.Tensor | None, length: int, past: int, device
) -> torch.Tensor:
    """Positions of the last ``length`` tokens: count only real tokens when a 2-D padding mask is given.

    Counting real tokens makes outputs independent of where padding sits (left or right) and gives
    left-padded prompts in batched generation the same positions as unpadded ones.

    Returns: (B, T) when a 2-D mask is given, else (T,).
    """
    if attention_mask is not None and attention_mask.dim() == 2:
        positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # (B, P+T)
        return positions[:, -length:]
    return torch.arange(length, device=device) + past  # (a compiled static cache gives a tensor `past`)


# ------------------------------------------------------------------------------------------------
# §3.4 Embeddings
# ------------------------------------------------------------------------------------------------


class VanillaTransformerEmbedding(nn.Embedding):
    """§3.4: learned token embeddings, multiplied by sqrt(d_model).

    The scale lives inside the module, so ``model(inputs_embeds=model.get_input_embeddings()(ids))``
    equals ``model(input_ids=ids)``. The weight itself is unscaled; it is also the pre-softmax
    matrix when ``tie_word_embeddings`` is set.

    Ids on the CPU are checked here, at every call (``check_token_ids``: an id outside the vocabulary is
    one error naming it, not torch's ``IndexError``; reading a CPU tensor's extremes costs no
    synchronisation). Ids on an accelerator are checked where they enter (the pipelines, ``translate()``,
    the training data), where a read of their values here would synchronise the device at every call; the
    model's opt-in ``check_inputs`` checks them here too.
    """

    check_inputs = False  # set through the model's ``check_inputs``

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None, embed_scale: float):
        super().__init__(num_embeddings, embedding_dim, padding_idx=padding_idx)
        self.embed_scale = embed_scale

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        if (self.check_inputs or host_reads_free(input_ids)) and not torch.compiler.is_compiling():
            check_token_ids(input_ids, self.num_embeddings, "input_ids")
        return super().forward(input_ids) * self.embed_scale


# ------------------------------------------------------------------------------------------------
# §3.2 Attention
# ------------------------------------------------------------------------------------------------


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """§3.2.1, Eq. 1: Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V, written out.

    The readable reference that every fast path (SDPA, flash, flex) is tested against, and the only
    one that returns the attention probabilities (``output_attentions=True``).

    Args:
        query: (B, H, T, Dk); key: (B, H, S, Dk); value: (B, H, S, Dv).
        attention_mask: additive float mask broadcastable to (B, H, T, S): 0 where attending and a
            very negative number where masked (what ``masking_utils`` builds for eager), or None.
        scaling: the factor applied to the dot products; 1/sqrt(d_k) by default.
        dropout: dropout on the attention probabilities (training only).

    Returns:
        (B, T, H, Dv) attention output, and (B, H, T, S) attention probabilities.
    """
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    scores = torch.matmul(query, key.transpose(-2, -1)) * scaling  # (B, H, T, S)
    if attention_mask is not None:
        scores = scores + attention_mask[..., : key.shape[-2]]
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    probs = apply_dropout(module, probs, dropout)
    output = torch.matmul(probs, value)  # (B, H, T, Dv)
    return output.transpose(1, 2).contiguous(), probs  # (B, T, H, Dv)


class VanillaTransformerAttention(nn.Module):
    """§3.2.2 multi-head attention: MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    The h per-head projections are stored as one matrix each (``q_proj``: D -> H*Dk, ``k_proj``:
    D -> H*Dk, ``v_proj``: D -> H*Dv, ``out_proj`` = W^O: H*Dv -> D). §3.2.3's three uses are three
    instances: encoder self-attention, masked (causal) decoder self-attention and encoder-decoder
    attention (``is_cross_attention``), whose keys and values come from the encoder output and are
    computed once per generation, then read from the cache.
    """

    def __init__(
        self,
        config: VanillaTransformerConfig,
        is_causal: bool = False,
        is_cross_attention: bool = False,
        layer_idx: int | None = None,
    ):
        super().__init__()
        if config.d_k is None or config.d_v is None:
            raise ValueError(
                f"`d_model` ({config.d_model}) must be divisible by `num_heads` ({config.num_heads}) when "
                "`d_k`/`d_v` are not given (§3.2.2 uses d_k = d_v = d_model / h)."
            )
        self.config = config
        self.num_heads = config.num_heads
        self.d_k = config.d_k
        self.d_v = config.d_v
        self.scaling = self.d_k**-0.5
        self.attention_dropout = config.attention_dropout
        # SDPA reads ``module.is_causal``: only masked decoder self-attention is causal (§3.2.3).
        self.is_causal = is_causal
        self.is_cross_attention = is_cross_attention
        self.layer_idx = layer_idx
        bias = config.attention_bias
        self.q_proj = nn.Linear(config.d_model, self.num_heads * self.d_k, bias=bias)
        self.k_proj = nn.Linear(config.d_model, self.num_heads * self.d_k, bias=bias)
        self.v_proj = nn.Linear(config.d_model, self.num_heads * self.d_v, bias=bias)
        self.out_proj = nn.Linear(self.num_heads * self.d_v, config.d_model, bias=bias)

    def _split_heads(self, states: torch.Tensor, head_dim: int) -> torch.Tensor:
        return states.view(*states.shape[:-1], -1, head_dim).transpose(1, 2)  # (B, L, H*d) -> (B, H, L, d)

    def forward(
        self,
        hidden_states: torch.Tensor,
        key_value_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """hidden_states: (B, T, D) queries; key_value_states: (B, S, D) encoder output for
        cross-attention, else None. Returns (B, T, D) and the (B, H, T, S) probabilities or None."""
        query = self._split_heads(self.q_proj(hidden_states), self.d_k)  # (B, H, T, Dk)

        layer_cache = cache
        if isinstance(cache, EncoderDecoderCache):
            layer_cache = (
                cache.cross_attention_cache if self.is_cross_attention else cache.self_attention_cache
            )

        if self.is_cross_attention and layer_cache is not None and cache.is_updated.get(self.layer_idx):
            # Encoder keys/values were projected at the first decoding step; reuse them.
            key = layer_cache.layers[self.layer_idx].keys  # (B, H, S, Dk)
            value = layer_cache.layers[self.layer_idx].values  # (B, H, S, Dv)
        else:
            # Self-attention: keys and values from the same states; cross-attention: from the encoder output.
            source = key_value_states if self.is_cross_attention else hidden_states
            key = self._split_heads(self.k_proj(source), self.d_k)  # (B, H, S, Dk)
            value = self._split_heads(self.v_proj(source), self.d_v)  # (B, H, S, Dv)
            if layer_cache is not None:
                key, value = layer_cache.update(key, value, self.layer_idx)  # self-attn: (B, H, P+T, d)
                if self.is_cross_attention:
                    cache.is_updated[self.layer_idx] = True

        # Eager is the readable reference and the only path that returns the probabilities.
        attention_function: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        output, probs = attention_function(
            self,
            query,
            key,
            value,
            attention_mask,
            dropout=self.attention_dropout if self.training else 0.0,
            scaling=self.scaling,
        )
        output = output.reshape(*hidden_states.shape[:-1], -1).contiguous()  # (B, T, H*Dv) = Concat(heads)
        return self.out_proj(output), probs  # (B, T, D)


# ------------------------------------------------------------------------------------------------
# §3.3 Position-wise feed-forward network
# ------------------------------------------------------------------------------------------------


class VanillaTransformerFeedForward(nn.Module):
    """§3.3, Eq. 2: FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, applied to each position separately.

    ``fc1`` is (W_1, b_1): D -> F, ``fc2`` is (W_2, b_2): F -> D. ``activation_dropout`` (0 by default,
    not in the paper) drops the hidden units.
    """

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__()
        self.fc1 = nn.Linear(config.d_model, config.d_ff)
        self.fc2 = nn.Linear(config.d_ff, config.d_model)
        self.activation = ACT2FN[config.activation]
        self.activation_dropout = config.activation_dropout

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.fc1(hidden_states)  # (B, T, F)
        hidden_states = self.activation(hidden_states)
        hidden_states = apply_dropout(self, hidden_states, self.activation_dropout)
        return self.fc2(hidden_states)  # (B, T, D)


# ------------------------------------------------------------------------------------------------
# §3.1 Encoder and decoder layers
# ------------------------------------------------------------------------------------------------


class VanillaTransformerLayer(GradientCheckpointingLayer):
    """What the encoder and decoder layers do around their sub-layers: §5.4's residual dropout on each
    sub-layer's output before it is added to the sub-layer input, and the feed-forward sub-layer."""

    dropout: float
    ffn: VanillaTransformerFeedForward

    def _residual_dropout(self, x: torch.Tensor) -> torch.Tensor:
        return apply_dropout(self, x, self.dropout)

    def _ff_block(self, x):
        return self._residual_dropout(self.ffn(x))


class VanillaTransformerEncoderLayer(VanillaTransformerLayer):
    """§3.1 encoder layer: a self-attention sub-layer and a feed-forward sub-layer.

    Each sub-layer is wrapped as LayerNorm(x + Dropout(Sublayer(x))) (§3.1 with §5.4's residual
    dropout), the paper's post-LN. ``norm_position="pre"`` gives x + Dropout(Sublayer(LayerNorm(x))).
    """

    def __init__(self, config: VanillaTransformerConfig, layer_idx: int | None = None):
        super().__init__()
        self.pre_norm = config.norm_position == "pre"
        self.dropout = config.dropout
        self.self_attn = VanillaTransformerAttention(config, is_causal=False, layer_idx=layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.ffn = VanillaTransformerFeedForward(config)
        self.final_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

    def _sa_block(self, x, attention_mask):
        x, probs = self.self_attn(x, attention_mask=attention_mask)
        return self._residual_dropout(x), probs

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Returns the new (B, S, D) states and the self-attention probabilities (None unless eager)."""
        x = hidden_states  # (B, S, D)
        if self.pre_norm:
            attended, probs = self._sa_block(self.self_attn_layer_norm(x), attention_mask)
            x = x + attended
            x = x + self._ff_block(self.final_layer_norm(x))
        else:
            attended, probs = self._sa_block(x, attention_mask)
            x = self.self_attn_layer_norm(x + attended)
            x = self.final_layer_norm(x + self._ff_block(x))
        return x, probs


class VanillaTransformerDecoderLayer(VanillaTransformerLayer):
    """§3.1 decoder layer: masked self-attention, encoder-decoder attention, feed-forward.

    The self-attention is causal so that position i attends only to positions < i + 1 (§3.1,
    §3.2.3). The decoder-only model (``has_cross_attention=False``) drops the middle sub-layer.
    """

    def __init__(
        self, config: VanillaTransformerConfig, layer_idx: int | None = None, has_cross_attention=True
    ):
        super().__init__()
        self.pre_norm = config.norm_position == "pre"
        self.dropout = config.dropout
        self.self_attn = VanillaTransformerAttention(config, is_causal=True, layer_idx=layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.encoder_attn = None
        if has_cross_attention:
            self.encoder_attn = VanillaTransformerAttention(
                config, is_cross_attention=True, layer_idx=layer_idx
            )
            self.encoder_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.ffn = VanillaTransformerFeedForward(config)
        self.final_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

    def _sa_block(self, x, attention_mask, cache):
        x, probs = self.self_attn(x, attention_mask=attention_mask, cache=cache)
        return self._residual_dropout(x), probs

    def _mha_block(self, x, memory, memory_mask, cache):
        x, probs = self.encoder_attn(x, key_value_states=memory, attention_mask=memory_mask, cache=cache)
        return self._residual_dropout(x), probs

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        use_cache: bool | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Returns the new (B, T, D) states, the self- and the cross-attention probabilities."""
        x = hidden_states  # (B, T, D)
        cross_probs = None
        use_cross = self.encoder_attn is not None and encoder_hidden_states is not None
        if self.pre_norm:
            attended, self_probs = self._sa_block(self.self_attn_layer_norm(x), attention_mask, cache)
            x = x + attended
            if use_cross:
                attended, cross_probs = self._mha_block(
                    self.encoder_attn_layer_norm(x),
                    encoder_hidden_states,
                    encoder_attention_mask,
                    cache,
                )
                x = x + attended
            x = x + self._ff_block(self.final_layer_norm(x))
        else:
            attended, self_probs = self._sa_block(x, attention_mask, cache)
            x = self.self_attn_layer_norm(x + attended)
            if use_cross:
                attended, cross_probs = self._mha_block(
                    x, encoder_hidden_states, encoder_attention_mask, cache
                )
                x = self.encoder_attn_layer_norm(x + attended)
            x = self.final_layer_norm(x + self._ff_block(x))
        return x, self_probs, cross_probs


# ------------------------------------------------------------------------------------------------
# Stacks
# ------------------------------------------------------------------------------------------------


def _check_attention_outputs(config: VanillaTransformerConfig, output_attentions: bool) -> None:
    implementation = config._attn_implementation
    if output_attentions and implementation not in (None, "eager"):
        logger.warning_once(
            f"`output_attentions=True` returns None for each layer: attn_implementation={implementation!r} never "
            "materialises the probabilities. Load the model with `attn_implementation='eager'` (or call "
            "`model.set_attn_implementation('eager')`) to get them."
        )


def _check_tokens_or_embeds(input_ids, inputs_embeds, name: str) -> None:
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError(f"Pass exactly one of `{name}input_ids` and `{name}inputs_embeds`.")
    if input_ids is not None and input_ids.dim() != 2:
        raise ValueError(f"`{name}input_ids` must have shape (batch, length), got {tuple(input_ids.shape)}.")


class VanillaTransformerStack(nn.Module):
    """What the encoder and decoder stacks share (§3.1, §3.4, §3.5, §5.4): the token embeddings, the
    positional encodings added to them and dropout on the sum, N layers, and, in pre-LN mode only, a
    final LayerNorm (in post-LN, the paper's, each layer already ends in one)."""

    def __init__(
        self,
        config: VanillaTransformerConfig,
        embed_tokens: VanillaTransformerEmbedding,
        layers: list[nn.Module],
    ):
        super().__init__()
        self.config = config
        self.embed_tokens = embed_tokens
        self.embed_positions = VanillaTransformerPositionalEncoding(config)
        self.layers = nn.ModuleList(layers)
        self.layer_norm = (
            nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.norm_position == "pre" else None
        )

    def add_positions(self, inputs_embeds: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """§3.5 with §5.4: (B, T, D) scaled embeddings + PE(positions), then dropout on the sum."""
        hidden_states = inputs_embeds + self.embed_positions(position_ids, inputs_embeds.dtype)
        return apply_dropout(self, hidden_states, self.config.dropout)

    def final_norm(
        self, hidden_states: torch.Tensor, all_hidden_states: tuple | None
    ) -> tuple[torch.Tensor, tuple | None]:
        """The pre-LN stack's final LayerNorm, which also replaces the last recorded hidden state."""
        if self.layer_norm is None:
            return hidden_states, all_hidden_states
        hidden_states = self.layer_norm(hidden_states)
        if all_hidden_states is not None:
            all_hidden_states = all_hidden_states[:-1] + (hidden_states,)
        return hidden_states, all_hidden_states


class VanillaTransformerEncoder(VanillaTransformerStack):
    """§3.1 encoder: N identical layers over the embedded source, (x * sqrt(D) + PE) then dropout (§5.4)."""

    def __init__(self, config: VanillaTransformerConfig, embed_tokens: VanillaTransformerEmbedding):
        layers = [
            VanillaTransformerEncoderLayer(config, layer_idx=i) for i in range(config.num_encoder_layers)
        ]
        super().__init__(config, embed_tokens, layers)

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = False,
        output_hidden_states: bool | None = False,
        return_dict: bool = True,  # generate() calls the encoder with it
    ) -> BaseModelOutput | tuple:
        """Source ids (B, S) and 2-D padding mask -> final encoder states (B, S, D), "the memory"."""
        output_attentions, output_hidden_states = bool(output_attentions), bool(output_hidden_states)
        _check_tokens_or_embeds(input_ids, inputs_embeds, "")
        _check_attention_outputs(self.config, output_attentions)
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)  # (B, S, D), already x sqrt(D)
        positions = position_ids_from_mask(attention_mask, inputs_embeds.shape[1], 0, inputs_embeds.device)
        hidden_states = self.add_positions(inputs_embeds, positions)

        mask = create_bidirectional_mask(
            config=self.config, inputs_embeds=inputs_embeds, attention_mask=attention_mask
        )  # None, or (B, 1, S, S) in the attention function's format

        all_hidden_states = (hidden_states,) if output_hidden_states else None
        all_attentions = () if output_attentions else None
        for layer in self.layers:
            hidden_states, probs = layer(hidden_states, mask)
            if output_hidden_states:
                all_hidden_states += (hidden_states,)
            if output_attentions:
                all_attentions += (probs,)
        hidden_states, all_hidden_states = self.final_norm(hidden_states, all_hidden_states)
        outputs = BaseModelOutput(
            last_hidden_state=hidden_states, hidden_states=all_hidden_states, attentions=all_attentions
        )
        return outputs if return_dict else outputs.to_tuple()


class VanillaTransformerDecoder(VanillaTransformerStack):
    """§3.1 decoder: N identical layers over the embedded, right-shifted target.

    With ``has_cross_attention=False`` it is the decoder-only (GPT-style) stack.
    """

    def __init__(
        self,
        config: VanillaTransformerConfig,
        embed_tokens: VanillaTransformerEmbedding,
        has_cross_attention: bool = True,
    ):
        layers = [
            VanillaTransformerDecoderLayer(config, layer_idx=i, has_cross_attention=has_cross_attention)
            for i in range(config.num_decoder_layers)
        ]
        super().__init__(config, embed_tokens, layers)
        self.has_cross_attention = has_cross_attention

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        past_key_values: Cache | None = None,
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        """Target ids (B, T) -> final decoder states (B, T, D). Self-attention is causal and cached in
        ``cache`` (``past_key_values`` before transformers 5.24); cross-attention reads
        ``encoder_hidden_states`` (B, S, D)."""
        cache = _one_cache(cache, past_key_values)
        _check_tokens_or_embeds(input_ids, inputs_embeds, "decoder_" if self.has_cross_attention else "")
        _check_attention_outputs(self.config, output_attentions)
        if self.has_cross_attention and encoder_hidden_states is None:
            raise ValueError("The encoder-decoder model's decoder needs `encoder_hidden_states`.")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)  # (B, T, D), already x sqrt(D)
        length = inputs_embeds.shape[1]

        if use_cache and cache is None:
            cache = (
                EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
                if self.has_cross_attention
                else DynamicCache(config=self.config)
            )
        self_attention_cache = cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache
        past_length = self_attention_cache.get_seq_length() if self_attention_cache is not None else 0

        if position_ids is None:
            positions_mask = attention_mask if not self.has_cross_attention else None
            position_ids = position_ids_from_mask(positions_mask, length, past_length, inputs_embeds.device)
        hidden_states = self.add_positions(inputs_embeds, position_ids)

        causal_mask = create_causal_mask(
            config=self.config,
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            **{_MASK_CACHE_ARGUMENT: self_attention_cache},
        )  # None (SDPA's is_causal serves), or (B, 1, T, P+T)
        memory_mask = None
        if self.has_cross_attention:
            memory_mask = create_bidirectional_mask(
                config=self.config,
                inputs_embeds=inputs_embeds,
                attention_mask=encoder_attention_mask,
                encoder_hidden_states=encoder_hidden_states,
            )  # None, or (B, 1, T, S)

        all_hidden_states = (hidden_states,) if output_hidden_states else None
        all_self_attentions = () if output_attentions else None
        all_cross_attentions = () if output_attentions and self.has_cross_attention else None
        for layer in self.layers:
            hidden_states, self_probs, cross_probs = layer(
                hidden_states,
                causal_mask,
                encoder_hidden_states,
                encoder_attention_mask=memory_mask,
                cache=cache,
                use_cache=use_cache,
            )
            if output_hidden_states:
                all_hidden_states += (hidden_states,)
            if output_attentions:
                all_self_attentions += (self_probs,)
                if self.has_cross_attention:
                    all_cross_attentions += (cross_probs,)
        hidden_states, all_hidden_states = self.final_norm(hidden_states, all_hidden_states)
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=hidden_states,
            **{CACHE_FIELD: cache if use_cache else None},
            hidden_states=all_hidden_states,
            attentions=all_self_attentions,
            cross_attentions=all_cross_attentions,
        )


# ------------------------------------------------------------------------------------------------
# Pre-trained model base: weight initialisation and tying
# ------------------------------------------------------------------------------------------------


class VanillaTransformerPreTrainedModel(PreTrainedModel):
    """Weight initialisation, tying and the HF plumbing shared by every model class.

    Initialisation (not specified by the paper): Xavier-uniform linear weights and zero biases,
    as tensor2tensor and the Annotated Transformer do; embeddings N(0, d_model^-0.5), so that after
    the sqrt(d_model) scale of §3.4 they have unit variance.
    """

    config_class = VanillaTransformerConfig
    config: VanillaTransformerConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["VanillaTransformerEncoderLayer", "VanillaTransformerDecoderLayer"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True  # every declared implementation is tested against eager
    _can_compile_fullgraph = True  # decoding steps with a static cache compile as one graph (tested)

    @property
    def check_inputs(self) -> bool:
        """Opt-in debug check, off by default: ``model.check_inputs = True`` has every forward refuse token
        ids outside the vocabulary, positions past a learned table and (classifier) labels outside
        ``num_labels``, with the errors the entry points give. Each check reads tensor values on the host:
        on the CPU that costs nothing and the forward always checks; on an accelerator it is a
        synchronisation per call, so the forward does none unless asked (the pipelines, ``translate()`` and
        the training data check ids where they enter). Skipped under ``torch.compile``. A run-time switch:
        nothing is saved."""
        return self.__dict__.get("_check_inputs", False)

    @check_inputs.setter
    def check_inputs(self, value: bool) -> None:
        for module in self.modules():
            if isinstance(module, VanillaTransformerPreTrainedModel):
                module.__dict__["_check_inputs"] = bool(value)
            elif isinstance(module, VanillaTransformerEmbedding | VanillaTransformerPositionalEncoding):
                module.check_inputs = bool(value)

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            init.xavier_uniform_(module.weight)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=self.config.embedding_init_std)
            if module.padding_idx is not None and not getattr(module.weight, "_is_hf_initialized", False):
                init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, VanillaTransformerPositionalEncoding) and module.learned:
            init.normal_(module.weight, mean=0.0, std=self.config.embedding_init_std)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)

    def post_init(self):
        super().post_init()
        # A tied weight is not saved (its source is). transformers.Trainer resumes with
        # load_state_dict(strict=False) and warns "missing keys" for every absent weight except those in
        # `_keys_to_ignore_on_save`, which it ties instead: the tied weights are declared there as well.
        tied = set(self.all_tied_weights_keys)
        self._keys_to_ignore_on_save = set(self._keys_to_ignore_on_save or ()) | tied

    def save_pretrained(self, save_directory: str | os.PathLike, *args, **kwargs):
        """transformers' ``save_pretrained``, also for a model that FSDP2 has sharded: ``fully_shard``
        swaps in a subclass defined in torch, and transformers copies the module of the saved object's
        class as the folder's remote code. The folder must carry this file and name this class instead."""
        own = next(cls for cls in type(self).__mro__ if cls.__module__ == __name__)
        if own is type(self):
            return super().save_pretrained(save_directory, *args, **kwargs)
        wrapped, self.__class__ = self.__class__, own
        try:
            return self.save_pretrained(save_directory, *args, **kwargs)
        finally:
            self.__class__ = wrapped

    def output_logits(self, hidden_states: torch.Tensor, logits_to_keep: int = 0) -> torch.Tensor:
        """(B, T, D) final decoder states -> (B, T, V) through ``lm_head``, §3.4's pre-softmax linear
        transformation; with ``logits_to_keep`` only the last that many positions (generation needs one)."""
        if logits_to_keep:
            hidden_states = hidden_states[:, -logits_to_keep:]
        return self.lm_head(hidden_states)

    def _paper_tied_weights(self) -> dict[str, str]:
        """{tied parameter: source parameter} that this class (not its sub-models) declares."""
        return {}

    @property
    def _tied_weights_keys(self) -> dict[str, str]:  # read by transformers when saving and tying
        return self._paper_tied_weights()

    def get_expanded_tied_weights_keys(self, all_submodels: bool = False) -> dict:
        """§3.4's weight sharing, read from the config.

        transformers ties nothing when ``tie_word_embeddings`` is False; the paper's two sharings are
        independent flags here (``share_embeddings``: source = target embedding;
        ``tie_word_embeddings``: pre-softmax matrix = target embedding), so we answer ourselves.
        """
        if all_submodels:
            return super().get_expanded_tied_weights_keys(all_submodels=True)
        return self._paper_tied_weights()


def _variant_config(config: VanillaTransformerConfig, is_decoder: bool, model_name: str):
    """The config of a one-stack model; a seq2seq config is copied (never mutated) and switched."""
    if not config.is_encoder_decoder and config.is_decoder == is_decoder:
        return config
    logger.info(
        f"{model_name} uses a single stack: setting is_encoder_decoder=False, is_decoder={is_decoder}."
    )
    config = copy.deepcopy(config)
    config.is_encoder_decoder = False
    config.is_decoder = is_decoder
    return config


class VanillaTransformerModel(VanillaTransformerPreTrainedModel):
    """The bare Transformer (§3, Figure 1), outputting hidden states.

    The stacks it holds follow the config: encoder and decoder (``is_encoder_decoder=True``), the
    encoder alone (``is_encoder_decoder=False``), or the decoder alone without cross-attention
    (``is_encoder_decoder=False, is_decoder=True``). Every head model wraps one as ``self.model``,
    so parameter names are the same in all variants (``model.encoder.layers.0.self_attn.q_proj``).
    """

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config)
        has_encoder = config.is_encoder_decoder or not config.is_decoder
        has_decoder = config.is_encoder_decoder or config.is_decoder
        embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0

        def embedding():
            return VanillaTransformerEmbedding(
                config.vocab_size, config.d_model, config.pad_token_id, embed_scale
            )

        self.encoder = VanillaTransformerEncoder(config, embedding()) if has_encoder else None
        self.decoder = (
            VanillaTransformerDecoder(config, embedding(), has_cross_attention=config.is_encoder_decoder)
            if has_decoder
            else None
        )
        self.post_init()

    def _paper_tied_weights(self) -> dict[str, str]:
        if self.encoder is not None and self.decoder is not None and self.config.share_embeddings:
            return {"decoder.embed_tokens.weight": "encoder.embed_tokens.weight"}
        return {}

    def get_input_embeddings(self) -> nn.Embedding:
        return (self.encoder or self.decoder).embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        if self.encoder is not None:
            self.encoder.embed_tokens = value
        if self.decoder is not None and (self.encoder is None or self.config.share_embeddings):
            self.decoder.embed_tokens = value

    def get_encoder(self):
        return self.encoder

    def get_decoder(self):
        return self.decoder

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        past_key_values: Cache | None = None,
        **kwargs,
    ) -> Seq2SeqModelOutput | BaseModelOutput | BaseModelOutputWithPastAndCrossAttentions | tuple:
        """Encoder-decoder: source ``input_ids`` (B, S) and target ``decoder_input_ids`` (B, T).
        Encoder-only or decoder-only: ``input_ids`` (B, T) alone. Masks are 2-D, 1 = attend.
        The key/value cache comes as ``cache`` or, as transformers before 5.24 name it, ``past_key_values``."""
        cache = _one_cache(cache, past_key_values)
        output_attentions = self.config.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = (
            self.config.output_hidden_states if output_hidden_states is None else output_hidden_states
        )

        if self.decoder is None:  # encoder only (BERT-style)
            return self.encoder(
                input_ids, attention_mask, inputs_embeds, output_attentions, output_hidden_states
            )

        use_cache = (self.config.use_cache and not self.training) if use_cache is None else use_cache
        if self.encoder is None:  # decoder only (GPT-style)
            return self.decoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                cache=cache,
                inputs_embeds=inputs_embeds,
                position_ids=position_ids,
                use_cache=use_cache,
                output_attentions=output_attentions,
                output_hidden_states=output_hidden_states,
            )

        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids, attention_mask, inputs_embeds, output_attentions, output_hidden_states
            )
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(
                last_hidden_state=encoder_outputs[0],
                hidden_states=encoder_outputs[1] if len(encoder_outputs) > 1 else None,
                attentions=encoder_outputs[2] if len(encoder_outputs) > 2 else None,
            )
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=attention_mask,
            cache=cache,
            inputs_embeds=decoder_inputs_embeds,
            position_ids=position_ids,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
        )
        outputs = Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            **{CACHE_FIELD: getattr(decoder_outputs, CACHE_FIELD)},
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )
        return outputs


# ------------------------------------------------------------------------------------------------
# Heads
# ------------------------------------------------------------------------------------------------


# §6.1: during inference the maximum output length is the input length + 50; beam size 4, alpha 0.6.
MAX_NEW_TOKENS_OVER_SOURCE = 50
PAPER_NUM_BEAMS, PAPER_LENGTH_PENALTY = 4, 0.6
# transformers' model-agnostic default `max_length` (20), which generate() applies where nothing is set and
# saved configs may carry without anyone having chosen it: a config holding it sets no bound of its own.
# (Not `GenerationConfig().max_length`: that is None, the default being applied later.)
UNSET_MAX_LENGTH = 20


def paper_generation_config(config: VanillaTransformerConfig) -> GenerationConfig:
    """§6.1 decoding: beam search with beam size 4 and length penalty alpha = 0.6, output length bounded by input length + 50 (``max_new_tokens_over_source``), stopping a beam
    search when enough hypotheses are finished. §6.1 cites Wu et al. (2016) for the penalty, whose form is
    ((5 + |Y|) / 6)^alpha; transformers' beam search divides a hypothesis's log-probability by |Y|^alpha
    (|Y| counting ``</s>``), which favours longer hypotheses more at the same alpha: a departure the model
    card names."""
    generation_config = GenerationConfig.from_model_config(config)
    generation_config.num_beams = PAPER_NUM_BEAMS
    generation_config.length_penalty = PAPER_LENGTH_PENALTY
    generation_config.early_stopping = True
    generation_config.max_new_tokens_over_source = MAX_NEW_TOKENS_OVER_SOURCE
    # A deliberate config, not one derived from the model config: transformers reloads derived ones
    # from the model config and would drop the §6.1 length bound above.
    generation_config._from_model_config = False
    return generation_config


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Teacher forcing (§3.1): the decoder input is the target shifted one position right, starting
    with the start token; -100 (ignored label) becomes padding."""
    if decoder_start_token_id is None:
        raise ValueError("`config.decoder_start_token_id` must be set to shift labels into decoder inputs.")
    shifted = labels.new_zeros(labels.shape)
    shifted[:, 1:] = labels[:, :-1].clone()
    shifted[:, 0] = decoder_start_token_id
    if pad_token_id is None:
        raise ValueError(
            "`config.pad_token_id` must be set to replace ignored labels (-100) in decoder inputs."
        )
    return shifted.masked_fill(shifted == -100, pad_token_id)


def sequence_losses(
    logits: torch.Tensor, labels: torch.Tensor, epsilon: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per sequence, the loss ``label_smoothed_nll_loss`` averages: §5.4's label-smoothed cross-entropy summed
    over the sequence's target tokens (labels -100 ignored), and their count; both (B,). With
    ``epsilon`` 0, the plain negative log-likelihood, whose exp per token is perplexity. Evaluation sums
    these over a whole split, each sentence once, for a per-token mean over the split."""
    if logits.shape[:-1] != labels.shape:
        raise ValueError(
            f"`labels` shape {tuple(labels.shape)} does not match logits {tuple(logits.shape[:-1])}."
        )
    labels = labels.to(logits.device)
    per_token = F.cross_entropy(
        logits.flatten(0, 1).float(),
        labels.flatten(),
        ignore_index=-100,
        label_smoothing=epsilon,
        reduction="none",
    ).view(labels.shape)  # (B, T)
    return per_token.sum(-1), (labels != -100).sum(-1)


def label_smoothed_nll_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    epsilon: float,
    num_items_in_batch: int | torch.Tensor | None = None,
) -> torch.Tensor:
    """§5.4 label smoothing: cross-entropy against (1 - eps) * one-hot + eps / V, labels -100 ignored.

    The mean is over non-ignored tokens, or the sum divided by ``num_items_in_batch`` when the
    Trainer passes it (exact averaging across gradient-accumulation steps).
    """
    if logits.shape[:-1] != labels.shape:
        raise ValueError(
            f"`labels` shape {tuple(labels.shape)} does not match logits {tuple(logits.shape[:-1])}."
        )
    flat_logits = logits.reshape(-1, logits.size(-1)).float()  # (B*T, V)
    flat_labels = labels.reshape(-1).to(flat_logits.device)  # (B*T,)
    if num_items_in_batch is None:
        return F.cross_entropy(flat_logits, flat_labels, ignore_index=-100, label_smoothing=epsilon)
    total = F.cross_entropy(
        flat_logits, flat_labels, ignore_index=-100, label_smoothing=epsilon, reduction="sum"
    )
    if isinstance(num_items_in_batch, torch.Tensor):
        num_items_in_batch = num_items_in_batch.to(total.device)
    return total / num_items_in_batch


def fused_loss_kernel(model: nn.Module, labels: torch.Tensor | None) -> Callable | None:
    """The projection + loss fused that a training run installed on ``model`` (``fused_output_loss.py``:
    the same loss, no logits), where it applies: the model trains and has labels. None otherwise, and then
    the head computes its logits and ``label_smoothed_nll_loss`` as written."""
    if not model.training or labels is None:
        return None
    return model.__dict__.get("output_loss_kernel")  # a plain attribute: nothing saved, no module lookup


def _name_pipeline_in_saved_config(save_directory: str | os.PathLike, entry: dict) -> None:
    """Write ``entry`` as ``custom_pipelines`` into a saved ``config.json`` that names none (the pipeline's
    file travels with the model code); the in-memory config is left as it is."""
    path = os.path.join(save_directory, "config.json")
    if os.path.isfile(path):  # not on the non-main processes of a distributed save
        with open(path, encoding="utf-8") as file:
            saved = json.load(file)
        if not saved.get("custom_pipelines"):
            saved["custom_pipelines"] = entry
            with open(path, "w", encoding="utf-8") as file:
                file.write(json.dumps(saved, indent=2, sort_keys=True) + "\n")


class VanillaTransformerForConditionalGeneration(VanillaTransformerPreTrainedModel, GenerationMixin):
    """The Transformer for sequence-to-sequence tasks (translation): the encoder-decoder with the
    pre-softmax linear transformation (§3.4), tied to the embeddings by default, and ``generate()``
    with the §6.1 defaults (beam 4, length penalty 0.6, max length input + 50)."""

    def __init__(self, config: VanillaTransformerConfig):
        if not config.is_encoder_decoder:
            raise ValueError(
                "VanillaTransformerForConditionalGeneration needs `is_encoder_decoder=True`; use "
                "VanillaTransformerForCausalLM or VanillaTransformerForSequenceClassification for one stack."
            )
        super().__init__(config)
        self.model = VanillaTransformerModel(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.post_init()
        self.generation_config = paper_generation_config(config)

    def save_pretrained(self, save_directory: str | os.PathLike, *args, **kwargs):
        """transformers' ``save_pretrained``; the saved ``config.json`` also names the translation
        pipeline (``custom_pipelines``), whose file travels with the model code, so
        ``pipeline("translation", model=folder, trust_remote_code=True)`` works on the folder. The
        in-memory config is left as it is."""
        super().save_pretrained(save_directory, *args, **kwargs)
        _name_pipeline_in_saved_config(save_directory, custom_pipelines_entry())

    def _paper_tied_weights(self) -> dict[str, str]:
        if not self.config.tie_word_embeddings:
            return {}
        source = "encoder" if self.config.share_embeddings else "decoder"
        return {"lm_head.weight": f"model.{source}.embed_tokens.weight"}

    def get_encoder(self):
        return self.model.encoder

    def get_decoder(self):
        return self.model.decoder

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    @torch.no_grad()
    def generate(
        self, inputs: torch.Tensor | None = None, generation_config: GenerationConfig | None = None, **kwargs
    ):
        """``GenerationMixin.generate`` with §6.1's length bound: unless ``max_new_tokens`` or
        ``max_length`` is given (as an argument or in the generation config), the output may be as long
        as the longest source sentence of the batch + ``generation_config.max_new_tokens_over_source``
        (50 by default), and with learned positions no longer than the decoder reads: at most
        ``max_position_embeddings`` new tokens (the last one is never read back), so that a long source
        gives a translation cut at that length, not an error. A bound given explicitly is the caller's."""
        config = generation_config if generation_config is not None else self.generation_config
        # A generation config without the setting (one built by the user) keeps §6.1's bound, not max_length 20.
        offset = getattr(config, "max_new_tokens_over_source", MAX_NEW_TOKENS_OVER_SOURCE)
        user_bound = "max_new_tokens" in kwargs or "max_length" in kwargs
        config_bound = config.max_new_tokens is not None or config.max_length not in (None, UNSET_MAX_LENGTH)
        source = inputs if inputs is not None else kwargs.get("input_ids")
        if (
            offset is not None
            and not user_bound
            and not config_bound
            and source is not None
            and source.dim() == 2
        ):
            mask = kwargs.get("attention_mask")
            length = int(mask.sum(-1).max()) if mask is not None else source.shape[-1]
            kwargs["max_new_tokens"] = length + offset
            if self.config.position_encoding == "learned":  # what the decoder's table reads
                kwargs["max_new_tokens"] = min(kwargs["max_new_tokens"], self.config.max_position_embeddings)
        return super().generate(inputs, generation_config=generation_config, **kwargs)

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        *,
        labels: torch.LongTensor | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        cache: Cache | None = None,
        past_key_values: Cache | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int = 0,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> Seq2SeqLMOutput | tuple:
        """Source ``input_ids`` (B, S) and its mask; every other input by name (as ``generate()`` and
        the Trainer pass them). ``labels`` (B, T): target ids, -100 where ignored; shifted right into
        ``decoder_input_ids`` when those are not given. The loss is label-smoothed with ``config.label_smoothing``.
        A training run that installed ``fused_output_loss`` (as the trainers do on CPUs) gets the same loss
        and no ``logits`` while the model trains.
        The key/value cache comes as ``cache`` or, as transformers before 5.24 name it, ``past_key_values``."""
        cache = _one_cache(cache, past_key_values)
        if labels is not None:
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            cache=cache,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
        )
        kernel = fused_loss_kernel(self, labels)
        if kernel is not None and not logits_to_keep:
            logits = None
            loss = kernel(
                outputs.last_hidden_state,
                self.lm_head.weight,
                labels,
                self.config.label_smoothing,
                num_items_in_batch,
            )
        else:
            logits = self.output_logits(outputs.last_hidden_state, logits_to_keep)  # (B, T, V)
            loss = (
                label_smoothed_nll_loss(logits, labels, self.config.label_smoothing, num_items_in_batch)
                if labels is not None
                else None
            )
        output = Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            **{CACHE_FIELD: getattr(outputs, CACHE_FIELD)},
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
        )
        return output


# Where an encoder-decoder checkpoint stores the embedding its two stacks share (§3.4), and where the
# decoder alone reads it: {checkpoint key pattern: parameter name}, bare model and head model.
SHARED_EMBEDDING_IN_SEQ2SEQ = {
    r"^encoder\.embed_tokens\.weight$": "decoder.embed_tokens.weight",
    r"^model\.encoder\.embed_tokens\.weight$": "model.decoder.embed_tokens.weight",
}


class VanillaTransformerForCausalLM(VanillaTransformerPreTrainedModel, GenerationMixin):
    """The decoder stack alone, without encoder-decoder attention: a GPT-style language model.

    Built from a config with ``is_encoder_decoder=False, is_decoder=True`` (a seq2seq config is
    copied and switched). The loss is next-token cross-entropy, label-smoothed per the config.
    """

    def __init__(self, config: VanillaTransformerConfig):
        config = _variant_config(config, is_decoder=True, model_name=type(self).__name__)
        super().__init__(config)
        self.model = VanillaTransformerModel(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.post_init()

    def _paper_tied_weights(self) -> dict[str, str]:
        return (
            {"lm_head.weight": "model.decoder.embed_tokens.weight"} if self.config.tie_word_embeddings else {}
        )

    @classmethod
    def from_pretrained(cls, *args, key_mapping: dict[str, str] | None = None, **kwargs):
        """``PreTrainedModel.from_pretrained``; from an encoder-decoder checkpoint, the decoder alone also
        finds its embedding: §3.4 shares one matrix between the stacks and the checkpoint stores it once,
        under the encoder's name. A checkpoint that stores the decoder's own embedding keeps it."""
        key_mapping = {**SHARED_EMBEDDING_IN_SEQ2SEQ, **(key_mapping or {})}
        return super().from_pretrained(*args, key_mapping=key_mapping, **kwargs)

    def get_decoder(self):
        return self.model.decoder

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        shift_labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        logits_to_keep: int = 0,
        num_items_in_batch: int | torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        **kwargs,
    ) -> CausalLMOutputWithPast | tuple:
        """``labels`` (B, T) are the inputs themselves, shifted inside (as in GPT-2); -100 is ignored.
        ``shift_labels`` (B, T) are targets already aligned with the logits, as sequence-parallel
        trainers pass them (the shift must happen before the sequence is split); they win over ``labels``.
        With the fused projection + loss installed (``fused_output_loss.py``) no ``logits`` while training.
        The key/value cache comes as ``cache`` or, as transformers before 5.24 name it, ``past_key_values``."""
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=_one_cache(cache, past_key_values),
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
        )
        states = outputs.last_hidden_state
        targets = shift_labels if shift_labels is not None else labels[:, 1:] if labels is not None else None
        kernel = fused_loss_kernel(self, targets)
        if kernel is not None and not logits_to_keep:
            states = states if shift_labels is not None else states[:, :-1]
            logits = None
            loss = kernel(
                states, self.lm_head.weight, targets, self.config.label_smoothing, num_items_in_batch
            )
        else:
            logits = self.output_logits(states, logits_to_keep)  # (B, T, V)
            loss = None
            if targets is not None:
                aligned = logits if shift_labels is not None else logits[:, :-1]
                loss = label_smoothed_nll_loss(
                    aligned, targets, self.config.label_smoothing, num_items_in_batch
                )
        output = CausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            **{CACHE_FIELD: getattr(outputs, CACHE_FIELD)},
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )
        return output


class VanillaTransformerEncoderHeadModel(VanillaTransformerPreTrainedModel):
    """The encoder stack alone under a task head (not in the paper; BERT's use of its first half).

    The forward the encoder-only heads share: the encoder reads ``input_ids`` (B, S) (or
    ``inputs_embeds``) with a 2-D ``attention_mask`` (1 = attend), then the subclass's ``head``
    turns the final states into ``(loss, logits)``, returned as its ``output_class``.
    """

    output_class: type[MaskedLMOutput] | type[SequenceClassifierOutput]

    def __init__(self, config: VanillaTransformerConfig):
        config = _variant_config(config, is_decoder=False, model_name=type(self).__name__)
        super().__init__(config)
        self.model = VanillaTransformerModel(config)

    def head(
        self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None, labels: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, torch.Tensor]:
        """(B, S, D) final encoder states -> (loss or None, logits)."""
        raise NotImplementedError(f"{type(self).__name__} must define its head.")

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> MaskedLMOutput | SequenceClassifierOutput | tuple:
        """``labels`` as the head's class docstring says; the loss is returned only with them."""
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            inputs_embeds=inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
        )
        loss, logits = self.head(outputs.last_hidden_state, attention_mask, labels)
        return self.output_class(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class VanillaTransformerForMaskedLM(VanillaTransformerEncoderHeadModel):
    """The encoder stack alone with a masked-language-model head (BERT's pre-training objective).

    Not in the paper: it pre-trains the encoder on unlabelled text before fine-tuning a classifier.
    The head is a dense layer, the activation and a LayerNorm, then the output projection tied to
    the token embeddings (§3.4's sharing) with its own bias. The loss is cross-entropy on the masked
    positions (labels -100 elsewhere), without label smoothing.

    ``labels`` (B, S): the original ids at masked positions, -100 elsewhere. With
    ``config.sparse_prediction`` and labels, ``logits`` holds only the masked positions (masked, V);
    with the fused projection + loss a training run installs (``fused_output_loss.py``), none while training.
    """

    output_class = MaskedLMOutput

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config)
        config = self.config
        self.transform = nn.Linear(config.d_model, config.d_model)
        self.activation = ACT2FN[config.activation]
        self.transform_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size)
        self.post_init()

    def _paper_tied_weights(self) -> dict[str, str]:
        return (
            {"lm_head.weight": "model.encoder.embed_tokens.weight"} if self.config.tie_word_embeddings else {}
        )

    def head(self, hidden_states, attention_mask, labels):
        if labels is not None and self.config.sparse_prediction:
            if labels.shape != hidden_states.shape[:-1]:
                raise ValueError(
                    f"`labels` shape {tuple(labels.shape)} does not match the input {tuple(hidden_states.shape[:-1])}."
                )
            masked = labels != -100
            hidden_states, labels = hidden_states[masked], labels[masked]  # (masked, d_model), (masked,)
        hidden_states = self.transform_layer_norm(self.activation(self.transform(hidden_states)))
        kernel = fused_loss_kernel(self, labels)
        if kernel is not None:
            return kernel(hidden_states, self.lm_head.weight, labels, 0.0, bias=self.lm_head.bias), None
        logits = self.lm_head(hidden_states)  # (B, S, V), or (masked, V) with sparse_prediction
        return (label_smoothed_nll_loss(logits, labels, 0.0) if labels is not None else None), logits


class VanillaTransformerForSequenceClassification(VanillaTransformerEncoderHeadModel):
    """The encoder stack alone with a classification head (not in the paper; BERT's use of its half).

    Pooling is padding-aware: the mean of the real tokens' final states (``classifier_pooling="mean"``)
    or the first token's (``"first"``). Single-label, multi-label and regression losses follow
    ``config.problem_type``, inferred from the labels when unset (as in transformers' BERT).

    ``labels``: (B,) class ids, (B, num_labels) multi-hot floats, or (B,)/(B, num_labels) targets
    for regression.
    """

    output_class = SequenceClassifierOutput

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config)
        config = self.config
        self.num_labels = config.num_labels
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.dropout
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(config.d_model, config.num_labels)
        self.post_init()

    def save_pretrained(self, save_directory: str | os.PathLike, *args, **kwargs):
        """transformers' ``save_pretrained``; the saved ``config.json`` also names the text-classification
        pipeline that reads long texts as ``config.classifier_long_text`` says (``custom_pipelines``), so
        ``pipeline("text-classification", model=folder, trust_remote_code=True)`` classifies as
        ``classify evaluate`` scored."""
        super().save_pretrained(save_directory, *args, **kwargs)
        _name_pipeline_in_saved_config(save_directory, classification_pipelines_entry())

    def pool(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """(B, S, D) final encoder states -> (B, D), ignoring padding."""
        if self.config.classifier_pooling == "first":
            return hidden_states[:, 0]
        if attention_mask is None:
            return hidden_states.mean(dim=1)
        weights = attention_mask.to(hidden_states.dtype).unsqueeze(-1)  # (B, S, 1)
        return (hidden_states * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)

    def head(self, hidden_states, attention_mask, labels):
        pooled = self.pool(hidden_states, attention_mask)  # (B, D)
        logits = self.classifier(self.dropout(pooled))  # (B, num_labels)
        return (self.classification_loss(logits, labels) if labels is not None else None), logits

    def classification_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        problem_type = self.config.problem_type
        if problem_type is None:
            if self.num_labels == 1:
                problem_type = "regression"
            elif labels.dtype in (torch.long, torch.int):
                problem_type = "single_label_classification"
            else:
                problem_type = "multi_label_classification"
        labels = labels.to(logits.device)
        if problem_type == "regression":
            if self.num_labels == 1:
                return F.mse_loss(logits.squeeze(-1), labels.squeeze(-1).to(logits.dtype))
            return F.mse_loss(logits, labels.to(logits.dtype))
        if problem_type == "single_label_classification":
            # Host reads: free on the CPU, the opt-in check on an accelerator.
            if (self.check_inputs or host_reads_free(labels)) and not torch.compiler.is_compiling():
                valid = labels[labels != -100]
                if valid.numel() and (int(valid.min()) < 0 or int(valid.max()) >= self.num_labels):
                    raise ValueError(
                        f"Label {int(valid.max()) if int(valid.max()) >= self.num_labels else int(valid.min())} "
                        f"is outside [0, num_labels={self.num_labels})."
                    )
            return F.cross_entropy(logits.view(-1, self.num_labels), labels.view(-1))
        return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))


__all__ = [
    "VanillaTransformerPreTrainedModel",
    "VanillaTransformerModel",
    "VanillaTransformerForConditionalGeneration",
    "VanillaTransformerForCausalLM",
    "VanillaTransformerForSequenceClassification",
    "VanillaTransformerForMaskedLM",
    "eager_attention_forward",
    "sinusoidal_position_encoding",
    "shift_tokens_right",
    "label_smoothed_nll_loss",
]
