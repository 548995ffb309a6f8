"""No host synchronisation in the model's forward on an accelerator (issue 50, item 3): there an eager forward
and a cached decoding step read no tensor value back to Python from the package's own code (each such read
waits for the device), and token ids are checked where they enter instead: the pipelines, ``translate()``
(the ``translate`` and ``evaluate`` commands), the training runs' tokenized data, and the model's opt-in
``check_inputs``. On the CPU, where a read costs nothing, the forward itself checks (issue 56, item 3).

The tests run on the CPU; ``on_an_accelerator`` makes the model take its tensors for an accelerator's."""

import inspect
import os
import types

import pytest
import torch
from conftest import random_ids, tiny_config
from datasets import Dataset
from torch.overrides import TorchFunctionMode

import vanilla_transformer
from vanilla_transformer import (
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerForSequenceClassification,
    modeling_vanilla_transformer,
)
from vanilla_transformer.classification_pipeline import LongText, LongTextClassificationPipeline
from vanilla_transformer.configuration_vanilla_transformer import check_token_ids
from vanilla_transformer.inference import translate
from vanilla_transformer.train.classification.data import encode_texts
from vanilla_transformer.train.translation.data import tokenize_pairs
from vanilla_transformer.translation_pipeline import TranslationPipeline

PACKAGE = os.path.dirname(vanilla_transformer.__file__) + os.sep
HOST_READS = {
    torch.Tensor.item,
    torch.Tensor.__int__,
    torch.Tensor.__bool__,
    torch.Tensor.__index__,
    torch.Tensor.tolist,
    torch.Tensor.__float__,
}
OUTSIDE = r"Token id {} is outside the vocabulary: ids must lie in \[0, vocab_size={}\)"


@pytest.fixture
def on_an_accelerator(monkeypatch):
    """The forward treats every tensor as an accelerator's: no value read unless ``check_inputs`` asks."""
    monkeypatch.setattr(modeling_vanilla_transformer, "host_reads_free", lambda tensor: False)


class HostReads(TorchFunctionMode):
    """Records each read of a tensor's value into Python (``item``, ``int()``, ``bool()``, ``tolist`` ...)
    whose caller is a file of the package, as ``(name, file, line)``; transformers' and torch's own reads
    (the mask builders make some) are not the package's to remove."""

    def __init__(self):
        super().__init__()
        self.reads = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in HOST_READS:
            caller = inspect.currentframe().f_back
            if caller.f_code.co_filename.startswith(PACKAGE):
                self.reads.append(
                    (func.__name__, os.path.basename(caller.f_code.co_filename), caller.f_lineno)
                )
        return func(*args, **(kwargs or {}))


def forward_and_step(model) -> tuple[list, list]:
    """The host reads of one eager forward (source 2 x 6, target 2 x 3, filling the cache) and of one cached
    decoding step after it."""
    source = random_ids(2, 6)
    mask = torch.ones_like(source)
    with torch.no_grad():
        with HostReads() as forward:
            out = model(
                input_ids=source, attention_mask=mask, decoder_input_ids=random_ids(2, 3), use_cache=True
            )
        with HostReads() as step:
            model(
                encoder_outputs=(out.encoder_last_hidden_state,),
                attention_mask=mask,
                decoder_input_ids=random_ids(2, 1, seed=1),
                cache=out.past_key_values,
                use_cache=True,
            )
    return forward.reads, step.reads


@pytest.mark.parametrize("position_encoding", ["sinusoidal", "learned"])
def test_a_forward_and_a_cached_step_read_no_tensor_value_on_the_host(position_encoding, on_an_accelerator):
    model = VanillaTransformerForConditionalGeneration(
        tiny_config(position_encoding=position_encoding)
    ).eval()
    assert forward_and_step(model) == ([], [])


def test_the_counter_finds_the_reads_of_the_opt_in_check(on_an_accelerator):
    """The counter sees what the forward did on every call before: two reads of the ids per embedding (4 in a
    forward, 2 in a decoding step), and one of the positions per learned table; now only when asked."""
    model = VanillaTransformerForConditionalGeneration(tiny_config()).eval()
    model.check_inputs = True
    forward, step = forward_and_step(model)
    assert (len(forward), len(step)) == (4, 2)
    assert {(name, file) for name, file, _ in forward + step} == {
        ("__int__", "configuration_vanilla_transformer.py")
    }
    model = VanillaTransformerForConditionalGeneration(tiny_config(position_encoding="learned")).eval()
    model.check_inputs = True
    forward, step = forward_and_step(model)
    assert (len(forward), len(step)) == (6, 3)


