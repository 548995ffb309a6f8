"""Train a Transformer for translation the paper's way (§5), on Accelerate.

Read top to bottom: data and tokenizer, model, batches by token budget, Adam with Eq. 3, the
update loop with periodic validation (loss and beam-search BLEU) and atomic checkpoints, and a final
evaluation on the test split. The same code runs on one CPU, ``accelerate launch --multi_gpu --num_processes N``
(gloo on CPU, NCCL on GPUs) and with Accelerate's mixed precision.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from tqdm.auto import tqdm
from transformers import AutoTokenizer, DataCollatorForSeq2Seq

from ..configuration_vanilla_transformer import VanillaTransformerConfig
from ..model_card import Result, write_model_card
from ..modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration
from ..tokenization import train_bpe_tokenizer
from .arguments import TranslationTrainingArguments
from .batching import TokenBudgetBatchSampler
from .checkpoints import (
    STATE_FILE,
    average_checkpoints,
    latest_checkpoint,
    save_checkpoint,
    spaced_checkpoints,
)
from .data import load_translation_splits, tokenize_pairs
from .evaluation import bleu_scores, translate
from .plots import plot_history
from .schedule import transformer_lr_scheduler


def build_model_config(args: TranslationTrainingArguments, tokenizer) -> VanillaTransformerConfig:
    """The model's config: a Table 3 preset (or the defaults) with the run's overrides and vocabulary."""
    settings = dict(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        max_position_embeddings=max(args.max_source_length, args.max_target_length) + 64,
        source_lang=args.source_lang,
        target_lang=args.target_lang,
        **args.model_overrides(),
    )
    if args.preset:
        return VanillaTransformerConfig.from_preset(args.preset, **settings)
    return VanillaTransformerConfig(**settings)


def prepare_data(args: TranslationTrainingArguments):
    files = {
        split: args.resolve(f"{split}_file")
        for split in ("train", "validation", "test")
        if getattr(args, f"{split}_file") is not None
    }
    return load_translation_splits(
        args.dataset,
        args.source_lang,
        args.target_lang,
        files=files,
        dataset_config=args.dataset_config,
        synthetic_sizes={
            "train": args.synthetic_train_size,
            "validation": args.synthetic_eval_size,
            "test": args.synthetic_eval_size,
        },
        seed=args.seed,
    )


def load_or_train_tokenizer(args: TranslationTrainingArguments, train_split, output_dir: Path):
    saved = Path(args.tokenizer_path) if args.tokenizer_path else output_dir / "tokenizer"
    if saved.is_dir():
        return AutoTokenizer.from_pretrained(saved)
    tokenizer = train_bpe_tokenizer(
        list(train_split["source"]) + list(train_split["target"]),
        vocab_size=args.vocab_size,
        model_max_length=max(args.max_source_length, args.max_target_length),
    )
    tokenizer.save_pretrained(saved)
    return tokenizer


def count_tokens(batch) -> int:
    """Real (non-padding) source and target tokens in a batch."""
    return int(batch["attention_mask"].sum()) + int((batch["labels"] != -100).sum())


@torch.no_grad()
def validation_loss(model, loader, accelerator) -> float:
    """Token-weighted label-smoothed loss over the whole validation split."""
    model.eval()
    total, count = torch.zeros((), device=accelerator.device), torch.zeros((), device=accelerator.device)
    for batch in loader:
        tokens = (batch["labels"] != -100).sum()
        total += model(**batch).loss * tokens
        count += tokens
    total, count = accelerator.reduce(total), accelerator.reduce(count)
    model.train()
    return (total / count.clamp(min=1)).item()


def train(args: TranslationTrainingArguments) -> dict:
    """Run the whole job; returns the final metrics (also written to ``output_dir/results.json``)."""
    output_dir = Path(args.output_dir)
    checkpoints_root = output_dir / "checkpoints"
    report_to = None if args.report_to == "none" else args.report_to
    accelerator = Accelerator(
        # Without an accelerator, processes started by `accelerate launch` / torchrun join over gloo.
        cpu=not torch.accelerator.is_available(),
        mixed_precision=args.mixed_precision,
        log_with=report_to,
        project_dir=str(output_dir),
        step_scheduler_with_optimizer=False,  # Eq. 3 counts optimizer updates, whatever the process count
    )
    set_seed(args.seed)

    # -- data and the shared BPE vocabulary ------------------------------------------------------------
    splits = prepare_data(args)
    if "train" not in splits:
        raise ValueError("The data has no 'train' split.")
    with accelerator.main_process_first():
        tokenizer = load_or_train_tokenizer(args, splits["train"], output_dir)
    encoded = {
        name: tokenize_pairs(split, tokenizer, args.max_source_length, args.max_target_length)
        for name, split in splits.items()
    }

    # -- model --------------------------------------------------------------------------------------------
    model = VanillaTransformerForConditionalGeneration(build_model_config(args, tokenizer))
    model.generation_config.num_beams = args.num_beams
    model.generation_config.length_penalty = args.length_penalty
    collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100, return_tensors="pt")

    def loader(split: str, shuffle: bool):
        data = encoded[split]
        sampler = TokenBudgetBatchSampler(
            [len(x) for x in data["input_ids"]],
            [len(x) for x in data["labels"]],
            args.max_tokens,
            shuffle,
            args.seed,
        )
        # A private generator: starting an epoch must not draw from the global RNG that dropout uses,
        # or a resumed run (which starts its epoch mid-way) would see different dropout masks.
        generator = torch.Generator().manual_seed(args.seed)
        return torch.utils.data.DataLoader(
            data, batch_sampler=sampler, collate_fn=collator, generator=generator
        ), sampler

    train_loader, train_sampler = loader("train", shuffle=True)
    valid_loader = loader("validation", shuffle=False)[0] if "validation" in encoded else None
    tokens_per_batch = sum(len(x) for x in encoded["train"]["labels"]) / max(len(train_sampler), 1)
    accumulation = args.gradient_accumulation_steps or max(
        1, round((args.tokens_per_update or 0) / (tokens_per_batch * accelerator.num_processes))
    )

    # -- Adam (§5.3) with the Eq. 3 schedule ---------------------------------------------------------------
    optimizer = torch.optim.Adam(
        model.parameters(), lr=1.0, betas=(args.adam_beta1, args.adam_beta2), eps=args.adam_epsilon
    )
    scheduler = transformer_lr_scheduler(optimizer, model.config.d_model, args.warmup_steps, args.lr_scale)
    model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
    if valid_loader is not None:
        valid_loader = accelerator.prepare(valid_loader)
    accelerator.register_for_checkpointing(scheduler)

    # -- resume ----------------------------------------------------------------------------------------------
    state = {"step": 0, "epoch": 0, "batches_in_epoch": 0, "elapsed_seconds": 0.0, "history": []}
    resume_from = latest_checkpoint(checkpoints_root) if args.resume else None
    if resume_from is not None:
        accelerator.load_state(str(resume_from / "state"))
        state = json.loads((resume_from / STATE_FILE).read_text())
        accelerator.print(f"Resuming from {resume_from} (update {state['step']}).")
    elif args.resume:
        accelerator.print(f"No checkpoint under {checkpoints_root}: starting from scratch.")
    if report_to:
        accelerator.init_trackers(
            "translation", config={k: v for k, v in args.to_dict().items() if v is not None}
        )

    accelerator.print(
        f"Model: {accelerator.unwrap_model(model).num_parameters():,} parameters; vocabulary {len(tokenizer)}; "
        f"{len(encoded['train']):,} training pairs in {len(train_sampler)} batches of <= {args.max_tokens} tokens; "
        f"{accumulation} batch(es) x {accelerator.num_processes} process(es) per update."
    )

    # -- the update loop ------------------------------------------------------------------------------------
    model.train()
    progress = tqdm(
        total=args.max_steps, initial=state["step"], desc="Training", disable=not accelerator.is_main_process
    )
    window_loss, window_batches, window_tokens, window_start = 0.0, 0, 0, time.time()
    session_start = time.time() - state["elapsed_seconds"]
    micro_step, done = 0, state["step"] >= args.max_steps

    def out_of_budget() -> bool:
        over_time = args.max_minutes is not None and time.time() - session_start > 60 * args.max_minutes
        over_epochs = args.max_epochs is not None and state["epoch"] >= args.max_epochs
        return state["step"] >= args.max_steps or over_time or over_epochs

    def minutes_left() -> str:
        """The ETA of whichever budget ends first: updates (at this session's rate) or wall-clock minutes."""
        elapsed = time.time() - session_start
        rate = (state["step"] - first_step) / max(time.time() - resumed_at, 1e-9)
        left = (args.max_steps - state["step"]) / max(rate, 1e-9)
        if args.max_minutes is not None:
            left = min(left, 60 * args.max_minutes - elapsed)
        return f"{max(left, 0) / 60:.1f}min"

    first_step, resumed_at = state["step"], time.time()
    while not done:
        train_sampler.set_epoch(state["epoch"])
        batches = train_loader
        if state["batches_in_epoch"]:
            batches = accelerator.skip_first_batches(train_loader, state["batches_in_epoch"])
        for batch in batches:
            micro_step += 1
            state["batches_in_epoch"] += 1
            loss = model(**batch).loss
            accelerator.backward(loss / accumulation)
            window_loss += loss.item()
            window_batches += 1
            window_tokens += count_tokens(batch) * accelerator.num_processes
            if micro_step % accumulation:
                continue
            if args.max_grad_norm:
                accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            state["step"] += 1
            progress.update(1)

            if state["step"] % args.log_every == 0:
                elapsed = time.time() - window_start
                metrics = {
                    "train/loss": window_loss / window_batches,
                    "train/lr": scheduler.get_last_lr()[0],
                    "train/tokens_per_second": window_tokens / max(elapsed, 1e-9),
                }
                progress.set_postfix(
                    loss=f"{metrics['train/loss']:.3f}",
                    lr=f"{metrics['train/lr']:.2e}",
                    tok_s=f"{metrics['train/tokens_per_second']:,.0f}",
                    eta=minutes_left(),
                )
                accelerator.log(metrics, step=state["step"])
                if accelerator.is_main_process:
                    with open(output_dir / "train_log.jsonl", "a", encoding="utf-8") as log:
                        log.write(json.dumps({"step": state["step"], **metrics}) + "\n")
                window_loss, window_batches, window_tokens, window_start = 0.0, 0, 0, time.time()

            finished = out_of_budget()
            if valid_loader is not None and (state["step"] % args.eval_every == 0 or finished):
                metrics = evaluate_during_training(args, accelerator, model, tokenizer, splits, valid_loader)
                metrics["elapsed_minutes"] = (time.time() - session_start) / 60
                state["history"].append({"step": state["step"], **metrics})
                accelerator.log({f"valid/{k}": v for k, v in metrics.items()}, step=state["step"])
                accelerator.print(
                    f"update {state['step']}: valid loss {metrics['loss']:.3f}, "
                    f"BLEU {metrics['sacrebleu']:.2f} ({metrics['elapsed_minutes']:.1f} min)"
                )
            if state["step"] % args.save_every == 0 or finished:
                state["elapsed_seconds"] = time.time() - session_start
                save_checkpoint(
                    accelerator, model, tokenizer, checkpoints_root, state["step"], state, args.keep_last
                )
            if finished:
                done = True
                break
        else:
            state["epoch"] += 1
            state["batches_in_epoch"] = 0
            done = out_of_budget()
    progress.close()
    training_minutes = (time.time() - session_start) / 60

    # -- final model and test evaluation ------------------------------------------------------------------------
    results = {"updates": state["step"], "training_minutes": training_minutes}
    if accelerator.is_main_process:
        final = accelerator.unwrap_model(model)
        averaged = spaced_checkpoints(checkpoints_root, args.average_last, args.save_every)
        if len(averaged) > 1:  # §6.1: the last checkpoints averaged
            average_checkpoints(averaged, output_dir / "model")
            final = type(final).from_pretrained(output_dir / "model").to(final.device)
            results["averaged_checkpoints"] = [folder.name for folder in averaged]
            print(f"Final model: the average of {', '.join(results['averaged_checkpoints'])}.")
        else:
            final.save_pretrained(output_dir / "model")
            tokenizer.save_pretrained(output_dir / "model")
        results["parameters"] = final.num_parameters()
        results["history"] = state["history"]
        if "test" in splits:
            references = args.resolve("tokenized_test_references")
            scores, samples = evaluate_split(
                final, tokenizer, splits["test"], args, output_dir / "test_hypotheses.txt", references
            )
            results["test"] = scores
            print("\nSample translations (test):")
            for source, hypothesis, reference in samples:
                print(f"  source:     {source}\n  hypothesis: {hypothesis}\n  reference:  {reference}\n")
            print(
                f"Test BLEU: sacreBLEU (cased, 13a) {scores['sacrebleu']:.2f}; "
                f"lowercased tokenized {scores['bleu_lc_tok']:.2f}"
            )
        (output_dir / "results.json").write_text(json.dumps(results, indent=2))
        write_translation_card(args, final, results, output_dir / "model")
        plot = plot_history(
            state["history"], output_dir / "bleu_curve.png", f"{args.source_lang} -> {args.target_lang}"
        )
        if plot is not None:
            print(f"Validation curve: {plot}")
        print(f"Model saved to {output_dir / 'model'} after {training_minutes:.1f} minutes of training.")
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return results


def write_translation_card(args, model, results: dict, folder: Path) -> Path:
    """The filled model card of this run: its test BLEU (both conventions), data, length and recipe."""
    if args.dataset in ("json", "text"):
        name, kind = Path(args.train_file).parent.name or "local", args.dataset
    else:
        name, kind = args.dataset, args.dataset
    split = Path(args.test_file).name.split(".")[0] if args.test_file else "test"
    pair = f"{args.source_lang}-{args.target_lang}"
    scores = [
        Result("translation", "bleu", "sacreBLEU (cased, 13a)", value, name, kind, split)
        for value in [results.get("test", {}).get("sacrebleu")]
        if value is not None
    ] + [
        Result("translation", "bleu", "BLEU (lowercased, tokenized)", value, name, kind, split)
        for value in [results.get("test", {}).get("bleu_lc_tok")]
        if value is not None
    ]
    training = {
        "data": f"{name} ({pair})",
        "updates": results["updates"],
        "training time": f"{results['training_minutes']:.1f} min",
        "tokens per batch": args.max_tokens,
        "optimizer": f"Adam({args.adam_beta1}, {args.adam_beta2}, eps={args.adam_epsilon}), Eq. 3 "
        f"(warmup {args.warmup_steps}, scale {args.lr_scale})",
        "label smoothing": model.config.label_smoothing,
        "final model": ", ".join(results.get("averaged_checkpoints", [])) or "last weights",
    }
    return write_model_card(
        folder,
        model,
        task="translation",
        name=Path(args.output_dir).name,
        summary=f"A Transformer trained from scratch with vanilla-transformer to translate {pair} "
        f"(beam {args.num_beams}, length penalty {args.length_penalty}).",
        results=scores,
        datasets=[name] if kind not in ("json", "text", "synthetic") else [],
        training=training,
        language=[args.source_lang, args.target_lang],
    )


def evaluate_during_training(args, accelerator, model, tokenizer, splits, valid_loader) -> dict:
    """Validation loss on the whole split, BLEU from beam search on its first ``eval_bleu_samples``.

    Runs in a forked RNG so that evaluating never changes the training run's random stream."""
    with torch.random.fork_rng(devices=[]):
        return _evaluate(args, accelerator, model, tokenizer, splits, valid_loader)


def _evaluate(args, accelerator, model, tokenizer, splits, valid_loader) -> dict:
    metrics = {"loss": validation_loss(model, valid_loader, accelerator)}
    metrics["perplexity"] = math.exp(min(metrics["loss"], 50))
    if accelerator.is_main_process:
        sample = splits["validation"].select(range(min(args.eval_bleu_samples, len(splits["validation"]))))
        hypotheses = translate(
            accelerator.unwrap_model(model), tokenizer, sample["source"], args.eval_batch_size
        )
        metrics |= bleu_scores(hypotheses, sample["target"], args.target_lang)
    else:
        metrics |= {"sacrebleu": float("nan"), "bleu_lc_tok": float("nan")}
    model.train()
    return metrics


def evaluate_split(
    model, tokenizer, split, args, hypotheses_file: Path, tokenized_references: str | None = None
):
    """Translate a whole split with the generation config, write the hypotheses, score both BLEUs."""
    hypotheses = translate(model, tokenizer, split["source"], args.eval_batch_size, progress=True)
    hypotheses_file.write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
    official = None
    if tokenized_references:
        official = Path(tokenized_references).read_text(encoding="utf-8").splitlines()
    scores = bleu_scores(hypotheses, split["target"], args.target_lang, official)
    samples = list(zip(split["source"][:3], hypotheses[:3], split["target"][:3], strict=True))
    return scores, samples


__all__ = ["train", "build_model_config", "evaluate_split"]
