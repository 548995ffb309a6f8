"""The models inside transformers' tools: pipeline(...) with a real tokenizer, and one Trainer step."""

import json

import pytest
import torch
import torch.nn.functional as F
from conftest import CORPUS, decoder_only_config, encoder_only_config, run_without_the_package, tiny_config
from transformers import Trainer, TrainingArguments, pipeline

from vanilla_transformer import (
    VanillaTransformerForCausalLM,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerForSequenceClassification,
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
    texts = ["a wonderful film with a great cast", "정말 지루한 영화"]
    results = classify(texts)
    # Each result is the model's own prediction: the argmax of its logits, with the softmax probability
    # (computed here on one padded batch: the pipeline reads each text alone, so padding must not count).
    assert len(set(map(len, tokenizer(texts)["input_ids"]))) == 2
    with torch.no_grad():
        logits = model.eval()(**tokenizer(texts, padding=True, return_tensors="pt")).logits
    assert [r["label"] for r in results] == [labels[int(i)] for i in logits.argmax(-1)]
    assert [r["score"] for r in results] == pytest.approx(
        logits.softmax(-1).max(-1).values.tolist(), abs=1e-6
    )
    # The same from a saved folder, labels round-tripping through config.json.
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    from_folder = pipeline("text-classification", model=str(tmp_path), trust_remote_code=True)
    assert from_folder.model.config.id2label == labels
    assert from_folder("a great cast")[0]["label"] == classify("a great cast")[0]["label"]
    assert from_folder("a great cast")[0]["score"] == pytest.approx(
        classify("a great cast")[0]["score"], abs=1e-6
    )


def test_text_generation_pipeline(tokenizer):
    model = VanillaTransformerForCausalLM(decoder_only_config())
    generate = pipeline("text-generation", model=model, tokenizer=tokenizer)
    output = generate("a wonderful", max_new_tokens=5, do_sample=False)
    # The prompt, then the five tokens generate() continues it with (the prompt as the tokenizer encodes it).
    prompt = tokenizer("a wonderful", return_tensors="pt")
    ids = model.generate(**prompt, max_new_tokens=5, do_sample=False)[0]
    continuation = tokenizer.decode(ids[prompt["input_ids"].shape[1] :], skip_special_tokens=True)
    assert len(ids) == prompt["input_ids"].shape[1] + 5 and continuation
    assert output == [{"generated_text": "a wonderful" + continuation}]


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
    # The loss of the starting weights on the whole set (one batch of 6), and its gradient's L1 norm: Adam's
    # first update moves each weight by about lr against its gradient's sign, so to first order the loss
    # falls by lr * |g|_1 (here ~0.0074; the update measured falls by 99.7 % of that).
    initial = F.cross_entropy(model(**encoded).logits, labels)
    initial.backward()
    initial = initial.item()
    gradient_l1 = sum(float(p.grad.abs().sum()) for p in model.parameters() if p.grad is not None)
    model.zero_grad(set_to_none=True)
    args = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=1,
        per_device_train_batch_size=6,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
    )
    result = Trainer(model=model, args=args, train_dataset=dataset).train()
    assert result.global_step == 1 and result.training_loss == pytest.approx(initial, abs=1e-6)
    assert not torch.equal(before, model.classifier.weight)
    with torch.no_grad():
        after = F.cross_entropy(model.eval()(**encoded).logits, labels)
    assert initial - float(after) > 0.5 * args.learning_rate * gradient_l1 > 1e-3


PAIRS = ["a wonderful film", "a boring story with a terrible plot", "great acting"]

TRANSLATE_REMOTELY = """
import sys
sys.modules["vanilla_transformer"] = None  # the package must not be importable here
import json
from transformers import pipeline
translate = pipeline("translation", model=sys.argv[1], trust_remote_code=True)
assert type(translate).__module__.startswith("transformers_modules"), type(translate).__module__
print(json.dumps(translate(json.loads(sys.argv[2]))))
"""


@pytest.fixture
def translation_folder(tokenizer, tmp_path):
    model = VanillaTransformerForConditionalGeneration(tiny_config(source_lang="en", target_lang="ko")).eval()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    return tmp_path


def _reference_translations(folder, tokenizer, texts, **generate_kwargs):
    model = VanillaTransformerForConditionalGeneration.from_pretrained(folder).eval()
    outputs = []
    for text in texts:
        for ids in model.generate(**tokenizer(text, return_tensors="pt"), **generate_kwargs):
            outputs.append(tokenizer.decode(ids, skip_special_tokens=True))
    return outputs