def test_a_classifier_with_labels_reads_no_tensor_value_on_the_host(on_an_accelerator):
    model = VanillaTransformerForSequenceClassification(tiny_config(num_labels=2)).eval()
    with torch.no_grad(), HostReads() as counted:
        loss = model(input_ids=random_ids(2, 5), labels=torch.tensor([0, 1])).loss
    assert counted.reads == [] and torch.isfinite(loss)


def test_the_forward_and_a_decoding_step_compile_as_one_graph():
    model = VanillaTransformerForConditionalGeneration(tiny_config()).eval()
    source, target = random_ids(2, 6), random_ids(2, 3)
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    with torch.no_grad():
        expected = model(input_ids=source, decoder_input_ids=target).logits
        torch.testing.assert_close(compiled(input_ids=source, decoder_input_ids=target).logits, expected)


# -- where ids enter: one test per entry point ------------------------------------------------------------------


def test_check_token_ids_takes_tensors_and_tokenizer_batches():
    check_token_ids(torch.tensor([[0, 98]]), 99)
    check_token_ids([[0, 5], [98]], 99)
    check_token_ids([[5, -100]], 99, ignore_index=-100)
    check_token_ids(torch.tensor([[-100, -100]]), 99, ignore_index=-100)
    with pytest.raises(ValueError, match="^labels: " + OUTSIDE.format(99, 99)):
        check_token_ids(torch.tensor([[5, 99, -100]]), 99, "labels", ignore_index=-100)
    with pytest.raises(ValueError, match=OUTSIDE.format(-3, 99) + r"\. Was the input made"):
        check_token_ids([[5], [-3, 7]], 99)


def small_vocab_model(model_class=VanillaTransformerForConditionalGeneration, **overrides):
    """A model whose vocabulary (10 ids) is smaller than the shared test tokenizer's: a mismatched pair."""
    return model_class(tiny_config(vocab_size=10, **overrides)).eval()


def test_the_translation_pipeline_refuses_ids_outside_the_vocabulary(tokenizer):
    translate_text = TranslationPipeline(model=small_vocab_model(), tokenizer=tokenizer)
    with pytest.raises(
        ValueError, match=r"^input_ids: Token id \d+ is outside the vocabulary: .*vocab_size=10\)"
    ):
        translate_text("a wonderful film", num_beams=1, max_new_tokens=2)


def test_the_classification_pipeline_refuses_ids_outside_the_vocabulary(tokenizer):
    model = small_vocab_model(VanillaTransformerForSequenceClassification, num_labels=2)
    classify = LongTextClassificationPipeline(model=model, tokenizer=tokenizer)
    with pytest.raises(
        ValueError, match=r"^input_ids: Token id \d+ is outside the vocabulary: .*vocab_size=10\)"
    ):
        classify("a wonderful film")


def test_translate_refuses_ids_outside_the_vocabulary_before_the_batch_moves(tokenizer):
    """``translate()``: what the ``translate`` command and ``evaluate`` (``evaluate_split``) call."""
    with pytest.raises(
        ValueError, match=r"^input_ids: Token id \d+ is outside the vocabulary: .*vocab_size=10\)"
    ):
        translate(small_vocab_model(), tokenizer, ["a wonderful film"], num_beams=1, max_new_tokens=2)


def test_tokenized_translation_pairs_refuse_ids_outside_the_vocabulary(tokenizer):
    pairs = Dataset.from_dict({"source": ["a wonderful film"], "target": ["great acting"]})
    encoded = tokenize_pairs(pairs, tokenizer, 16, 16)
    assert encoded["labels"][0] == tokenizer("great acting")["input_ids"]
    with pytest.raises(ValueError, match=r"source input_ids: Token id \d+ is outside the vocabulary"):
        tokenize_pairs(pairs, tokenizer, 16, 16, vocab_size=10)
    high = max(tokenizer("great acting")["input_ids"])
    pairs = Dataset.from_dict({"source": ["a"], "target": ["great acting"]})
    low_source = max(tokenizer("a")["input_ids"]) + 1
    if low_source <= high:
        with pytest.raises(ValueError, match=f"target labels: Token id {high} is outside"):
            tokenize_pairs(pairs, tokenizer, 16, 16, vocab_size=low_source)


