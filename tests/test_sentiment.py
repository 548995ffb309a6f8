"""Issue 18: the sentiment classifier as users run it. Validation held out of the training file, the
long-text strategy that travels with a saved folder (pipeline = `classify evaluate`), resuming masked-LM
pre-training without a tied-weight warning, Korean data, and ELECTRA pre-training."""

import gzip
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import pipeline
from transformers.testing_utils import CaptureLogger
from transformers.utils import logging as transformers_logging

from vanilla_transformer import VanillaTransformerForMaskedLM
from vanilla_transformer.classification_pipeline import LongText, encode_long_texts
from vanilla_transformer.train.classification import (
    classification_metrics,
    clean_text,
    load_classification_arguments,
    load_labelled,
    split_validation,
)
from vanilla_transformer.train.classify import (
    classification_tokenizer,
    evaluate_classifier,
    predict_texts,
    pretrain_mlm,
    pretraining_texts,
    train_classifier,
)
from vanilla_transformer.train.recipes import parse_overrides

TINY_ENCODER = {"d_model": 32, "d_ff": 64, "num_heads": 4, "num_encoder_layers": 2, "dropout": 0.0}


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def arguments(tmp_path, stage="train", **values):
    """``ClassificationArguments`` and ``TrainingArguments`` as ``--set key=value`` gives them."""
    settings = dict(
        vocab_size=300,
        max_length=32,
        mixed_precision="no",
        run_dir=str(tmp_path / "run"),
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        eval_strategy="no",
        logging_steps=1000,
        per_device_train_batch_size=8,
        seed=0,
    )
    settings.update({f"model.{key}": value for key, value in TINY_ENCODER.items()})
    settings.update(values)
    pairs = [
        f"{key}={json.dumps(value) if isinstance(value, list) else value}" for key, value in settings.items()
    ]
    return load_classification_arguments(None, parse_overrides(pairs), stage)


# -- 1. validation held out of the training file -----------------------------------------------------


def test_validation_split_is_disjoint_deterministic_and_sized(tmp_path):
    """The held-out reviews never reach training: not even a duplicate of one (IMDB repeats reviews),
    the same seed gives the same split, and `validation_size` is a count or a fraction of the texts."""
    rng = random.Random(0)
    texts = [f"review number {i} <br /> {'good' if i % 2 else 'bad'}" for i in range(60)]
    texts += [texts[i] for i in range(0, 60, 3)]  # 20 reviews appear twice
    rng.shuffle(texts)
    train_file = write_jsonl(tmp_path / "train.jsonl.gz", [{"text": t, "label": len(t) % 2} for t in texts])
    args, _ = arguments(tmp_path, train_file=str(train_file))
    data = load_labelled(args, args.train_file)

    train, validation = split_validation(data, 12, seed=0, text_column="text")
    seen = {clean_text(t) for t in train["text"]}
    held = {clean_text(t) for t in validation["text"]}
    assert len(held) == 12 and not seen & held
    assert len(train) + len(validation) == len(data) == 80  # every row on exactly one side
    assert split_validation(data, 12, seed=0, text_column="text")[1]["text"] == validation["text"]
    assert set(split_validation(data, 12, seed=1, text_column="text")[1]["text"]) != set(validation["text"])
    assert len(set(split_validation(data, 0.25, seed=0, text_column="text")[1]["text"])) == 15  # of 60
    with pytest.raises(ValueError, match="validation_size"):
        split_validation(data, 60, seed=0, text_column="text")


