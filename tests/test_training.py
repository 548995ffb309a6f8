"""Translation training the paper's way (token batches, Eq. 3, label smoothing, checkpoint averaging,
BLEU validation) on tiny data the tests make."""

import gzip
import json
import math
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from conftest import TINY_MODEL, TINY_RUN, TWO_PROCESS_LAUNCH
from huggingface_hub import ModelCard
from safetensors import safe_open
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, GenerationConfig

from vanilla_transformer import PRESETS, VanillaTransformerForConditionalGeneration
from vanilla_transformer.averaging import average_checkpoints
from vanilla_transformer.cli import build_parser
from vanilla_transformer.data.synthetic import german_number, synthetic_pairs
from vanilla_transformer.data.translation import prepare_data
from vanilla_transformer.recipes import parse_overrides, parse_yaml
from vanilla_transformer.tokenization import train_bpe_tokenizer
from vanilla_transformer.train.common.budget import TrainingClock
from vanilla_transformer.train.common.checkpoints import STATE_FILE, checkpoint_dirs, latest_checkpoint
from vanilla_transformer.train.run import train
from vanilla_transformer.train.translation.ablation import read_study
from vanilla_transformer.train.translation.arguments import SYNTHETIC_MODEL, load_arguments
from vanilla_transformer.train.translation.averaging import spaced_checkpoints
from vanilla_transformer.train.translation.batching import TokenBudgetBatchSampler
from vanilla_transformer.train.translation.schedule import (
    cooldown_factor,
    transformer_learning_rate,
    transformer_lr_scheduler,
)
from vanilla_transformer.train.translation.trainer import TranslationTrainer, build_model_config

CONFIGS = Path(__file__).parent.parent / "training" / "configs"


def run(tmp_path, name, model=None, **settings):
    """A tiny run; ``model`` edits fields of the tiny model block."""
    model_fields = {f"model.{key}": value for key, value in (model or {}).items()}
    args = load_arguments(None, {**TINY_RUN, "output_dir": str(tmp_path / name), **settings, **model_fields})
    return train(args), tmp_path / name


def logged_rows(folder):
    """``train_log.jsonl`` by step (a step logged twice, by a resumed run, keeps its last row)."""
    return {
        row["step"]: row for row in map(json.loads, (folder / "train_log.jsonl").read_text().splitlines())
    }


def logged_losses(folder):
    return {step: row["train/loss"] for step, row in logged_rows(folder).items()}


# -- tokenizer ---------------------------------------------------------------------------------------


def test_tokenizer_round_trip_any_script(tmp_path):
    texts = [
        "Schöne Grüße aus München",
        "Über den Fluß, bitte.",
        "영화가 정말 재미있어요",
        "Ein Mädchen läuft.",
    ] * 3
    tokenizer = train_bpe_tokenizer(texts, vocab_size=300, min_frequency=1, model_max_length=32)
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    for text in texts[:4] + ["Grüße, 영화!"]:
        ids = loaded(text)["input_ids"]
        assert ids[-1] == loaded.eos_token_id
        assert loaded.decode(ids, skip_special_tokens=True) == text
    assert (loaded.pad_token_id, loaded.bos_token_id, loaded.eos_token_id, loaded.unk_token_id) == (
        0,
        1,
        2,
        3,
    )
    assert loaded.model_max_length == 32
    assert len(loaded("wort " * 100, truncation=True)["input_ids"]) == 32


def test_lowercasing_tokenizer_keeps_its_normaliser_when_saved(tmp_path):
    texts = ["A Great Film, GREAT acting", "a great film, great acting", "Über alles"] * 3
    train_bpe_tokenizer(texts, vocab_size=300, min_frequency=1, lowercase=True).save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded("GREAT Film ÜBER")["input_ids"] == loaded("great film über")["input_ids"]
    cased = train_bpe_tokenizer(texts, vocab_size=300, min_frequency=1)
    assert cased("GREAT")["input_ids"] != cased("great")["input_ids"]


def test_tokenizer_refuses_empty_text():
    with pytest.raises(ValueError, match="every training sentence was empty"):
        train_bpe_tokenizer(["", "   "], vocab_size=300)


# -- Eq. 3 -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("step", [1, 100, 3999, 4000, 4001, 100000])
def test_eq3_values(step):
    expected = 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
    assert transformer_learning_rate(step, 512, 4000) == pytest.approx(expected)
    assert transformer_learning_rate(step, 512, 4000, scale=2.0) == pytest.approx(2 * expected)


def test_eq3_peaks_at_warmup_and_scheduler_follows_it():
    assert transformer_learning_rate(4000, 512, 4000) == pytest.approx(512**-0.5 * 4000**-0.5)  # 6.99e-4
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.Adam([parameter], lr=1.0)
    scheduler = transformer_lr_scheduler(optimizer, d_model=512, warmup_steps=10)
    rates = []
    for _ in range(30):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert rates == pytest.approx([transformer_learning_rate(k, 512, 10) for k in range(1, 31)])
    assert max(rates) == rates[9]  # update 10 = end of warmup


def test_eq3_paper_constants():
    """Worked by hand: 512^-0.5 * 4000^-0.5 = (2,048,000)^-0.5 = 6.98771e-4 at the end of warmup; at
    step 16000 = 4 x warmup, step^-0.5 halves it: 3.49386e-4 (and warmup's linear branch meets it)."""
    assert transformer_learning_rate(4000, 512, 4000) == pytest.approx(6.98771e-4, rel=1e-5)
    assert transformer_learning_rate(16000, 512, 4000) == pytest.approx(3.49386e-4, rel=1e-5)
    assert transformer_learning_rate(1000, 512, 4000) == pytest.approx(6.98771e-4 / 4, rel=1e-5)  # linear


