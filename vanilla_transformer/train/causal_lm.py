"""Causal language modelling (GPT-style) as a task of the one run (``train/run.py``): the paper's decoder
stack alone (``VanillaTransformerForCausalLM``: masked self-attention, no encoder-decoder attention) trained
to predict each next token of plain text, scored by perplexity.

The data are the classification data's texts (``ClassificationArguments``: JSON Lines / CSV / parquet files
or a Hub data set, with ``unlabelled_files`` for extra text): the training texts less ``validation_size``
held out, plus the unlabelled ones, each ending in ``</s>``, run together and cut into blocks of
``pack_length`` tokens (no padding, every position a target). Validation and test perplexity are
exp(negative log-likelihood per token) over those blocks, unsmoothed (``sequence_losses``), whatever the
training's label smoothing. The saved folder continues a prompt with
``pipeline("text-generation", model=folder, trust_remote_code=True)``."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from datasets import Dataset
from tokenizers import processors
from transformers import default_data_collator

from ..data.classification import check_data_paths, read_texts, split_validation, text_corpus
from ..fast_dropout import use_fast_dropout
from ..loading import is_hub_id
from ..model_card import Result, write_model_card
from ..modeling_vanilla_transformer import VanillaTransformerForCausalLM, sequence_losses
from .classification.arguments import ClassificationArguments, load_classification_arguments
from .classification.data import pretraining_dataset
from .classification.setup import classification_tokenizer, data_name
from .classification.task import EncoderTask
from .common.budget import BudgetedTrainer
from .common.positions import check_lengths
from .common.precision_record import describe_precision
from .common.recipes import SET_BY_RUN, build_config

GENERATED_TOKENS = 60  # the saved generation config's max_new_tokens
# The built-in decoder: four post-LN layers of width 256 (a recipe's `model:` block replaces it whole).
DECODER_MODEL = {"d_model": 256, "d_ff": 1024, "num_heads": 4, "num_decoder_layers": 4, "dropout": 0.1}


@dataclass
class CausalLMArguments(ClassificationArguments):
    """The text task's settings (``ClassificationArguments``: data, tokenizer, ``pack_length``) for a decoder
    alone; labels are not read."""

    set_by_run: ClassVar[tuple[str, ...]] = (*SET_BY_RUN, "num_encoder_layers")
    model: dict[str, Any] = field(
        default_factory=lambda: dict(DECODER_MODEL),
        metadata={"help": "VanillaTransformerConfig fields of the decoder stack."},
    )
    pack_length: int | None = field(
        default=128, metadata={"help": "Tokens per training block: the texts run together and cut."}
    )
    output_dir: str = field(default="runs/causal-lm", metadata={"help": "The run folder."})

    def __post_init__(self):
        if not self.pack_length:
            raise ValueError("`pack_length` must be set: a causal LM trains on blocks of that many tokens.")
        super().__post_init__()


def plain_text_tokenizer(tokenizer):
    """The tokenizer as a language model's (GPT-2's way): it adds no special token to what it encodes. The
    package's tokenizers end every text with ``</s>``, which a prompt must not: a language model reads it as
    the end of the text and starts another (the ``text-generation`` pipeline would continue a new review,
    not the prompt). Training adds ``</s>`` itself, between the texts it packs."""
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(single="$A", pair="$A $B")
    return tokenizer


def language_model_texts(args: CausalLMArguments) -> tuple[list[str], list[str]]:
    """``(corpus, validation)``: the training file's texts, less the validation texts (``validation_file``,
    else ``validation_size`` of its distinct texts, drawn by ``seed``), plus ``unlabelled_files``, less any
    validation or test text (``text_corpus``): perplexity is measured on text never trained on."""
    texts, _ = read_texts(args, args.train_file)
    column = args.text_column
    if args.validation_file:
        held_out = read_texts(args, args.validation_file)[0]
    else:
        data = Dataset.from_dict({column: texts})
        train, validation = split_validation(data, args.validation_size, args.seed, column)
        texts, held_out = list(train[column]), list(validation[column])
    return text_corpus(args, texts, held_out), held_out


class CausalLMTrainer(BudgetedTrainer):
    """``transformers.Trainer`` for the causal LM; its validation hook is perplexity (``evaluate``)."""

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval"):
        """Negative log-likelihood per token over every block of the split (each once, on every process's
        share), unsmoothed, and its exp: ``<prefix>_loss``, ``<prefix>_perplexity``."""
        started = time.monotonic()
        loader = self.get_eval_dataloader(eval_dataset)
        model = self.model.eval()
        totals = torch.zeros(2, dtype=torch.float64, device=self.args.device)  # NLL summed, tokens
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            for batch in loader:
                ids = batch["input_ids"].to(self.args.device)
                with self.compute_loss_context_manager():
                    logits = model(input_ids=ids).logits
                nll, tokens = sequence_losses(logits[:, :-1], ids[:, 1:], 0.0)
                # Per block, so that the gather drops the blocks that even out the processes' last batches.
                rows = torch.stack([nll.double(), tokens.double()], dim=-1)  # (B, 2)
                totals += self.accelerator.gather_for_metrics(rows).sum(0)
        nll, tokens = totals.tolist()
        loss = nll / max(tokens, 1.0)
        metrics = {
            f"{metric_key_prefix}_loss": loss,
            f"{metric_key_prefix}_perplexity": math.exp(min(loss, 50)),
            f"{metric_key_prefix}_tokens": int(tokens),
            f"{metric_key_prefix}_runtime": time.monotonic() - started,
        }
        self.log(dict(metrics))  # the Trainer's log adds the epoch to the dict it is given
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics


class CausalLMTask(EncoderTask):
    name = "causal-lm"
    stage = "train"
    outputs = ("model",)
    staged_checkpoints = False

    def load_arguments(self, recipe, overrides) -> CausalLMArguments:
        args = load_classification_arguments(recipe, overrides, self.stage, CausalLMArguments)
        if (
            args.init_from
        ):  # not built yet: refused rather than half done (the parent's tokenizer, new weights)
            raise ValueError(
                "`init_from`: the causal-lm task trains a decoder from scratch; starting from a trained model "
                "is not supported yet (fine-tune one with transformers' Trainer: docs/fine-tuning.md)."
            )
        args.task = self.name
        return args

    def own_files(self, args, folder: Path) -> list[Path]:
        return super(EncoderTask, self).own_files(args, folder) + [folder / "tokenizer"]

    def settings(self, args: CausalLMArguments) -> dict:
        """What a resumed run must keep: the text's (encoder tasks') settings and the blocks it is cut into."""
        return super().settings(args) | {
            name: getattr(args, name) for name in ("pack_length", "unlabelled_files")
        }

    def check(self, args: CausalLMArguments) -> None:
        check_data_paths(args)
        check_lengths({"pack_length": args.pack_length}, args.model)

    def setup(self, args: CausalLMArguments, folder) -> dict:
        texts, held_out = language_model_texts(args)
        return {"texts": texts, "held_out": held_out}

    def build_model(self, args: CausalLMArguments, setup: dict, checkpoint):
        tokenizer = plain_text_tokenizer(classification_tokenizer(args, setup["texts"], checkpoint))
        setup["tokenizer"] = tokenizer
        setup["train_dataset"] = pretraining_dataset(setup["texts"], tokenizer, args)
        setup["eval_dataset"] = pretraining_dataset(setup["held_out"], tokenizer, args)
        config = build_config(
            args.model,
            defaults={"max_position_embeddings": args.pack_length},
            tokenizer=tokenizer,
            num_encoder_layers=0,
            is_encoder_decoder=False,
            is_decoder=True,
        )
        if checkpoint is not None:
            model = VanillaTransformerForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
        else:
            model = VanillaTransformerForCausalLM(config)
        use_fast_dropout(model, args.device)
        return model

    def trainer(self, args: CausalLMArguments, setup: dict, model, clock) -> CausalLMTrainer:
        return CausalLMTrainer(
            model=model,
            args=args,
            train_dataset=setup["train_dataset"].map(lambda row: {"labels": row["input_ids"]}),
            eval_dataset=setup["eval_dataset"],
            data_collator=default_data_collator,
            processing_class=setup["tokenizer"],
        )

    def describe(self, args, setup: dict, trainer) -> list[str]:
        blocks = len(setup["train_dataset"])
        return [
            f"Model: {trainer.model.num_parameters():,} parameters (decoder only); vocabulary "
            f"{len(setup['tokenizer'])}; {blocks:,} blocks of {args.pack_length} tokens "
            f"({blocks * args.pack_length:,} tokens); {args.per_device_train_batch_size} x "
            f"{args.gradient_accumulation_steps} x {args.world_size} blocks per update."
        ]

    def finish(self, args: CausalLMArguments, setup: dict, trainer, precision: dict, clock) -> dict:
        output = Path(args.output_dir) / "model"
        # The saved folder continues a prompt by sampling (GPT-2's top-k 50), up to 60 new tokens, unless a
        # caller asks otherwise: greedy decoding of a small language model soon repeats itself.
        generation = trainer.accelerator.unwrap_model(trainer.model).generation_config
        generation.update(do_sample=True, top_k=50, max_new_tokens=GENERATED_TOKENS, max_length=None)
        trainer.save_model(str(output))
        results = {"model": str(output), "validation": trainer.evaluate()}
        if args.test_file:
            texts, where = read_texts(args, args.test_file)
            texts = texts[: args.max_eval_examples]
            blocks = pretraining_dataset(texts, setup["tokenizer"], args)
            results["test"] = trainer.evaluate(blocks, metric_key_prefix="test") | {"texts": len(texts)}
            print(
                f"Test perplexity: {results['test']['test_perplexity']:.2f} ({len(texts):,} texts of {where})."
            )
        if trainer.is_world_process_zero():
            causal_lm_card(args, trainer, results, precision, output, len(setup["train_dataset"]))
        return results


def causal_lm_card(args, trainer, results: dict, precision: dict, folder: Path, blocks: int) -> Path:
    name, kind = data_name(args)
    model = trainer.accelerator.unwrap_model(trainer.model)
    test = results.get("test") or {}
    scores = [
        Result("text-generation", "perplexity", "perplexity", test["test_perplexity"], name, kind, "test")
        for _ in [0]
        if "test_perplexity" in test
    ]
    clock = trainer.clock
    return write_model_card(
        folder,
        model,
        task="text-generation",
        name=Path(args.output_dir).name,
        summary="The Transformer's decoder stack alone as a GPT-style causal language model, trained from "
        "scratch with `transformers.Trainer` on plain text.",
        results=scores,
        datasets=[name] if is_hub_id(name) else [],  # the Hub refuses a card naming a local path
        training={
            "data": f"{name}: {blocks:,} blocks of {args.pack_length} tokens",
            "updates": trainer.state.global_step,
            "batch size": args.per_device_train_batch_size * args.gradient_accumulation_steps,
            "learning rate": args.learning_rate,
            "training time": f"{clock.elapsed_seconds / 60:.1f} min" if clock else "",
            "precision": describe_precision(precision),
        },
    )


__all__ = ["CausalLMTask", "CausalLMArguments", "CausalLMTrainer"]
