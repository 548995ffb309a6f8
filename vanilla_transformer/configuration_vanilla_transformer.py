"""Configuration of the Transformer of "Attention Is All You Need" (Vaswani et al., 2017).

The field names follow the paper's Table 3 (``d_model``, ``d_ff``, ``h`` as ``num_heads``, ``d_k``,
``d_v``, ``N`` as ``num_encoder_layers`` / ``num_decoder_layers``, ``P_drop`` as ``dropout``,
``epsilon_ls`` as ``label_smoothing``). The HF-standard names (``hidden_size``,
``num_attention_heads``, ``intermediate_size``, ``num_hidden_layers``, ``head_dim``) are aliases, so
generic tools (generation caches, PEFT, Trainer) find what they look for.

One config describes all three shapes of the model:

* ``is_encoder_decoder=True`` (the default): the paper's encoder-decoder (translation).
* ``is_encoder_decoder=False, is_decoder=False``: the encoder stack alone (BERT-style classifier).
* ``is_encoder_decoder=False, is_decoder=True``: the decoder stack alone without cross-attention
  (GPT-style causal LM).

This file is copied next to saved checkpoints (remote code): it imports only transformers.
"""

from __future__ import annotations

from transformers import PretrainedConfig

POSITION_ENCODINGS = ("sinusoidal", "learned")
NORM_POSITIONS = ("post", "pre")
ACTIVATIONS = ("relu", "gelu", "silu", "gelu_new")
LONG_TEXT_STRATEGIES = ("head", "head_tail", "windows")

# Table 3 of the paper: the two named configurations of §6.1 / §6.2.
PRESETS: dict[str, dict] = {
    "base": {
        "num_encoder_layers": 6,
        "num_decoder_layers": 6,
        "d_model": 512,
        "d_ff": 2048,
        "num_heads": 8,
        "d_k": 64,
        "d_v": 64,
        "dropout": 0.1,
        "label_smoothing": 0.1,
    },
    "big": {
        "num_encoder_layers": 6,
        "num_decoder_layers": 6,
        "d_model": 1024,
        "d_ff": 4096,
        "num_heads": 16,
        "d_k": 64,
        "d_v": 64,
        "dropout": 0.3,
        "label_smoothing": 0.1,
    },
}


