"""The benchmark suite measures what it says: its FLOP count is PyTorch's, its systems train and agree."""

import json
import time

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.measure import main as measure_main
from benchmarks.measure import random_sentences
from benchmarks.presets import PRESETS, SOURCE_LENGTH, TARGET_LENGTH, TRAIN_BATCH, training_flops
from benchmarks.run import combine, table
from benchmarks.systems import Marian, Ours, TorchTransformer

# Run once (.ci/run): the benchmark harness is a developer's tool, not the package, and times the model
# through the calls tests/test_modeling.py and tests/test_generation.py check at both ends of the ranges.
pytestmark = pytest.mark.newest_only


@pytest.mark.parametrize("system_class", [Ours, Marian, TorchTransformer])
def test_training_flops_formula_matches_pytorchs_flop_counter(system_class):
    preset = PRESETS["small"]
    system = system_class(preset)
    source = random_sentences(TRAIN_BATCH, SOURCE_LENGTH, preset["vocab_size"], seed=1)
    target = random_sentences(TRAIN_BATCH, TARGET_LENGTH, preset["vocab_size"], seed=2)
    decoder_input = torch.cat([torch.full((TRAIN_BATCH, 1), system.start), target[:, :-1]], dim=1)

    # PyTorch's counter knows addmm but not its in-place form, which the fused loss accumulates with:
    # (m x k) @ (k x n) is 2 m k n FLOPs, as the counter's addmm formula says
    def addmm_(self_shape, a_shape, b_shape, out_shape=None, **kwargs) -> int:
        return 2 * a_shape[0] * a_shape[1] * b_shape[1]

    with FlopCounterMode(display=False, custom_mapping={torch.ops.aten.addmm_: addmm_}) as counter:
        system.train_step(source, decoder_input, target)
    assert counter.get_total_flops() == pytest.approx(training_flops(preset), rel=0.03)


def test_same_dimensions_give_the_same_parameter_count_up_to_known_extras():
    preset = PRESETS["small"]
    ours = sum(p.numel() for p in Ours(preset).model.parameters())
    marian = sum(p.numel() for p in Marian(preset).model.parameters())
    torch_nn = sum(p.numel() for p in TorchTransformer(preset).model.parameters())
    # Marian stores its sinusoidal tables (encoder + decoder, 512 x d) as parameters; nn.Transformer adds
    # the final LayerNorm of each stack.
    assert marian - ours == 2 * 512 * preset["d_model"]
    assert torch_nn - ours == 2 * 2 * preset["d_model"]


def test_measure_prints_one_json_record_of_the_timed_step(capsys, monkeypatch):
    """The record's figures are the timed update's: its seconds (timed here too, around the same call), the
    tokens it trained on (source + target, counted here from its arguments) per second, and the preset's
    training FLOPs per second."""
    calls = []
    train_step = Ours.train_step

    def timed_here(system, source, decoder_input, labels):
        start = time.perf_counter()
        loss = train_step(system, source, decoder_input, labels)
        calls.append((time.perf_counter() - start, source.numel() + labels.numel()))
        return loss

    monkeypatch.setattr(Ours, "train_step", timed_here)
    measure_main(
        ["--system", "ours", "--preset", "small", "--measure", "train", "--threads", "1", "--repeats", "1"]
    )
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert record["system"] == "ours" and record["threads"] == 1
    assert record["parameters"] == 7_577_600 and record["peak_rss_mb"] > 0
    assert len(calls) == 4  # three warm-up updates, then the one timed (--repeats 1)
    seconds, tokens = calls[-1]
    assert tokens == TRAIN_BATCH * (SOURCE_LENGTH + TARGET_LENGTH)
    # The measure's clock wraps the same call (and a list append): at least as long, hardly longer.
    assert seconds <= record["train_step_s"] <= 1.05 * seconds + 1e-3
    assert record["train_tokens_per_s"] == pytest.approx(tokens / record["train_step_s"], rel=1e-9)
    assert record["train_gflops"] == pytest.approx(
        training_flops(PRESETS["small"]) / record["train_step_s"] / 1e9
    )


def test_ratios_are_medians_of_same_round_ratios_so_drift_cancels():
    # The machine halves in speed in round 2: each round's ratio is 1.2, 1.2 and 0.9.
    rounds = [
        {"small": {"ours": {"train_tokens_per_s": ours}, "marian": {"train_tokens_per_s": marian}}}
        for ours, marian in [(120.0, 100.0), (60.0, 50.0), (90.0, 100.0)]
    ]
    results, ratios = combine(rounds, ["small"])
    assert results["small"]["ours"]["train_tokens_per_s"] == 90.0  # median of the figures
    assert results["small"]["marian"]["train_tokens_per_s"] == 100.0
    assert ratios["small"]["ours"]["train_tokens_per_s"] == pytest.approx(1.2)  # 90 / 100 would say 0.9
    assert len(results["small"]["ours"]["rounds"]) == 3
    assert "(1.20×)" in table(results, ratios, "small", ["ours", "marian"])


def test_bf16_systems_are_compared_with_marian_in_bf16():
    rounds = [
        {
            "small": {
                "ours-bf16": {"train_tokens_per_s": 300.0},
                "marian-bf16": {"train_tokens_per_s": 200.0},
                "marian": {"train_tokens_per_s": 100.0},
            }
        }
    ]
    _, ratios = combine(rounds, ["small"])
    assert ratios["small"]["ours-bf16"]["train_tokens_per_s"] == pytest.approx(1.5)  # not 3.0
    assert ratios["small"]["marian-bf16"]["train_tokens_per_s"] == pytest.approx(2.0)


