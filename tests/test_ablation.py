"""`vanilla-transformer ablate`: Table 3's rows trained for one budget, measured, tabulated; resumable."""

import json

import numpy as np
import pytest
import sacrebleu
from PIL import Image
from test_config import paper_parameter_count
from transformers import AutoTokenizer

from vanilla_transformer.cli import main
from vanilla_transformer.data.translation import prepare_data
from vanilla_transformer.train import run as run_module
from vanilla_transformer.train.translation import ablation
from vanilla_transformer.train.translation.arguments import load_arguments

# Run once (.ci/run): the rows train, save and score through the translation trainer, whose use of
# accelerate, transformers and datasets tests/test_training.py checks at both ends of the ranges; what is
# tested here is the command's own work (rows, budgets, resumption, the table and its plot).
pytestmark = pytest.mark.newest_only

TINY_RECIPE = """
dataset: synthetic
synthetic_train_size: 160
synthetic_eval_size: 12
vocab_size: 300
max_source_length: 24
max_target_length: 24
model: {d_model: 32, d_ff: 64, num_heads: 4, num_encoder_layers: 1, num_decoder_layers: 1}
max_tokens: 600
max_steps: 3
warmup_steps: 2
eval_steps: 3
eval_bleu_samples: 4
save_steps: 3
save_total_limit: 1
mixed_precision: "no"
report_to: none
"""

STUDY = """
recipe: tiny.yaml
settings: {max_steps: 2, save_steps: 1, eval_steps: 2, model.dropout: 0.0}
rows:
  A:
    - {model.num_heads: 1}
  B:
    - {model.d_k: 4}
  C:
    - {model.d_model: 16, model.d_ff: 48}
"""


def write_study(folder, study=STUDY):
    (folder / "tiny.yaml").write_text(TINY_RECIPE)
    (folder / "table3.yaml").write_text(study)
    return folder / "table3.yaml"


def attention_parameters(d_model, heads, d_k, d_v):
    """q, k (D -> h d_k), v (D -> h d_v) and the output projection (h d_v -> D), with biases."""
    return (
        2 * (d_model * heads * d_k + heads * d_k)
        + d_model * heads * d_v
        + heads * d_v
        + heads * d_v * d_model
        + d_model
    )


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    folder = tmp_path_factory.mktemp("table3")
    study = write_study(folder)
    main(["ablate", "--recipe", str(study), "--output", str(folder / "runs")])
    return folder


def test_every_row_is_trained_for_the_same_budget_and_measured_on_dev(table):
    result = json.loads((table / "runs" / "table3.json").read_text())
    rows = {row["name"]: row for row in result["rows"]}
    assert sorted(rows) == ["A1", "B1", "C1", "base"]
    references = prepare_data(load_arguments(str(table / "tiny.yaml")))["validation"]["target"]
    for row in rows.values():
        assert row["updates"] == 2  # the shared settings' budget, not the recipe's 3
        assert row["dev_perplexity"] > 1.0 and row["dev_sentences"] == 12
        # The row's BLEU is sacreBLEU's of the translations it wrote, against the dev references.
        hypotheses = (table / "runs" / row["name"] / "dev_hypotheses.txt").read_text().splitlines()
        assert len(hypotheses) == 12
        assert row["dev_sacrebleu"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references]).score)
    # Every row trains the same tokenizer (same data, same size), so only the architecture differs.
    vocab = len(AutoTokenizer.from_pretrained(table / "runs" / "base" / "model"))
    assert vocab == len(AutoTokenizer.from_pretrained(table / "runs" / "C1" / "model"))
    assert rows["base"]["parameters"] == paper_parameter_count(vocab, 32, 64, 1)
    assert rows["A1"]["parameters"] == rows["base"]["parameters"]  # h x d_k = d_model: the same computation
    assert rows["C1"]["parameters"] == paper_parameter_count(vocab, 16, 48, 1)
    # Row B: d_k = 4 with 4 heads shrinks q and k only (d_v stays d_model / h = 8).
    smaller = 3 * (attention_parameters(32, 4, 8, 8) - attention_parameters(32, 4, 4, 8))
    assert rows["B1"]["parameters"] == rows["base"]["parameters"] - smaller
    assert rows["B1"]["config"]["d_k"] == "4" and rows["B1"]["config"]["d_v"] == "8"


def test_the_table_is_laid_out_as_the_papers(table):
    lines = (table / "runs" / "table3.md").read_text().splitlines()
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    assert header[1:4] == ["N", "d_model", "d_ff"] and header[-3:] == [
        "PPL (dev)",
        "BLEU (dev)",
        "params ×10⁶",
    ]
    body = {
        cells[0]: cells for cells in ([c.strip() for c in line.strip("|").split("|")] for line in lines[2:])
    }
    assert body["base"][1:5] == ["1", "32", "64", "4"]  # the base row shows every value
    row_a = body["A"]
    assert row_a[header.index("h")] == "1" and row_a[header.index("d_k")] == "32"
    assert row_a[header.index("d_model")] == "" and row_a[header.index("N")] == ""  # blank: the base value
    # The pictures: dev BLEU and dev perplexity bars (11 x 4 inches at 120 dpi), each row's bar in its
    # group's colour, as tall as its value (bars of one width from 0: areas in proportion; the base row's
    # black also colours the text, so it is left out of the proportion); and each row's validation-loss
    # curve (8 x 4.5 inches), drawn and named in the legend in the same colour.
    bars = np.asarray(Image.open(table / "runs" / "table3.png").convert("RGB")).astype(int)
    curves = np.asarray(Image.open(table / "runs" / "table3_curves.png").convert("RGB")).astype(int)
    assert bars.shape == (480, 1320, 3) and curves.shape == (540, 960, 3)
    perplexity_panel = bars[:, 660:]  # BLEU after two updates may be 0: a bar of no height
    rows = {row["name"]: row for row in json.loads((table / "runs" / "table3.json").read_text())["rows"]}
    area_per_unit = []
    for group, colour in GROUP_COLOURS.items():
        assert _pixels(perplexity_panel, colour) > 10_000, group  # a bar (the text alone: under 3,000)
        assert _pixels(curves, colour) > 30, group  # a marker and the legend's line
        if group != "base":
            area_per_unit.append(_pixels(perplexity_panel, colour) / rows[f"{group}1"]["dev_perplexity"])
    assert max(area_per_unit) < 1.05 * min(area_per_unit), area_per_unit


