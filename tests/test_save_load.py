"""save_pretrained / from_pretrained, Auto classes, and remote code loaded without the package."""

import json
import textwrap

import pytest
import torch
from conftest import (
    decoder_only_config,
    encoder_only_config,
    random_ids,
    run_without_the_package,
    tiny_config,
)
from safetensors.torch import load_file
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
)

from vanilla_transformer import (
    VanillaTransformerConfig,
    VanillaTransformerForCausalLM,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerForSequenceClassification,
    VanillaTransformerModel,
)

CASES = [
    (VanillaTransformerForConditionalGeneration, AutoModelForSeq2SeqLM, tiny_config),
    (VanillaTransformerForSequenceClassification, AutoModelForSequenceClassification, encoder_only_config),
    (VanillaTransformerForCausalLM, AutoModelForCausalLM, decoder_only_config),
    (VanillaTransformerModel, AutoModel, tiny_config),
]


def _inputs(model):
    inputs = {"input_ids": random_ids(2, 6)}
    if model.config.is_encoder_decoder:
        inputs["decoder_input_ids"] = random_ids(2, 4, seed=1)
    return inputs


@pytest.mark.parametrize("model_class, auto_class, make_config", CASES)
def test_save_load_gives_identical_outputs(tmp_path, model_class, auto_class, make_config):
    model = model_class(make_config(position_encoding="learned")).eval()
    inputs = _inputs(model)
    expected = model(**inputs)[0]
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file()
    assert {"configuration_vanilla_transformer.py", "modeling_vanilla_transformer.py"} <= {
        p.name for p in tmp_path.iterdir()
    }
    loaded, info = model_class.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    torch.testing.assert_close(loaded.eval()(**inputs)[0], expected)
    via_auto = auto_class.from_pretrained(tmp_path).eval()
    assert type(via_auto) is model_class
    torch.testing.assert_close(via_auto(**inputs)[0], expected)


def test_tied_weights_are_stored_once_and_tied_after_loading(tmp_path):
    model = VanillaTransformerForConditionalGeneration(tiny_config())
    model.save_pretrained(tmp_path)
    stored = load_file(tmp_path / "model.safetensors")
    embedding_keys = [k for k in stored if "embed_tokens" in k or "lm_head" in k]
    assert embedding_keys == ["model.encoder.embed_tokens.weight"]
    loaded = VanillaTransformerForConditionalGeneration.from_pretrained(tmp_path)
    assert loaded.lm_head.weight is loaded.model.encoder.embed_tokens.weight
    assert loaded.model.decoder.embed_tokens.weight is loaded.model.encoder.embed_tokens.weight


def test_auto_map_and_generation_config_are_written(tmp_path):
    VanillaTransformerForConditionalGeneration(tiny_config()).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "vanilla_transformer"
    assert config["auto_map"]["AutoConfig"] == "configuration_vanilla_transformer.VanillaTransformerConfig"
    assert config["auto_map"]["AutoModelForSeq2SeqLM"].endswith("VanillaTransformerForConditionalGeneration")
    generation = json.loads((tmp_path / "generation_config.json").read_text())
    assert (generation["num_beams"], generation["length_penalty"]) == (4, 0.6)
    assert isinstance(AutoConfig.from_pretrained(tmp_path), VanillaTransformerConfig)


def test_classifier_checkpoint_loads_into_auto_model_as_encoder_only(tmp_path):
    classifier = VanillaTransformerForSequenceClassification(encoder_only_config()).eval()
    classifier.save_pretrained(tmp_path)
    base = AutoModel.from_pretrained(tmp_path).eval()
    ids = random_ids(2, 5)
    torch.testing.assert_close(
        base(input_ids=ids).last_hidden_state, classifier.model(input_ids=ids).last_hidden_state
    )


REMOTE_SCRIPT = textwrap.dedent(
    """
    import sys
    sys.modules["vanilla_transformer"] = None  # the package must not be importable here
    import torch
    import transformers
    for folder, auto in zip(sys.argv[1::2], sys.argv[2::2]):
        model = getattr(transformers, auto).from_pretrained(folder, trust_remote_code=True).eval()
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        inputs = torch.load(folder + "/inputs.pt")
        torch.testing.assert_close(model(**inputs)[0], torch.load(folder + "/expected.pt"))
        if model.can_generate():
            tokens = model.generate(input_ids=inputs["input_ids"], max_new_tokens=4, num_beams=2)
            assert torch.equal(tokens, torch.load(folder + "/tokens.pt")), (auto, tokens)
        print("remote code OK", type(model).__name__, model.can_generate())
    """
)