def test_our_bf16_system_trains_as_the_loop_does_and_generates_in_bf16():
    from benchmarks.systems import build

    system = build("ours-bf16", PRESETS["small"], threads=1)
    assert system.bf16 and system.model.config._attn_implementation == "eager"
    source = random_sentences(2, 6, PRESETS["small"]["vocab_size"], seed=1)
    decoder_input = torch.cat([torch.full((2, 1), system.start), source[:, :-1]], dim=1)
    system.train_step(source, decoder_input, source)
    assert system.optimizer.defaults["fused"]  # as the trainer steps (and the Trainer's default optim)
    assert system.model.lm_head.weight.dtype == torch.float32  # autocast: fp32 weights
    assert system.generate(source, num_beams=1, new_tokens=3).shape == (2, 3)
    assert system.model.lm_head.weight.dtype == torch.bfloat16  # generation serves bf16 weights


def test_our_ctranslate2_export_runs_in_the_suite_and_agrees_with_our_model():
    pytest.importorskip(
        "ctranslate2", reason='the optional engine: pip install "vanilla-transformer[ctranslate2]"'
    )
    from benchmarks.systems import build

    system = build("ctranslate2-ours", PRESETS["small"], threads=1)
    source = random_sentences(3, 8, PRESETS["small"]["vocab_size"], seed=4)
    assert torch.equal(system.generate(source, num_beams=1, new_tokens=6), system.reference(source, 6))


def test_precision_curves_tabulate_each_run_and_mark_the_evaluated_test_score(tmp_path, capsys):
    """benchmarks/precision_curves.py reads each run's validation history and, where `evaluate` scored the
    final model on test (model/test_scores.json), prints that score with the run's updates and minutes."""
    from benchmarks.precision_curves import main as curves_main

    history = [{"step": 500, "sacrebleu": 12.5, "bleu_lc_tok": 13.0, "elapsed_minutes": 5.2}]
    for name, used, test in (("fp32", "no", None), ("bf16", "bf16", 41.27)):
        (tmp_path / name / "model").mkdir(parents=True)
        results = {"updates": 900, "training_minutes": 9.5, "mixed_precision": {"used": used}}
        (tmp_path / name / "results.json").write_text(json.dumps({**results, "history": history}))
        if test:
            scores = {"sacrebleu": test, "bleu_lc_tok": 43.0, "num_beams": 4, "length_penalty": 0.6}
            (tmp_path / name / "model" / "test_scores.json").write_text(json.dumps(scores))
    plot = tmp_path / "curves.png"
    curves_main([str(tmp_path / "fp32"), str(tmp_path / "bf16"), "--output", str(plot)])
    printed = capsys.readouterr().out
    assert "| 500 | 12.50 | 5.2 | 12.50 | 5.2 |" in printed
    assert "bf16: test sacreBLEU 41.27 after 900 updates, 9.5 min (beam 4, length penalty 0.6)" in printed
    assert "fp32: test" not in printed and plot.stat().st_size > 10_000
    curves_main(
        [str(tmp_path / "bf16"), "--metric", "bleu_lc_tok", "--labels", "cooled", "--output", str(plot)]
    )
    assert "cooled: test lowercased tokenized BLEU 43.00" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        curves_main([str(tmp_path / "bf16"), "--labels", "a", "b", "--output", str(plot)])


def test_paired_ratios_are_medians_of_within_round_ratios_so_drift_cancels():
    from benchmarks.paired import paired_ratio

    # The machine halves in speed in round 2; within each round ours is 1.2x, 1.2x and 0.9x as fast.
    ours, marian = [0.5, 1.0, 0.5], [0.6, 1.2, 0.45]
    ratio = paired_ratio(ours, marian)
    assert ratio["median"] == pytest.approx(1.2) and ratio["rounds"] == 3
    assert ratio["q1"] == pytest.approx(1.05) and ratio["q3"] == pytest.approx(1.2)
    with pytest.raises(ValueError, match="3 times against 2"):
        paired_ratio(ours, marian[:2])


def test_paired_rounds_alternate_which_system_goes_first():
    from benchmarks.paired import alternate

    calls = []
    times = alternate({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, rounds=3)
    assert calls == ["a", "b", "b", "a", "a", "b"]
    assert [len(values) for values in times.values()] == [3, 3]


def test_paired_command_times_both_systems_on_every_shared_workload(tmp_path, monkeypatch, capsys):
    from benchmarks.paired import main as paired_main
    from benchmarks.paired import paired_ratio

    tiny = {"d_model": 16, "num_heads": 2, "d_ff": 32, "num_encoder_layers": 1, "num_decoder_layers": 1}
    monkeypatch.setitem(PRESETS, "tiny", {**tiny, "vocab_size": 64})
    output = tmp_path / "paired.json"
    paired_main(
        ["--preset", "tiny", "--systems", "ours", "marian", "--rounds", "2", "--threads", "1"]
        + ["--output", str(output)]
    )
    records = json.loads(output.read_text())["records"]
    assert [record["workload"] for record in records] == [
        "training step",
        "greedy, batch 1",
        "beam 4, batch 1",
        "greedy, batch 32",
        "beam 4, batch 32",
    ]
    assert [record["ratio"]["rounds"] for record in records] == [2, 2, 2, 3, 3]  # batch 32: at least 3
    for record in records:
        assert record["ratio"] == pytest.approx(
            paired_ratio(record["times"]["ours"], record["times"]["marian"])
        )
    printed = capsys.readouterr().out
    rows = [line for line in printed.splitlines() if line.startswith(("| training", "| greedy", "| beam"))]
    assert "| tiny: ours / marian |" in printed and len(rows) == 5
