"""Encoder pre-training as tasks of the one run (``train/run.py``): BERT's masked LM (``masked-lm``) and
ELECTRA's replaced-token detection (``electra``, ``electra.py``), on the classification data's own text
(the labelled training texts less the validation ones, and ``unlabelled_files``).

They share a run folder with the classification task (stage ``pretrain``; checkpoints in
``checkpoints/pretrain/``), and end with the encoder to fine-tune: ``output_dir/mlm`` or
``output_dir/discriminator``, with its tokenizer and card, which ``init_from`` of a classification recipe
names."""

from __future__ import annotations

from pathlib import Path

from transformers import DataCollatorForLanguageModeling, DataCollatorWithPadding

from ...data.classification import check_data_paths
from ...fast_dropout import use_fast_dropout
from ...modeling_vanilla_transformer import VanillaTransformerForMaskedLM
from ...recipes import read_recipe
from ..common.positions import check_lengths
from .arguments import ClassificationArguments
from .data import pretraining_dataset, pretraining_texts
from .electra import ElectraForPreTraining
from .pretrain import PretrainingTrainer, pretraining_card
from .setup import classification_tokenizer, model_config
from .task import STAGE_OUTPUTS, EncoderTask


class PretrainingTask(EncoderTask):
    stage = "pretrain"
    outputs = STAGE_OUTPUTS["pretrain"]
    objective = ""  # the recipe's `objective`, which the task's name decides
    folder_name = ""  # the pre-trained encoder's folder in output_dir

    def load_arguments(self, recipe, overrides) -> ClassificationArguments:
        args = super().load_arguments(recipe, overrides)
        if args.init_from:
            raise ValueError(
                f"`init_from` starts a classification (or translation) run from a model; {self.name} "
                "pre-training starts from random weights."
            )
        named = {**(read_recipe(recipe) if recipe else {}), **(overrides or {})}.get("objective")
        if named is not None and named != self.objective:
            raise ValueError(f"`objective: {named}` is not task {self.name}'s ({self.objective}).")
        args.objective = self.objective
        return args

    def check(self, args: ClassificationArguments) -> None:
        check_data_paths(args)
        # Packed blocks of pack_length tokens, else each text as the classifier reads it (max_length).
        packed = {"pack_length": args.pack_length} if args.pack_length else {"max_length": args.max_length}
        check_lengths(packed, args.model)

    def setup(self, args: ClassificationArguments, folder) -> dict:
        texts, held_out = pretraining_texts(args, args.seed)
        return {"texts": texts, "held_out": held_out}

    def build_model(self, args: ClassificationArguments, setup: dict, checkpoint):
        tokenizer = classification_tokenizer(args, setup["texts"])
        setup["tokenizer"] = tokenizer
        setup["train_dataset"] = pretraining_dataset(setup["texts"], tokenizer, args)
        evaluate = args.eval_strategy != "no"
        setup["eval_dataset"] = pretraining_dataset(setup["held_out"], tokenizer, args) if evaluate else None
        model = self.encoder(args, tokenizer)
        use_fast_dropout(model, args.device)
        return model

    def encoder(self, args, tokenizer):
        raise NotImplementedError

    def collator(self, args, tokenizer):
        raise NotImplementedError

    def trainer(self, args, setup: dict, model, clock) -> PretrainingTrainer:
        return PretrainingTrainer(
            model=model,
            args=args,
            train_dataset=setup["train_dataset"],
            eval_dataset=setup["eval_dataset"],
            data_collator=self.collator(args, setup["tokenizer"]),
        )

    def describe(self, args, setup: dict, trainer) -> list[str]:
        return [
            f"Model: {trainer.model.num_parameters():,} parameters ({self.name}); {len(setup['train_dataset']):,} "
            f"sequences; {args.per_device_train_batch_size} x {args.gradient_accumulation_steps} x "
            f"{args.world_size} sequences per update."
        ]

    def finish(self, args: ClassificationArguments, setup: dict, trainer, precision: dict, clock) -> dict:
        output = Path(args.output_dir) / self.folder_name
        model = trainer.accelerator.unwrap_model(trainer.model)
        kept = self.kept(model)
        if trainer.is_world_process_zero():
            kept.save_pretrained(output)
            setup["tokenizer"].save_pretrained(output)
            pretraining_card(args, trainer, kept, output, len(setup["train_dataset"]), precision)
        results = {"model": str(output)}
        if setup["eval_dataset"] is not None:
            results["validation"] = trainer.evaluate()
        return results

    def kept(self, model):
        """What the run keeps of the pre-training model: the encoder to fine-tune."""
        return model


class MaskedLMTask(PretrainingTask):
    """BERT's masked LM: ``mlm_probability`` of the tokens masked; the head runs only at the masked positions
    (``sparse_prediction``: the same loss, without the (batch, length, vocabulary) logits that would dominate
    a small encoder's step)."""

    name, objective, folder_name = "masked-lm", "mlm", "mlm"

    def encoder(self, args, tokenizer):
        return VanillaTransformerForMaskedLM(model_config(args, tokenizer, sparse_prediction=True))

    def collator(self, args, tokenizer):
        return DataCollatorForLanguageModeling(tokenizer, mlm_probability=args.mlm_probability)


class ElectraTask(PretrainingTask):
    """ELECTRA (Clark et al., 2020): a small generator fills masked positions, the encoder (the
    discriminator) tells replaced tokens from original ones; the discriminator is kept."""

    name, objective, folder_name = "electra", "electra", "discriminator"

    def encoder(self, args, tokenizer):
        if tokenizer.mask_token_id is None:
            raise ValueError(
                f"ELECTRA needs a tokenizer with a mask token; {tokenizer.name_or_path} has none."
            )
        return ElectraForPreTraining(
            model_config(args, tokenizer),
            mask_token_id=tokenizer.mask_token_id,
            special_token_ids=tokenizer.all_special_ids,
            mask_probability=args.mlm_probability,
            generator_size=args.generator_size,
            discriminator_weight=args.discriminator_weight,
        )

    def collator(self, args, tokenizer):
        return DataCollatorWithPadding(tokenizer)  # the model masks and samples (§2)

    def kept(self, model):
        return model.discriminator()


# `classify pretrain` and recipes written before tasks were named: the task of their `objective`.
PRETRAINING_TASKS = {"mlm": "masked-lm", "electra": "electra"}


__all__ = ["MaskedLMTask", "ElectraTask", "PretrainingTask", "PRETRAINING_TASKS"]
