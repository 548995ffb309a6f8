"""The systems compared, each built at a preset's dimensions with random weights (nothing downloaded).

- ``ours``: ``VanillaTransformerForConditionalGeneration``, its own label-smoothed loss and ``generate()``;
  training with the dropout mask our trainers install on CPUs where torch's is serial (``fast_dropout.py``)
  and the projection + loss they fuse on CPUs (``fused_output_loss.py``).
- ``ours-compiled``: the same model under ``torch.compile``; generation with a static cache.
- ``marian``: transformers' ``MarianMTModel`` (ReLU, static sinusoidal positions, ``scale_embedding``,
  shared and tied embeddings: the closest built-in relative of the paper's model).
- ``torch-nn``: ``torch.nn.Transformer`` with tied embeddings, sinusoidal positions and a tied output
  projection (training only: it has no decoding loop).
- ``ctranslate2``: the C++ engine, fp32, on the converted random Marian weights (generation only).
- ``ours-bf16``: our fast bf16 path: training as ``mixed_precision: bf16`` runs it on a CPU (autocast,
  eager attention; fp32 weights and Adam state), generation with bf16 weights
  (``prepare_for_inference(dtype=torch.bfloat16)``).
- ``ours-int8``: generation with int8 dynamically quantised linear layers (``prepare_for_inference``).
- ``marian-bf16``: Marian under ``torch.autocast`` bf16 for training (what a Marian user gets by turning
  bf16 on), with bf16 weights for generation.
- ``ctranslate2-int8``: CTranslate2 with ``compute_type="int8"`` on the same Marian weights.
- ``ctranslate2-ours``: CTranslate2 fp32 on our model, converted by ``export-ct2`` (generation only).
- ``ours-onnx``: our model exported to ONNX and decoded greedily in onnxruntime (greedy rows only).

Every trainer takes the same step: forward, label-smoothed cross-entropy (§5.4, 0.1), backward and
fused Adam (§5.3: betas 0.9/0.98, eps 1e-9). Generators produce exactly ``new_tokens`` tokens (EOS
suppressed) from the same source ids.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from .presets import DROPOUT, LABEL_SMOOTHING

PAD, BOS, EOS = 0, 1, 2  # ours; Marian keeps EOS 2 and moves <pad> (its start token) to the last id


def adam(parameters) -> torch.optim.Optimizer:
    """§5.3's Adam, fused: what our trainer runs, and what transformers' Trainer gives every model on
    torch >= 2.8 (its default ``optim`` is ``adamw_torch_fused``), so every system steps the same way."""
    return torch.optim.Adam(parameters, lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)


def smoothed_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(
        logits.reshape(-1, logits.size(-1)), labels.reshape(-1), label_smoothing=LABEL_SMOOTHING
    )


class TrainingStep:
    """The common step: ``loss`` (each system's forward and label-smoothed loss), backward, fused Adam;
    under bf16 autocast when ``bf16`` is set (weights and Adam state stay fp32)."""

    model: nn.Module
    optimizer: torch.optim.Optimizer | None = None
    bf16: bool = False

    def loss(self, source, decoder_input, labels) -> torch.Tensor:
        raise NotImplementedError

    def train_step(self, source, decoder_input, labels) -> float:
        self.optimizer = self.optimizer or adam(self.model.parameters())
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
            loss = self.loss(source, decoder_input, labels)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.item()


def fixed_length_generate(model, source, num_beams: int, new_tokens: int, **extra) -> torch.Tensor:
    """transformers' ``generate()`` with exactly ``new_tokens`` new tokens per row (EOS suppressed)."""
    output = model.eval().generate(
        input_ids=source,
        attention_mask=torch.ones_like(source),
        num_beams=num_beams,
        do_sample=False,
        min_new_tokens=new_tokens,
        max_new_tokens=new_tokens,
        length_penalty=1.0,
        **extra,
    )
    return output[:, 1:]  # the new tokens


class Ours(TrainingStep):
    def __init__(self, preset: dict, compiled: bool = False, precision: str = "fp32", device: str = "cpu"):
        """``device``: where the trainers' per-device choices are made for (CPU-only kernels are not
        installed on a GPU); the caller moves the model there."""
        from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
        from vanilla_transformer.fast_dropout import use_fast_dropout
        from vanilla_transformer.fused_output_loss import use_fused_output_loss

        config = VanillaTransformerConfig(
            **preset,
            dropout=DROPOUT,
            label_smoothing=LABEL_SMOOTHING,
            max_position_embeddings=512,
            pad_token_id=PAD,
            bos_token_id=BOS,
            eos_token_id=EOS,
        )
        self.model = VanillaTransformerForConditionalGeneration(config)
        self.start = config.decoder_start_token_id
        # Our trainers' dropout mask on a CPU whose torch dropout is serial (fast_dropout.py); off when
        # VT_BENCH_TORCH_DROPOUT=1, to measure what it buys.
        if not os.environ.get("VT_BENCH_TORCH_DROPOUT"):
            use_fast_dropout(self.model, torch.device(device))
        # and their fused projection + loss (fused_output_loss.py); off when VT_BENCH_UNFUSED_LOSS=1
        if not os.environ.get("VT_BENCH_UNFUSED_LOSS"):
            use_fused_output_loss(self.model, torch.device(device))
        self.forward = torch.compile(self.model) if compiled else self.model
        self.compiled = compiled
        self.forward_compiled = False
        self.precision = precision
        if precision == "bf16":  # what the training loop does for mixed_precision: bf16 on a CPU
            from vanilla_transformer.precision import use_fast_bf16_kernels

            use_fast_bf16_kernels(self.model, {"used": "bf16"}, torch.device(device))
            self.bf16 = True
        self.prepared = False

    def loss(self, source, decoder_input, labels) -> torch.Tensor:
        mask = torch.ones_like(source)
        return self.forward(
            input_ids=source, attention_mask=mask, decoder_input_ids=decoder_input, labels=labels
        ).loss

    def generate(self, source, num_beams: int, new_tokens: int, use_cache: bool = True) -> torch.Tensor:
        if self.precision != "fp32" and not self.prepared:
            from vanilla_transformer.inference import prepare_for_inference

            self.model.set_attn_implementation("sdpa")
            prepare_for_inference(
                self.model,
                dtype=torch.bfloat16 if self.precision == "bf16" else None,
                quantize="int8" if self.precision == "int8" else None,
            )
            self.prepared = True
        static = self.compiled and use_cache
        if static and not self.forward_compiled:
            self.model.forward = torch.compile(self.model.forward, fullgraph=True)
            self.forward_compiled = True
        extra = {"cache_implementation": "static"} if static else {}
        return fixed_length_generate(self.model, source, num_beams, new_tokens, use_cache=use_cache, **extra)


class Marian(TrainingStep):
    def __init__(self, preset: dict, bf16: bool = False):
        from transformers import MarianConfig, MarianMTModel

        vocab = preset["vocab_size"]
        self.pad = vocab - 1
        self.config = MarianConfig(
            vocab_size=vocab,
            d_model=preset["d_model"],
            encoder_layers=preset["num_encoder_layers"],
            decoder_layers=preset["num_decoder_layers"],
            encoder_attention_heads=preset["num_heads"],
            decoder_attention_heads=preset["num_heads"],
            encoder_ffn_dim=preset["d_ff"],
            decoder_ffn_dim=preset["d_ff"],
            activation_function="relu",
            scale_embedding=True,
            share_encoder_decoder_embeddings=True,
            tie_word_embeddings=True,
            max_position_embeddings=512,
            dropout=DROPOUT,
            attention_dropout=0.0,
            activation_dropout=0.0,
            pad_token_id=self.pad,
            eos_token_id=EOS,
            bos_token_id=BOS,
            decoder_start_token_id=self.pad,
            forced_eos_token_id=None,
        )
        self.model = MarianMTModel(self.config)
        self.start = self.pad
        self.bf16 = bf16
        self.prepared = False

    def loss(self, source, decoder_input, labels) -> torch.Tensor:
        logits = self.model(
            input_ids=source, attention_mask=torch.ones_like(source), decoder_input_ids=decoder_input
        ).logits
        return smoothed_loss(logits, labels)

    def generate(self, source, num_beams: int, new_tokens: int) -> torch.Tensor:
        if self.bf16 and not self.prepared:
            self.model.to(torch.bfloat16)
            self.prepared = True
        # <pad> banned, as released Marian models do; CTranslate2 drops it from its vocabulary.
        return fixed_length_generate(self.model, source, num_beams, new_tokens, bad_words_ids=[[self.pad]])

    def save_for_ctranslate2(self, folder: Path) -> Path:
        """Save the model with a word-level tokenizer whose tokens name the ids (CTranslate2 reads both)."""
        self.model.save_pretrained(folder)
        specials = {BOS: "<s>", EOS: "</s>", 3: "<unk>", self.pad: "<pad>"}
        word_level_tokenizer(self.config.vocab_size, specials).save_pretrained(folder)
        return folder


def word_level_tokenizer(vocab_size: int, specials: dict[int, str]):
    """A tokenizer whose tokens name the ids (``t17``), for random-weight models that CTranslate2 converts."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {specials.get(i, f"t{i}"): i for i in range(vocab_size)}
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<unk>")),
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
    )


class CTranslate2:
    """CTranslate2 on the converted Marian weights (``ctranslate2``, ``ctranslate2-int8``), or on our model
    exported by ``export-ct2`` (``ctranslate2-ours``: same engine, so any gap is a conversion defect)."""

    def __init__(self, preset: dict, threads: int, compute_type: str = "float32", ours: bool = False):
        import ctranslate2

        self.work = tempfile.TemporaryDirectory()
        converted = Path(self.work.name) / "ct2"
        if ours:
            from vanilla_transformer.ctranslate2_export import export_ctranslate2

            self.source_model = Ours(preset).model
            saved = Path(self.work.name) / "ours"
            self.source_model.save_pretrained(saved)
            word_level_tokenizer(
                preset["vocab_size"], {PAD: "<pad>", BOS: "<s>", EOS: "</s>", 3: "<unk>"}
            ).save_pretrained(saved)
            export_ctranslate2(saved, converted)
        else:
            self.marian = Marian(preset)
            saved = self.marian.save_for_ctranslate2(Path(self.work.name) / "marian")
            ctranslate2.converters.TransformersConverter(str(saved)).convert(str(converted), force=True)
        self.translator = ctranslate2.Translator(
            str(converted), device="cpu", compute_type=compute_type, inter_threads=1, intra_threads=threads
        )

    def generate(self, source, num_beams: int, new_tokens: int) -> torch.Tensor:
        tokens = [[self._token(i) for i in row] for row in source.tolist()]
        results = self.translator.translate_batch(
            tokens,
            beam_size=num_beams,
            min_decoding_length=new_tokens,
            max_decoding_length=new_tokens,
            length_penalty=1.0,
            max_batch_size=len(tokens),
        )
        return torch.tensor([[self._id(t) for t in result.hypotheses[0]] for result in results])

    def reference(self, source, new_tokens: int) -> torch.Tensor:
        """Greedy tokens of the PyTorch model the engine runs (ours: the eager path without cache)."""
        if not hasattr(self, "source_model"):
            return self.marian.generate(source, num_beams=1, new_tokens=new_tokens)
        self.source_model.eval().set_attn_implementation("eager")
        return fixed_length_generate(self.source_model, source, 1, new_tokens, use_cache=False)

    def _token(self, index: int) -> str:
        return {BOS: "<s>", EOS: "</s>", 3: "<unk>"}.get(index, f"t{index}")

    @staticmethod
    def _id(token: str) -> int:
        return {"<pad>": PAD, "<s>": BOS, "</s>": EOS, "<unk>": 3}.get(token) or int(token[1:])


class OursOnnx:
    """Our model exported to ONNX (``export-onnx``: encoder, first step, step with past) and decoded
    greedily in onnxruntime by ``OnnxSeq2Seq`` (no beam search there)."""

    beams = (1,)

    def __init__(self, preset: dict, threads: int):
        from vanilla_transformer.onnx_export import OnnxSeq2Seq, export_onnx

        self.model = Ours(preset).model.eval()
        self.work = tempfile.TemporaryDirectory()
        export_onnx(self.model, self.work.name)
        self.engine = OnnxSeq2Seq(self.work.name)

    def generate(self, source, num_beams: int, new_tokens: int) -> torch.Tensor:
        mask = torch.ones_like(source).numpy()
        tokens = self.engine.generate(
            source.numpy(), mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens, num_beams=num_beams
        )
        return torch.from_numpy(tokens[:, 1:])


class SinusoidalPositions(nn.Module):
    def __init__(self, d_model: int, max_length: int = 512):
        super().__init__()
        position = torch.arange(max_length).unsqueeze(1)
        frequencies = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        table = torch.zeros(max_length, d_model)
        table[:, 0::2], table[:, 1::2] = torch.sin(position * frequencies), torch.cos(position * frequencies)
        self.register_buffer("table", table, persistent=False)

    def forward(self, length: int) -> torch.Tensor:
        return self.table[:length]


class TorchTransformerModel(nn.Module):
    """``nn.Transformer`` (post-LN, ReLU) with one embedding shared by source, target and output."""

    def __init__(self, preset: dict):
        super().__init__()
        d = preset["d_model"]
        self.scale = math.sqrt(d)
        self.embed = nn.Embedding(preset["vocab_size"], d)
        nn.init.normal_(self.embed.weight, std=d**-0.5)
        self.positions = SinusoidalPositions(d)
        self.transformer = nn.Transformer(
            d_model=d,
            nhead=preset["num_heads"],
            num_encoder_layers=preset["num_encoder_layers"],
            num_decoder_layers=preset["num_decoder_layers"],
            dim_feedforward=preset["d_ff"],
            dropout=DROPOUT,
            batch_first=True,
        )
        self.dropout = nn.Dropout(DROPOUT)

    def embed_tokens(self, ids: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.embed(ids) * self.scale + self.positions(ids.shape[1]))

    def forward(self, source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        causal = nn.Transformer.generate_square_subsequent_mask(target.shape[1])
        padding = source == PAD
        hidden = self.transformer(
            self.embed_tokens(source),
            self.embed_tokens(target),
            tgt_mask=causal,
            tgt_is_causal=True,
            src_key_padding_mask=padding,
            memory_key_padding_mask=padding,
        )
        return F.linear(hidden, self.embed.weight)


class TorchTransformer(TrainingStep):
    def __init__(self, preset: dict):
        self.model = TorchTransformerModel(preset)
        self.start = BOS

    def loss(self, source, decoder_input, labels) -> torch.Tensor:
        return smoothed_loss(self.model(source, decoder_input), labels)


MEASURES = {  # system -> what it is measured on (nn.Transformer has no decoding loop, CTranslate2 no training)
    "ours": ("train", "generate"),
    "ours-compiled": ("train", "generate"),
    "marian": ("train", "generate"),
    "torch-nn": ("train",),
    "ctranslate2": ("generate",),
    "ours-bf16": ("train", "generate"),
    "marian-bf16": ("train", "generate"),
    "torch-nn-bf16": ("train",),
    "ours-int8": ("generate",),
    "ctranslate2-int8": ("generate",),
    "ctranslate2-ours": ("generate",),
    "ours-onnx": ("generate",),
}
# The system each one's ratio is taken to: Marian of the same precision (CTranslate2 int8: fp32 Marian).
# Our CTranslate2 export is compared with CTranslate2 on Marian's weights: the same engine.
BASELINES = {"ours-bf16": "marian-bf16", "torch-nn-bf16": "marian-bf16", "ctranslate2-ours": "ctranslate2"}
SYSTEMS = tuple(MEASURES)


def build(name: str, preset: dict, threads: int):
    if name == "ours":
        return Ours(preset)
    if name == "ours-compiled":
        return Ours(preset, compiled=True)
    if name == "marian":
        return Marian(preset)
    if name == "torch-nn":
        return TorchTransformer(preset)
    if name == "ctranslate2":
        return CTranslate2(preset, threads)
    if name in ("ours-bf16", "ours-int8"):
        return Ours(preset, precision=name.split("-")[1])
    if name == "marian-bf16":
        return Marian(preset, bf16=True)
    if name == "torch-nn-bf16":
        system = TorchTransformer(preset)
        system.bf16 = True
        return system
    if name == "ctranslate2-int8":
        return CTranslate2(preset, threads, compute_type="int8")
    if name == "ctranslate2-ours":
        return CTranslate2(preset, threads, ours=True)
    if name == "ours-onnx":
        return OursOnnx(preset, threads)
    raise ValueError(f"Unknown system {name!r}; choose from {', '.join(SYSTEMS)}.")