def test_pretraining_leaves_out_validation_and_test_texts(tmp_path):
    """Pre-training reads the training file minus the reviews fine-tuning validates on (same size and
    seed), and drops unlabelled texts that are test or validation texts word for word."""
    train_rows = [{"text": f"train review {i}", "label": i % 2} for i in range(40)]
    test_rows = [{"text": f"test review {i}", "label": i % 2} for i in range(10)]
    unlabelled = [{"text": "test review 3", "label": -1}, {"text": "unlabelled review", "label": -1}]
    unlabelled += [{"text": row["text"], "label": -1} for row in train_rows]  # as IMDB's repeats some
    args, training = arguments(
        tmp_path,
        "pretrain",
        train_file=str(write_jsonl(tmp_path / "train.jsonl.gz", train_rows)),
        test_file=str(write_jsonl(tmp_path / "test.jsonl.gz", test_rows)),
        unlabelled_files=[str(write_jsonl(tmp_path / "unsup.jsonl.gz", unlabelled))],
        validation_size=8,
    )
    corpus, held_out = pretraining_texts(args, training.seed)
    _, validation = split_validation(load_labelled(args, args.train_file), 8, training.seed, "text")
    assert sorted(held_out) == sorted(validation["text"])
    assert not set(corpus) & set(held_out)
    assert "test review 3" not in corpus and "unlabelled review" in corpus
    assert len(corpus) == 2 * (40 - 8) + 1


# -- 2. the long-text reading travels with the folder: pipeline = classify evaluate -------------------

WORDS = "good bad fine awful great boring superb dull plot actor scene ending music film story cast".split()


