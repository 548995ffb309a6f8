"""Bad model folders on every command that loads a model: a missing folder, a weights
file with a flipped bit or malformed JSON in its header, a flipped bit in a tensor's name, a folder without
``model.safetensors``, a BERT or Marian folder, a tokenizer larger than the model's ``vocab_size``, a weights
file cut short. Each is one ``error:`` line that names the file or field (``loading.check_model_folder``),
never a traceback, and nothing reaches the Hub or starts a server.

The folders are the module's own, not the shared run's: a good untrained tiny model (and a BERT and a
Marian) saved with the test tokenizer, whose size the messages name, and copies of it each broken one way."""

import importlib.util
import json
import shutil
import struct

import pytest
from conftest import encoder_only_config, tiny_config
from huggingface_hub import HfApi
from transformers import BertConfig, BertModel, MarianConfig, MarianMTModel

from vanilla_transformer import (
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerForSequenceClassification,
)
from vanilla_transformer.cli import main
from vanilla_transformer.loading import MODEL_CLASSES, load_saved_model

SMALL_VOCAB = 50  # fewer ids than the test tokenizer's tokens
# The tensor whose name gets a flipped bit ("bias" becomes "bhas"), in the translation model and classifier.
RENAMED = {
    False: "model.decoder.layers.0.encoder_attn.k_proj.bias",
    True: "model.encoder.layers.0.self_attn.k_proj.bias",
}


def _flip(path, offset: int, bit: int = 0x10) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= bit
    path.write_bytes(bytes(data))


def _header_offset(path, text: str) -> int:
    """Where ``text`` starts in the file (inside the JSON header, which follows its 8-byte length)."""
    data = path.read_bytes()
    length = struct.unpack("<Q", data[:8])[0]
    offset = data.index(text.encode(), 8)
    assert offset < 8 + length
    return offset


def _save(model, folder, tokenizer) -> None:
    """A saved folder as a run leaves it, model card included (so ``push`` checks it, not the card writer)."""
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / "README.md").write_text("---\nlicense: mit\n---\nA tiny model.\n", encoding="utf-8")


def build_bad_folders(root, tokenizer, classifier: bool) -> dict:
    """{case: folder} from a tiny translation model (or classifier), each folder broken one way."""
    model_class, config = (
        (VanillaTransformerForSequenceClassification, encoder_only_config(num_labels=2))
        if classifier
        else (VanillaTransformerForConditionalGeneration, tiny_config())
    )
    good = root / "good"
    _save(model_class(config).eval(), good, tokenizer)
    folders = {"good": good, "missing": root / "nothing-here"}
    for case in ("header-bit", "header-json", "tensor-name", "no-weights"):
        shutil.copytree(good, root / case)
        folders[case] = root / case
    weights = "model.safetensors"
    _flip(root / "header-bit" / weights, 5)  # the header's length, plus 2^44 bytes
    _flip(root / "header-json" / weights, 8, 0x20)  # "{" becomes "[": not a JSON object
    renamed, name = root / "tensor-name" / weights, RENAMED[classifier]
    _flip(renamed, _header_offset(renamed, f'"{name}"') + len(name) - 2, 0x01)  # "bias" becomes "bhas"
    (root / "no-weights" / weights).unlink()
    bert = BertConfig(
        vocab_size=99, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16
    )
    _save(BertModel(bert), root / "bert", tokenizer)
    marian = MarianConfig(
        vocab_size=99,
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=16,
        decoder_ffn_dim=16,
        max_position_embeddings=32,
        pad_token_id=0,
        decoder_start_token_id=0,
    )
    _save(MarianMTModel(marian), root / "marian", tokenizer)
    config.vocab_size = SMALL_VOCAB
    _save(model_class(config), root / "big-tokenizer", tokenizer)
    folders |= {"bert": root / "bert", "marian": root / "marian", "big-tokenizer": root / "big-tokenizer"}
    # Folders of another kind, and one copied in part (issue 56, item 5).
    shutil.copytree(good, root / "no-tokenizer-json")
    (root / "no-tokenizer-json" / "tokenizer.json").unlink()  # tokenizer_config.json stays
    shutil.copytree(good, root / "run-folder" / "model")
    (root / "run-folder" / "run.json").write_text("{}", encoding="utf-8")
    tokenizer.save_pretrained(root / "tokenizer-only")
    ct2 = root / "ct2-export"
    ct2.mkdir()
    for name, text in [("model.bin", "binary"), ("config.json", "{}"), ("shared_vocabulary.json", "[]")]:
        (ct2 / name).write_text(text, encoding="utf-8")
    for case in ("no-tokenizer-json", "run-folder", "tokenizer-only", "ct2-export"):
        folders[case] = root / case
    return folders


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tokenizer):
    root = tmp_path_factory.mktemp("bad")
    return {
        "translation": build_bad_folders(root / "translation", tokenizer, classifier=False),
        "classifier": build_bad_folders(root / "classifier", tokenizer, classifier=True),
    }