def test_translation_pipeline_in_process_matches_generate(tokenizer, translation_folder):
    translate = pipeline("vanilla-translation", model=str(translation_folder))
    assert translate.model.generation_config.num_beams == 4  # §6.1 defaults reach the pipeline
    expected = _reference_translations(translation_folder, tokenizer, PAIRS)
    assert [translate(text)[0]["translation_text"] for text in PAIRS] == expected
    # Batched: one dict per input, same text. Greedy, so padding cannot reorder near-tied beams, and
    # a fixed length, since the §6.1 bound follows the longest source of a batch (untrained: no EOS).
    greedy = _reference_translations(translation_folder, tokenizer, PAIRS, num_beams=1, max_new_tokens=10)
    batched = translate(PAIRS, batch_size=2, num_beams=1, max_new_tokens=10)
    assert [item["translation_text"] for item in batched] == greedy
    several = translate(PAIRS[0], num_return_sequences=2)
    assert [item["translation_text"] for item in several] == _reference_translations(
        translation_folder, tokenizer, PAIRS[:1], num_return_sequences=2
    )


def test_translation_pipeline_checks_the_language_pair(tokenizer, translation_folder):
    translate = pipeline("vanilla-translation", model=str(translation_folder))
    expected = _reference_translations(translation_folder, tokenizer, PAIRS[:1])
    assert [translate(PAIRS[0], src_lang="en", tgt_lang="ko")[0]["translation_text"]] == expected
    with pytest.raises(ValueError, match=r"src_lang='de'.*translates en -> ko"):
        translate(PAIRS[0], src_lang="de")


def test_saved_folder_serves_the_translation_task_by_its_own_name(tokenizer, translation_folder):
    config = json.loads((translation_folder / "config.json").read_text())
    assert config["custom_pipelines"]["translation"]["impl"] == "translation_pipeline.TranslationPipeline"
    assert (translation_folder / "translation_pipeline.py").is_file()
    with pytest.raises(ValueError, match="trust_remote_code"):
        pipeline("translation", model=str(translation_folder))
    expected = _reference_translations(translation_folder, tokenizer, PAIRS[:2])
    in_process = pipeline("translation", model=str(translation_folder), trust_remote_code=True)
    assert [item["translation_text"] for item in in_process(PAIRS[:2])] == expected
    # A Python with transformers and torch but without this package (the user who downloads it).
    result = run_without_the_package(
        TRANSLATE_REMOTELY, str(translation_folder), json.dumps(PAIRS[:2]), folder=translation_folder
    )
    remote = json.loads(result.stdout.strip().splitlines()[-1])
    assert [item["translation_text"] for item in remote] == expected


def test_seq2seq_trainer_fine_tunes_a_saved_checkpoint_scored_by_generated_bleu(
    tokenizer, translation_folder, tmp_path
):
    """Users fine-tune a downloaded translation model as they fine-tune Marian or T5."""
    from datasets import Dataset
    from transformers import (
        AutoModelForSeq2SeqLM,
        DataCollatorForSeq2Seq,
        Seq2SeqTrainer,
        Seq2SeqTrainingArguments,
    )

    from vanilla_transformer.metrics import bleu_metric

    model = AutoModelForSeq2SeqLM.from_pretrained(translation_folder)
    sentences = CORPUS[:4]  # a copy task: target = source
    data = Dataset.from_dict({"source": sentences, "target": sentences}).map(
        lambda batch: tokenizer(batch["source"], text_target=batch["target"]),
        batched=True,
        remove_columns=["source", "target"],
    )
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path / "fine-tuned"),
        max_steps=400,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        learning_rate=1e-2,
        predict_with_generate=True,
        generation_num_beams=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        logging_steps=1000,
    )
    trainer = Seq2SeqTrainer(
        model=model,
        args=args,
        train_dataset=data,
        eval_dataset=data,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        processing_class=tokenizer,
        compute_metrics=bleu_metric(tokenizer),
    )
    before = trainer.evaluate()
    trainer.train()
    after = trainer.evaluate()
    assert after["eval_loss"] < before["eval_loss"]
    assert (
        after["eval_sacrebleu"] > 60 > before["eval_sacrebleu"]
    )  # it learned to copy (width 16: not perfectly)
    trainer.save_model(tmp_path / "saved")
    translate = pipeline("vanilla-translation", model=str(tmp_path / "saved"))
    expected = _reference_translations(tmp_path / "saved", tokenizer, sentences[:1], num_beams=1)
    assert translate(sentences[0], num_beams=1)[0]["translation_text"] == expected[0]
