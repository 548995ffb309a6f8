"""ONNX export with torch.onnx.export(dynamo=True): onnxruntime reproduces PyTorch's outputs, and a greedy
loop over the three seq2seq graphs reproduces generate()'s tokens."""

import numpy as np
import pytest
import torch
from conftest import decoder_only_config, encoder_only_config, random_ids, tiny_config

from vanilla_transformer import (
    VanillaTransformerForCausalLM,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerForSequenceClassification,
)
from vanilla_transformer.cli import main
from vanilla_transformer.onnx_export import SEQ2SEQ_FILES, OnnxSeq2Seq, export_onnx

onnxruntime = pytest.importorskip("onnxruntime", reason="the `onnx` extra (onnx, onnxscript, onnxruntime)")


def padded_batch(batch: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = random_ids(batch, length, seed=seed)
    mask = torch.ones_like(ids)
    mask[0, length // 2 :] = 0  # one row padded, as in any real batch
    return ids.masked_fill(mask == 0, 0), mask


def test_classifier_onnx_matches_pytorch_for_any_batch_and_length(tmp_path):
    model = VanillaTransformerForSequenceClassification(encoder_only_config(num_labels=3)).eval()
    (path,) = export_onnx(model, tmp_path)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for batch, length in ((3, 11), (1, 30), (5, 4)):  # none of them the traced shape
        ids, mask = padded_batch(batch, length, seed=length)
        expected = model(input_ids=ids, attention_mask=mask).logits.detach().numpy()
        (logits,) = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
        assert logits.shape == (batch, 3)
        np.testing.assert_allclose(logits, expected, atol=1e-5, rtol=1e-4)


def seq2seq_with_varied_outputs() -> VanillaTransformerForConditionalGeneration:
    """Untrained tiny weights repeat one token; larger random weights make every step differ. Seeded here:
    a module's fixture is built before the per-test seed, after whichever tests ran first."""
    torch.manual_seed(0)
    model = VanillaTransformerForConditionalGeneration(tiny_config()).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.5)
    return model


@pytest.fixture(scope="module")
def exported_seq2seq(tmp_path_factory):
    """A seq2seq model whose rows end at different steps, and its three graphs (one export, ~20 s, shared)."""
    model = seq2seq_with_varied_outputs()
    ids, mask = padded_batch(4, 9, seed=1)
    reference = model.generate(
        input_ids=ids, attention_mask=mask, num_beams=1, do_sample=False, max_new_tokens=12
    )
    # Declare a token the model does produce mid-sequence the EOS, so rows finish at different steps.
    model.generation_config.eos_token_id = model.config.eos_token_id = int(reference[1, 4])
    folder = tmp_path_factory.mktemp("onnx-seq2seq")
    files = export_onnx(model, folder)
    return model, folder, files


def test_onnx_greedy_loop_reproduces_generate(exported_seq2seq):
    model, folder, files = exported_seq2seq
    ids, mask = padded_batch(4, 9, seed=1)
    expected = model.generate(
        input_ids=ids, attention_mask=mask, num_beams=1, do_sample=False, max_new_tokens=12
    )
    assert (expected == model.config.pad_token_id).any() and len(
        {tuple(row) for row in expected.tolist()}
    ) > 1

    assert [path.name for path in files] == list(SEQ2SEQ_FILES)
    tokens = OnnxSeq2Seq(folder).generate(ids.numpy(), mask.numpy(), max_new_tokens=12, num_beams=1)
    np.testing.assert_array_equal(tokens, expected.numpy())
    # min_new_tokens as generate() has it: EOS is refused until then (the benchmark's fixed-length rows).
    at_least = model.generate(
        input_ids=ids, attention_mask=mask, num_beams=1, do_sample=False, max_new_tokens=12, min_new_tokens=8
    )
    tokens = OnnxSeq2Seq(folder).generate(
        ids.numpy(), mask.numpy(), max_new_tokens=12, min_new_tokens=8, num_beams=1
    )
    np.testing.assert_array_equal(tokens, at_least.numpy())


def _up_to_eos(tokens, eos: int) -> list[list[int]]:
    """Each row's generated tokens through its first EOS: what a translation is made of (generate() fills a
    shorter beam hypothesis with EOS or padding, as transformers chooses)."""
    rows = []
    for row in np.asarray(tokens)[:, 1:].tolist():
        rows.append(row[: row.index(eos) + 1] if eos in row else row)
    return rows


@pytest.mark.parametrize(
    ("num_beams", "length_penalty", "early_stopping", "max_new_tokens"),
    [(4, 1.0, True, 12), (4, 0.6, False, 12), (3, 2.0, "never", 15), (5, -0.5, False, 10)],
)
def test_onnx_beam_search_reproduces_generate(
    exported_seq2seq, num_beams, length_penalty, early_stopping, max_new_tokens
):
    """Beam search over the three graphs gives generate()'s hypotheses and lengths, for §6.1's beam 4 and the
    settings that change when a beam is finished (length penalty of either sign, each early_stopping)."""
    model, folder, _ = exported_seq2seq
    runner = OnnxSeq2Seq(folder)
    lengths = set()
    for seed in range(3):
        ids, mask = padded_batch(5, 7 + seed, seed=seed)
        settings = {
            "num_beams": num_beams,
            "length_penalty": length_penalty,
            "early_stopping": early_stopping,
        }
        expected = model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False, **settings
        )
        tokens = runner.generate(ids.numpy(), mask.numpy(), max_new_tokens=max_new_tokens, **settings)
        eos = model.config.eos_token_id
        assert _up_to_eos(tokens, eos) == _up_to_eos(expected, eos)
        assert tokens.shape == tuple(expected.shape)
        lengths |= {len(row) for row in _up_to_eos(expected, eos)}
    if length_penalty == 1.0:  # here some hypotheses end early and others run to the bound (the others
        assert len(lengths) > 1  # settings make this model end every one at its first step)


