"""Every value a user gives is checked where it enters, before any work, and refused in one line that names
the setting, field or file: a model too large for the machine's memory (in a recipe or an edited
config.json), paths that must exist, split names, references that must match the test split, labels, and a
folder's generation config and tokenizer (checked against the model they were saved with). The folders are
conftest's shared ones, copied where a test breaks them."""

import gzip
import json
import re
import shutil

import pytest
import torch
from conftest import CORPUS, decoder_only_config, encoder_only_config, tiny_config
from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.cli import main
from vanilla_transformer.data.synthetic import synthetic_pairs
from vanilla_transformer.loading import MODEL_CLASSES, check_model_folder, parameter_count
from vanilla_transformer.tokenization import tokenizer_fingerprint
from vanilla_transformer.train.common.recipes import build_config

# A synthetic translation task of a few sentences: what the commands read before the refusal is cheap.
TINY_SPLITS = ["--set=synthetic_train_size=8", "--set=synthetic_eval_size=4"]  # what `evaluate` reads
TINY_DATA = [*TINY_SPLITS, "--set=vocab_size=300"]
TINY_MODEL = ["--set=model.d_model=16", "--set=model.d_ff=32", "--set=model.num_encoder_layers=1"]


def refused(argv: list[str]) -> str:
    """The one line the command exits with (status 1: ``SystemExit`` with a message)."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    message = str(exit_.value.code)
    assert message.startswith("error: ") and "\n" not in message, message
    return message


def _copy(folder, tmp_path, name="copy"):
    return shutil.copytree(folder, tmp_path / name)


def _translate(folder, tmp_path) -> list[str]:
    source = tmp_path / "in.txt"
    source.write_text("a wonderful film\n", encoding="utf-8")
    return ["translate", "--model", str(folder), "--input", str(source), "--beams", "1"]


# -- a model too large for the machine ----------------------------------------------------------------------


SEQ2SEQ, CLASSIFIER, CAUSAL, MASKED = (
    "VanillaTransformerForConditionalGeneration",
    "VanillaTransformerForSequenceClassification",
    "VanillaTransformerForCausalLM",
    "VanillaTransformerForMaskedLM",
)
SHAPES = {  # id -> (config, the class built from it)
    "seq2seq": (lambda: tiny_config(), SEQ2SEQ),
    "seq2seq, untied": (lambda: tiny_config(share_embeddings=False, tie_word_embeddings=False), SEQ2SEQ),
    "seq2seq, pre-LN, learned, d_k != d_v": (
        lambda: tiny_config(norm_position="pre", position_encoding="learned", d_k=3, d_v=5),
        SEQ2SEQ,
    ),
    "bare, no bias": (lambda: tiny_config(attention_bias=False), "VanillaTransformerModel"),
    "classifier": (lambda: encoder_only_config(num_labels=3), CLASSIFIER),
    "masked LM": (lambda: encoder_only_config(), MASKED),
    "masked LM, untied": (lambda: encoder_only_config(tie_word_embeddings=False), MASKED),
    "causal LM": (lambda: decoder_only_config(), CAUSAL),
    "causal LM, untied, pre-LN": (
        lambda: decoder_only_config(tie_word_embeddings=False, norm_position="pre"),
        CAUSAL,
    ),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_the_parameter_count_from_the_config_is_the_models(shape):
    """Counted from the fields alone, tied matrices once: the number the built model has; without the
    class named, the head the config's shape takes (translation, classifier, causal LM)."""
    make_config, architecture = SHAPES[shape]
    config = make_config()
    parameters = sum(p.numel() for p in MODEL_CLASSES[architecture](config).parameters())
    assert parameter_count(config, architecture) == parameters
    if architecture in (SEQ2SEQ, CLASSIFIER, CAUSAL):
        assert parameter_count(config) == parameters


