"""torch.compile on CPU: a compiled training step gives eager's losses, and generate() with a static
cache and a compiled forward gives eager's tokens (the speed-up is measured by `python -m benchmarks`, system
``ours-compiled`` in benchmarks/systems.py)."""

import copy

import torch
from conftest import random_ids, tiny_config

from vanilla_transformer import VanillaTransformerForConditionalGeneration


def varied_seq2seq() -> VanillaTransformerForConditionalGeneration:
    model = VanillaTransformerForConditionalGeneration(tiny_config())
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.5)
    return model


# At both ends: the compiled backward and Adam are torch's, and CI's two stages run two torch releases.
def test_compiled_training_step_matches_eager_losses():
    eager = VanillaTransformerForConditionalGeneration(tiny_config()).train()  # dropout 0: deterministic
    compiled_model = copy.deepcopy(eager)
    compiled = torch.compile(compiled_model)
    ids = random_ids(4, 9, seed=3)
    labels = random_ids(4, 7, seed=4)
    labels[0, 5:] = -100  # padding in the labels, as in any batch
    losses = {"eager": [], "compiled": []}
    for name, model, parameters in (
        ("eager", eager, eager.parameters()),
        ("compiled", compiled, compiled_model.parameters()),
    ):
        optimizer = torch.optim.Adam(parameters, lr=1e-3, betas=(0.9, 0.98), eps=1e-9)
        for _ in range(3):
            loss = model(input_ids=ids, labels=labels).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses[name].append(loss.item())
    assert losses["eager"][2] < losses["eager"][0]  # it does train
    torch.testing.assert_close(losses["compiled"], losses["eager"], rtol=1e-4, atol=1e-5)
    for (name, trained), compiled_parameter in zip(
        eager.named_parameters(), compiled_model.parameters(), strict=True
    ):
        if name.endswith("k_proj.bias"):
            # Softmax ignores a key bias (it adds q.b to every score of a query): its gradient is rounding
            # noise, which Adam normalises into +-lr steps of arbitrary sign.
            continue
        torch.testing.assert_close(compiled_parameter, trained, rtol=1e-4, atol=1e-5, msg=name)


def test_static_cache_compiled_generate_gives_eager_tokens():
    model = varied_seq2seq().eval()
    ids = random_ids(3, 9, seed=1)
    mask = torch.ones_like(ids)
    mask[0, 5:] = 0
    settings = dict(
        input_ids=ids,
        attention_mask=mask,
        num_beams=1,
        do_sample=False,
        max_new_tokens=10,
        output_scores=True,
        return_dict_in_generate=True,
    )
    eager = model.generate(**settings)
    static = model.generate(**settings, cache_implementation="static")
    model.forward = torch.compile(model.forward, fullgraph=True)  # transformers' static-cache recipe
    compiled = model.generate(**settings, cache_implementation="static")
    for output in (static, compiled):
        assert torch.equal(output.sequences, eager.sequences)
        torch.testing.assert_close(
            torch.stack(output.scores), torch.stack(eager.scores), rtol=1e-4, atol=1e-4
        )