def expected(case: str, folder, tokenizer, classifier: bool = False) -> list[str]:
    """What the one line must say: the folder, the file or field, and what is wrong with it."""
    weights = f"{folder}/model.safetensors"
    name = RENAMED[classifier]
    return {
        "missing": [f"No such model folder: {folder} (no config.json to read)"],
        "missing, demo": [f"No such model folder: '{folder}' (nor is it a Hub id, USER/NAME)"],
        "header-bit": [f"{weights} is damaged and cannot be read", "header too large"],
        "header-json": [f"{weights} is damaged and cannot be read", "invalid JSON in header"],
        "tensor-name": [f"{weights} lacks 1 tensor(s) of the", f"({name}) and holds 1 it has not"],
        "tensor-name, averaged": [f"{folder} holds different tensors than ", f"it lacks {name}, holds "],
        "no-weights": [f"{folder} has no model.safetensors (the model's weights"],
        "bert": [
            f"{folder} is not a vanilla-transformer model folder: its config.json has model_type 'bert'"
        ],
        "marian": [
            f"{folder} is not a vanilla-transformer model folder: its config.json has model_type 'marian'"
        ],
        "big-tokenizer": [
            f"The tokenizer of {folder} has {len(tokenizer)} tokens but its config.json has "
            f"vocab_size={SMALL_VOCAB}"
        ],
        "no-tokenizer-json": [
            f"{folder} has no tokenizer.json, the model's tokenizer (tokenizer_config.json is there: the "
            "folder was copied in part). Copy it from the folder the model was saved in"
        ],
        "run-folder": [
            f"{folder} is a training run's folder: its model is {folder}/model. Pass that folder."
        ],
        "tokenizer-only": [f"{folder} holds a tokenizer but no model (a run's tokenizer/ folder)"],
        "ct2-export": [
            f"{folder} is a CTranslate2 export (model.bin): `translate --engine ctranslate2 --model {folder}` "
            "runs it"
        ],
        # push takes exports too (with their parity report), so an incomplete one is named as such
        "ct2-export, push": [f"{folder} is not a complete CTranslate2 export: it lacks tokenizer.json"],
    }[case]


def _arguments(command: str, folder, good, tmp_path) -> list[str]:
    """The command line of ``command`` on ``folder`` (``average``: a good checkpoint first, then it)."""
    source, labelled, out = tmp_path / "in.txt", tmp_path / "labelled.jsonl", str(tmp_path / "out")
    source.write_text("a wonderful film\n", encoding="utf-8")
    labelled.write_text(json.dumps({"text": "a wonderful film", "label": 1}) + "\n", encoding="utf-8")
    model = ["--model", str(folder)]
    tiny_data = ["--set=synthetic_train_size=8", "--set=synthetic_eval_size=2"]
    return {
        "translate": ["translate", *model, "--input", str(source), "--output", out, "--beams", "1"],
        "evaluate": ["evaluate", *model, *tiny_data, "--output", out],
        "attention": ["attention", *model, "--text", "a wonderful film", "--output", out],
        "average": ["average", str(good), str(folder), "--output", out],
        "classify evaluate": [
            "classify",
            "evaluate",
            *model,
            "--file",
            str(labelled),
        ],
        "export-onnx": ["export-onnx", *model, "--output", out],
        "export-ct2": ["export-ct2", *model, "--output", out],
        "push": ["push", *model, "--repo-id", "someone/bad"],
        "demo": ["demo", *model, "--port", "7999"],
    }[command]


COMMANDS = [
    "translate",
    "evaluate",
    "attention",
    "average",
    "classify evaluate",
    "export-onnx",
    "export-ct2",
    "push",
    "demo",
]
CASES = [
    "missing",
    "header-bit",
    "header-json",
    "tensor-name",
    "no-weights",
    "bert",
    "marian",
    "big-tokenizer",
    "no-tokenizer-json",
    "run-folder",
    "tokenizer-only",
    "ct2-export",
]


@pytest.fixture
def nothing_leaves(monkeypatch):
    """The Hub and a server are never reached: the folder is refused before either."""

    def refuse(*args, **kwargs):
        raise AssertionError("reached past the folder check (Hub upload or server start)")

    monkeypatch.setattr(HfApi, "create_repo", refuse)
    monkeypatch.setattr(HfApi, "create_commit", refuse)
    if importlib.util.find_spec("gradio") is not None:
        import gradio

        monkeypatch.setattr(gradio.Blocks, "launch", refuse)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("command", COMMANDS)