class VanillaTransformerConfig(PretrainedConfig):
    r"""Hyper-parameters of the Transformer (§3, Table 3). Defaults are the paper's *base* model.

    Args:
        vocab_size: size of the shared source/target BPE vocabulary (§5.1 uses ~37,000 for En-De).
        d_model: width of every sub-layer output and of the embeddings (§3.1; 512 in *base*).
        d_ff: inner width of the position-wise feed-forward network (Eq. 2; 2048 in *base*).
        num_heads: number of attention heads ``h`` (§3.2.2; 8 in *base*).
        d_k: width of each head's queries and keys; defaults to ``d_model // num_heads`` (§3.2.2).
            Settable on its own, as in Table 3 row (B). Left unset when ``num_heads`` does not divide
            ``d_model``; building a model from such a config raises a ``ValueError`` naming the fields.
        d_v: width of each head's values; defaults to ``d_model // num_heads``.
        num_encoder_layers: ``N`` for the encoder stack (§3.1; 6).
        num_decoder_layers: ``N`` for the decoder stack (§3.1; 6).
        dropout: ``P_drop`` (§5.4), applied to each sub-layer output before the residual add and to
            the sum of embeddings and positional encodings.
        attention_dropout: dropout on the attention probabilities. Not in the paper (0 by default).
        activation_dropout: dropout inside the FFN after the activation. Not in the paper (0).
        label_smoothing: ``epsilon_ls`` of §5.4 used by the training loss (0.1).
        position_encoding: ``"sinusoidal"`` (§3.5) or ``"learned"`` (Table 3 row E).
        max_position_embeddings: longest sequence the model is meant for. A hard limit only for learned
            positions; sinusoids extrapolate.
        norm_position: ``"post"`` = LayerNorm(x + Sublayer(x)) as in §3.1; ``"pre"`` = x +
            Sublayer(LayerNorm(x)) with a final LayerNorm per stack (a deviation, off by default).
        activation: FFN non-linearity; the paper uses ``"relu"`` (Eq. 2).
        attention_bias: bias vectors on the Q/K/V/output projections. §3.2.2 writes them as plain
            matrices; nearly every implementation (and the parameter counts we test) includes biases,
            so the default is ``True``. ``False`` gives the equations literally.
        layer_norm_eps: epsilon of every LayerNorm.
        scale_embedding: multiply embeddings by ``sqrt(d_model)`` (§3.4).
        share_embeddings: one embedding matrix for source and target (§3.4, with a shared BPE vocab).
        tie_word_embeddings: tie the pre-softmax linear transformation to the target embedding (§3.4).
        init_std: standard deviation of the embedding initialisation; defaults to ``d_model ** -0.5``
            so that scaled embeddings start with unit variance. Linear layers use Xavier-uniform.
        classifier_pooling: how the sequence classifier pools encoder states: ``"mean"`` over real
            (non-padding) tokens, or ``"first"`` token (a BERT-style ``[CLS]``).
        classifier_dropout: dropout before the classification head; defaults to ``dropout``.
        classifier_long_text: how the sequence classifier reads a text longer than
            ``classifier_max_length`` tokens: ``"head"`` (its first tokens), ``"head_tail"`` (its first
            ``classifier_head_tokens`` and its last tokens; Sun et al., 2019, §5.3.1) or ``"windows"``
            (windows every ``classifier_window_stride`` tokens that cover the whole text, their logits
            averaged). Read by ``classification_pipeline.py`` and ``classify evaluate``, which share one
            implementation, so the pipeline classifies as the recipe evaluated. Default ``"head_tail"``.
        classifier_max_length: tokens the classifier reads at once, ``</s>`` included; defaults to
            ``max_position_embeddings``.
        classifier_head_tokens: ``"head_tail"``: tokens kept from the start of a long text (128).
        classifier_window_stride: ``"windows"``: tokens between the starts of two windows; defaults to
            half a window. At most ``classifier_max_length - 1``, so that no token is skipped.
        sparse_prediction: masked-LM training computes the vocabulary head only at the masked
            positions (labels != -100) and returns those logits, flattened to (masked, V), as
            ModernBERT's option of the same name does. Most of a small encoder's pre-training time is
            the (B, S, V) head and its softmax; with 15 % masking this removes ~85 % of it. Without
            labels the head runs everywhere, as ``pipeline("fill-mask")`` needs. Off by default.
        source_lang: language code of the text a translation model reads (e.g. ``"de"``), recorded by
            the training run; the translation pipeline checks ``src_lang`` against it. Optional.
        target_lang: language code of the text a translation model writes (e.g. ``"en"``). Optional.
        tokenizer_fingerprint: SHA-256 (64 hex digits) of the vocabulary and special-token ids of the
            tokenizer the model was trained with (``vanilla_transformer.tokenization.tokenizer_fingerprint``),
            recorded by the training run, so that a folder's tokenizer is checked against its model, not
            only by its size. Optional: a config without one (saved by other tools) checks the size only.

    Example:
        >>> from vanilla_transformer import VanillaTransformerConfig
        >>> config = VanillaTransformerConfig.from_preset("base", vocab_size=37000)
        >>> config.d_model, config.num_attention_heads, config.d_k
        (512, 8, 64)
    """

    model_type = "vanilla_transformer"
    # Trainer drops the key/value cache from evaluation outputs under either name (`cache` from 5.24).
    keys_to_ignore_at_inference = ["cache", "past_key_values"]
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "num_heads",
        "intermediate_size": "d_ff",
        "head_dim": "d_k",
        "encoder_layers": "num_encoder_layers",
        "decoder_layers": "num_decoder_layers",
        "hidden_dropout_prob": "dropout",
        "attention_probs_dropout_prob": "attention_dropout",
    }

    vocab_size: int = 37000
    d_model: int = 512
    d_ff: int = 2048
    num_heads: int = 8
    d_k: int | None = None
    d_v: int | None = None
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    label_smoothing: float = 0.1
    position_encoding: str = "sinusoidal"
    max_position_embeddings: int = 1024
    norm_position: str = "post"
    activation: str = "relu"
    attention_bias: bool = True
    layer_norm_eps: float = 1e-5
    scale_embedding: bool = True
    share_embeddings: bool = True
    tie_word_embeddings: bool = True
    init_std: float | None = None
    classifier_pooling: str = "mean"
    classifier_dropout: float | None = None
    classifier_long_text: str = "head_tail"
    classifier_max_length: int | None = None
    classifier_head_tokens: int = 128
    classifier_window_stride: int | None = None
    sparse_prediction: bool = False
    source_lang: str | None = None
    target_lang: str | None = None
    tokenizer_fingerprint: str | None = None
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | None = 2
    # The paper names no start symbol; like fairseq, decoding starts from BOS unless told otherwise.
    decoder_start_token_id: int | None = None
    is_encoder_decoder: bool = True
    is_decoder: bool = False
    use_cache: bool = True

    def __post_init__(self, **kwargs):
        # The base class resolves HF aliases in ``kwargs`` (e.g. ``hidden_size``) onto our fields first.
        super().__post_init__(**kwargs)
        if self.decoder_start_token_id is None:
            self.decoder_start_token_id = self.bos_token_id
        self._derive_and_validate()

    # -- derived values ---------------------------------------------------------------------------

    def _derive_and_validate(self) -> None:
        """Fill the derived defaults and check every field once; errors name the field."""
        for name in ("vocab_size", "d_model", "d_ff", "num_heads", "max_position_embeddings"):
            _require_positive_int(name, getattr(self, name))
        for name in ("num_encoder_layers", "num_decoder_layers"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"`{name}` must be a non-negative integer, got {value!r}.")
        # §3.2.2: d_k = d_v = d_model / h unless given. A width h does not divide leaves them unset: the
        # config still saves and loads (as transformers' own configs do), and building a model names the
        # fields (VanillaTransformerAttention).
        if self.d_model % self.num_heads == 0:
            self.d_k = self.d_model // self.num_heads if self.d_k is None else self.d_k
            self.d_v = self.d_model // self.num_heads if self.d_v is None else self.d_v
        for name in ("d_k", "d_v"):
            if getattr(self, name) is not None:
                _require_positive_int(name, getattr(self, name))
        for name in ("dropout", "attention_dropout", "activation_dropout", "label_smoothing"):
            _require_probability(name, getattr(self, name))
        if self.classifier_dropout is not None:
            _require_probability("classifier_dropout", self.classifier_dropout)
        _require_choice("position_encoding", self.position_encoding, POSITION_ENCODINGS)
        _require_choice("norm_position", self.norm_position, NORM_POSITIONS)
        _require_choice("activation", self.activation, ACTIVATIONS)
        _require_choice("classifier_pooling", self.classifier_pooling, ("mean", "first"))
        self._validate_long_text()
        if self.init_std is not None and not self.init_std > 0:
            raise ValueError(f"`init_std` must be positive, got {self.init_std!r}.")
        if not self.layer_norm_eps > 0:
            raise ValueError(f"`layer_norm_eps` must be positive, got {self.layer_norm_eps!r}.")
        for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
            value = getattr(self, name)
            if isinstance(value, int) and not 0 <= value < self.vocab_size:
                raise ValueError(f"`{name}` ({value}) must lie in [0, vocab_size={self.vocab_size}).")
        fingerprint = self.tokenizer_fingerprint
        if fingerprint is not None and not (
            isinstance(fingerprint, str)
            and len(fingerprint) == 64
            and all(c in "0123456789abcdef" for c in fingerprint)
        ):
            raise ValueError(
                f"`tokenizer_fingerprint` must be a SHA-256 in 64 lowercase hex digits, got {fingerprint!r}."
            )
        if self.is_encoder_decoder and self.is_decoder:
            raise ValueError(
                "`is_decoder=True` selects the decoder-only model; it cannot be combined with "
                "`is_encoder_decoder=True`."
            )

    def _validate_long_text(self) -> None:
        validate_long_text(
            self.classifier_long_text,
            self.classifier_max_length,
            self.classifier_head_tokens,
            self.classifier_window_stride,
            prefix="classifier_",
            window=self.classifier_max_length or self.max_position_embeddings,
        )
        if (
            self.classifier_max_length is not None
            and self.position_encoding == "learned"
            and self.classifier_max_length > self.max_position_embeddings
        ):
            raise ValueError(
                f"`classifier_max_length` ({self.classifier_max_length}) exceeds `max_position_embeddings` "
                f"({self.max_position_embeddings}), the number of learned positions."
            )

    @property
    def embedding_init_std(self) -> float:
        """Standard deviation of the embedding initialisation (``init_std`` or ``d_model ** -0.5``)."""
        return self.init_std if self.init_std is not None else self.d_model**-0.5

    @property
    def num_hidden_layers(self) -> int:
        """HF alias: layers of the stack that generates (decoder), or of the encoder when there is none.

        Generation builds its key/value caches from this number. Setting it sets ``N`` of both stacks
        in the encoder-decoder model (the paper uses one ``N`` for both, §3.1).
        """
        if self.is_encoder_decoder or self.is_decoder:
            return self.num_decoder_layers
        return self.num_encoder_layers

    @num_hidden_layers.setter
    def num_hidden_layers(self, value: int) -> None:
        if self.is_encoder_decoder:
            self.num_encoder_layers = value
            self.num_decoder_layers = value
        elif self.is_decoder:
            self.num_decoder_layers = value
        else:
            self.num_encoder_layers = value

    # -- presets ------------------------------------------------------------------------------------

    @classmethod
    def from_preset(cls, name: str, **overrides) -> VanillaTransformerConfig:
        """Table 3's named rows: ``"base"`` (65M parameters) or ``"big"`` (213M).

        ``overrides`` replace any field, e.g. ``from_preset("big", vocab_size=32000, dropout=0.1)``
        (the paper's En-Fr big model used P_drop = 0.1).
        """
        if name not in PRESETS:
            raise ValueError(f"Unknown preset {name!r}; choose one of {sorted(PRESETS)}.")
        return cls(**{**PRESETS[name], **overrides})