def long_reviews(count: int, seed: int, words: int = 60) -> list[dict]:
    """Reviews of ``words`` words (several times a tiny classifier's max_length), labels at random."""
    rng = random.Random(seed)
    return [
        {
            "text": " <br /> ".join(" ".join(rng.choices(WORDS, k=words // 3)) for _ in range(3)),
            "label": i % 2,
        }
        for i in range(count)
    ]


def random_classifier_folder(tmp_path, texts: list[str], **reading) -> Path:
    """A randomly initialised classifier saved with its tokenizer and a long-text reading."""
    from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForSequenceClassification
    from vanilla_transformer.tokenization import train_bpe_tokenizer

    tokenizer = train_bpe_tokenizer(texts, vocab_size=300, min_frequency=1, model_max_length=16)
    config = VanillaTransformerConfig(
        vocab_size=len(tokenizer),
        is_encoder_decoder=False,
        id2label={0: "NEGATIVE", 1: "POSITIVE"},
        label2id={"NEGATIVE": 0, "POSITIVE": 1},
        classifier_max_length=16,
        **TINY_ENCODER,
        **reading,
    )
    torch.manual_seed(0)
    folder = tmp_path / "classifier"
    VanillaTransformerForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def pipeline_scores(classify, texts: list[str], **kwargs) -> np.ndarray:
    """(texts, labels) probabilities from the pipeline, columns in label-id order."""
    results = classify(texts, top_k=None, **kwargs)
    order = classify.model.config.label2id
    return np.array(
        [[row["score"] for row in sorted(result, key=lambda r: order[r["label"]])] for result in results]
    )


@pytest.mark.parametrize(
    "reading",
    [{"classifier_long_text": "head_tail", "classifier_head_tokens": 5}, {"classifier_long_text": "windows"}],
    ids=["head_tail", "windows"],
)
def test_pipeline_predicts_what_classify_evaluate_scores_on_long_reviews(tmp_path, reading):
    """On reviews several times longer than max_length, `pipeline("text-classification", folder,
    trust_remote_code=True)` gives the probabilities and labels `classify evaluate` scored, batched or
    not; and the reading matters: the first max_length tokens alone would give other scores."""
    rows = long_reviews(24, seed=1)
    test_file = write_jsonl(tmp_path / "test.jsonl.gz", rows)
    texts = [row["text"] for row in rows]
    folder = random_classifier_folder(tmp_path, texts, **reading)
    assert json.loads((folder / "config.json").read_text())["custom_pipelines"]["text-classification"]
    args, _ = arguments(tmp_path)
    metrics = evaluate_classifier(folder, args, str(test_file))

    classify = pipeline("text-classification", model=str(folder), trust_remote_code=True)
    assert type(classify).__name__ == "LongTextClassificationPipeline"
    tokenizer = classify.tokenizer
    assert min(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts) > 3 * 16
    model = classify.model
    reading_used = LongText.from_config(model.config)
    evaluated = torch.softmax(
        predict_texts(model, tokenizer, texts, reading_used, tmp_path / "eval"), -1
    ).numpy()
    scores = pipeline_scores(classify, texts)
    np.testing.assert_allclose(scores, evaluated, atol=1e-5)
    np.testing.assert_allclose(pipeline_scores(classify, texts, batch_size=5), evaluated, atol=1e-5)
    predicted = scores.argmax(-1)
    labels = np.array([row["label"] for row in rows])
    assert metrics["accuracy"] == pytest.approx(float(np.mean(predicted == labels)))
    assert metrics["confusion_matrix"] == classification_metrics(predicted, labels, 2)["confusion_matrix"]
    assert metrics["long_text"]["strategy"] == reading["classifier_long_text"]
    # The reading matters on these reviews: the first 16 tokens alone give other probabilities.
    first_tokens = pipeline_scores(classify, texts, long_text="head")
    assert np.abs(first_tokens - scores).max() > 1e-3


def test_training_with_windows_validates_per_review_and_saves_the_reading(tmp_path):
    """`long_text: windows`: training reads every window, validation scores each held-out review once
    (the mean of its windows' logits, as the pipeline), and the saved config carries the reading."""
    rows = long_reviews(48, seed=2, words=30)
    args, training = arguments(
        tmp_path,
        train_file=str(write_jsonl(tmp_path / "train.jsonl.gz", rows)),
        test_file="null",
        validation_size=12,
        max_length=16,
        long_text="windows",
        window_stride=10,
        num_train_epochs=1,
    )
    results = train_classifier(args, training)
    folder = Path(args.run_dir) / "model"
    config = json.loads((folder / "config.json").read_text())
    assert (config["classifier_long_text"], config["classifier_max_length"]) == ("windows", 16)
    assert config["classifier_window_stride"] == 10
    _, validation = split_validation(load_labelled(args, args.train_file), 12, training.seed, "text")
    held_out = write_jsonl(tmp_path / "validation.jsonl.gz", list(validation))
    evaluated = evaluate_classifier(folder, args, str(held_out))
    assert results["validation"]["eval_accuracy"] == pytest.approx(evaluated["accuracy"])
    assert evaluated["long_text"] == {
        "strategy": "windows",
        "max_length": 16,
        "head_tokens": 128,
        "stride": 10,
    }


# -- 3. resuming masked-LM pre-training: the tied head is no "missing key" ------------------------------


def test_resuming_masked_lm_pretraining_warns_of_no_missing_tied_weight(tmp_path):
    """The masked-LM head is tied to the embeddings (§3.4) and not saved. Resuming `classify pretrain`
    from its checkpoint (transformers.Trainer) says nothing about a missing `lm_head.weight`, and the tie
    holds in the resumed and in the saved model."""
    rows = long_reviews(40, seed=3, words=12)
    values = dict(
        train_file=str(write_jsonl(tmp_path / "train.jsonl.gz", rows)),
        test_file="null",
        validation_size=4,
        max_steps=3,
        output_dir=str(tmp_path / "trainer"),
    )
    pretrain_mlm(*arguments(tmp_path, "pretrain", max_minutes=0, **values))  # stops after step 1, saved
    assert (tmp_path / "trainer" / "checkpoint-1").is_dir()
    logger = transformers_logging.get_logger("transformers")
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_info()
    try:
        with CaptureLogger(logger) as captured:
            folder = pretrain_mlm(*arguments(tmp_path, "pretrain", **values))
    finally:
        transformers_logging.set_verbosity(verbosity)
    assert f"Loading model from {tmp_path / 'trainer' / 'checkpoint-1'}" in captured.out  # it resumed
    assert "missing keys" not in captured.out.lower(), captured.out
    mlm, info = VanillaTransformerForMaskedLM.from_pretrained(folder, output_loading_info=True)
    assert info["missing_keys"] == set() and info["unexpected_keys"] == set()
    assert mlm.lm_head.weight is mlm.model.encoder.embed_tokens.weight


# -- 4. Korean (and any script): tokenizer, long-text reading, pipeline -------------------------------

KOREAN_POSITIVE = [
    "정말 재미있는 영화였어요 ㅋㅋㅋ",
    "배우들의 연기가 훌륭했다!",
    "올해 본 영화 중에 최고입니다",
    "감동적인 결말에 눈물이 났어요 ㅠㅠ",
    "음악이 너무 아름다워요",
    "두 번 봐도 좋은 작품",
    "가족과 함께 보기 좋은 영화",
    "연출이 깔끔하고 몰입감 최고",
    "시간 가는 줄 모르고 봤네요",
    "주인공 연기 진짜 대박 ㅎㅎ",
    "스토리가 탄탄하고 재밌다",
    "강력 추천합니다 10점 만점에 10점",
    "웃기고 따뜻한 영화, 강추!",
    "영상미가 정말 아름답다",
    "오랜만에 극장에서 행복했어요",
    "기대 이상이었어요 최고최고",
    "명작은 역시 명작이다",
    "OST가 계속 생각나요 ♪",
    "배우 케미가 완벽해요",
    "한 장면도 버릴 게 없다",
]
KOREAN_NEGATIVE = [
    "정말 지루한 영화였어요 ㅡㅡ",
    "배우들의 연기가 어색했다",
    "올해 본 영화 중에 최악입니다",
    "결말이 허무해서 화가 났어요 ㅠㅠ",
    "음악이 너무 시끄러워요",
    "다시는 보고 싶지 않은 작품",
    "돈이 아까운 영화",
    "연출이 엉망이고 몰입이 안 됨",
    "시간 낭비였네요",
    "주인공 연기 진짜 별로 ㅋㅋ",
    "스토리가 엉성하고 재미없다",
    "비추합니다 10점 만점에 1점",
    "유치하고 뻔한 영화, 비추!",
    "영상이 너무 어둡고 흐리다",
    "극장에서 졸았어요",
    "기대 이하였어요 실망실망",
    "졸작은 역시 졸작이다",
    "OST 말고는 볼 게 없어요",
    "배우 케미가 하나도 없어요",
    "중간에 나가고 싶었다",
]


def korean_reviews(count: int, seed: int) -> list[dict]:
    """Two short Korean reviews of the same sentiment joined into one, label 1 positive / 0 negative."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        label = rng.randint(0, 1)
        first, second = rng.sample(KOREAN_POSITIVE if label else KOREAN_NEGATIVE, 2)
        rows.append({"text": f"{first}<br /><br />{second}", "label": label})
    return rows


def test_tokenizer_trained_on_korean_reviews_gives_them_back(tmp_path):
    """The tokenizer `classify` trains on Korean reviews encodes them without <unk> and decodes them
    exactly, compatibility jamo (ㅋㅋ, ㅠㅠ) included, also unseen Korean; the vocabulary learned Korean
    merges rather than flooding a review with byte pieces (under 0.4 tokens per UTF-8 byte)."""
    rows = [{"text": text, "label": 1} for text in KOREAN_POSITIVE] + [
        {"text": text, "label": 0} for text in KOREAN_NEGATIVE
    ]
    args, _ = arguments(tmp_path, vocab_size=1000)
    texts = [row["text"] for row in rows]
    tokenizer = classification_tokenizer(args, texts)
    unseen = "처음 보는 단어들: 뮤지컬 애니메이션 ㅋㅋ ㅎㅎ ㅜㅜ"
    for text in [*texts, unseen]:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.unk_token_id not in ids
        assert tokenizer.decode(ids) == text
    utf8_bytes = sum(len(text.encode("utf-8")) for text in texts)  # a Hangul syllable is 3 bytes
    tokens = sum(len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in texts)
    assert tokens < 0.4 * utf8_bytes


@pytest.mark.parametrize("strategy", ["head_tail", "windows"])
def test_long_korean_text_is_read_head_and_tail_or_in_windows(tmp_path, strategy):
    """A Korean review of many times max_length tokens: head + tail keeps its first and last tokens,
    windows cover every token, no view is longer than max_length, and each ends in </s>."""
    args, _ = arguments(tmp_path, vocab_size=1000)
    tokenizer = classification_tokenizer(args, KOREAN_POSITIVE + KOREAN_NEGATIVE)
    text = " ".join(KOREAN_POSITIVE + KOREAN_NEGATIVE)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    reading = LongText(strategy, max_length=24, head_tokens=7, stride=10)
    views = encode_long_texts(tokenizer, [text], reading)[0]
    assert len(ids) > 10 * 24
    assert all(len(view) <= 24 and view[-1] == tokenizer.eos_token_id for view in views)
    if strategy == "head_tail":
        assert views == [ids[:7] + ids[-16:] + [tokenizer.eos_token_id]]
    else:
        starts = [*range(0, len(ids) - 23, 10), len(ids) - 23]
        assert views == [ids[start : start + 23] + [tokenizer.eos_token_id] for start in starts]


CLASSIFY_WITHOUT_THE_PACKAGE = """
import sys
sys.modules["vanilla_transformer"] = None  # the package must not be importable here
import json
from transformers import pipeline
classify = pipeline("text-classification", model=sys.argv[1], trust_remote_code=True)
assert type(classify).__module__.startswith("transformers_modules"), type(classify).__module__
print(json.dumps(classify(json.loads(sys.argv[2]), top_k=None)))
"""


def test_korean_classifier_trains_and_its_pipeline_classifies_korean_anywhere(tmp_path):
    """`classify train` on Korean JSON Lines: the classifier beats chance on unseen combinations, and
    its pipeline, in-process and in a Python without this package, scores Korean reviews (one longer
    than max_length) as `classify evaluate` does."""
    from conftest import run_without_the_package

    test_rows = korean_reviews(40, seed=1)
    test_rows.append({"text": " ".join(KOREAN_POSITIVE), "label": 1})  # longer than max_length
    args, training = arguments(
        tmp_path,
        train_file=str(write_jsonl(tmp_path / "train.jsonl.gz", korean_reviews(240, seed=0))),
        test_file=str(write_jsonl(tmp_path / "test.jsonl.gz", test_rows)),
        vocab_size=800,
        max_length=24,
        head_tokens=8,
        num_train_epochs=4,
        learning_rate=0.003,
        per_device_train_batch_size=16,
    )
    results = train_classifier(args, training)
    assert results["test"]["accuracy"] > 0.8  # chance: 0.5
    folder = Path(args.run_dir) / "model"
    classify = pipeline("text-classification", model=str(folder), trust_remote_code=True)
    texts = [row["text"] for row in test_rows]
    assert len(classify.tokenizer(texts[-1])["input_ids"]) > 24
    scores = pipeline_scores(classify, texts)
    labels = np.array([row["label"] for row in test_rows])
    assert results["test"]["accuracy"] == pytest.approx(float(np.mean(scores.argmax(-1) == labels)))
    evaluated = predict_texts(
        classify.model, classify.tokenizer, texts, LongText.from_config(classify.model.config), tmp_path / "e"
    )
    np.testing.assert_allclose(scores, torch.softmax(evaluated, -1).numpy(), atol=1e-5)

    result = run_without_the_package(
        CLASSIFY_WITHOUT_THE_PACKAGE, str(folder), json.dumps(texts[-3:]), folder=tmp_path
    )
    remote = json.loads(result.stdout.strip().splitlines()[-1])
    order = classify.model.config.label2id
    remote_scores = np.array(
        [[r["score"] for r in sorted(rows, key=lambda r: order[r["label"]])] for rows in remote]
    )
    np.testing.assert_allclose(remote_scores, scores[-3:], atol=1e-5)
