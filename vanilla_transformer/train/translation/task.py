"""Translation as a task of the one run (``train/run.py``): the paper's recipe (§5) on ``Seq2SeqTrainer``.

The task's hooks: its checks (data paths, ``init_from``), its data and the shared BPE vocabulary, §5.1's
token-budget batches and the accumulation they need, the model of the recipe's ``model:`` block (or the
parent's), ``TranslationTrainer`` (§5.3's Adam and Eq. 3; BLEU as its validation hook), and its end: the
last or averaged weights (§6.1), the test BLEU, the card and the BLEU plot (``trainer.finish``)."""

from __future__ import annotations

from pathlib import Path

from transformers import DataCollatorForSeq2Seq
from transformers.trainer_utils import IntervalStrategy

from ...data.translation import check_data_paths, data_paths, prepare_data
from ...evaluation import set_decoding
from ...fast_dropout import use_fast_dropout
from ...fused_output_loss import use_fused_output_loss
from ...precision import use_fast_bf16_kernels
from ..common.data import check_tokenizer_folder
from ..tasks import Task
from .arguments import TranslationTrainingArguments, load_arguments, run_budgets, run_settings
from .batching import TokenBudgetBatchSampler
from .data import tokenize_pairs, translation_tokenizer
from .trainer import (
    VALIDATION_HYPOTHESES,
    TranslationTrainer,
    accumulation_steps,
    build_model,
    check_init_from,
    finish,
)


class TranslationTask(Task):
    name = "translation"
    outputs = ("model", "bleu_curve.png", "test_hypotheses.txt", VALIDATION_HYPOTHESES)

    def load_arguments(self, recipe, overrides) -> TranslationTrainingArguments:
        args = load_arguments(recipe, overrides)
        args.task = self.name
        return args

    def settings(self, args) -> dict:
        return run_settings(args)

    def budgets(self, args) -> dict:
        return run_budgets(args)

    def check(self, args) -> None:
        check_data_paths(args)
        if args.tokenizer_path:
            check_tokenizer_folder(args.tokenizer_path, "tokenizer_path")
        check_init_from(args)

    def reads(self, args) -> dict:
        return {**data_paths(args), "tokenizer_path": args.tokenizer_path, "init_from": args.init_from}

    def own_files(self, args, folder: Path) -> list[Path]:
        trained_tokenizer = [] if args.tokenizer_path or args.init_from else [folder / "tokenizer"]
        return super().own_files(args, folder) + trained_tokenizer

    def setup(self, args, folder) -> dict:
        splits = prepare_data(args)
        if "train" not in splits:
            raise ValueError("The data has no 'train' split.")
        if "validation" not in splits:
            args.eval_strategy = IntervalStrategy.NO
        with args.main_process_first():
            tokenizer = translation_tokenizer(args, splits["train"])
        encoded = {
            name: tokenize_pairs(split, tokenizer, args.max_source_length, args.max_target_length)
            for name, split in splits.items()
        }
        sampler = TokenBudgetBatchSampler(
            [len(x) for x in encoded["train"]["input_ids"]],
            [len(x) for x in encoded["train"]["labels"]],
            args.max_tokens,
            shuffle=True,
            seed=args.seed,
        )
        # An update's batches: a setting of the run (its checkpoint records it), so decided before them.
        args.gradient_accumulation_steps = accumulation_steps(args, encoded["train"], sampler)
        return {
            "splits": splits,
            "tokenizer": tokenizer,
            "encoded": encoded,
            "sampler": sampler,
            "eval_dataset": encoded.get("validation"),
        }

    def build_model(self, args, setup: dict, checkpoint):
        # Nothing before this draws from torch's generator: the initial weights are those set_seed gives.
        model = build_model(args, setup["tokenizer"], checkpoint)
        set_decoding(model.generation_config, args.num_beams, args.length_penalty)
        use_fast_bf16_kernels(model, setup["precision"], args.device)
        use_fast_dropout(model, args.device)
        use_fused_output_loss(model, args.device)
        return model

    def trainer(self, args, setup: dict, model, clock) -> TranslationTrainer:
        splits = setup["splits"]
        return TranslationTrainer(
            model=model,
            args=args,
            data_collator=DataCollatorForSeq2Seq(setup["tokenizer"], model=model, label_pad_token_id=-100),
            train_dataset=setup["encoded"]["train"],
            eval_dataset=setup["eval_dataset"],
            processing_class=setup["tokenizer"],
            sampler=setup["sampler"],
            clock=clock,
            bleu_references=splits["validation"]["target"] if "validation" in splits else None,
        )

    def describe(self, args, setup: dict, trainer) -> list[str]:
        return [
            f"Model: {trainer.model.num_parameters():,} parameters; vocabulary {len(setup['tokenizer'])}; "
            f"{len(setup['splits']['train']):,} training pairs in {len(setup['sampler'])} batches of <= "
            f"{args.max_tokens} tokens; {args.gradient_accumulation_steps} batch(es) x {args.world_size} "
            "process(es) per update."
        ]

    def evaluates(self, args, setup: dict) -> bool:
        return setup["eval_dataset"] is not None

    def epochs_over(self, args, state) -> bool:
        return args.max_epochs is not None and state.epoch >= args.max_epochs - 1e-9

    def finish(self, args, setup: dict, trainer, precision: dict, clock) -> dict:
        results = finish(trainer, setup["splits"], precision, clock.elapsed_seconds / 60)
        return {"model": str(Path(args.output_dir) / "model"), **results}


__all__ = ["TranslationTask"]
