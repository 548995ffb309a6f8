"""ELECTRA pre-training of the encoder: replaced-token detection (Clark et al., 2020, "ELECTRA:
Pre-training Text Encoders as Discriminators Rather Than Generators", ICLR 2020).

A small masked-language-model *generator* fills the masked positions of a text with sampled tokens;
the encoder we fine-tune later, the *discriminator*, reads the corrupted text and says, for every
token, whether it is the original or a replacement (§2, Figure 1). The discriminator learns from all
tokens, not only the 15 % masked ones, which is what makes ELECTRA the most compute-efficient of the
objectives the paper compares for small models (§3.3, Table 1, ELECTRA-Small).

* §2: x^masked = REPLACE(x, m, [MASK]) at ~15 % of the positions m (drawn in the forward pass); the
  generator predicts p_G(x_t | x^masked) at the masked positions (Eq. 1), x̂_t ~ p_G is sampled there
  and x^corrupt = REPLACE(x, m, x̂); the discriminator D(x^corrupt, t) = sigmoid(w^T h_D(x^corrupt)_t)
  (Eq. 2). A sampled token equal to the original counts as original.
* §2, Eq. 3: the loss is L_MLM(x, θ_G) + λ L_Disc(x, θ_D), λ = 50; the discriminator's loss does not
  flow back into the generator through the sampling.
* §3.2: generator and discriminator share the token embeddings; the generator is smaller (a quarter to
  a half of the discriminator's width works best, Figure 3). Here the generator reads the
  discriminator's embeddings through a linear projection to its own width (as ELECTRA's code does when
  the widths differ) and predicts through the same embedding matrix. Sinusoidal positions (§3.5 of
  the Transformer paper) have no parameters to share; learned ones are the generator's own.

Only the discriminator's encoder is kept after pre-training: ``VanillaTransformerModel``, whose weights
load into ``VanillaTransformerForSequenceClassification`` (§3.3: the generator is thrown away).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers.activations import ACT2FN
from transformers.utils import ModelOutput

from ...configuration_vanilla_transformer import VanillaTransformerConfig
from ...modeling_vanilla_transformer import (
    VanillaTransformerEncoder,
    VanillaTransformerModel,
    VanillaTransformerPreTrainedModel,
)


def generator_config(config: VanillaTransformerConfig, size: float) -> VanillaTransformerConfig:
    """The generator's config (§3.2): the discriminator's, with ``d_model``, ``d_ff`` and the number of
    heads scaled by ``size`` (ELECTRA-Small's generator: 1/4), the same number of layers."""
    if not 0 < size <= 1:
        raise ValueError(f"`generator_size` must be a fraction of the discriminator in (0, 1], got {size!r}.")
    heads = max(1, round(config.num_heads * size))
    width = max(heads, round(config.d_model * size / heads) * heads)  # a multiple of the heads
    values = config.to_dict() | {
        "d_model": width,
        "d_ff": max(1, round(config.d_ff * size)),
        "num_heads": heads,
        "d_k": None,
        "d_v": None,
    }
    generator = VanillaTransformerConfig.from_dict(values)
    generator._attn_implementation = config._attn_implementation
    return generator


class ElectraGenerator(nn.Module):
    """§2, Eq. 1 / §3.2: the small masked-LM generator over the discriminator's token embeddings.

    (B, S, D) embedded masked text -> projection to its width Dg -> N encoder layers -> at the masked
    positions only: dense, activation, LayerNorm back to D -> logits through the shared (V, D) embedding
    matrix plus a bias (BERT's tied output layer)."""

    def __init__(self, config: VanillaTransformerConfig, embedding_dim: int, vocab_size: int):
        super().__init__()
        self.project = nn.Linear(embedding_dim, config.d_model) if config.d_model != embedding_dim else None
        self.encoder = VanillaTransformerEncoder(config, embed_tokens=None)  # reads inputs_embeds only
        self.transform = nn.Linear(config.d_model, embedding_dim)
        self.activation = ACT2FN[config.activation]
        self.layer_norm = nn.LayerNorm(embedding_dim, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(
        self,
        embeddings: torch.Tensor,
        attention_mask: torch.Tensor | None,
        masked: torch.Tensor,
        embedding_matrix: torch.Tensor,
    ) -> torch.Tensor:
        """(B, S, D) embeddings, (B, S) padding mask, (B, S) bool masked positions, (V, D) matrix ->
        (M, V) logits at the M masked positions."""
        hidden = self.project(embeddings) if self.project is not None else embeddings  # (B, S, Dg)
        hidden = self.encoder(inputs_embeds=hidden, attention_mask=attention_mask).last_hidden_state
        hidden = hidden[masked]  # (M, Dg): the head runs only where there is something to predict
        hidden = self.layer_norm(self.activation(self.transform(hidden)))  # (M, D)
        return F.linear(hidden, embedding_matrix, self.bias)  # (M, V)


@dataclass
class ElectraPreTrainingOutput(ModelOutput):
    """``loss`` = ``mlm_loss`` + λ ``discriminator_loss`` (Eq. 3); ``replaced_fraction``: of the real
    tokens, how many were replaced (a discriminator that always answers that rate has the binary entropy
    of it as its loss: the baseline to beat); ``logits``: (B, S) replaced-token scores; ``replaced``:
    (B, S) whether each token was replaced."""

    loss: torch.Tensor | None = None
    mlm_loss: torch.Tensor | None = None
    discriminator_loss: torch.Tensor | None = None
    replaced_fraction: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    replaced: torch.Tensor | None = None


class ElectraForPreTraining(VanillaTransformerPreTrainedModel):
    """Generator + discriminator trained jointly on Eq. 3 (§2). ``model`` is the discriminator's encoder
    (named as in every other head model: ``model.encoder.layers.0...``); ``discriminator_dense`` and
    ``discriminator_out`` its per-token head (dense, activation, dense to one logit, as in ELECTRA).

    The forward pass masks the text itself (§2's m and x^masked) and samples the replacements, with
    ``generator`` or torch's global random state, which Trainer checkpoints save and restore: a resumed
    run masks and samples as the uninterrupted one. (Masking in a data collator would not repeat: the
    data loader collates the next batch before the checkpoint is written.)"""

    accepts_loss_kwargs = False  # the loss is a mean per micro-batch; the Trainer scales accumulation

    def __init__(
        self,
        config: VanillaTransformerConfig,
        mask_token_id: int,
        special_token_ids: list[int],
        mask_probability: float = 0.15,
        generator_size: float = 0.25,
        discriminator_weight: float = 50.0,
    ):
        if config.is_encoder_decoder or config.is_decoder:
            raise ValueError(
                "ELECTRA pre-trains the encoder alone: use `is_encoder_decoder=False, is_decoder=False`."
            )
        super().__init__(config)
        self.mask_token_id = mask_token_id
        self.mask_probability = mask_probability
        self.discriminator_weight = discriminator_weight
        self.register_buffer("special_token_ids", torch.tensor(sorted(special_token_ids)), persistent=False)
        self.model = VanillaTransformerModel(config)
        self.discriminator_dense = nn.Linear(config.d_model, config.d_model)
        self.discriminator_activation = ACT2FN[config.activation]
        self.discriminator_out = nn.Linear(config.d_model, 1)
        self.generator = ElectraGenerator(
            generator_config(config, generator_size), config.d_model, config.vocab_size
        )
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
        return_loss: bool = True,
        **kwargs,
    ) -> ElectraPreTrainingOutput:
        """``input_ids`` (B, S): the text x (special tokens and padding are never masked)."""
        real = (
            attention_mask.bool()
            if attention_mask is not None
            else torch.ones_like(input_ids, dtype=torch.bool)
        )
        maskable = real & ~torch.isin(input_ids, self.special_token_ids)
        draw = torch.rand(input_ids.shape, generator=generator, device=input_ids.device)
        masked = maskable & (draw < self.mask_probability)  # (B, S): m
        masked_ids = input_ids.masked_fill(masked, self.mask_token_id)  # x^masked
        embed = self.model.encoder.embed_tokens  # shared with the generator (§3.2)
        generator_logits = self.generator(embed(masked_ids), attention_mask, masked, embed.weight)  # (M, V)
        targets = input_ids[masked]  # (M,)
        if masked.any():
            mlm_loss = F.cross_entropy(generator_logits.float(), targets)  # Eq. 3, L_MLM
        else:
            mlm_loss = generator_logits.float().sum() * 0.0
        with torch.no_grad():  # x̂ ~ p_G: no gradient through the sampling (§2)
            probabilities = F.softmax(generator_logits.float(), dim=-1)
            sampled = (
                torch.multinomial(probabilities, 1, generator=generator).squeeze(-1)
                if masked.any()
                else targets
            )
        corrupted = input_ids.masked_scatter(masked, sampled)  # (B, S): x^corrupt
        replaced = corrupted != input_ids  # a sample equal to the original is "original" (§2)
        hidden = self.model(input_ids=corrupted, attention_mask=attention_mask).last_hidden_state  # (B, S, D)
        logits = self.discriminator_out(self.discriminator_activation(self.discriminator_dense(hidden)))
        logits = logits.squeeze(-1)  # (B, S): Eq. 2 before the sigmoid
        discriminator_loss = F.binary_cross_entropy_with_logits(
            logits[real].float(), replaced[real].float()
        )  # Eq. 3, L_Disc: every real token
        loss = mlm_loss + self.discriminator_weight * discriminator_loss
        return ElectraPreTrainingOutput(
            loss=loss,
            mlm_loss=mlm_loss.detach(),
            discriminator_loss=discriminator_loss.detach(),
            replaced_fraction=replaced[real].float().mean(),
            logits=logits,
            replaced=replaced,
        )

    def discriminator(self) -> VanillaTransformerModel:
        """The encoder to keep (§3.3): it loads into ``VanillaTransformerForSequenceClassification``."""
        return self.model


__all__ = ["ElectraForPreTraining", "ElectraGenerator", "ElectraPreTrainingOutput", "generator_config"]