def validate_long_text(
    strategy, max_length, head_tokens, stride, prefix: str = "", window: int | None = None
) -> None:
    """The checks of a long-text reading, written once for the config's ``classifier_*`` fields and for a
    recipe's or a pipeline call's settings (``prefix`` completes the field names the errors give).
    ``max_length``: tokens per view, ``</s>`` included, or None (unset); ``window``: the view length the
    stride is checked against, ``max_length`` unless given."""
    _require_choice(f"{prefix}long_text", strategy, LONG_TEXT_STRATEGIES)
    if max_length is not None:
        _require_positive_int(f"{prefix}max_length", max_length)
        if max_length < 2:
            raise ValueError(
                f"`{prefix}max_length` must leave room for a token and </s> (>= 2), got {max_length}."
            )
    if not isinstance(head_tokens, int) or isinstance(head_tokens, bool) or head_tokens < 0:
        raise ValueError(f"`{prefix}head_tokens` must be a non-negative integer, got {head_tokens!r}.")
    window = window or max_length
    if stride is not None:
        _require_positive_int(f"{prefix}window_stride", stride)
        if window is not None and stride > window - 1:
            raise ValueError(
                f"`{prefix}window_stride` ({stride}) must be at most the window's {window - 1} tokens "
                f"({prefix}max_length - 1), or windows would skip text."
            )