def test_a_bad_folder_is_one_line_naming_the_file_or_field(
    command, case, folders, tokenizer, tmp_path, nothing_leaves
):
    extra = {"demo": "gradio", "export-ct2": "ctranslate2"}.get(command)
    if extra and importlib.util.find_spec(extra) is None:
        pytest.skip(f"{command} needs {extra}, an optional extra")
    if (command, case) == ("average", "run-folder"):
        pytest.skip("average reads a run folder's model/ (README: `average RUN --last N` and a run folder)")
    classifier = command == "classify evaluate"
    chosen = folders["classifier" if classifier else "translation"]
    folder = chosen[case]
    with pytest.raises(SystemExit) as refused:
        main(_arguments(command, folder, chosen["good"], tmp_path))
    message = str(refused.value.code)
    assert message.startswith("error: ") and "\n" not in message, message
    if command == "average" and case == "tensor-name":  # compared to the first folder, which loads
        case = "tensor-name, averaged"
    if command == "demo" and case == "missing":  # the demo also serves Hub ids
        case = "missing, demo"
    if command == "push" and case == "ct2-export":  # push uploads exports too (hub.push_export)
        case = "ct2-export, push"
    for part in expected(case, folder, tokenizer, classifier):
        assert part in message, message
    assert not (tmp_path / "out").exists()  # nothing written


@pytest.mark.parametrize("command", ["translate", "evaluate", "classify evaluate"])
def test_a_model_of_another_kind_is_named_with_the_command_that_takes_it(
    command, folders, tmp_path, nothing_leaves
):
    """A classifier given to a translation command (and a translation model to ``classify evaluate``) is
    named as what it is and what takes it, not as a folder that lacks the decoder's tensors."""
    classifier = command != "classify evaluate"
    folder = folders["classifier" if classifier else "translation"]["good"]
    good = folders["translation"]["good"]
    with pytest.raises(SystemExit) as refused:
        main(_arguments(command, folder, good, tmp_path))
    message = str(refused.value.code)
    what, needed = ("a sentence classifier", "a translation model")
    if not classifier:
        what, needed = needed, what
    assert message.startswith(f"error: {folder} holds {what} (") and "\n" not in message, message
    assert message.endswith(f"take it. This command needs {needed}."), message
    assert not (tmp_path / "out").exists()


def test_a_config_that_does_not_fit_the_weights_names_the_tensor(folders, tmp_path):
    folder = tmp_path / "wider"
    shutil.copytree(folders["translation"]["good"], folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    (folder / "config.json").write_text(json.dumps({**config, "d_ff": 40}), encoding="utf-8")
    with pytest.raises(SystemExit) as refused:
        main(["attention", "--model", str(folder), "--text", "a film", "--output", str(tmp_path / "out")])
    assert str(refused.value.code).startswith(
        f"error: {folder}/model.safetensors does not fit config.json: model.decoder.layers.0.ffn.fc1.bias is "
        "[37] in the file but [40] in the model the config describes (11 more tensors differ)"
    )


@pytest.mark.parametrize("name", list(MODEL_CLASSES))
@pytest.mark.parametrize(
    "options", [{}, {"share_embeddings": False, "tie_word_embeddings": False}, {"norm_position": "pre"}]
)
def test_every_class_saved_here_passes_the_checks(name, options, tmp_path, tokenizer):
    """The checks refuse nothing this package saves: each class, tied or not, post- or pre-LN."""
    single = name not in ("VanillaTransformerModel", "VanillaTransformerForConditionalGeneration")
    config = tiny_config(**options)
    if single:
        config = tiny_config(is_encoder_decoder=False, is_decoder="CausalLM" in name, **options)
    _save(MODEL_CLASSES[name](config), tmp_path, tokenizer)
    assert type(load_saved_model(tmp_path)).__name__ == name


@pytest.mark.parametrize("command", ["translate", "attention", "export-onnx"])
def test_a_missing_relative_folder_is_not_looked_up_on_the_hub(command, tmp_path, monkeypatch):
    """``runs/model`` has the shape of a Hub id; for every command but the demo it is a folder, refused at
    once (not after a minute of retrying a Hub that may be unreachable)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match=r"^error: No such model folder: runs/model \(no config\.json"):
        main(_arguments(command, "runs/model", None, tmp_path))


def test_weights_cut_short_name_the_file(folders, tmp_path, nothing_leaves):
    folder = shutil.copytree(folders["translation"]["good"], tmp_path / "model")
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])  # a copy cut short
    source = tmp_path / "in.txt"
    source.write_text("a wonderful film\n", encoding="utf-8")
    with pytest.raises(SystemExit, match=r"model\.safetensors is damaged"):
        main(["translate", "--model", str(folder), "--input", str(source), "--beams", "1"])
    with pytest.raises(SystemExit, match=r"model\.safetensors is damaged"):
        main(["push", "--model", str(folder), "--repo-id", "someone/broken"])