def test_a_model_too_large_to_train_is_refused_before_anything_is_allocated(tmp_path):
    """`--set model.d_model=100000000` (a typo for 1000): refused while the recipe is read, naming the field
    and the sizes, not a 200 GB allocation's traceback after the data and tokenizer were made."""
    run = tmp_path / "run"
    message = refused(["train", "--set", "model.d_model=100000000", f"--set=output_dir={run}", *TINY_DATA])
    assert "The model is too large for this machine" in message
    assert "model.d_model=100000000" in message
    assert re.search(r"GiB of (GPU )?memory to train", message), message  # the GPU's, where CUDA is available
    assert "is available" in message
    assert not run.exists()


def test_a_vocabulary_too_large_to_train_is_refused_when_the_run_builds_the_config():
    """The run's own values count too: the check the trainers' ``build_config`` call makes."""
    with pytest.raises(
        ValueError, match=r"too large for this machine: .*vocab_size=1000000000, model\.d_model"
    ):
        build_config({"d_model": 512}, vocab_size=10**9)


def test_training_on_a_gpu_counts_the_gpus_free_memory(monkeypatch):
    """Where CUDA is available the weights, gradients and Adam's moments must fit the GPU's free memory
    (the weights are built in main memory first, which must hold them too)."""
    from vanilla_transformer import loading

    monkeypatch.setattr(loading, "_gpu_memory", lambda: 1024)
    with pytest.raises(ValueError, match=r"KiB of GPU memory to train \(.*\), but 1\.0 KiB is available"):
        build_config({"d_model": 16, "d_ff": 32, "num_heads": 4, "num_encoder_layers": 1}, vocab_size=99)
    monkeypatch.setattr(loading, "_gpu_memory", lambda: 2**30)
    build_config({"d_model": 16, "d_ff": 32, "num_heads": 4, "num_encoder_layers": 1}, vocab_size=99)


def test_an_edited_config_too_large_to_load_is_refused_naming_the_file(translation_model, tmp_path):
    edited = _copy(translation_model, tmp_path)
    config = json.loads((edited / "config.json").read_text(encoding="utf-8"))
    (edited / "config.json").write_text(json.dumps({**config, "d_model": 10**9}), encoding="utf-8")
    message = refused(_translate(edited, tmp_path))
    assert f"{edited}/config.json: the model is too large for this machine" in message
    assert "d_model=1000000000" in message and "to hold its fp32 weights" in message


# -- paths that must exist ----------------------------------------------------------------------------------


def test_a_tokenizer_path_that_does_not_exist_is_refused_not_filled(tmp_path):
    missing, run = tmp_path / "tokenizer-typo", tmp_path / "run"
    message = refused(["train", f"--set=tokenizer_path={missing}", f"--set=output_dir={run}", *TINY_DATA])
    assert f"`tokenizer_path`: {missing} does not exist" in message
    assert not missing.exists()  # no tokenizer trained and written there