def test_onnx_engine_translates_as_the_pytorch_engine(translation_model, tmp_path):
    """`translate --engine onnx` on an export of the shared run decodes with its saved beam search and gives
    the PyTorch engine's lines."""
    source = tmp_path / "in.txt"
    source.write_text("a small dog runs\n\nthe red house is big\nwe see two cats\n", encoding="utf-8")
    main(["export-onnx", "--model", str(translation_model), "--output", str(tmp_path / "onnx"), "--no-check"])
    outputs = {}
    for engine, folder in (("pytorch", translation_model), ("onnx", tmp_path / "onnx")):
        output = tmp_path / f"{engine}.txt"
        main(
            [
                "translate",
                "--engine",
                engine,
                "--model",
                str(folder),
                "--input",
                str(source),
                "--output",
                str(output),
            ]
        )
        outputs[engine] = output.read_text(encoding="utf-8").splitlines()
    assert outputs["onnx"] == outputs["pytorch"] and len(outputs["onnx"]) == 4 and outputs["onnx"][1] == ""


def test_onnx_decoder_steps_match_pytorch_logits(exported_seq2seq):
    model, folder, _ = exported_seq2seq
    runner = OnnxSeq2Seq(folder)
    ids, mask = padded_batch(2, 13, seed=2)
    targets = torch.tensor([[1, 5, 9, 17], [1, 23, 4, 8]])
    expected = model(input_ids=ids, attention_mask=mask, decoder_input_ids=targets).logits.detach().numpy()
    (encoded,) = runner.encoder.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
    logits, keys, values, cross_keys, cross_values = runner.first.run(
        None,
        {
            "decoder_input_ids": targets[:, :1].numpy(),
            "encoder_hidden_states": encoded,
            "encoder_attention_mask": mask.numpy(),
        },
    )
    np.testing.assert_allclose(logits, expected[:, 0], atol=1e-4, rtol=1e-4)
    for step in range(1, targets.shape[1]):
        logits, keys, values = runner.later.run(
            None,
            {
                "decoder_input_ids": targets[:, step : step + 1].numpy(),
                "encoder_attention_mask": mask.numpy(),
                "past_keys": keys,
                "past_values": values,
                "cross_keys": cross_keys,
                "cross_values": cross_values,
            },
        )
        np.testing.assert_allclose(logits, expected[:, step], atol=1e-4, rtol=1e-4)
    assert keys.shape == (2, 2, 4, targets.shape[1], 4)  # (layers, batch, heads, length, d_k)