def check_token_ids(ids, vocab_size: int, where: str = "", ignore_index: int | None = None) -> None:
    """Refuse token ids outside ``[0, vocab_size)``, naming the first bad extreme, where ids enter: the
    pipelines, ``translate()`` (``translate`` and ``evaluate``), the training runs' tokenized data, and the
    model's forward on the CPU (free there) or under its opt-in ``check_inputs``. On an accelerator the
    forward does not check unless asked: each read of a tensor's value is a device-to-host synchronisation.

    ``ids``: a tensor (call this before the batch moves to an accelerator), or a list of ids or of lists
    of ids (a tokenizer's batch). ``where`` names the input in the error; ``ignore_index`` (the labels'
    -100) is skipped."""
    if hasattr(ids, "numel"):  # a tensor: one read of each extreme
        if ignore_index is not None:
            ids = ids[ids != ignore_index]
        if not ids.numel():
            return
        low, high = int(ids.min()), int(ids.max())
    else:
        rows = ids if len(ids) and isinstance(ids[0], list | tuple) else [ids]
        values = [value for row in rows for value in row if ignore_index is None or value != ignore_index]
        if not values:
            return
        low, high = min(values), max(values)
    if low < 0 or high >= vocab_size:
        bad = high if high >= vocab_size else low
        raise ValueError(
            f"{where + ': ' if where else ''}Token id {bad} is outside the vocabulary: ids must lie in "
            f"[0, vocab_size={vocab_size}). Was the input made with a different tokenizer?"
        )


def _require_positive_int(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")


def _require_probability(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value < 1.0:
        raise ValueError(f"`{name}` must be a probability in [0, 1), got {value!r}.")


def _require_choice(name: str, value, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {list(choices)}, got {value!r}.")


__all__ = [
    "VanillaTransformerConfig",
    "PRESETS",
    "LONG_TEXT_STRATEGIES",
    "check_token_ids",
    "validate_long_text",
]