# Eq. 3 with d_model 32, warmup 4, worked by hand: 32^-0.5 = 0.1767767 and 4^-1.5 = 1/8, so during warmup
# lr(k) = 0.1767767 * k / 8 = 0.0220971 * k; the peak lr(4) = (32 * 4)^-0.5 = 128^-0.5 = 0.0883883; after it
# lr(k) = (32 k)^-0.5: lr(5) = 160^-0.5 = 0.0790569, lr(8) = 256^-0.5 = 1/16, lr(16) = 512^-0.5 = 0.0441942,
# half the peak (4 x warmup, as lr(16000) is half of lr(4000) in the paper's setting).
EQ3_D32_WARMUP4 = {
    1: 0.0220971,
    2: 0.0441942,
    3: 0.0662913,
    4: 0.0883883,
    5: 0.0790569,
    8: 0.0625,
    16: 0.0441942,
}


def test_the_logged_learning_rate_of_update_k_is_eq3_at_step_k(tmp_path):
    """A real run logs, in the row of step k, the rate update k stepped with: update 1 uses lr(1), never
    lr(0) or lr(2) (the scheduler has already moved on to the next update's rate when the row is written)."""
    _, folder = run(tmp_path, "run", max_steps=16, warmup_steps=4, lr_scale=1.0, save_steps=16)
    rates = {step: row["train/lr"] for step, row in logged_rows(folder).items()}
    assert sorted(rates) == list(range(1, 17))
    assert {step: rates[step] for step in EQ3_D32_WARMUP4} == pytest.approx(EQ3_D32_WARMUP4, rel=1e-5)
    assert max(rates, key=rates.get) == 4  # the peak is the last warmup update
    assert rates[16] == pytest.approx(rates[4] / 2, rel=1e-6)
    # The optimizer carries the schedule: after update 16 it holds lr(17) for the next update,
    # (32 * 17)^-0.5 = 544^-0.5 = 0.0428746 (the Trainer's checkpoint stores Adam as optimizer.pt).
    optimizer = torch.load(latest_checkpoint(folder / "checkpoints") / "optimizer.pt")
    assert optimizer["param_groups"][0]["lr"] == pytest.approx(0.0428746, rel=1e-5)
    assert (
        optimizer["param_groups"][0]["betas"] == (0.9, 0.98) and optimizer["param_groups"][0]["eps"] == 1e-9
    )


def test_cooldown_takes_eq3_linearly_to_zero_over_the_last_fraction_of_the_budget(tmp_path):
    """``lr_cooldown: 0.5`` with an 8-update budget: updates 1-5 are set while at most half the budget is
    spent and keep Eq. 3's rate; update k > 5 gets lr(k) * (1 - (k-1)/8) / 0.5, worked by hand for d_model
    32, warmup 4: lr(6) = 32^-0.5 6^-0.5 * 0.75 = 0.0541266, lr(7) = 0.0668153 * 0.5 = 0.0334077,
    lr(8) = 0.0625 * 0.25 = 0.015625."""
    assert [cooldown_factor(p, 0.2) for p in (0.0, 0.8, 0.9, 1.0, 1.3)] == pytest.approx([1, 1, 0.5, 0, 0])
    assert cooldown_factor(0.99, 0.0) == 1.0  # 0: the paper's schedule
    _, folder = run(tmp_path, "run", max_steps=8, warmup_steps=4, lr_cooldown=0.5, save_steps=8)
    rates = {step: row["train/lr"] for step, row in logged_rows(folder).items()}
    assert {k: rates[k] for k in (2, 4, 5)} == pytest.approx(
        {k: transformer_learning_rate(k, 32, 4) for k in (2, 4, 5)}
    )
    assert [rates[6], rates[7], rates[8]] == pytest.approx([0.0541266, 0.0334077, 0.015625], rel=1e-5)
    optimizer = torch.load(latest_checkpoint(folder / "checkpoints") / "optimizer.pt")
    assert optimizer["param_groups"][0]["lr"] == 0.0  # the budget is spent: a next update would not move
    card = (folder / "model" / "README.md").read_text()
    assert "linear cool-down to 0 over the last 50% of the budget" in card


def test_cooldown_counts_the_minutes_budget_when_it_is_further_along():
    """With ``run_minutes`` the fraction spent is the larger of updates/max_steps and minutes/run_minutes:
    a run resumed after 6 of its 10 minutes has spent 60 % of its budget whatever its step count."""
    args = load_arguments(None, {**TINY_RUN, "max_steps": 1000, "run_minutes": 10, "lr_cooldown": 0.5})
    trainer = types.SimpleNamespace(  # what budget_spent reads of a TranslationTrainer
        state=types.SimpleNamespace(global_step=19, max_steps=args.max_steps),
        args=types.SimpleNamespace(max_steps=args.max_steps, world_size=1),
        clock=TrainingClock(args.run_minutes, elapsed_seconds=360.0),
    )
    assert TranslationTrainer.budget_spent(trainer) == pytest.approx(0.6, abs=1e-3)
    trainer.state.global_step = 899  # the scheduler sets the rate of update 900
    assert TranslationTrainer.budget_spent(trainer) == pytest.approx(0.9)
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match=r"`lr_cooldown` is a fraction of the budget in \[0, 1\)"):
            load_arguments(None, {**TINY_RUN, "lr_cooldown": bad})


# -- batching ----------------------------------------------------------------------------------------------


def test_batches_respect_the_token_budget_and_cover_every_example_once():
    generator = torch.Generator().manual_seed(0)
    sources = torch.randint(1, 40, (500,), generator=generator).tolist()
    targets = torch.randint(1, 40, (500,), generator=generator).tolist()
    sampler = TokenBudgetBatchSampler(sources, targets, max_tokens=200, shuffle=True, seed=3)
    epochs = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        assert len(batches) == len(sampler)
        for batch in batches:
            assert max(sources[i] for i in batch) * len(batch) <= 200
            assert max(targets[i] for i in batch) * len(batch) <= 200
        flat = sorted(i for batch in batches for i in batch)
        assert flat == list(range(500))
        epochs.append(batches)
    assert epochs[0] != epochs[1]  # reshuffled every epoch
    sampler.set_epoch(0)
    assert list(sampler) == epochs[0]  # deterministic for a seed
    # Length buckets: batching sorted lengths needs far fewer padded tokens than a random split.
    padded = sum(max(sources[i] for i in b) * len(b) for b in epochs[0])
    assert padded < 1.25 * sum(sources)