def test_encoded_classification_texts_refuse_ids_outside_the_vocabulary(tokenizer):
    texts = Dataset.from_dict({"text": ["a wonderful film"], "label": [1]})
    args = types.SimpleNamespace(text_column="text", label_column="label")
    reading = LongText("head", 16)
    encoded = encode_texts(texts, tokenizer, args, reading, with_labels=True)
    assert encoded["labels"] == [1]
    with pytest.raises(
        ValueError, match=r"input_ids: Token id \d+ is outside the vocabulary: .*vocab_size=10\)"
    ):
        encode_texts(texts, tokenizer, args, reading, with_labels=True, vocab_size=10)


def test_the_opt_in_check_refuses_ids_positions_and_labels_in_the_forward(on_an_accelerator):
    """For users who call the model directly: off by default (no host reads), on with ``check_inputs``."""
    model = VanillaTransformerForConditionalGeneration(
        tiny_config(position_encoding="learned", max_position_embeddings=8)
    )
    assert not model.check_inputs
    model.check_inputs = True
    assert model.check_inputs and model.model.encoder.embed_tokens.check_inputs
    with pytest.raises(ValueError, match=OUTSIDE.format(99, 99)):
        model(input_ids=torch.tensor([[5, 99]]), decoder_input_ids=torch.tensor([[1]]))
    with pytest.raises(
        ValueError, match=r"Sequence of 9 positions, but learned position embeddings hold only"
    ):
        model(input_ids=random_ids(1, 9), decoder_input_ids=torch.tensor([[1]]))
    classifier = VanillaTransformerForSequenceClassification(tiny_config(num_labels=2))
    classifier.check_inputs = True
    with pytest.raises(ValueError, match=r"Label 5 is outside \[0, num_labels=2\)"):
        classifier(input_ids=random_ids(2, 4), labels=torch.tensor([0, 5]))
    model.check_inputs = False
    assert (
        not model.model.decoder.embed_tokens.check_inputs
        and not model.model.encoder.embed_positions.check_inputs
    )
    assert forward_and_step(model.eval()) == ([], [])


def test_on_the_cpu_the_forward_names_an_id_a_position_and_a_label_it_cannot_take():
    """Issue 56: ``model(input_ids)`` with an id past the vocabulary was torch's ``IndexError: index out of
    range in self``; on the CPU the forward now names the id (and a position past a learned table, and a
    classifier's label past ``num_labels``) without ``check_inputs``, since the reads cost nothing there."""
    model = VanillaTransformerForConditionalGeneration(
        tiny_config(position_encoding="learned", max_position_embeddings=8)
    )
    assert not model.check_inputs
    vocab = model.config.vocab_size
    with pytest.raises(ValueError, match="input_ids: " + OUTSIDE.format(vocab, vocab)):
        model(input_ids=torch.tensor([[5, vocab]]), decoder_input_ids=torch.tensor([[1]]))
    with pytest.raises(ValueError, match=OUTSIDE.format(-1, vocab)):
        model(input_ids=torch.tensor([[5, 6]]), decoder_input_ids=torch.tensor([[-1]]))
    with pytest.raises(ValueError, match=r"Sequence needs position 8, but learned position embeddings hold"):
        model.model.decoder.embed_positions(torch.tensor([[8]]), torch.float32)  # a cached step's position
    classifier = VanillaTransformerForSequenceClassification(tiny_config(num_labels=2))
    with pytest.raises(ValueError, match=r"Label 2 is outside \[0, num_labels=2\)"):
        classifier(input_ids=random_ids(2, 4), labels=torch.tensor([1, 2]))
    with torch.no_grad():  # what the model takes still runs
        assert (
            model(input_ids=random_ids(1, 8), decoder_input_ids=torch.tensor([[1]])).logits.shape[-1] == vocab
        )
