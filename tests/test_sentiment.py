"""The sentiment classifier as users run it. Validation held out of the training file, the
long-text strategy that travels with a saved folder (pipeline = `classify evaluate`), resuming masked-LM
pre-training without a tied-weight warning, Korean data, and ELECTRA pre-training."""

import gzip
import json
import logging
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import AutoTokenizer, pipeline
from transformers.utils import logging as transformers_logging

from vanilla_transformer import VanillaTransformerForMaskedLM
from vanilla_transformer.classification_pipeline import LongText, clean_text, encode_long_texts
from vanilla_transformer.data.classification import load_labelled, split_validation, training_and_validation
from vanilla_transformer.evaluation import evaluate_on_recipe_data, predict_texts
from vanilla_transformer.metrics import classification_metrics
from vanilla_transformer.recipes import parse_overrides
from vanilla_transformer.train.classification.arguments import load_classification_arguments
from vanilla_transformer.train.classification.data import pretraining_texts
from vanilla_transformer.train.classification.setup import classification_tokenizer
from vanilla_transformer.train.common.budget import budget_schedule
from vanilla_transformer.train.run import TrainLog, train
from vanilla_transformer.train.tasks import get_task

TINY_ENCODER = {"d_model": 32, "d_ff": 64, "num_heads": 4, "num_encoder_layers": 2, "dropout": 0.0}


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def overrides(tmp_path, **values) -> dict:
    """A tiny run's settings in ``tmp_path / "run"``, as ``--set key=value`` gives them."""
    settings = dict(
        vocab_size=300,
        max_length=32,
        mixed_precision="no",
        output_dir=str(tmp_path / "run"),
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
    return parse_overrides(pairs)


def arguments(tmp_path, stage="train", **values):
    """``ClassificationArguments`` (a ``TrainingArguments``) as ``--set key=value`` gives them."""
    return load_classification_arguments(None, overrides(tmp_path, **values), stage)


def task_arguments(tmp_path, task="classification", **values):
    """The arguments of a run of ``task`` (``train(args)`` runs it), as ``--set key=value`` gives them."""
    return get_task(task).load_arguments(None, overrides(tmp_path, **values))


def log_rows(folder, name="pretrain_log.jsonl") -> list[dict]:
    """A run's training log: one row per logged update."""
    return [json.loads(line) for line in (Path(folder) / name).read_text().splitlines()]


# -- 1. validation held out of the training file -----------------------------------------------------


def test_validation_split_is_disjoint_deterministic_and_sized(tmp_path):
    """The held-out reviews never reach training: not even a duplicate of one (IMDB repeats reviews),
    the same seed gives the same split, and `validation_size` is a count or a fraction of the texts."""
    rng = random.Random(0)
    texts = [f"review number {i} <br /> {'good' if i % 2 else 'bad'}" for i in range(60)]
    texts += [texts[i] for i in range(0, 60, 3)]  # 20 reviews appear twice
    rng.shuffle(texts)
    train_file = write_jsonl(tmp_path / "train.jsonl.gz", [{"text": t, "label": len(t) % 2} for t in texts])
    args = arguments(tmp_path, train_file=str(train_file))
    data = load_labelled(args, args.train_file)

    training, validation = split_validation(data, 12, seed=0, text_column="text")
    seen = {clean_text(t) for t in training["text"]}
    held = {clean_text(t) for t in validation["text"]}
    assert len(held) == 12 and not seen & held
    assert len(training) + len(validation) == len(data) == 80  # every row on exactly one side
    assert split_validation(data, 12, seed=0, text_column="text")[1]["text"] == validation["text"]
    assert set(split_validation(data, 12, seed=1, text_column="text")[1]["text"]) != set(validation["text"])
    assert len(set(split_validation(data, 0.25, seed=0, text_column="text")[1]["text"])) == 15  # of 60
    with pytest.raises(ValueError, match="validation_size"):
        split_validation(data, 60, seed=0, text_column="text")


def test_validation_runs_hold_out_whole_subjects_with_the_label_balance(tmp_path):
    """`validation_runs` holds out runs of neighbouring rows, for files grouped by subject as IMDB's
    reviews are by movie: a held-out subject is one training never reads except at a run's two ends, each
    label gives its share of the runs, duplicates still fall on one side, and the recipe key reaches it."""
    rows = []
    for label in (0, 1):  # IMDB's layout: grouped by label, then by movie, 10 reviews a movie
        for movie in range(40):
            rows += [{"text": f"movie {label}-{movie} review {k}", "label": label} for k in range(10)]
    rows.append(dict(rows[5]))  # a repeated review
    train_file = write_jsonl(tmp_path / "train.jsonl.gz", rows)
    args = arguments(
        tmp_path, train_file=str(train_file), test_file="null", validation_size=80, validation_runs=4
    )
    data = load_labelled(args, args.train_file)

    def movie(text):
        return text.split(" review")[0]

    training, validation = training_and_validation(args, args.seed)
    assert len(set(validation["text"])) == 80 and not set(training["text"]) & set(validation["text"])
    assert len(training) + len(validation) == len(data)
    assert sum(validation["label"]) == 40  # two runs of 20 from each label
    held_movies = {movie(t) for t in validation["text"]}
    shared = held_movies & {movie(t) for t in training["text"]}
    assert len(shared) <= 2 * 4 and len(held_movies) - len(shared) >= 4  # only runs' ends can cut a movie
    one_by_one = split_validation(data, 80, args.seed, "text")[1]
    assert len({movie(t) for t in one_by_one["text"]}) > len(held_movies) + 20  # texts drawn apart
    assert split_validation(data, 80, 0, "text", runs=4)[1]["text"] == validation["text"]
    assert set(split_validation(data, 80, 1, "text", runs=4)[1]["text"]) != set(validation["text"])
    with pytest.raises(ValueError, match="validation_runs"):
        split_validation(data, 700, 0, "text", runs=2)  # 350 a run: a label has 400 texts, 1 run fits
    with pytest.raises(ValueError, match="validation_runs"):
        arguments(tmp_path, train_file=str(train_file), validation_runs=-1)


def test_pretraining_leaves_out_validation_and_test_texts(tmp_path):
    """Pre-training reads the training file minus the reviews fine-tuning validates on (same size and
    seed), and drops unlabelled texts that are test or validation texts word for word."""
    train_rows = [{"text": f"train review {i}", "label": i % 2} for i in range(40)]
    test_rows = [{"text": f"test review {i}", "label": i % 2} for i in range(10)]
    unlabelled = [{"text": "test review 3", "label": -1}, {"text": "unlabelled review", "label": -1}]
    unlabelled += [{"text": row["text"], "label": -1} for row in train_rows]  # as IMDB's repeats some
    args = arguments(
        tmp_path,
        "pretrain",
        train_file=str(write_jsonl(tmp_path / "train.jsonl.gz", train_rows)),
        test_file=str(write_jsonl(tmp_path / "test.jsonl.gz", test_rows)),
        unlabelled_files=[str(write_jsonl(tmp_path / "unsup.jsonl.gz", unlabelled))],
        validation_size=8,
    )
    corpus, held_out = pretraining_texts(args, args.seed)
    _, validation = split_validation(load_labelled(args, args.train_file), 8, args.seed, "text")
    assert sorted(held_out) == sorted(validation["text"])
    assert sorted(held_out) == sorted(training_and_validation(args, args.seed)[1]["text"])
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
    args = arguments(tmp_path)
    metrics = evaluate_on_recipe_data(folder, args, str(test_file))

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


def test_pipeline_takes_the_standard_text_classification_arguments(tmp_path):
    """`clf(texts, batch_size=32, truncation=True)`, as a user of any text-classification pipeline calls
    it: the folder's own reading (what was evaluated); `max_length` sets the tokens per view for one call;
    `padding` changes nothing; `truncation=False` refuses a text longer than the model reads, naming the
    lengths; `top_k` and `batch_size` as usual; other tokenizer arguments are refused by name."""
    rows = long_reviews(8, seed=3)
    texts = [row["text"] for row in rows]
    folder = random_classifier_folder(
        tmp_path, texts, classifier_long_text="head_tail", classifier_head_tokens=5
    )
    classify = pipeline("text-classification", model=str(folder), trust_remote_code=True)
    as_evaluated = pipeline_scores(classify, texts)
    np.testing.assert_allclose(
        pipeline_scores(classify, texts, batch_size=32, truncation=True, padding=True),
        as_evaluated,
        atol=1e-6,
    )
    top = classify(texts[:1], truncation=True, top_k=1)
    assert len(top[0]) == 1 and top[0][0]["score"] == pytest.approx(as_evaluated[0].max(), abs=1e-6)
    # max_length: the same reading with 8 tokens a view (</s> included) is what predict_texts gives for it.
    short = LongText.from_config(classify.model.config)
    short = LongText(short.strategy, 8, short.head_tokens, short.stride)
    expected = torch.softmax(
        predict_texts(classify.model, classify.tokenizer, texts, short, tmp_path / "e"), -1
    )
    np.testing.assert_allclose(
        pipeline_scores(classify, texts, truncation=True, max_length=8), expected.numpy(), atol=1e-5
    )
    assert np.abs(pipeline_scores(classify, texts, max_length=8) - as_evaluated).max() > 1e-3
    with pytest.raises(
        ValueError, match=r"tokens \(</s> included\), more than max_length=16, and truncation=False"
    ):
        classify(texts[:1], truncation=False)
    assert classify(["good"], truncation=False)[0]["label"] in classify.model.config.label2id
    positions = classify.model.config.max_position_embeddings
    with pytest.raises(ValueError, match=rf"at most {positions} tokens, got {positions + 1}"):
        classify(texts[:1], max_length=positions + 1)
    with pytest.raises(ValueError, match=r"not \['stride'\]"):
        classify(texts[:1], stride=4)


def test_training_with_windows_validates_per_review_and_saves_the_reading(tmp_path):
    """`long_text: windows`: training reads every window, validation scores each held-out review once
    (the mean of its windows' logits, as the pipeline), and the saved config carries the reading."""
    rows = long_reviews(48, seed=2, words=30)
    args = task_arguments(
        tmp_path,
        train_file=str(write_jsonl(tmp_path / "train.jsonl.gz", rows)),
        test_file="null",
        validation_size=12,
        max_length=16,
        long_text="windows",
        window_stride=10,
        num_train_epochs=1,
    )
    results = train(args)
    folder = Path(results["model"])
    config = json.loads((folder / "config.json").read_text())
    assert (config["classifier_long_text"], config["classifier_max_length"]) == ("windows", 16)
    assert config["classifier_window_stride"] == 10
    evaluated = evaluate_on_recipe_data(folder, args, split="validation")  # held out for args.seed
    assert evaluated["examples"] == 12
    assert results["validation"]["eval_accuracy"] == pytest.approx(evaluated["accuracy"])
    assert results["validation"]["eval_f1"] == pytest.approx(evaluated["f1"])
    assert (folder / "eval_results-validation.json").is_file()
    with pytest.raises(ValueError, match="not both"):
        evaluate_on_recipe_data(folder, args, args.train_file, split="validation")
    assert evaluated["long_text"] == {
        "strategy": "windows",
        "max_length": 16,
        "head_tokens": 128,
        "stride": 10,
    }


# -- 3. resuming masked-LM pre-training: the tied head is no "missing key" ------------------------------


class RecordLogs(logging.Handler):
    """Every record a logger (and its children) emits: (logger name, level, message)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages = []

    def emit(self, record):
        self.messages.append((record.name, record.levelno, record.getMessage()))


def test_resuming_masked_lm_pretraining_warns_of_no_missing_tied_weight(tmp_path):
    """The masked-LM head is tied to the embeddings (§3.4) and not saved. Resuming `classify pretrain`
    from its checkpoint (transformers.Trainer) logs that it loads the checkpoint and no warning at all (none
    about a missing `lm_head.weight`), and the tie holds in the resumed and in the saved model."""
    rows = long_reviews(40, seed=3, words=12)
    values = dict(
        train_file=str(write_jsonl(tmp_path / "train.jsonl.gz", rows)),
        test_file="null",
        validation_size=4,
        max_steps=3,
    )
    checkpoint = tmp_path / "run" / "checkpoints" / "pretrain" / "checkpoint-1"
    train(task_arguments(tmp_path, "masked-lm", session_minutes=0, **values))  # stops after step 1, saved
    assert checkpoint.is_dir()
    logger, records = transformers_logging.get_logger("transformers"), RecordLogs()
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_info()
    logger.addHandler(records)
    try:
        folder = train(task_arguments(tmp_path, "masked-lm", resume="true", **values))["model"]
    finally:
        logger.removeHandler(records)
        transformers_logging.set_verbosity(verbosity)
    loading = f"Loading model from {checkpoint}."  # it resumed
    assert ("transformers.trainer", logging.INFO, loading) in records.messages
    assert [entry for entry in records.messages if entry[1] >= logging.WARNING] == []
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
    args = arguments(tmp_path, vocab_size=1000)
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
    args = arguments(tmp_path, vocab_size=1000)
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
    args = task_arguments(
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
    results = train(args)
    assert results["test"]["accuracy"] > 0.8  # chance: 0.5
    folder = Path(results["model"])
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


# -- 5. ELECTRA pre-training ----------------------------------------------------------------------------

SUBJECTS = ["the film", "this movie", "the actor", "the story", "the music"]
VERBS = ["was", "is", "seemed", "felt"]
ADJECTIVES = ["wonderful", "boring", "great", "terrible", "moving", "dull"]


def simple_reviews(count: int, seed: int) -> list[dict]:
    """Sentences of a tiny grammar: a generator learns them within steps, so replacements are learnable."""
    rng = random.Random(seed)

    def clause():
        return f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(ADJECTIVES)}"

    return [{"text": f"{clause()} and {clause()} .", "label": i % 2} for i in range(count)]


def electra_arguments(folder: Path, **values):
    folder.mkdir(parents=True, exist_ok=True)
    settings = dict(
        train_file=str(write_jsonl(folder / "train.jsonl.gz", simple_reviews(300, seed=0))),
        test_file="null",
        validation_size=20,
        pack_length=32,
        logging_steps=1,
        per_device_train_batch_size=16,
        learning_rate=0.003,
        warmup_steps=0.1,
        **{"model.norm_position": "pre"},
    )
    settings.update(values)
    return task_arguments(folder, "electra", **settings)


@pytest.fixture(scope="module")
def electra_run(tmp_path_factory):
    """60 ELECTRA steps on tiny data: (arguments, saved discriminator folder, logged rows)."""
    folder = tmp_path_factory.mktemp("electra")
    args = electra_arguments(folder, max_steps=60)
    output = train(args)["model"]
    return args, output, log_rows(args.output_dir)


def binary_entropy(p: float) -> float:
    return -(p * np.log(p) + (1 - p) * np.log(1 - p))


def test_electra_discriminator_learns_which_tokens_were_replaced(electra_run):
    """Over 60 steps the discriminator's loss falls well below its start and below the loss of always
    answering the replaced rate (so it tells replaced tokens apart); the generator's loss falls too; the
    total is Eq. 3's MLM + 50 x discriminator."""
    _, _, rows = electra_run
    assert len(rows) == 60 and all(row["elapsed_minutes"] > 0 for row in rows)
    first, last = rows[:3], rows[-10:]
    discriminator = np.mean([row["discriminator_loss"] for row in last])
    base_rate = binary_entropy(np.mean([row["replaced_fraction"] for row in last]))
    assert 0.05 < np.mean([row["replaced_fraction"] for row in last]) <= 0.15  # of 15 % masked
    assert discriminator < 0.5 * np.mean([row["discriminator_loss"] for row in first])
    assert discriminator < 0.85 * base_rate
    assert np.mean([row["mlm_loss"] for row in last]) < 0.8 * np.mean([row["mlm_loss"] for row in first])
    for row in rows:
        assert row["train/loss"] == pytest.approx(row["mlm_loss"] + 50 * row["discriminator_loss"], rel=1e-3)


def test_electra_generator_is_a_quarter_wide_and_shares_the_embeddings():
    """§3.2: the generator is a fraction of the discriminator's width and has no token embeddings of its
    own: it reads the discriminator's (projected) and predicts through them, so its masked-LM loss trains
    the embedding matrix the discriminator uses."""
    from vanilla_transformer import VanillaTransformerConfig
    from vanilla_transformer.train.classification.electra import ElectraForPreTraining

    config = VanillaTransformerConfig(
        vocab_size=60,
        is_encoder_decoder=False,
        num_decoder_layers=0,
        max_position_embeddings=16,
        **TINY_ENCODER,
    )
    model = ElectraForPreTraining(config, mask_token_id=4, special_token_ids=[0, 1, 2, 3, 4])
    generator = model.generator.encoder.config
    assert (generator.d_model, generator.d_ff, generator.num_heads) == (8, 16, 1)
    assert generator.num_encoder_layers == config.num_encoder_layers
    assert [name for name, _ in model.named_parameters() if "embed" in name] == [
        "model.encoder.embed_tokens.weight"
    ]
    ids = torch.randint(5, 60, (4, 16), generator=torch.Generator().manual_seed(0))
    model.discriminator_weight = 0.0  # the generator's masked-LM loss alone
    output = model(input_ids=ids, generator=torch.Generator().manual_seed(1))
    output.loss.backward()
    assert model.model.encoder.embed_tokens.weight.grad.abs().sum() > 0
    layers = [p.grad for n, p in model.named_parameters() if n.startswith("model.encoder.layers")]
    assert all(grad is None or not grad.any() for grad in layers)  # the discriminator's layers: untouched
    assert output.replaced.any() and output.replaced.sum() <= (ids > 4).sum()


def test_electra_discriminator_loads_into_the_classifier(electra_run, tmp_path):
    """The saved discriminator is our encoder: it loads into VanillaTransformerForSequenceClassification
    with only the new classifier missing, carries pre-training's pre-LN, and fine-tunes (`classify train`
    from it) with dropout back on."""
    from vanilla_transformer import VanillaTransformerForSequenceClassification, VanillaTransformerModel

    args, folder, _ = electra_run
    encoder = VanillaTransformerModel.from_pretrained(folder)
    classifier, info = VanillaTransformerForSequenceClassification.from_pretrained(
        folder, num_labels=2, output_loading_info=True
    )
    assert set(info["missing_keys"]) == {"classifier.weight", "classifier.bias"}
    assert not info["unexpected_keys"] and not info["mismatched_keys"]
    loaded = classifier.model.state_dict()
    for name, tensor in encoder.state_dict().items():
        torch.testing.assert_close(loaded[name], tensor, rtol=0, atol=0)
    assert classifier.config.norm_position == "pre" and classifier.config.dropout == 0.0

    rows = simple_reviews(80, seed=3)
    fine_args = task_arguments(
        tmp_path,
        train_file=str(write_jsonl(tmp_path / "train.jsonl.gz", rows)),
        test_file="null",
        validation_size=10,
        init_from=str(folder),
        **{"model.dropout": 0.1},
        num_train_epochs=1,
    )
    train(fine_args)
    tuned = VanillaTransformerForSequenceClassification.from_pretrained(tmp_path / "run" / "model")
    assert tuned.config.dropout == 0.1 and tuned.config.norm_position == "pre"
    assert tuned.config.architectures == ["VanillaTransformerForSequenceClassification"]


def test_packed_pretraining_rows_are_full_and_unpadded(tmp_path):
    """`pack_length`: the texts, each ending in </s>, run together and cut into equal rows, no padding."""
    from vanilla_transformer.train.classification.data import pretraining_dataset

    args = arguments(tmp_path, pack_length=16)
    texts = [row["text"] for row in simple_reviews(50, seed=4)]
    tokenizer = classification_tokenizer(args, texts)
    rows = pretraining_dataset(texts, tokenizer, args)["input_ids"]
    stream = [t for text in texts for t in (*tokenizer(text, add_special_tokens=False)["input_ids"], 2)]
    assert {len(row) for row in rows} == {16} and len(rows) == len(stream) // 16
    assert [t for row in rows for t in row] == stream[: 16 * len(rows)]
    assert tokenizer.pad_token_id not in {t for row in rows for t in row}


def test_electra_pretraining_resumes_as_if_never_stopped(tmp_path):
    """Stopped after its first update (with a checkpoint) and run again, ELECTRA pre-training logs the
    same losses as the uninterrupted run: weights, optimizer, schedule, data order and the random state
    of masking and sampling all come back."""
    args = electra_arguments(tmp_path / "whole", max_steps=6)
    train(args)
    whole = log_rows(args.output_dir)

    args = electra_arguments(tmp_path / "resumed", max_steps=6, session_minutes=0)
    train(args)  # one update, then a checkpoint
    checkpoint = Path(args.output_dir) / "checkpoints" / "pretrain" / "checkpoint-1"
    saved = json.loads((checkpoint / "trainer_state.json").read_text())["log_history"][0]
    train(electra_arguments(tmp_path / "resumed", max_steps=6, resume="true"))
    resumed = log_rows(args.output_dir)
    # The first update is the first invocation's, not redone: its row, under the log's names.
    assert resumed[0] == {TrainLog.NAMES.get(key, key): value for key, value in saved.items()}

    def losses(log):
        return [(row["step"], row["train/loss"], row["discriminator_loss"]) for row in log]

    assert [step for step, *_ in losses(resumed)] == [1, 2, 3, 4, 5, 6]
    flat = [value for row in losses(resumed) for value in row]
    assert flat == pytest.approx([value for row in losses(whole) for value in row], rel=1e-5)


def test_budget_schedule_warms_up_then_reaches_zero_at_the_budget():
    """Hand-worked values: warm-up over 10 % of the budget, then linear decay to zero when it is spent."""
    assert budget_schedule(0, 0.0, 0.1) == 0.0
    assert budget_schedule(3, 0.05, 0.1) == pytest.approx(0.5)
    assert budget_schedule(9, 0.1, 0.1) == pytest.approx(1.0)
    assert budget_schedule(50, 0.55, 0.1) == pytest.approx(0.5)
    assert budget_schedule(99, 1.0, 0.1) == 0.0 and budget_schedule(120, 1.3, 0.1) == 0.0
    assert budget_schedule(5, 0.5, 10) == pytest.approx(0.25)  # warm-up over 10 updates


def test_time_budget_ends_pretraining_with_the_learning_rate_at_zero(tmp_path):
    """`run_minutes`: each update's learning rate follows the budget schedule of the minutes
    trained so far, training stops (with a checkpoint) once it reaches zero, right at the budget, and
    running the same command again (``resume: auto``) finds the run finished (the budget counts every
    invocation) and trains nothing more: refused, the log as it was."""
    budget, peak = 0.05, 0.001  # minutes; learning rate (logged: the rate an update ran at)
    values = dict(max_steps=100000, run_minutes=budget, save_strategy="no", learning_rate=peak)
    args = electra_arguments(tmp_path, **values)
    train(args)
    rows = log_rows(args.output_dir)
    assert rows[-1]["step"] < 100000 and rows[-3]["elapsed_minutes"] < budget <= rows[-1]["elapsed_minutes"]
    # An update runs at the rate the update before it set, between that one's start and its end.
    for start, end, row in zip(rows, rows[1:], rows[2:], strict=False):
        minutes = (start["elapsed_minutes"], end["elapsed_minutes"])
        bounds = [peak * budget_schedule(row["step"] - 1, m / budget, 0.1) for m in minutes]
        assert min(bounds) - 2e-5 <= row["train/lr"] <= max(bounds) + 2e-5
    assert max(row["train/lr"] for row in rows) > 0.8 * peak  # warmed up, then decayed
    checkpoints = sorted((Path(args.output_dir) / "checkpoints" / "pretrain").glob("checkpoint-*"))
    assert [path.name for path in checkpoints] == [f"checkpoint-{rows[-1]['step']}"]

    with pytest.raises(ValueError, match=r"holds a finished run .*nothing is left to train"):
        train(electra_arguments(tmp_path, resume="auto", **values))  # again: the budget is spent
    assert log_rows(args.output_dir) == rows


def _fine_tuning_log(tmp_path, **values) -> list[dict]:
    """The log of a tiny classifier run (80 training reviews, batches of 8), every update logged."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    args = task_arguments(
        tmp_path,
        train_file=str(write_jsonl(tmp_path / "train.jsonl.gz", simple_reviews(100, seed=1))),
        test_file="null",
        validation_size=20,
        logging_steps=1,
        learning_rate=0.001,
        warmup_steps=0.1,
        save_strategy="epoch",
        eval_strategy="epoch",
        **values,
    )
    train(args)
    checkpoints = (Path(args.output_dir) / "checkpoints" / "train").glob("checkpoint-*")
    last = max(checkpoints, key=lambda path: int(path.name.split("-")[1]))
    return json.loads((last / "trainer_state.json").read_text())["log_history"]


def test_fine_tuning_budget_is_the_linear_schedule_where_the_epochs_end_first(tmp_path):
    """`classify train` with `run_minutes`: on a machine fast enough for the recipe's epochs, every
    update's learning rate is the one the plain linear schedule (no budget) gives: a budget changes
    nothing where it is not reached."""
    plain = _fine_tuning_log(tmp_path / "plain", num_train_epochs=2)
    budgeted = _fine_tuning_log(tmp_path / "budgeted", num_train_epochs=2, run_minutes=60)
    rates = [[row["learning_rate"] for row in log if "loss" in row] for log in (plain, budgeted)]
    assert len(rates[0]) == 20 and rates[1] == pytest.approx(rates[0], abs=1e-12)
    assert rates[0][1] == pytest.approx(0.0005) and rates[0][-1] == pytest.approx(0.001 / 18)


def test_fine_tuning_budget_ends_at_zero_and_validates_the_last_update(tmp_path):
    """Where the budget runs out before the epochs (a slow CPU), the rate decays to zero at the budget,
    training stops there, and that last update is validated, so the best-epoch choice can take it."""
    budget = 0.05  # minutes
    log = _fine_tuning_log(tmp_path, num_train_epochs=1000, run_minutes=budget)
    updates = [row for row in log if "loss" in row]
    assert updates[-1]["step"] < 1000 * 10  # stopped by the clock, long before the epochs
    assert max(row["learning_rate"] for row in updates) > 0.5 * 0.001  # warmed up, then decayed
    assert updates[-1]["learning_rate"] < 0.2 * 0.001
    evaluated = [row["step"] for row in log if "eval_accuracy" in row]
    assert evaluated[-1] == updates[-1]["step"]  # the update that spent the budget, validated
    checkpoints = sorted(tmp_path.glob("run/checkpoints/train/checkpoint-*"))
    optimizer = torch.load(max(checkpoints, key=lambda path: int(path.name.split("-")[1])) / "optimizer.pt")
    assert optimizer["param_groups"][0]["lr"] == pytest.approx(0.0, abs=2e-5)  # budget spent


def test_loss_curves_plot_compares_mlm_and_electra(electra_run, tmp_path):
    """training/plot_pretraining.py draws, from the runs' logs, the masked-LM loss of each (ELECTRA's
    generator) and ELECTRA's discriminator loss beside the base-rate loss, against minutes trained."""
    import importlib.util

    script = Path(__file__).parents[1] / "training" / "plot_pretraining.py"
    spec = importlib.util.spec_from_file_location("plot_pretraining", script)
    plots = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plots)
    args, _, rows = electra_run
    mlm_log = {
        "objective": "mlm",
        "log_history": [{"loss": 6.0 - i / 10, "elapsed_minutes": i / 2, "step": i} for i in range(1, 6)],
    }
    # A masked-LM run's folder: its log as the run writes it (`train/` names) and its task in its results.
    (tmp_path / "mlm").mkdir()
    rows_written = [
        {"step": row["step"], "train/loss": row["loss"], "elapsed_minutes": row["elapsed_minutes"]}
        for row in mlm_log["log_history"]
    ]
    (tmp_path / "mlm" / "pretrain_log.jsonl").write_text(
        "".join(json.dumps(row) + "\n" for row in rows_written)
    )
    (tmp_path / "mlm" / "pretrain_results.json").write_text(json.dumps({"task": "masked-lm"}))
    assert plots.read_log(tmp_path / "mlm") == mlm_log
    electra = plots.pretraining_curves(plots.read_log(Path(args.output_dir)))
    assert electra["masked-LM loss"] == [(row["elapsed_minutes"], row["mlm_loss"]) for row in rows]
    assert electra["discriminator loss"] == [
        (row["elapsed_minutes"], row["discriminator_loss"]) for row in rows
    ]
    assert electra["base-rate loss"][-1][1] == pytest.approx(binary_entropy(rows[-1]["replaced_fraction"]))
    assert plots.pretraining_curves(mlm_log) == {
        "masked-LM loss": [(i / 2, 6.0 - i / 10) for i in range(1, 6)]
    }
    output = tmp_path / "curves.png"
    plots.main(
        ["--run", f"mlm={tmp_path / 'mlm'}", "--run", f"electra={args.output_dir}", "--output", str(output)]
    )
    # Two panels, 11 x 4 inches at 120 dpi. Left, the masked-LM losses: the MLM run in matplotlib's first
    # colour, ELECTRA's generator in its second; right, the discriminator's loss (and its base rate) in the
    # first colour of that panel.
    picture = np.asarray(Image.open(output).convert("RGB")).astype(int)
    assert picture.shape == (480, 1320, 3)
    left, right = picture[:, :660], picture[:, 660:]
    assert _pixels(left, FIRST_COLOUR) > 50 and _pixels(left, SECOND_COLOUR) > 200
    assert _pixels(right, FIRST_COLOUR) > 200 and _pixels(right, SECOND_COLOUR) == 0
    # The reference line: the entropy of the token frequencies, special tokens left out.
    tokenizer = AutoTokenizer.from_pretrained(Path(args.output_dir) / "tokenizer")
    texts = ["good good good film", "bad film"]
    ids = [token for row in tokenizer(texts, add_special_tokens=False)["input_ids"] for token in row]
    counts = np.unique(ids, return_counts=True)[1] / len(ids)
    assert plots.unigram_entropy(tokenizer, texts + [""]) == pytest.approx(-(counts * np.log(counts)).sum())
    reviews = tmp_path / "reviews.jsonl"
    reviews.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    with_line = tmp_path / "with_line.png"
    plots.main(
        ["--run", f"mlm={tmp_path / 'mlm'}", "--output", str(with_line)]
        + ["--unigram-tokenizer", str(Path(args.output_dir) / "tokenizer"), "--unigram-texts", str(reviews)]
    )
    # One MLM run: its curve on the left, an empty discriminator panel, and the grey dashed unigram line
    # across the left panel (more grey in one row than the text's anti-aliasing ever makes: under 60).
    picture = np.asarray(Image.open(with_line).convert("RGB")).astype(int)
    left, right = picture[:, :660], picture[:, 660:]
    assert _pixels(left, FIRST_COLOUR) > 50 and _pixels(picture, SECOND_COLOUR) == 0
    assert _pixels(right, FIRST_COLOUR) == 0
    assert (np.abs(left - 128).max(-1) <= 12).sum(1).max() > 150


FIRST_COLOUR, SECOND_COLOUR = (31, 119, 180), (255, 127, 14)  # matplotlib's tab:blue and tab:orange


def _pixels(picture: np.ndarray, colour: tuple[int, int, int]) -> int:
    """How many pixels of an (H, W, 3) picture are ``colour`` (within anti-aliasing's 12 per channel)."""
    return int((np.abs(picture - np.array(colour)).max(-1) <= 12).sum())