def test_export_command_and_refusals(tmp_path, classifier_folder):
    main(["export-onnx", "--model", str(classifier_folder), "--output", str(tmp_path / "onnx"), "--no-check"])
    assert {"model.onnx", "config.json", "tokenizer.json"} <= {p.name for p in (tmp_path / "onnx").iterdir()}
    with pytest.raises(ValueError, match="decoder-only"):
        export_onnx(VanillaTransformerForCausalLM(decoder_only_config()), tmp_path / "causal")
    with pytest.raises(FileNotFoundError, match="lacks encoder_model.onnx"):
        OnnxSeq2Seq(tmp_path / "onnx")


def test_onnx_decoding_follows_the_saved_generation_config(exported_seq2seq, tmp_path):
    """What the export's generation_config.json asks of generate() the ONNX decoding does too (a saved
    min_new_tokens or min_length), or refuses in one line (a setting it does not apply, such as
    no_repeat_ngram_size): it never returns other tokens than generate() in silence."""
    import copy
    import shutil

    model, folder, _ = exported_seq2seq
    saved = shutil.copytree(folder, tmp_path / "saved")
    ids, mask = padded_batch(5, 8, seed=4)
    eos = model.config.eos_token_id
    plain = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=12, num_beams=3)
    for setting in ({"min_new_tokens": 6}, {"min_length": 9}):
        config = copy.deepcopy(model.generation_config)
        config.update(**setting)
        config.save_pretrained(saved)
        expected = model.generate(
            input_ids=ids, attention_mask=mask, generation_config=config, max_new_tokens=12, num_beams=3
        )
        assert _up_to_eos(expected, eos) != _up_to_eos(plain, eos)  # the setting changes the translations
        for num_beams in (3, 1):
            expected = model.generate(
                input_ids=ids,
                attention_mask=mask,
                generation_config=config,
                max_new_tokens=12,
                num_beams=num_beams,
            )
            tokens = OnnxSeq2Seq(saved).generate(
                ids.numpy(), mask.numpy(), max_new_tokens=12, num_beams=num_beams
            )
            assert _up_to_eos(tokens, eos) == _up_to_eos(expected, eos), setting
    config = copy.deepcopy(model.generation_config)
    config.no_repeat_ngram_size = 2
    config.save_pretrained(saved)
    with pytest.raises(
        ValueError, match="sets no_repeat_ngram_size=2, which the ONNX decoding does not apply"
    ):
        OnnxSeq2Seq(saved)


def test_onnx_decoding_stops_at_a_learned_position_table(tmp_path, classifier_folder):
    """With learned positions generate() bounds a translation by the decoder's table (the default bound, the
    source + 50, would read past it); the ONNX decoding stops there too instead of failing in ONNX Runtime,
    and refuses a bound past it in one line. A folder that is not an ONNX translation export is named as
    what it is."""
    from test_input_checks import refused

    torch.manual_seed(0)
    model = VanillaTransformerForConditionalGeneration(
        tiny_config(position_encoding="learned", max_position_embeddings=12)
    ).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.5)
    model.generation_config.num_beams = 3
    export_onnx(model, tmp_path / "onnx")
    runner = OnnxSeq2Seq(tmp_path / "onnx")
    ids, mask = padded_batch(3, 9, seed=5)
    for num_beams in (3, 1):
        expected = model.generate(input_ids=ids, attention_mask=mask, num_beams=num_beams)
        tokens = runner.generate(ids.numpy(), mask.numpy(), num_beams=num_beams)
        assert tokens.shape[1] == 13 and tokens.shape == tuple(expected.shape)  # start + the table's 12
        np.testing.assert_array_equal(tokens, expected.numpy())
    with pytest.raises(ValueError, match="max_new_tokens 20: the decoder's learned positions hold 12"):
        runner.generate(ids.numpy(), mask.numpy(), max_new_tokens=20)

    (tmp_path / "ct2").mkdir()
    (tmp_path / "ct2" / "model.bin").write_bytes(b"")
    for folder, expected in (
        (
            tmp_path / "ct2",
            "is a CTranslate2 export (model.bin), not an ONNX one: translate it with --engine ",
        ),
        (classifier_folder, "is a model folder, not an ONNX export: translate it with --engine pytorch"),
        (tmp_path / "none", "does not exist"),
    ):
        message = refused(["translate", "--engine", "onnx", "--model", str(folder), "--input", __file__])
        assert expected in message, message