def test_an_example_longer_than_the_budget_forms_its_own_batch():
    sampler = TokenBudgetBatchSampler([5, 500, 5], [5, 5, 5], max_tokens=100, shuffle=False)
    assert sorted(map(sorted, sampler)) == [[0, 2], [1]]


# -- synthetic task ----------------------------------------------------------------------------------------


def test_synthetic_task_has_agreement_reordering_and_numbers():
    assert (
        german_number(37) == "sieben und dreißig"
        and german_number(2) == "zwei"
        and german_number(16) == "sechzehn"
    )
    pairs = synthetic_pairs(300, seed=1)
    assert pairs == synthetic_pairs(300, seed=1) and pairs != synthetic_pairs(300, seed=2)
    assert any(" den " in p["de"] or " einen " in p["de"] for p in pairs)  # accusative agreement
    assert any(", dass " in p["de"] for p in pairs)  # verb-final subordinate clauses
    assert any(any(w.isdigit() for w in p["en"].split()) for p in pairs)
    assert not any(any(w.isdigit() for w in p["de"].split()) for p in pairs)  # spelled out


# -- the training loop ---------------------------------------------------------------------------------------


def test_end_to_end_run_learns_and_saves_a_loadable_model(tmp_path):
    results, folder = run(tmp_path, "run", max_steps=40, lr_scale=2.0)
    losses = logged_losses(folder)
    assert sum(losses[s] for s in range(36, 41)) / 5 < sum(losses[s] for s in range(1, 6)) / 5 - 0.5
    model = AutoModelForSeq2SeqLM.from_pretrained(folder / "model")
    assert type(model).__name__ == "VanillaTransformerForConditionalGeneration"
    assert (folder / "model" / "model.safetensors").is_file() and (
        folder / "model" / "tokenizer.json"
    ).is_file()
    assert results["updates"] == 40 and set(results["test"]) == {"sacrebleu", "bleu_lc_tok"}
    # This process's peak resident memory in MiB: more than torch alone takes, at most the peak now.
    peak_now = int(re.search(r"VmHWM:\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1)) / 1024
    assert 100 < results["peak_memory_mib"]["host"] <= peak_now + 0.05  # the record is rounded to 0.1 MiB
    assert json.loads((folder / "results.json").read_text())["peak_memory_mib"] == results["peak_memory_mib"]
    assert (folder / "test_hypotheses.txt").read_text().count("\n") == 8
    assert (folder / "bleu_curve.png").stat().st_size > 1000
    checkpoint = latest_checkpoint(folder / "checkpoints")
    assert checkpoint.name == "checkpoint-40"
    # A complete model folder (loadable with from_pretrained) and the Trainer's state to resume from.
    assert {"model.safetensors", "config.json", "tokenizer.json", "generation_config.json"} <= {
        p.name for p in checkpoint.iterdir()
    }
    assert {"optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json"} <= {
        p.name for p in checkpoint.iterdir()
    }
    assert type(AutoModelForSeq2SeqLM.from_pretrained(checkpoint)) is type(model)
    card = ModelCard.load(folder / "model" / "README.md")  # the filled card, with this run's numbers
    scores = {r.metric_name: r.metric_value for r in card.data.eval_results}
    assert scores == pytest.approx(
        {
            "sacreBLEU (cased, 13a)": results["test"]["sacrebleu"],
            "BLEU (lowercased, tokenized)": results["test"]["bleu_lc_tok"],
        },
        abs=1e-4,
    )
    assert card.data.pipeline_tag == "translation" and card.data.language == ["en", "de"]
    assert "## Architecture" in card.text
    # The run's own settings, as the card's training table states them.
    for row in (
        "| updates | 40 |",
        "| tokens per batch | 300 |",
        "| optimizer | Adam(0.9, 0.98, eps=1e-09), Eq. 3 (warmup 4, scale 2.0) |",
        "| label smoothing | 0.1 |",
        "| final model | last weights |",
        "| decoding (saved generation config) | beam 2, length penalty 0.6: the recipe's choice, departing "
        "from §6.1's beam 4, length penalty 0.6 |",
    ):
        assert row in card.text
    assert f"vocabulary 400, {model.num_parameters():,} parameters" in card.text


def test_a_run_with_a_saved_tokenizer_logs_into_a_new_output_dir(tmp_path):
    """Reusing a trained tokenizer (``tokenizer_path``) with no tracker leaves nothing else to create
    ``output_dir`` before the first log row: it crashed with "No such file ... train_log.jsonl"."""
    _, first = run(tmp_path, "first", max_steps=2)
    results, folder = run(
        tmp_path, "nested/second", max_steps=3, save_steps=1000, tokenizer_path=str(first / "tokenizer")
    )
    assert sorted(logged_losses(folder)) == [1, 2, 3] and results["updates"] == 3
    assert not (folder / "tokenizer").exists()  # the saved one was used, not retrained


@pytest.mark.parametrize("precision", ["no", "bf16"])
def test_resume_reproduces_the_uninterrupted_run(tmp_path, precision):
    dropout = {"dropout": 0.1}
    settings = dict(save_steps=3, model=dropout, mixed_precision=precision)
    _, straight = run(tmp_path, "straight", max_steps=6, **settings)
    _, interrupted = run(tmp_path, "interrupted", max_steps=3, **settings)
    (interrupted / "checkpoints" / ".tmp-checkpoint-4").mkdir()  # a crash mid-write leaves this behind
    _, resumed = run(tmp_path, "interrupted", max_steps=6, resume=True, **settings)
    expected, got = logged_losses(straight), logged_losses(resumed)
    assert [got[s] for s in (4, 5, 6)] == pytest.approx([expected[s] for s in (4, 5, 6)], abs=1e-6)
    assert [p.name for p in checkpoint_dirs(resumed / "checkpoints")] == ["checkpoint-3", "checkpoint-6"]
    assert not (resumed / "checkpoints" / ".tmp-checkpoint-4").exists()


def test_session_minutes_stops_the_invocation_and_resume_finishes_the_run(tmp_path):
    """``session_minutes: 0`` ends this invocation after its first update, with a checkpoint and no final
    model; the same run resumed goes on from there to the losses of the uninterrupted run."""
    settings = dict(save_steps=100, model={"dropout": 0.1})
    _, straight = run(tmp_path, "straight", max_steps=4, **settings)
    stopped, folder = run(tmp_path, "sessions", max_steps=4, session_minutes=0, **settings)
    assert stopped["stopped"] == "session_minutes" and stopped["updates"] == 1
    assert [p.name for p in checkpoint_dirs(folder / "checkpoints")] == ["checkpoint-1"]
    assert not (folder / "model").exists() and not (folder / "results.json").exists()
    finished, _ = run(tmp_path, "sessions", max_steps=4, resume=True, **settings)
    assert finished["updates"] == 4 and "test" in finished
    expected, got = logged_losses(straight), logged_losses(folder)
    assert [got[s] for s in (1, 2, 3, 4)] == pytest.approx([expected[s] for s in (1, 2, 3, 4)], abs=1e-6)


def test_a_recipe_sets_the_trainers_switches_by_their_transformers_names(tmp_path):
    """The recipe is Seq2SeqTrainingArguments with the translation fields added: a trainer switch a user
    knows (accumulation, logging, the tracker, compile, Hub pushes) is a recipe key, with the paper's
    defaults where the paper has one; the settings the run decides itself are refused, naming what to set."""
    args = load_arguments(
        None,
        {"gradient_accumulation_steps": 3, "logging_steps": 7, "torch_compile": True, "report_to": "none"},
    )
    assert (args.gradient_accumulation_steps, args.logging_steps, args.torch_compile) == (3, 7, True)
    assert args.report_to == [] or args.report_to == ["none"]
    assert (args.adam_beta1, args.adam_beta2, args.adam_epsilon) == (0.9, 0.98, 1e-9)  # §5.3
    assert (args.max_steps, args.warmup_steps, args.seed) == (800, 400, 0)  # the built-in job
    for key, named in (
        ("learning_rate", "`lr_scale`"),
        ("lr_scheduler_type", "Eq. 3"),
        ("bf16", "`mixed_precision`"),
        ("label_smoothing_factor", "`model.label_smoothing`"),
    ):
        with pytest.raises(ValueError, match=rf"--set: `{key}` is not a translation setting: .*{named}"):
            load_arguments(None, {key: 1})
    with pytest.raises(ValueError, match="`tokens_per_update` .* or `gradient_accumulation_steps`, not both"):
        load_arguments(None, {"tokens_per_update": 1000, "gradient_accumulation_steps": 2})


def test_the_progress_bar_counts_minutes_where_a_minutes_budget_ends_the_run(tmp_path, capsys):
    """A run that ``run_minutes`` or ``session_minutes`` ends (its max_steps only a bound) shows minutes of
    the budget that ends first, with the update count beside them; a run that max_steps ends counts updates."""
    from vanilla_transformer.train.common.budget import TrainingProgress

    by_minutes = TrainingProgress(10**9, 0, budget_minutes=2, minutes=0.0, disable=False)
    by_minutes.advance(5, 0.5)
    by_minutes.set_postfix(loss="1.0")
    assert (by_minutes.bar.n, by_minutes.bar.total) == (0.5, 2.0)
    assert "update=5" in by_minutes.bar.postfix and "loss=1.0" in by_minutes.bar.postfix
    by_minutes.close()
    by_steps = TrainingProgress(800, 10, budget_minutes=None, minutes=3.0, disable=False)
    by_steps.advance(12, 3.1)
    assert (by_steps.bar.n, by_steps.bar.total) == (12, 800)
    by_steps.close()
    run(tmp_path, "budgeted", max_steps=3, run_minutes=1)
    assert "/1.0 min" in capsys.readouterr().err
    # A session budget (this invocation's minutes) that ends before the run's: the bar counts the session's.
    run(tmp_path, "session", max_steps=3, run_minutes=10, session_minutes=0.5)
    shown = capsys.readouterr().err
    assert "/0.5 min" in shown and "/10.0 min" not in shown and "/3 [" not in shown
    run(tmp_path, "session-only", max_steps=3, session_minutes=2)
    assert "/2.0 min" in capsys.readouterr().err


def test_keeps_only_the_last_k_checkpoints(tmp_path):
    _, folder = run(tmp_path, "run", max_steps=8, save_steps=2, save_total_limit=2)
    assert [p.name for p in checkpoint_dirs(folder / "checkpoints")] == ["checkpoint-6", "checkpoint-8"]


def test_averaging_two_checkpoints_averages_their_tensors(tmp_path):
    _, folder = run(tmp_path, "run", max_steps=4, save_steps=2)
    first, second = checkpoint_dirs(folder / "checkpoints")
    output = average_checkpoints([first, second], tmp_path / "averaged")
    a, b, mean = (AutoModelForSeq2SeqLM.from_pretrained(p).state_dict() for p in (first, second, output))
    for name in a:
        torch.testing.assert_close(mean[name], (a[name] + b[name]) / 2)
    assert AutoTokenizer.from_pretrained(output).pad_token_id == 0


def test_average_last_makes_the_final_model_the_mean_of_the_last_checkpoints(tmp_path):
    results, folder = run(tmp_path, "run", max_steps=6, save_steps=2, average_last=2)
    assert results["averaged_checkpoints"] == ["checkpoint-4", "checkpoint-6"]
    last_two = [
        AutoModelForSeq2SeqLM.from_pretrained(folder / "checkpoints" / name).state_dict()
        for name in results["averaged_checkpoints"]
    ]
    final = AutoModelForSeq2SeqLM.from_pretrained(folder / "model").state_dict()
    for name, tensor in final.items():
        torch.testing.assert_close(tensor, (last_two[0][name] + last_two[1][name]) / 2)
    with pytest.raises(ValueError, match="`average_last` \\(6\\) cannot exceed `save_total_limit` \\(5\\)"):
        load_arguments(None, {"average_last": 6})


def test_a_final_save_just_after_a_periodic_one_is_not_averaged_twice(tmp_path):
    for step in (2000, 2500, 3000, 3500, 3501):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        (folder / STATE_FILE).write_text("{}")
    names = [folder.name for folder in spaced_checkpoints(tmp_path, 3, spacing=500)]
    assert names == ["checkpoint-2500", "checkpoint-3000", "checkpoint-3501"]
    assert [f.name for f in spaced_checkpoints(tmp_path, 2, spacing=1)] == [
        "checkpoint-3500",
        "checkpoint-3501",
    ]


@pytest.mark.parametrize(
    "precision",
    [
        "no",
        # once: DDP runs at both ends of the ranges in the "no" case, and bf16 through Accelerate in
        # test_resume_reproduces_the_uninterrupted_run[bf16]
        pytest.param("bf16", marks=pytest.mark.newest_only),
    ],
)
def test_two_processes_match_one_process_with_the_same_global_batch(tmp_path, precision, capsys):
    """DDP averages the gradients of two processes that each take one batch; one process accumulating
    the same two batches with each loss halved computes the same mean gradient. So every update's loss
    (averaged over both processes' batches) and its gradient norm before clipping agree, and so do the
    weights after each update. Adam and clipping hide a constant scale of the gradient (a sum over
    processes instead of the mean trains the same weights): the unclipped norm is what shows it.

    Tolerance: the sums run in a different order (fp32, ~1e-7 relative), and three Adam updates of lr
    ~1e-3 keep the parameters within 1e-5 of each other, while each update moves them by ~1e-2.

    The validation split has 3 batches: on two processes the second repeats the first batch (Accelerate's
    even_batches), which must not count twice in the validation loss."""
    settings = {
        **TINY_RUN,
        "max_steps": 3,
        "save_steps": 1,
        "eval_steps": 3,
        "eval_bleu_samples": 1,
        "synthetic_eval_size": 24,
        "max_grad_norm": 0.5,  # clips every update here: a scaled gradient clips to the same step
    }
    model = {**TINY_MODEL, "dropout": 0.0}
    overrides = [f"--set={key}={value}" for key, value in settings.items() if key != "model"]
    overrides += [f"--set=model.{key}={value}" for key, value in model.items()]
    # In bf16 each process computes exactly the micro-batch one process accumulates: same bf16 products.
    overrides += [f"--set=mixed_precision={precision}"]
    # Both runs on the CPU (gloo), also where a GPU is visible: on a one-GPU machine the second
    # process would ask for a cuda:1 that is not there, and fp32 CPU sums keep the 1e-5 tolerance.
    # The one-process reference runs in this process (its own would add only ~7 s of imports).
    reference = {key: value for key, value in settings.items() if key != "model"}
    reference.update(mixed_precision=precision, use_cpu=True, gradient_accumulation_steps=2)
    run(tmp_path, "one", model=model, **reference)
    assert "2 batch(es) x 1 process(es)" in capsys.readouterr().out
    # TMPDIR: torch.distributed's log folders (torchelastic_*) go under the test's folder, not /tmp.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "TMPDIR": str(tmp_path)}
    launch = [sys.executable, *TWO_PROCESS_LAUNCH, "train", *overrides]
    two = subprocess.run(
        [*launch, f"--set=output_dir={tmp_path / 'two'}", "--set=gradient_accumulation_steps=1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert two.returncode == 0, two.stderr[-3000:]
    assert "2 process(es) per update" in two.stdout + two.stderr
    assert "1 batch(es) x 2 process(es)" in two.stdout + two.stderr

    one_log, two_log = (logged_rows(tmp_path / name) for name in ("one", "two"))
    assert sorted(one_log) == sorted(two_log) == [1, 2, 3]
    for step in (1, 2, 3):
        assert two_log[step]["train/loss"] == pytest.approx(one_log[step]["train/loss"], rel=1e-5)
        assert two_log[step]["train/grad_norm"] == pytest.approx(one_log[step]["train/grad_norm"], rel=1e-4)
    # The logged norm is the unclipped one: clipped norms would all be 0.5.
    assert min(row["train/grad_norm"] for row in one_log.values()) > 0.55

    checkpoints = {
        name: [
            AutoModelForSeq2SeqLM.from_pretrained(folder).state_dict()
            for folder in checkpoint_dirs(tmp_path / name / "checkpoints")
        ]
        for name in ("one", "two")
    }
    assert len(checkpoints["one"]) == len(checkpoints["two"]) == 3  # after updates 1, 2 and 3
    for a, b in zip(checkpoints["one"], checkpoints["two"], strict=True):
        for name in a:
            torch.testing.assert_close(a[name], b[name], atol=1e-5, rtol=0)
    first, last = checkpoints["one"][0], checkpoints["one"][-1]
    moved = max((last[name] - first[name]).abs().max().item() for name in first)
    assert moved > 1e-2  # updates 2 and 3 changed the weights: the comparison above is not of two copies
    final = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "two" / "model").state_dict()
    for name in final:
        torch.testing.assert_close(final[name], checkpoints["one"][-1][name], atol=1e-5, rtol=0)
    one_results, two_results = (
        json.loads((tmp_path / run / "results.json").read_text()) for run in ("one", "two")
    )
    assert one_results["mixed_precision"]["used"] == two_results["mixed_precision"]["used"] == precision
    assert one_results["history"][-1]["loss"] == pytest.approx(two_results["history"][-1]["loss"], rel=1e-5)


# -- bad input ------------------------------------------------------------------------------------------------


def _write_jsonl(path, rows):
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")


def test_missing_language_key_names_the_file(tmp_path):
    data = tmp_path / "train.jsonl.gz"
    _write_jsonl(data, [{"translation": {"de": "Hallo", "fr": "Bonjour"}}])
    with pytest.raises(ValueError, match=r"train.jsonl.gz line 1: language key 'en' is missing"):
        run(tmp_path, "out", dataset="json", train_file=str(data), source_lang="de", target_lang="en")
    assert not (tmp_path / "out").exists()


def test_empty_file_names_the_file(tmp_path):
    data = tmp_path / "train.jsonl.gz"
    _write_jsonl(data, [])
    with pytest.raises(ValueError, match=r"train.jsonl.gz is empty"):
        run(tmp_path, "out", dataset="json", train_file=str(data), source_lang="de", target_lang="en")
    assert not (tmp_path / "out").exists()


def test_mismatched_line_counts_name_both_files(tmp_path):
    (tmp_path / "train.de").write_text("eins\nzwei\n")
    (tmp_path / "train.en").write_text("one\n")
    from vanilla_transformer.data.translation import load_translation_splits

    with pytest.raises(ValueError, match=r"train.de has 2 lines but .*train.en has 1"):
        load_translation_splits("text", "de", "en", files={"train": str(tmp_path / "train")})


# -- data layouts: local files and the layouts of Hub data sets --------------------------------------------

LAYOUT_SPLITS = {"train": 60, "validation": 6, "test": 6}


def _write_layout(folder: Path, layout: str) -> dict:
    """The synthetic pairs written in one of the layouts a user brings; returns the run's data settings."""
    import pandas as pd

    folder.mkdir()
    settings = {}
    for offset, (split, size) in enumerate(LAYOUT_SPLITS.items()):
        pairs = synthetic_pairs(size, seed=100 + offset)
        if layout == "text":  # parallel files <prefix>.<lang>
            for lang in ("en", "de"):
                (folder / f"{split}.{lang}").write_text("\n".join(p[lang] for p in pairs) + "\n")
            settings[f"{split}_file"] = str(folder / split)
        elif layout == "json":  # Multi30k's JSON Lines: {"translation": {lang: text}}
            _write_jsonl(folder / f"{split}.jsonl.gz", [{"translation": p} for p in pairs])
            settings[f"{split}_file"] = str(folder / f"{split}.jsonl.gz")
        elif layout == "csv":  # a user's spreadsheet export: one column a language
            pd.DataFrame({"en": [p["en"] for p in pairs], "de": [p["de"] for p in pairs]}).to_csv(
                folder / f"{split}.csv", index=False
            )
            settings[f"{split}_file"] = str(folder / f"{split}.csv")
        elif layout == "tsv":  # tab-separated, read by the csv builder from its header (no quoting)
            pd.DataFrame({"en": [p["en"] for p in pairs], "de": [p["de"] for p in pairs]}).to_csv(
                folder / f"{split}.tsv", index=False, sep="\t"
            )
            settings[f"{split}_file"] = str(folder / f"{split}.tsv")
        elif layout == "parquet":  # a parquet file a split, rows with a translation dict
            pd.DataFrame({"translation": [dict(p) for p in pairs]}).to_parquet(folder / f"{split}.parquet")
            settings[f"{split}_file"] = str(folder / f"{split}.parquet")
        elif layout == "hub-flat":  # bentrevett/multi30k: flat language columns
            pd.DataFrame({"en": [p["en"] for p in pairs], "de": [p["de"] for p in pairs]}).to_parquet(
                folder / f"{split}.parquet"
            )
        elif layout == "hub-translation":  # wmt/wmt14 de-en: a translation dict per row
            pd.DataFrame({"translation": [dict(p) for p in pairs]}).to_parquet(folder / f"{split}.parquet")
        elif layout == "hub-named-columns":  # other column names, given by source_column / target_column
            pd.DataFrame(
                {"english": [p["en"] for p in pairs], "german": [p["de"] for p in pairs]}
            ).to_parquet(folder / f"{split}.parquet")
            settings |= {"source_column": "english", "target_column": "german"}
    if layout.startswith("hub"):
        settings["dataset"] = str(folder)  # load_dataset(folder): the call a Hub id goes through
    else:
        settings["dataset"] = "csv" if layout == "tsv" else layout
    return settings


@pytest.mark.parametrize(
    "layout", ["text", "json", "csv", "tsv", "parquet", "hub-flat", "hub-translation", "hub-named-columns"]
)
def test_a_run_trains_and_scores_from_each_data_layout(tmp_path, layout):
    """Parallel text files and JSON Lines from a recipe, and the layouts of Hub data sets read through the
    same ``load_dataset`` call a Hub id takes (here a local folder of parquet files): each trains, saves
    and scores the test split of exactly the pairs written."""
    settings = _write_layout(tmp_path / "data", layout)
    args = load_arguments(None, {**TINY_RUN, **settings, "output_dir": str(tmp_path / "out"), "max_steps": 2})
    splits = prepare_data(args)
    for offset, (split, size) in enumerate(LAYOUT_SPLITS.items()):
        pairs = synthetic_pairs(size, seed=100 + offset)
        assert splits[split]["source"] == [p["en"] for p in pairs]
        assert splits[split]["target"] == [p["de"] for p in pairs]
    results = train(args)
    assert results["updates"] == 2 and 0 <= results["test"]["sacrebleu"] <= 100
    assert (tmp_path / "out" / "model" / "model.safetensors").is_file()
    hypotheses = (tmp_path / "out" / "test_hypotheses.txt").read_text().splitlines()
    assert len(hypotheses) == LAYOUT_SPLITS["test"]


def test_missing_tokenized_references_are_named_before_training(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"tokenized_test_references.*nowhere.tok"):
        run(tmp_path, "out", tokenized_test_references=str(tmp_path / "nowhere.tok"))
    assert not (tmp_path / "out").exists()


def test_flat_rows_without_the_language_columns_are_refused_naming_the_columns(tmp_path):
    import pandas as pd

    (tmp_path / "data").mkdir()
    pd.DataFrame({"src": ["a"], "tgt": ["b"]}).to_parquet(tmp_path / "data" / "train.parquet")
    args = load_arguments(None, {**TINY_RUN, "dataset": str(tmp_path / "data")})
    with pytest.raises(
        ValueError, match=r"expected a 'translation' column or columns 'en' and 'de'.*source_column"
    ):
        prepare_data(args)


def test_unknown_recipe_key_names_the_key_and_file(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("model:\n  d_model: 64\nlearning_rat: 0.1\n")
    with pytest.raises(
        ValueError,
        match=r"Unknown setting\(s\) in .*recipe.yaml: learning_rat \(did you mean learning_rate\?\)\.$",
    ):
        load_arguments(str(recipe))
    recipe.write_text("d_model: 64\n")  # model settings live only in the model block
    with pytest.raises(
        ValueError,
        match=r"Unknown setting\(s\) in .*recipe.yaml: d_model \(a model setting: put it under `model:`",
    ):
        load_arguments(str(recipe))


def test_unknown_model_field_names_the_key_and_file(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("model:\n  d_model: 64\n  d_modle: 32\n")
    with pytest.raises(
        ValueError,
        match=r"recipe.yaml: Unknown model setting\(s\): model\.d_modle \(did you mean d_model\?\)",
    ):
        load_arguments(str(recipe))
    recipe.write_text("model:\n  vocab_size: 64\n")  # the tokenizer's size, not the recipe's
    with pytest.raises(ValueError, match=r"recipe.yaml: model\.vocab_size: set by the run"):
        load_arguments(str(recipe))
    recipe.write_text("model:\n  norm_position: middle\n")  # a bad value fails before any work
    with pytest.raises(ValueError, match=r"recipe.yaml: `norm_position` must be one of"):
        load_arguments(str(recipe))
    with pytest.raises(ValueError, match=r"--set: Unknown model setting\(s\): model\.heads"):
        load_arguments(None, {"model.heads": 2})


def test_set_overrides_one_field_of_the_model_block(tokenizer):
    options = build_parser().parse_args(["train", "--set", "model.d_model=64", "--set", "max_steps=7"])
    args = load_arguments(options.recipe, parse_overrides(options.set))
    assert args.model == {**SYNTHETIC_MODEL, "d_model": 64} and args.max_steps == 7
    config = build_model_config(args, tokenizer)
    assert (config.d_model, config.d_ff, config.num_heads, config.num_encoder_layers) == (64, 512, 4, 3)
    assert config.vocab_size == len(tokenizer) and config.pad_token_id == tokenizer.pad_token_id
    # On a recipe, the recipe's block is edited; a whole block replaces it, a preset lies under its fields.
    edited = load_arguments(str(CONFIGS / "multi30k_de_en.yaml"), {"model.dropout": 0.3})
    assert edited.model["d_model"] == 256 and edited.model["dropout"] == 0.3
    base = load_arguments(None, parse_overrides(["model={preset: base, dropout: 0.3}"]))
    config = build_model_config(base, tokenizer)
    assert (config.d_model, config.num_encoder_layers, config.dropout) == (512, 6, 0.3)


def test_the_default_job_is_the_synthetic_recipe(tokenizer):
    default, recipe = load_arguments(None), load_arguments(str(CONFIGS / "synthetic_en_de.yaml"))
    assert default.to_dict() == recipe.to_dict()
    config = build_model_config(default, tokenizer)
    sizes = ("d_model", "d_ff", "num_heads", "num_encoder_layers", "num_decoder_layers", "dropout")
    assert tuple(getattr(config, name) for name in sizes) == (128, 512, 4, 3, 3, 0.1)
    assert config.label_smoothing == 0.1 and config.norm_position == "post"
    assert default.mixed_precision_setting == "auto"


def test_recipes_read_yaml_1_2_scalars(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("lr_scale: 3e-1\nsource_lang: no\nresume: true\n")  # no: Norwegian, not false
    args = load_arguments(str(recipe))
    assert (args.lr_scale, args.source_lang, args.resume) == (
        0.3,
        "no",
        "true",
    )  # resume: true | false | auto


def test_committed_recipes_parse(tokenizer):
    recipes = sorted(CONFIGS.glob("*.yaml"))
    recipes = [
        r for r in recipes if not r.name.startswith(("imdb_", "nsmc_"))
    ]  # classification recipes: tests/test_classification.py and tests/test_nsmc.py parse them
    # Ablation studies (`vanilla-transformer ablate`) name a recipe and its rows' overrides.
    studies = [r for r in recipes if "recipe" in (parse_yaml(r.read_text(encoding="utf-8")) or {})]
    recipes = [r for r in recipes if r not in studies]
    assert recipes, "training/configs/ holds the recipes"
    for recipe in recipes:
        args = load_arguments(str(recipe))
        assert args.output_dir and args.mixed_precision_setting == "auto"
        preset = PRESETS[args.model["preset"]] if "preset" in args.model else {}
        assert build_model_config(args, tokenizer).d_model == args.model.get("d_model", preset.get("d_model"))
    for path in studies:  # read_study parses every row's training arguments, naming a bad row
        study = read_study(path)
        assert study.recipe.is_file() and [row.name for row in study.rows][0] == "base"


# -- mixed precision ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("native", [False, True], ids=["no-native-bf16", "native-bf16"])
def test_auto_precision_follows_the_hardware_and_is_recorded(tmp_path, monkeypatch, native):
    """`auto` is bf16 where the hardware multiplies bf16 natively, fp32 elsewhere (precision.py)."""
    monkeypatch.setattr("vanilla_transformer.precision.native_bf16", lambda device=None: native)
    results, folder = run(tmp_path, "run", max_steps=2, mixed_precision="auto")
    expected = "bf16" if native else "no"
    assert results["mixed_precision"]["setting"] == "auto" and results["mixed_precision"]["used"] == expected
    assert json.loads((folder / "results.json").read_text())["mixed_precision"] == results["mixed_precision"]
    card = (folder / "model" / "README.md").read_text()
    assert ("| precision | bf16 autocast" if native else "| precision | fp32") in card
    assert results["mixed_precision"]["hardware"] in card


def test_bf16_run_learns_and_saves_fp32_weights(tmp_path):
    results, folder = run(tmp_path, "run", max_steps=10, lr_scale=2.0, mixed_precision="bf16")
    assert results["mixed_precision"]["used"] == "bf16"
    losses = logged_losses(folder)
    assert sum(losses[s] for s in (8, 9, 10)) / 3 < sum(losses[s] for s in (1, 2, 3)) / 3 - 0.3
    for weights in (folder / "model", latest_checkpoint(folder / "checkpoints")):
        with safe_open(weights / "model.safetensors", "pt") as saved:
            assert {saved.get_tensor(name).dtype for name in saved.keys()} == {torch.float32}
    model = AutoModelForSeq2SeqLM.from_pretrained(folder / "model").eval()
    assert model.dtype == torch.float32
    tokenizer = AutoTokenizer.from_pretrained(folder / "model")
    batch = tokenizer(["The dog sees a cat ."], return_tensors="pt")
    generated = model.generate(**batch, max_new_tokens=5, num_beams=1)
    assert generated.shape[0] == 1 and 1 < generated.shape[1] <= 6


def test_learning_rate_is_finite_and_positive():
    assert all(
        0 < transformer_learning_rate(s, 128, 400, 2.0) < 1
        and math.isfinite(transformer_learning_rate(s, 128, 400))
        for s in range(1, 2000, 97)
    )


def test_a_greedy_recipe_saves_a_valid_greedy_generation_config(tmp_path):
    """``num_beams: 1`` (a setting tuned on validation may choose it) trains, checkpoints and reloads:
    the saved generation config is greedy, without the beam-only length penalty and early stopping."""
    _, folder = run(tmp_path, "greedy", max_steps=2, save_steps=1, num_beams=1, length_penalty=0.6)
    saved = GenerationConfig.from_pretrained(folder / "model")
    assert (saved.num_beams, saved.length_penalty, saved.early_stopping) == (1, 1.0, False)
    assert (
        "| decoding (saved generation config) | greedy search: the recipe's choice"
        in (folder / "model" / "README.md").read_text()
    )
    model = VanillaTransformerForConditionalGeneration.from_pretrained(folder / "model")
    ids = torch.tensor([[5, 6, 7, 2]])
    assert torch.equal(
        model.generate(input_ids=ids), model.generate(input_ids=ids, num_beams=1, do_sample=False)
    )
    with pytest.raises(ValueError, match="num_beams"):
        run(tmp_path, "none", max_steps=1, num_beams=0)


def test_validation_bleu_over_several_batches_logs_no_generation_warning(tmp_path):
    """Seq2SeqTrainer fills the generation config with transformers' defaults after each validation batch
    (``max_length`` 20 among them), which is no bound of ours: the later batches are bounded by §6.1's
    source length + 50 alone, and generate() does not warn on each of them that both bounds are set (it
    did on transformers 5.24, a line per batch of every validation in a training log)."""
    from transformers.testing_utils import CaptureLogger
    from transformers.utils import logging as transformers_logging

    generation = transformers_logging.get_logger("transformers.generation.utils")
    with CaptureLogger(generation) as captured:
        results, _ = run(
            tmp_path, "run", max_steps=2, eval_steps=2, eval_bleu_samples=6, per_device_eval_batch_size=2
        )
    assert [row["step"] for row in results["history"]] == [2]  # one validation: 3 batches of 2 sentences
    assert "seem to have been set" not in captured.out


def test_validation_perplexity_is_the_unsmoothed_one_table_3_reports(tmp_path):
    """One meaning of perplexity: validation's ``perplexity`` (what ``ablate`` reports as a row's dev
    perplexity) is exp of the unsmoothed negative log-likelihood per target token of the whole split,
    each sentence once; its ``loss`` is §5.4's label-smoothed loss, which is higher."""
    from transformers import DataCollatorForSeq2Seq

    from vanilla_transformer.modeling_vanilla_transformer import sequence_losses
    from vanilla_transformer.train.translation.data import tokenize_pairs

    results, folder = run(tmp_path, "run", max_steps=3, eval_steps=3, model={"dropout": 0.1})
    (validation,) = results["history"]
    args = load_arguments(None, {**TINY_RUN, "output_dir": str(folder)})
    model = VanillaTransformerForConditionalGeneration.from_pretrained(folder / "model").eval()
    tokenizer = AutoTokenizer.from_pretrained(folder / "model")
    split = prepare_data(args)["validation"]
    encoded = tokenize_pairs(split, tokenizer, args.max_source_length, args.max_target_length)
    batch = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)(
        [{key: row[key] for key in ("input_ids", "labels")} for row in encoded]
    )
    with torch.no_grad():
        nll, tokens = sequence_losses(model(**batch).logits, batch["labels"], 0.0)
    assert validation["bleu_sentences"] == min(TINY_RUN["eval_bleu_samples"], len(split))
    assert validation["perplexity"] == pytest.approx(math.exp(float(nll.sum()) / int(tokens.sum())), rel=1e-5)
    assert math.exp(validation["loss"]) > validation["perplexity"]  # smoothing raises the loss
