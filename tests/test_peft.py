"""LoRA adapters (PEFT) on the attention projections: train, save, reload, merge."""

import pytest
import torch
from conftest import encoder_only_config, random_ids, tiny_config
from peft import (
    AutoPeftModelForSeq2SeqLM,
    AutoPeftModelForSequenceClassification,
    LoraConfig,
    PeftModel,
    get_peft_model,
)

from vanilla_transformer import (
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerForSequenceClassification,
)

ATTENTION_PROJECTIONS = ["q_proj", "k_proj", "v_proj", "out_proj"]  # W^Q, W^K, W^V, W^O of §3.2.2


def _train_a_few_steps(model, inputs, steps=5):
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    for _ in range(steps):
        optimizer.zero_grad()
        model(**inputs).loss.backward()
        optimizer.step()
    model.eval()


CASES = {
    "seq2seq": (
        VanillaTransformerForConditionalGeneration,
        tiny_config,
        "SEQ_2_SEQ_LM",
        AutoPeftModelForSeq2SeqLM,
    ),
    "classifier": (
        VanillaTransformerForSequenceClassification,
        encoder_only_config,
        "SEQ_CLS",
        AutoPeftModelForSequenceClassification,
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_lora_trains_saves_reloads_and_merges(tmp_path, case):
    model_class, make_config, task_type, auto_peft = CASES[case]
    model_class(make_config()).save_pretrained(tmp_path / "base")
    base = model_class.from_pretrained(tmp_path / "base")
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=ATTENTION_PROJECTIONS, task_type=task_type)
    model = get_peft_model(base, lora)
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in name or "classifier" in name for name in trainable)
    # seq2seq: 2 encoder self + 2 decoder self + 2 cross attentions; classifier: 2 self; x q, k, v, out.
    assert sum("lora_A" in name for name in trainable) == {"seq2seq": 24, "classifier": 8}[case]

    source = random_ids(2, 7)
    inputs = {"input_ids": source}
    inputs["labels"] = random_ids(2, 5, seed=1) if case == "seq2seq" else torch.tensor([0, 1])
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    _train_a_few_steps(model, inputs)
    assert all(torch.equal(p, frozen[n]) for n, p in model.named_parameters() if not p.requires_grad)

    def outputs(m):
        with torch.no_grad():
            if case == "seq2seq":
                return m.generate(input_ids=source, max_new_tokens=6, num_beams=2)
            return m(input_ids=source).logits

    trained = outputs(model)
    original = model_class.from_pretrained(tmp_path / "base").eval()
    with torch.no_grad():  # the adapter changed the function
        assert not torch.allclose(model(**inputs).logits, original(**inputs).logits)
    model.save_pretrained(tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()

    reloaded = PeftModel.from_pretrained(
        model_class.from_pretrained(tmp_path / "base"), tmp_path / "adapter"
    ).eval()
    auto = auto_peft.from_pretrained(tmp_path / "adapter").eval()  # finds the base via adapter_config.json
    for loaded in (reloaded, auto):
        same(outputs(loaded), trained)
    merged = reloaded.merge_and_unload()
    assert isinstance(merged, model_class) and not any("lora" in n for n, _ in merged.named_parameters())
    same(outputs(merged), trained)  # the same tokens (scores) before and after merging


def same(actual, expected):
    if actual.dtype == torch.long:  # generated tokens
        assert torch.equal(actual, expected), (actual, expected)
    else:
        torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)
