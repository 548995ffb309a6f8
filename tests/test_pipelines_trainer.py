"""The models inside transformers' tools: pipeline(...) with a real tokenizer, and one Trainer step."""

import pytest
import torch
from conftest import decoder_only_config, encoder_only_config
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast, Trainer, TrainingArguments, pipeline

from vanilla_transformer import VanillaTransformerForCausalLM, VanillaTransformerForSequenceClassification

CORPUS = [
    "a wonderful film with a great cast",
    "a boring film with a terrible plot",
    "great acting and a wonderful story",
    "terrible acting and a boring story",
    "정말 재미있는 영화",
    "정말 지루한 영화",
]


@pytest.fixture(scope="module")
def tokenizer():
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.normalizer = normalizers.NFKC()
    bpe.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=99, special_tokens=["<pad>", "<s>", "</s>", "<unk>"])
    bpe.train_from_iterator(CORPUS, trainer)
    bpe.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])
    from tokenizers import decoders

    bpe.decoder = decoders.Metaspace()
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        model_max_length=64,
    )


def test_tokenizer_ids_match_the_config(tokenizer):
    config = encoder_only_config()
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (
        config.pad_token_id,
        config.bos_token_id,
        config.eos_token_id,
    )
    assert len(tokenizer) <= config.vocab_size


def test_text_classification_pipeline_returns_label_names(tokenizer, tmp_path):
    labels = {0: "NEGATIVE", 1: "POSITIVE"}
    model = VanillaTransformerForSequenceClassification(
        encoder_only_config(id2label=labels, label2id={v: k for k, v in labels.items()})
    )
    classify = pipeline("text-classification", model=model, tokenizer=tokenizer)
    results = classify(["a wonderful film", "정말 지루한 영화"])
    assert len(results) == 2 and all(r["label"] in labels.values() for r in results)
    assert all(0.0 <= r["score"] <= 1.0 for r in results)
    # The same from a saved folder, labels round-tripping through config.json.
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    from_folder = pipeline("text-classification", model=str(tmp_path))
    assert from_folder.model.config.id2label == labels
    assert from_folder("a great cast")[0]["label"] in labels.values()


def test_text_generation_pipeline(tokenizer):
    model = VanillaTransformerForCausalLM(decoder_only_config())
    generate = pipeline("text-generation", model=model, tokenizer=tokenizer)
    output = generate("a wonderful", max_new_tokens=5, do_sample=False)
    assert output[0]["generated_text"].startswith("a wonderful")
    again = generate("a wonderful", max_new_tokens=5, do_sample=False)
    assert again == output


def test_one_trainer_step_updates_the_weights(tokenizer, tmp_path):
    model = VanillaTransformerForSequenceClassification(encoder_only_config())
    encoded = tokenizer(CORPUS, padding=True, return_tensors="pt")
    labels = torch.tensor([1, 0, 1, 0, 1, 0])
    dataset = [
        {
            "input_ids": encoded["input_ids"][i],
            "attention_mask": encoded["attention_mask"][i],
            "labels": labels[i],
        }
        for i in range(len(CORPUS))
    ]
    before = model.classifier.weight.detach().clone()
    args = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=1,
        per_device_train_batch_size=6,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
    )
    result = Trainer(model=model, args=args, train_dataset=dataset).train()
    assert result.global_step == 1 and result.training_loss > 0
    assert not torch.equal(before, model.classifier.weight)