GROUP_COLOURS = {"base": (0, 0, 0), "A": (31, 119, 180), "B": (23, 190, 207), "C": (44, 160, 44)}


def _pixels(picture: np.ndarray, colour: tuple[int, int, int]) -> int:
    """How many pixels of an (H, W, 3) picture are exactly ``colour`` (give or take 3 per channel)."""
    return int((np.abs(picture - np.array(colour)).max(-1) <= 3).sum())


def test_a_re_run_skips_finished_rows(table, monkeypatch):
    def no_training(*args, **kwargs):
        raise AssertionError(f"a finished row was trained again: {args}")

    monkeypatch.setattr(run_module, "train_recipe", no_training)
    before = (table / "runs" / "A1" / "table3_row.json").stat().st_mtime_ns
    main(["ablate", "--recipe", str(table / "table3.yaml"), "--output", str(table / "runs")])
    assert (table / "runs" / "A1" / "table3_row.json").stat().st_mtime_ns == before


def test_a_started_row_resumes_from_its_checkpoint(tmp_path, monkeypatch):
    study = ablation.read_study(write_study(tmp_path))
    checkpoint = tmp_path / "runs" / "base" / "checkpoints" / "checkpoint-1"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text("{}")  # what makes a checkpoint complete
    runs = []

    def record(recipe, overrides, *args, **kwargs):
        runs.append(overrides)
        raise SystemExit  # stop after the first row's run

    monkeypatch.setattr(run_module, "train_recipe", record)
    with pytest.raises(SystemExit):
        ablation.run_study(study, study.select(None), tmp_path / "runs")
    assert runs[0]["resume"] == "auto" and runs[0]["output_dir"] == str(tmp_path / "runs" / "base")


def test_print_commands_lists_one_ordinary_training_command_per_selected_row(tmp_path, capsys):
    study = write_study(tmp_path)
    main(["ablate", "--recipe", str(study), "--rows", "A,C1", "--print-commands", "--output", "out"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3  # base, A1, C1
    assert all(line.startswith("vanilla-transformer train --recipe ") for line in lines)
    assert "--set model.num_heads=1" in lines[1] and "--set output_dir=out/A1" in lines[1]
    assert "--set max_steps=2" in lines[2] and "--set model.d_model=16" in lines[2]


def test_a_bad_override_names_the_row_and_the_key(tmp_path):
    bad = STUDY.replace("model.num_heads: 1", "model.num_hedas: 1")
    with pytest.raises(ValueError, match=r"row A1 .*model\.num_hedas"):
        ablation.read_study(write_study(tmp_path, bad))
    with pytest.raises(ValueError, match=r"--rows: unknown row\(s\) F2"):
        ablation.read_study(write_study(tmp_path)).select("A,F2")


def test_a_rows_dev_scores_are_its_runs_validation_of_the_saved_model(table):
    """The table's perplexity and translations are the saved model's, measured by the run's own validation
    (no second evaluation): perplexity unsmoothed per target token (§5.4 smooths the loss, not the metric),
    the translations those of ``generate()`` with the saved decoding settings."""
    import math

    import torch
    from transformers import DataCollatorForSeq2Seq

    from vanilla_transformer import VanillaTransformerForConditionalGeneration
    from vanilla_transformer.inference import translate
    from vanilla_transformer.modeling_vanilla_transformer import sequence_losses
    from vanilla_transformer.train.translation.data import tokenize_pairs

    folder = table / "runs" / "base"
    model = VanillaTransformerForConditionalGeneration.from_pretrained(folder / "model").eval()
    tokenizer = AutoTokenizer.from_pretrained(folder / "model")
    args = load_arguments(str(table / "tiny.yaml"))
    validation = prepare_data(args)["validation"]
    encoded = tokenize_pairs(validation, tokenizer, args.max_source_length, args.max_target_length)
    batch = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)(
        [{key: row[key] for key in ("input_ids", "labels")} for row in encoded]
    )
    with torch.no_grad():
        nll, tokens = sequence_losses(model(**batch).logits, batch["labels"], 0.0)
    row = json.loads((table / "runs" / "table3.json").read_text())["rows"][0]
    assert row["name"] == "base"
    assert row["dev_perplexity"] == pytest.approx(math.exp(float(nll.sum()) / int(tokens.sum())), rel=1e-5)
    assert row["dev_perplexity"] < len(tokenizer)  # two updates already beat guessing
    written = (folder / "dev_hypotheses.txt").read_text().splitlines()
    assert written == translate(
        model, tokenizer, validation["source"], max_source_length=args.max_source_length
    )
