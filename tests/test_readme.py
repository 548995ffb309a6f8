"""The README's quick start runs as written and gives what its comments say: Table 3's parameter count,
§6.1's decoding (beam 4, alpha 0.6, at most 8 new tokens) and the classifier's own label and score."""

import ast
import contextlib
import io
import re
from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="module")
def quick_start() -> tuple[dict, str]:
    """The quick start's names after running it, and what it printed."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    block = re.search(r"## Quick start\n\n```python\n(.*?)```", readme, re.S).group(1)
    names, printed = {"__block__": block}, io.StringIO()
    torch.manual_seed(0)
    with contextlib.redirect_stdout(printed):
        exec(compile(block, "README.md", "exec"), names)
    return names, printed.getvalue()


def test_quick_start_builds_table_3_and_decodes_as_section_6_1(quick_start):
    names, _ = quick_start
    model, tokens, source = names["model"], names["tokens"], torch.tensor([[5, 17, 42, 2]])
    assert "63,082,496 parameters" in names["__block__"]
    assert sum(p.numel() for p in model.parameters()) == 63_082_496
    # The generated tokens: the start token, at most 8 new ones, and exactly what generate() gives when asked
    # for beam 4 and alpha 0.6 by name (the quick start relies on them being the defaults).
    assert (model.generation_config.num_beams, model.generation_config.length_penalty) == (4, 0.6)
    assert tokens.shape[0] == 1 and 2 <= tokens.shape[1] <= 1 + 8
    assert tokens[0, 0] == model.config.decoder_start_token_id
    explicit = model.generate(source, max_new_tokens=8, num_beams=4, length_penalty=0.6, do_sample=False)
    assert torch.equal(tokens, explicit)


def test_quick_start_prints_the_classifiers_own_label_and_score(quick_start):
    names, printed = quick_start
    classifier, tokenizer = names["classifier"], names["tokenizer"]
    training = classifier.training
    with torch.no_grad():
        logits = classifier.eval()(**tokenizer("a wonderful film", return_tensors="pt")).logits[0]
    classifier.train(training)
    (result,) = ast.literal_eval(printed.strip().splitlines()[-1])
    assert result["label"] == classifier.config.id2label[int(logits.argmax())]
    assert result["score"] == pytest.approx(float(logits.softmax(-1).max()), abs=1e-6)


def test_the_readme_is_a_path_not_a_manual():
    """The README takes a newcomer from install to a pushed, fine-tuned model; reference material lives in
    docs/ (one page per topic). It stays short enough to read through: at most 250 lines."""
    lines = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: move reference material to docs/"