def test_remote_code_loads_without_the_package(tmp_path):
    """Each head's saved folder loads through its Auto class with ``trust_remote_code`` in a Python that
    cannot import the package (one process for the three: each start costs ~7 s of imports), gives the
    outputs it gave here, and the two that generate give the same beam-search tokens."""
    arguments, expected = [], []
    for model_class, auto_class, make_config in CASES[:3]:
        folder = tmp_path / model_class.__name__
        model = model_class(make_config()).eval()
        model.save_pretrained(folder)
        inputs = _inputs(model)
        torch.save(inputs, folder / "inputs.pt")
        torch.save(model(**inputs)[0], folder / "expected.pt")
        if model.can_generate():
            tokens = model.generate(input_ids=inputs["input_ids"], max_new_tokens=4, num_beams=2)
            torch.save(tokens, folder / "tokens.pt")
        arguments += [str(folder), auto_class.__name__]
        expected.append(f"remote code OK {model_class.__name__} {model.can_generate()}")
    result = run_without_the_package(REMOTE_SCRIPT, *arguments, folder=tmp_path)
    assert result.stdout.splitlines() == expected
    assert [line.split()[-1] for line in expected] == ["True", "False", "True"]  # generate() checked twice


REMOTE_CODE_FILES = (
    "configuration_vanilla_transformer.py",
    "modeling_vanilla_transformer.py",
    "translation_pipeline.py",
    "classification_pipeline.py",
    "long_inputs.py",  # the translation pipeline's policy for a text longer than the model reads
)


def test_remote_code_files_import_only_torch_transformers_and_each_other():
    """What ``trust_remote_code`` copies must import nothing a downloaded folder lacks: no
    ``vanilla_transformer.*`` (not even guarded by ``except ImportError``, which would pick up whatever
    version happens to be installed), only torch, transformers, the standard library and siblings."""
    import ast
    import sys
    from pathlib import Path

    import vanilla_transformer

    folder = Path(vanilla_transformer.__file__).parent
    siblings = {Path(name).stem for name in REMOTE_CODE_FILES}
    for name in REMOTE_CODE_FILES:
        for node in ast.walk(ast.parse((folder / name).read_text())):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: must be a sibling remote-code file
                    assert node.level == 1 and (node.module or "") in siblings, (name, node.module)
                    continue
                modules = [node.module]
            else:
                continue
            for module in modules:
                root = module.split(".")[0]
                assert root in {"torch", "transformers"} or root in sys.stdlib_module_names, (name, module)


def test_model_constructors_leave_the_config_alone(tmp_path):
    config = tiny_config()
    before = config.to_dict()
    model = VanillaTransformerForConditionalGeneration(config)
    assert config.to_dict() == before and not getattr(config, "custom_pipelines", None)
    model.save_pretrained(tmp_path)  # the pipeline is named where the folder is written
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["custom_pipelines"]["translation"]["impl"] == "translation_pipeline.TranslationPipeline"
    assert (tmp_path / "translation_pipeline.py").is_file()
    assert not getattr(model.config, "custom_pipelines", None)


def test_decoder_only_model_reads_the_shared_embedding_of_a_seq2seq_checkpoint(tmp_path):
    """§3.4: the seq2seq checkpoint stores the embedding shared by both stacks once (under the encoder);
    the decoder alone (and its tied output projection) must find it, not start from random weights."""
    seq2seq = VanillaTransformerForConditionalGeneration(tiny_config())
    seq2seq.save_pretrained(tmp_path)
    causal, info = VanillaTransformerForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"]
    shared = seq2seq.model.encoder.embed_tokens.weight
    assert torch.equal(causal.model.decoder.embed_tokens.weight, shared)
    assert torch.equal(causal.lm_head.weight, shared)
    layer = "layers.1.self_attn.q_proj.weight"
    assert torch.equal(causal.model.decoder.get_parameter(layer), seq2seq.model.decoder.get_parameter(layer))


@pytest.mark.parametrize("share, tie", [(True, False), (False, True), (False, False)])
def test_every_tying_choice_survives_save_and_load(tmp_path, share, tie):
    model = VanillaTransformerForConditionalGeneration(
        tiny_config(share_embeddings=share, tie_word_embeddings=tie)
    )
    model.save_pretrained(tmp_path)
    loaded, info = VanillaTransformerForConditionalGeneration.from_pretrained(
        tmp_path, output_loading_info=True
    )
    assert not any(info.values())
    embeddings = loaded.model.encoder.embed_tokens.weight, loaded.model.decoder.embed_tokens.weight
    assert (embeddings[0] is embeddings[1]) == share
    assert (loaded.lm_head.weight is embeddings[1]) == tie
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], tensor)