def _pairs(path, count: int):
    rows = [{"translation": {"en": f"the cat {i}", "de": f"die katze {i}"}} for i in range(count)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_missing_data_files_are_named_all_at_once_before_the_run_starts(tmp_path):
    train, run = _pairs(tmp_path / "train.jsonl", 4), tmp_path / "run"
    message = refused(
        [
            "train",
            "--set=dataset=json",
            f"--set=train_file={train}",
            f"--set=test_file={tmp_path / 'tset.jsonl'}",
            f"--set=tokenized_test_references={tmp_path / 'refs.txt'}",
            f"--set=output_dir={run}",
            *TINY_MODEL,
        ]
    )
    assert f"No such file: test_file={tmp_path / 'tset.jsonl'}" in message
    assert f"tokenized_test_references={tmp_path / 'refs.txt'}" in message
    assert not (run / "tokenizer").exists()


def test_an_evaluate_split_the_data_lacks_is_refused_listing_those_it_has(translation_model, tmp_path):
    message = refused(["evaluate", "--model", str(translation_model), "--split", "tset", *TINY_SPLITS])
    assert message == (
        "error: --split 'tset': the data (synthetic) has no such split; it has train, validation, test."
    )


def test_references_of_another_length_are_refused_before_translating(translation_model, tmp_path):
    """3 reference lines for a 4-sentence test split: refused with both counts, not BLEU over 3 sentences."""
    references = tmp_path / "refs.txt"
    references.write_text("a\nb\nc\n", encoding="utf-8")
    output = tmp_path / "hypotheses.txt"
    message = refused(
        ["evaluate", "--model", str(translation_model), f"--set=tokenized_test_references={references}"]
        + ["--output", str(output), *TINY_SPLITS]
    )
    assert (
        f"tokenized_test_references: {references} has 3 lines but the test split has 4 sentences" in message
    )
    assert not output.exists()


# -- classification: files, splits, labels --------------------------------------------------------------------


def _reviews(path, labels):
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        for index, label in enumerate(labels):
            handle.write(
                json.dumps({"text": f"{CORPUS[index % len(CORPUS)]} {index}", "label": label}) + "\n"
            )
    return path


def _classify(stage, tmp_path, *settings):
    return [
        "classify",
        stage,
        f"--set=output_dir={tmp_path / 'run'}",
        "--set=vocab_size=300",
        "--set=max_length=16",
        "--set=validation_size=2",
        "--set=mixed_precision=no",
        "--set=report_to=none",
        "--set=model.d_model=16",
        "--set=model.d_ff=32",
        "--set=model.num_encoder_layers=1",
        *settings,
    ]


def test_a_misspelt_classification_test_file_is_refused_before_training(tmp_path):
    train = _reviews(tmp_path / "train.jsonl.gz", [0, 1] * 6)
    message = refused(
        _classify(
            "train", tmp_path, f"--set=train_file={train}", f"--set=test_file={tmp_path / 'tset.jsonl.gz'}"
        )
    )
    assert f"No such file: test_file={tmp_path / 'tset.jsonl.gz'}" in message
    assert not (tmp_path / "run" / "model").exists()


def test_a_hub_data_sets_split_name_is_refused_listing_its_splits(tmp_path):
    """A data set read through ``load_dataset`` (a local folder here, the Hub's the same way): its split
    names are checked before training, not when the test split is read after it."""
    data = tmp_path / "reviews"
    data.mkdir()
    for split in ("train", "test"):
        with gzip.open(_reviews(tmp_path / f"{split}.gz", [0, 1] * 6)) as handle:
            (data / f"{split}.jsonl").write_bytes(handle.read())
    message = refused(
        _classify(
            "train", tmp_path, f"--set=dataset={data}", "--set=train_file=train", "--set=test_file=tset"
        )
    )
    assert f"{data} has no split test_file='tset': its splits are train, test" in message


def test_a_training_file_of_one_class_is_refused(tmp_path):
    """One class would train a one-label regression and report accuracy 1.0."""
    train = _reviews(tmp_path / "train.jsonl.gz", [0] * 12)
    message = refused(_classify("train", tmp_path, f"--set=train_file={train}", "--set=test_file=null"))
    assert f"{train}: every row has label 0 (`label`): a classifier needs at least two classes" in message
    assert not (tmp_path / "run" / "model").exists()


def test_a_label_outside_the_class_names_is_refused_naming_the_line(tmp_path):
    train = _reviews(tmp_path / "train.jsonl.gz", [0, 1, 0, 1, 2, 0, 1, 0, 1, 0, 1, 0])
    message = refused(
        _classify(
            "train",
            tmp_path,
            f"--set=train_file={train}",
            "--set=test_file=null",
            "--set=class_names=[NEGATIVE, POSITIVE]",
        )  # fmt: skip
    )
    assert f"{train} line 5: 'label' is 2, outside `class_names` (2 names: labels 0 to 1)" in message


def test_classify_evaluate_names_the_row_of_a_label_outside_num_labels(tmp_path, classifier_folder):
    labelled = _reviews(tmp_path / "three.jsonl.gz", [0, 1, 2, 1])
    message = refused(["classify", "evaluate", "--model", str(classifier_folder), "--file", str(labelled)])
    assert f"{labelled}: labels [2] are outside the model's num_labels=2" in message
    assert "row 3's label 2" in message


# -- the folder's generation config and tokenizer -------------------------------------------------------------


def test_a_cut_short_generation_config_is_refused_naming_the_file(translation_model, tmp_path):
    """transformers would fall back to greedy search without a word, changing every translation."""
    damaged = _copy(translation_model, tmp_path)
    text = (damaged / "generation_config.json").read_text(encoding="utf-8")
    (damaged / "generation_config.json").write_text(text[: len(text) // 2], encoding="utf-8")
    message = refused(_translate(damaged, tmp_path))
    assert f"{damaged}/generation_config.json cannot be read" in message


def _other_tokenizer(size: int) -> PreTrainedTokenizerFast:
    """A tokenizer of ``size`` tokens learnt from other text (enough of it for the shared run's 400): the
    same size, other ids."""
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=size, special_tokens=["<pad>", "<s>", "</s>", "<unk>"])
    german = [pair["de"] for pair in synthetic_pairs(400, seed=1)]  # the run's task: one side, other pairs
    bpe.train_from_iterator(["zebras quietly juggle violet umbrellas"] * 3 + CORPUS[::-1] + german, trainer)
    bpe.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


def test_another_models_tokenizer_of_the_same_size_is_refused(translation_model, tmp_path):
    swapped = _copy(translation_model, tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(translation_model)
    other = _other_tokenizer(len(tokenizer))
    assert len(other) == len(tokenizer) and tokenizer_fingerprint(other) != tokenizer_fingerprint(tokenizer)
    other.save_pretrained(swapped)
    message = refused(_translate(swapped, tmp_path))
    assert f"{swapped}/tokenizer.json is not the tokenizer this model was trained with" in message


def test_the_fingerprint_names_the_vocabulary_not_the_file(translation_model, tmp_path, tokenizer):
    """A re-save (another transformers release writes the files differently) still matches; a folder
    without a fingerprint (an older save, another tool's) is checked by size alone, as before."""
    resaved = _copy(translation_model, tmp_path)
    AutoTokenizer.from_pretrained(resaved).save_pretrained(resaved)
    tokenizer_json = json.loads((resaved / "tokenizer.json").read_text(encoding="utf-8"))
    (resaved / "tokenizer.json").write_text(json.dumps(tokenizer_json, indent=1), encoding="utf-8")
    original = AutoTokenizer.from_pretrained(translation_model)
    assert check_model_folder(resaved).tokenizer_fingerprint == tokenizer_fingerprint(original)
    unrecorded = tmp_path / "unrecorded"
    VanillaTransformerForConditionalGeneration(tiny_config()).save_pretrained(unrecorded)
    _other_tokenizer(len(tokenizer)).save_pretrained(unrecorded)
    assert check_model_folder(unrecorded).tokenizer_fingerprint is None


def test_the_run_records_its_tokenizers_fingerprint_in_the_config(tokenizer):
    config = build_config({"d_model": 16, "d_ff": 32, "num_heads": 4}, tokenizer=tokenizer)
    assert config.tokenizer_fingerprint == tokenizer_fingerprint(tokenizer)
    assert (config.vocab_size, config.pad_token_id, config.eos_token_id) == (len(tokenizer), 0, 2)


def _files(folder) -> dict:
    """Every file under ``folder`` and its bytes: what a refused command must leave as it found it."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# -- a classifier parent's labels ----------------------------------------------------------------------------


def _fine_tune(tmp_path, parent, *settings):
    """`classify train` from ``parent``: no model block or vocabulary (both the parent's)."""
    train = _reviews(tmp_path / "train.jsonl.gz", [0, 1] * 6)
    return [
        "classify",
        "train",
        f"--set=init_from={parent}",
        f"--set=train_file={train}",
        "--set=test_file=null",
        f"--set=output_dir={tmp_path / 'run'}",
        "--set=max_length=16",
        "--set=validation_size=2",
        "--set=max_steps=1",
        "--set=mixed_precision=no",
        "--set=report_to=none",
        *settings,
    ]


@pytest.mark.parametrize(
    "class_names, first",
    [("[LABEL_1, LABEL_0]", "label 0 is 'LABEL_1' in this run but 'LABEL_0'"), ("[LABEL_0, LABEL_2]", None)],
    ids=["in another order", "one renamed"],
)
def test_class_names_that_disagree_with_the_parent_classifiers_are_refused(
    classifier_folder, tmp_path, class_names, first
):
    """Its labels are LABEL_0, LABEL_1: the same names in another order, or one of them renamed, would throw
    its trained head away (before: a warning), or with data numbered its way name every class wrongly."""
    argv = _fine_tune(tmp_path, classifier_folder, f"--set=class_names={class_names}")
    before = _files(tmp_path)
    message = refused(argv)
    first = first or "label 1 is 'LABEL_2' in this run but 'LABEL_1'"
    assert message == (
        f"error: `class_names`: {first} in {classifier_folder} (its labels: LABEL_0, LABEL_1), whose "
        "classifier head the run would start from. Set `class_names: [LABEL_0, LABEL_1]` and number the "
        "data's labels that way; or, to train other classes, give them names the model does not use (the "
        "head then starts anew)."
    )
    assert _files(tmp_path) == before and not (tmp_path / "run").exists()


def test_a_parent_whose_label2id_disagrees_with_its_id2label_is_refused(classifier_folder, tmp_path):
    parent = _copy(classifier_folder, tmp_path, "parent")
    config = json.loads((parent / "config.json").read_text(encoding="utf-8"))
    config["id2label"], config["label2id"] = {"0": "LABEL_0", "1": "LABEL_1"}, {"LABEL_0": 1, "LABEL_1": 0}
    (parent / "config.json").write_text(json.dumps(config), encoding="utf-8")
    argv = _fine_tune(tmp_path, parent)
    before = _files(tmp_path)
    assert refused(argv) == (
        f"error: {parent}/config.json: label2id gives 'LABEL_0' id 1, but id2label names id 1 'LABEL_1': "
        "correct one of the two in its config.json (id2label is what the model's predictions are named by)."
    )
    assert _files(tmp_path) == before


# -- lengths against the positions the model will have ----------------------------------------------------------


LEARNED = ["--set=model.position_encoding=learned"]


def _learned_parent(folder, tokenizer, model_class, config):
    model_class(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _lengths_case(case, tmp_path, tokenizer) -> tuple[list[str], str]:
    """The command of ``case`` and the line after "error: " that it must print."""
    from vanilla_transformer import VanillaTransformerForSequenceClassification

    run = f"--set=output_dir={tmp_path / 'run'}"
    reviews = f"--set=train_file={_reviews(tmp_path / 'train.jsonl.gz', [0, 1] * 6)}"
    scratch = (
        "`model.max_position_embeddings` is {p} learned positions, but `{name}` is {n}: the model could not "
        "read a longer sequence. Set model.max_position_embeddings to at least {n} (or leave it out: the run "
        "sizes it), or {name} to at most {p}."
    )
    parent = (
        "`init_from`: {folder} has {p} learned positions (max_position_embeddings), but `{name}` is {n}: the "
        "model cannot read a longer sequence. Set {name} to at most {p}, or start from a model with more "
        "positions."
    )
    if case == "translation, the recipe's table, the source":
        positions = ["--set=model.max_position_embeddings=32", "--set=max_source_length=100"]
        argv = ["train", *TINY_DATA, *TINY_MODEL, *LEARNED, *positions, run]
        return argv, scratch.format(p=32, name="max_source_length", n=100)
    if case == "translation, the recipe's table, the target":
        positions = ["--set=model.max_position_embeddings=32", "--set=max_source_length=32"]
        argv = ["train", *TINY_DATA, *TINY_MODEL, *LEARNED, *positions, run]
        return argv, scratch.format(p=32, name="max_target_length", n=128)  # its default
    if case == "translation, init_from a model of 32 learned positions":
        config = tiny_config(position_encoding="learned", max_position_embeddings=32)
        folder = _learned_parent(
            tmp_path / "parent", tokenizer, VanillaTransformerForConditionalGeneration, config
        )
        argv = ["train", *TINY_SPLITS, f"--set=init_from={folder}", "--set=max_source_length=32", run]
        return argv, parent.format(folder=folder, p=32, name="max_target_length", n=128)
    if case == "classification, the recipe's table":
        table = "--set=model.max_position_embeddings=8"
        argv = _classify("train", tmp_path, reviews, "--set=test_file=null", *LEARNED, table)
        return argv, scratch.format(p=8, name="max_length", n=16)
    if case == "classification, init_from a classifier of 12 learned positions":
        config = encoder_only_config(num_labels=2, position_encoding="learned", max_position_embeddings=12)
        folder = _learned_parent(
            tmp_path / "parent", tokenizer, VanillaTransformerForSequenceClassification, config
        )
        argv = _fine_tune(tmp_path, folder)  # max_length=16
        return argv, parent.format(folder=folder, p=12, name="max_length", n=16)
    if case == "masked-LM pre-training, pack_length":
        packed = ["--set=pack_length=32", "--set=model.max_position_embeddings=16"]
        argv = _classify("pretrain", tmp_path, reviews, "--set=test_file=null", *LEARNED, *packed)
        return argv, scratch.format(p=16, name="pack_length", n=32)
    assert case == "causal LM, pack_length"
    model = ["--set=model.d_model=16", "--set=model.d_ff=32", "--set=model.num_decoder_layers=1"]
    settings = [reviews, "--set=test_file=null", "--set=vocab_size=300", *model, *LEARNED]
    settings += ["--set=model.max_position_embeddings=16", "--set=pack_length=32", run]
    return ["train", "--set=task=causal-lm", *settings], scratch.format(p=16, name="pack_length", n=32)


LENGTHS_CASES = [
    "translation, the recipe's table, the source",
    "translation, the recipe's table, the target",
    "translation, init_from a model of 32 learned positions",
    "classification, the recipe's table",
    "classification, init_from a classifier of 12 learned positions",
    "masked-LM pre-training, pack_length",
    "causal LM, pack_length",
]


@pytest.mark.parametrize("case", LENGTHS_CASES)
def test_a_length_past_the_learned_positions_is_refused_before_the_run(case, tmp_path, tokenizer):
    """Every training task, each way its lengths can pass the learned table the model will have (the
    recipe's, or its parent's): refused before the run folder is touched, not mid-training when a long
    enough example comes along (the forward's error, the run recorded as interrupted)."""
    argv, said = _lengths_case(case, tmp_path, tokenizer)
    before = _files(tmp_path)
    assert refused(argv) == f"error: {said}"
    assert _files(tmp_path) == before and not (tmp_path / "run").exists()


def test_sinusoidal_positions_past_max_position_embeddings_are_not_refused():
    """§3.5's sinusoids are computed for any position (no table): a length past max_position_embeddings is
    read as the model computes it, so the run goes on (``common/positions.py``)."""
    from vanilla_transformer.train.common.positions import check_lengths

    check_lengths({"max_source_length": 100}, {"max_position_embeddings": 32})
    check_lengths({"max_length": 100}, {}, "parent", encoder_only_config(max_position_embeddings=32))
    model = VanillaTransformerForConditionalGeneration(tiny_config(max_position_embeddings=8)).eval()
    ids = torch.randint(3, 99, (1, 20))
    assert model(input_ids=ids, decoder_input_ids=ids).logits.shape == (1, 20, 99)
