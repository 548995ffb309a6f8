"""NSMC (Naver Sentiment Movie Corpus), Korean movie reviews: the shipped recipe nsmc_supervised.yaml on a
small copy the tests write in each of NSMC's layouts: the Hub's Parquet conversion of ``e9t/nsmc`` (read
through the ``load_dataset`` call the Hub id takes), the release's tab-separated ``ratings_*.txt``, and a
user's JSON Lines, comma-separated and parquet files. Columns ``id``, ``document``, ``label``; a few
documents are empty, as in the release. Offline: nothing is downloaded."""

import csv
import json
import unicodedata
from pathlib import Path

import datasets
import numpy as np
import pytest
from transformers import AutoTokenizer, pipeline

from vanilla_transformer import VanillaTransformerForSequenceClassification
from vanilla_transformer.cli import main
from vanilla_transformer.data import classification as classification_data
from vanilla_transformer.data.classification import load_labelled, training_and_validation
from vanilla_transformer.train.classification.arguments import load_classification_arguments

RECIPE = Path(__file__).parent.parent / "vanilla_transformer" / "recipes" / "nsmc_supervised.yaml"

# Reviews written for these tests, in the manner of NSMC's: short, colloquial, compatibility jamo ("ㅋㅋ",
# "ㅠㅠ"), an emoji, quotes (two open a review, one of them never closed), English and digits among the Hangul.
POSITIVE = [
    "정말 재미있게 봤어요. 배우들 연기가 최고!",
    "인생 영화입니다 ㅠㅠ 몇 번을 봐도 감동적이에요",
    "스토리도 탄탄하고 영상미가 정말 아름답다",
    '"인생작"이라는 말이 아깝지 않다',
    "오랜만에 극장에서 박수 치고 나왔습니다",
    "가족이랑 같이 보기 좋은 따뜻한 영화",
    "음악이 너무 좋아서 OST까지 찾아 들었어요",
    "마지막 장면에서 눈물이 멈추질 않았다",
    "기대 안 했는데 완전 꿀잼 ㅋㅋㅋ",
    "두 시간이 순식간에 지나갔네요. 강력 추천합니다",
    '주연 배우의 "눈빛 연기" 하나로 10점',
    "연출, 각본, 연기 뭐 하나 빠지는 게 없다",
    "보고 나서도 여운이 오래 남는 영화",
    "아이들과 봤는데 어른인 제가 더 좋아했어요",
    "웃기면서도 마음이 찡해지는 명작",
    "이 영화 덕분에 하루가 행복했다 😊",
    "원작보다 더 잘 만든 것 같아요",
    "액션이 시원시원하고 속도감이 대단함",
    '감독님 다음 작품도 기대할게요 "최고',
    "10년이 지나도 다시 보고 싶은 영화",
    "배우들 케미가 정말 좋네요 ♥",
    "잔잔하지만 깊은 울림이 있는 작품입니다",
    "역시 믿고 보는 감독! 최고의 선택이었다",
    "평점이 왜 이렇게 낮은지 모르겠네요, 정말 재밌는데",
    "처음부터 끝까지 긴장감 넘치는 스릴러",
]
NEGATIVE = [
    "시간이 아까웠다. 돈 주고 볼 영화는 아님",
    "스토리가 너무 뻔하고 지루해요",
    '"반전 있다길래 봤는데 뻔함',
    "배우들 연기가 어색해서 몰입이 안 됨",
    "중간에 나왔습니다... 최악",
    "예고편이 전부였네 ㅡㅡ",
    "별 하나도 아깝다",
    "감독이 무슨 말을 하고 싶은 건지 모르겠다",
    "결말이 너무 허무해서 화가 난다",
    "광고에 속았다 ㅠㅠ 완전 실망",
    "졸려서 혼났네요 ㅋㅋ 노잼",
    "억지 감동에 억지 웃음, 보는 내내 불편했음",
    "CG가 너무 어색하고 싸구려 같다",
    "원작을 완전히 망쳐놨네",
    "2시간 동안 아무 일도 안 일어남",
    "대사가 유치해서 손발이 오그라든다",
    "이런 영화에 평점 10점 준 사람들 이해가 안 간다",
    "편집이 엉망이라 내용을 따라갈 수가 없음",
    "주인공이 답답해서 보는 내내 짜증났다",
    "기대가 컸는데 그만큼 실망도 크다",
    "다시는 이 감독 영화 안 본다",
    "음향이 너무 커서 귀만 아팠음",
    "이게 왜 천만 영화인지 모르겠음",
]


def _rows(positive: list[str], negative: list[str], empty_labels: list[int], first_id: int) -> list[dict]:
    """Rows of NSMC's layout, the labels interleaved; an empty document for each of ``empty_labels``."""
    labelled = [(text, 1) for text in positive] + [(text, 0) for text in negative]
    order = sorted(range(len(labelled)), key=lambda i: (i % 5, i))  # the labels mixed, deterministically
    rows = [labelled[i] for i in order]
    for position, label in zip((3, 11, 20), empty_labels, strict=False):
        rows.insert(position, ("", label))
    return [
        {"id": str(first_id + i), "document": text, "label": label} for i, (text, label) in enumerate(rows)
    ]


TRAIN = _rows(POSITIVE[:18], NEGATIVE[:17], empty_labels=[0, 1], first_id=9_000_001)
TEST = _rows(POSITIVE[18:], NEGATIVE[17:], empty_labels=[1], first_id=5_000_001)
SPLITS = {"train": TRAIN, "test": TEST}


def _kept(rows: list[dict]) -> list[tuple[str, int]]:
    return [(row["document"], row["label"]) for row in rows if row["document"]]


def write_hub_layout(folder: Path) -> Path:
    """``e9t/nsmc`` at ``refs/convert/parquet``: ``default/<split>/0000.parquet``, features as the Hub's
    (``id`` and ``document`` strings, ``label`` a ClassLabel negative / positive; empty documents are "")."""
    features = datasets.Features(
        {
            "id": datasets.Value("string"),
            "document": datasets.Value("string"),
            "label": datasets.ClassLabel(names=["negative", "positive"]),
        }
    )
    for split, rows in SPLITS.items():
        (folder / "default" / split).mkdir(parents=True)
        datasets.Dataset.from_list(rows, features=features).to_parquet(
            folder / "default" / split / "0000.parquet"
        )
    return folder


def write_release_files(folder: Path) -> Path:
    """The release's ``ratings_train.txt`` / ``ratings_test.txt``: a header line, tab-separated fields, no
    quoting (a ``"`` is part of the review), numeric ids, an empty document as an empty field."""
    folder.mkdir(parents=True)
    for split, rows in SPLITS.items():
        lines = ["id\tdocument\tlabel"] + [f"{row['id']}\t{row['document']}\t{row['label']}" for row in rows]
        (folder / f"ratings_{split}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def write_own_files(folder: Path) -> Path:
    """The same rows as a user's own files: ``<split>.jsonl`` (an empty document as null, as a data frame's
    export writes it), ``<split>.csv`` (comma-separated with CSV's quoting) and ``<split>.parquet``."""
    folder.mkdir(parents=True)
    for split, rows in SPLITS.items():
        datasets.Dataset.from_list(rows).to_parquet(folder / f"{split}.parquet")
        with open(folder / f"{split}.jsonl", "w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(
                    json.dumps({**row, "document": row["document"] or None}, ensure_ascii=False) + "\n"
                )
        with open(folder / f"{split}.csv", "w", encoding="utf-8", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=["id", "document", "label"])
            writer.writeheader()
            writer.writerows(rows)
    return folder


def recipe_arguments(**overrides):
    return load_classification_arguments(str(RECIPE), overrides, "train")


# Tiny sizes for the recipe's own settings: a 1-layer encoder of width 32, short reviews, 40 epochs of the
# 30-odd training reviews (enough to learn them), no checkpoints; fp32.
TINY = {
    "model.d_model": 32,
    "model.d_ff": 64,
    "model.num_encoder_layers": 1,
    "max_length": 64,
    "head_tokens": 32,
    "validation_size": 4,
    "num_train_epochs": 40,
    "per_device_train_batch_size": 8,
    "learning_rate": 0.003,
    "warmup_steps": 0,
    "eval_strategy": "no",
    "save_strategy": "no",
    "load_best_model_at_end": False,
    "logging_steps": 1000,
    "mixed_precision": "no",
    "report_to": "none",
}


def run_recipe(stage: str, *options: str, **settings) -> None:
    """``vanilla-transformer classify <stage> --recipe nsmc_supervised.yaml [options] --set key=value ...``."""
    main(
        [
            "classify",
            stage,
            "--recipe",
            str(RECIPE),
            *options,
            *(f"--set={k}={v}" for k, v in settings.items()),
        ]
    )


@pytest.fixture(scope="module")
def nsmc_run(tmp_path_factory):
    """The recipe trained by ``classify train`` on the Hub layout (a local folder in place of the Hub id),
    with TINY's sizes: ``(data folder, run folder, results)``."""
    data = tmp_path_factory.mktemp("nsmc-data")
    hub = write_hub_layout(data / "hub")
    write_release_files(data / "nsmc")
    run = data / "run"
    run_recipe("train", **TINY, dataset=hub, output_dir=run)
    return data, run, json.loads((run / "results.json").read_text())


def test_the_recipe_reads_the_hubs_parquet_conversion_of_e9t_nsmc(tmp_path, monkeypatch):
    """Unchanged, the recipe asks ``load_dataset`` for e9t/nsmc's splits at refs/convert/parquet (the
    script on its main branch runs on no datasets >= 4); here the call is answered from a local folder laid
    out as that branch, as the Hub answers it."""
    hub = write_hub_layout(tmp_path / "hub")
    calls = []

    def hub_load(path, **options):
        calls.append((path, options))
        return datasets.load_dataset(str(hub), **options)

    monkeypatch.setattr(classification_data, "load_dataset", hub_load)
    monkeypatch.setattr(datasets, "get_dataset_split_names", lambda path, **options: ["train", "test"])
    args = recipe_arguments(validation_size=4)
    assert (args.text_column, args.label_column, args.class_names) == (
        "document",
        "label",
        ["negative", "positive"],
    )
    train, validation = training_and_validation(args, seed=0)
    assert calls == [("e9t/nsmc", {"split": "train", "revision": "refs/convert/parquet"})]
    assert len(train) + len(validation) == len(_kept(TRAIN)) and len(validation) == 4


@pytest.mark.parametrize("layout", ["hub", "release", "json", "csv", "parquet"])
def test_every_layout_reads_the_same_reviews_and_drops_the_empty_ones(layout, tmp_path, monkeypatch, capsys):
    """NSMC's layouts give the same reviews with the same labels (quotes, commas and emoji intact), the
    empty documents (null, "" or an empty field) dropped with their count printed, file paths read from
    ``VT_DATA_DIR``."""
    monkeypatch.setenv("VT_DATA_DIR", str(tmp_path))
    write_hub_layout(tmp_path / "hub")
    write_release_files(tmp_path / "nsmc")
    write_own_files(tmp_path / "files")
    overrides = {
        "hub": {"dataset": str(tmp_path / "hub")},
        "release": {
            "dataset": "csv",
            "train_file": "nsmc/ratings_train.txt",
            "test_file": "nsmc/ratings_test.txt",
        },
        "json": {"dataset": "json", "train_file": "files/train.jsonl", "test_file": "files/test.jsonl"},
        "csv": {"dataset": "csv", "train_file": "files/train.csv", "test_file": "files/test.csv"},
        "parquet": {
            "dataset": "parquet",
            "train_file": "files/train.parquet",
            "test_file": "files/test.parquet",
        },
    }[layout]
    args = recipe_arguments(**overrides)
    for rows, file in ((TRAIN, args.train_file), (TEST, args.test_file)):
        data = load_labelled(args, file)
        assert list(zip(data["document"], data["label"], strict=True)) == _kept(rows)
        dropped = len(rows) - len(_kept(rows))
        assert f"{dropped} of {len(rows)} rows dropped: their 'document' is empty" in capsys.readouterr().out


def test_without_drop_empty_texts_an_empty_review_is_an_error_naming_its_row(tmp_path):
    write_release_files(tmp_path / "nsmc")
    write_own_files(tmp_path / "files")
    args = recipe_arguments(dataset="csv", data_dir=str(tmp_path), drop_empty_texts=False)
    with pytest.raises(
        ValueError, match=r"ratings_train.txt: row 3: 'document' is empty \(`drop_empty_texts"
    ):
        load_labelled(args, "nsmc/ratings_train.txt")
    args = recipe_arguments(dataset="json", data_dir=str(tmp_path), drop_empty_texts=False)
    with pytest.raises(ValueError, match=r"train.jsonl line 4: 'document' is None, not text \(`drop_empty"):
        load_labelled(args, "files/train.jsonl")


@pytest.mark.parametrize("layout", ["hub", "release"])
def test_a_wrong_column_name_is_an_error_naming_it_and_the_columns(layout, tmp_path):
    data = {"hub": {"dataset": str(write_hub_layout(tmp_path / "hub"))}}.get(layout)
    if layout == "release":
        write_release_files(tmp_path / "nsmc")
        data = {
            "dataset": "csv",
            "data_dir": tmp_path,
            "train_file": "nsmc/ratings_train.txt",
            "test_file": "null",
        }
    settings = {**data, "text_column": "review", "output_dir": tmp_path / "run", "report_to": "none"}
    with pytest.raises(SystemExit) as raised:
        run_recipe("train", **settings)
    assert "column 'review' is missing; the rows have ['id', 'document', 'label']" in str(raised.value)
    assert not (tmp_path / "run").exists()  # refused: the run takes away the folder it made


def test_a_missing_release_file_is_named_before_any_work(tmp_path):
    settings = {"dataset": "csv", "data_dir": tmp_path, "train_file": "nsmc/ratings_train.txt"}
    with pytest.raises(
        SystemExit, match=r"No such file: train_file=\S*nsmc/ratings_train.txt; test_file=\S*/test "
    ):
        run_recipe("train", **settings, output_dir=tmp_path / "run")


def test_the_recipe_trains_saves_and_scores_a_classifier_of_korean_reviews(nsmc_run, monkeypatch):
    """``classify train`` learns the training reviews, saves a model whose own pipeline names NSMC's
    classes, and scores the test split without its empty review; ``classify evaluate`` gives that score
    again, on the Hub layout and on the release's tab-separated test file alike."""
    data, run, results = nsmc_run
    folder = run / "model"
    model = VanillaTransformerForSequenceClassification.from_pretrained(folder)
    assert model.config.id2label == {0: "negative", 1: "positive"}
    assert model.config.classifier_long_text == "head_tail" and model.config.classifier_max_length == 64
    classify = pipeline("text-classification", model=str(folder), trust_remote_code=True)
    train_texts, train_labels = zip(*_kept(TRAIN), strict=True)
    predicted = [result["label"] for result in classify(list(train_texts))]
    assert set(predicted) == {"negative", "positive"}
    learned = np.mean(
        [name == model.config.id2label[label] for name, label in zip(predicted, train_labels, strict=True)]
    )
    assert learned >= 0.9  # the reviews it trained on (4 of them held out for validation)

    test = results["test"]
    assert test["examples"] == len(_kept(TEST))  # the empty test review dropped, not scored
    test_texts, test_labels = zip(*_kept(TEST), strict=True)
    agreed = [
        result["label"] == model.config.id2label[label]
        for result, label in zip(classify(list(test_texts)), test_labels, strict=True)
    ]
    assert test["accuracy"] == pytest.approx(np.mean(agreed))  # what the pipeline predicts is what was scored

    run_recipe("evaluate", "--model", str(folder), dataset=data / "hub")
    scored = json.loads((folder / "eval_results.json").read_text())
    assert (scored["examples"], scored["accuracy"]) == (test["examples"], pytest.approx(test["accuracy"]))
    monkeypatch.setenv("VT_DATA_DIR", str(data))
    run_recipe("evaluate", "--model", str(folder), "--file", "nsmc/ratings_test.txt", dataset="csv")
    scored = json.loads((folder / "eval_results.json").read_text())
    assert (scored["examples"], scored["accuracy"]) == (test["examples"], pytest.approx(test["accuracy"]))


def test_the_trained_tokenizer_keeps_hangul_as_typed(nsmc_run):
    """The run's BPE tokenizer (NFC, byte-level) gives every review back exactly: syllables are not
    decomposed into jamo, compatibility jamo ("ㅋㅋ", "ㅠㅠ") are not rewritten (NFKC would make them
    conjoining jamo), and the emoji and quotes survive; decomposed (NFD) input reads as the composed text."""
    _, run, _ = nsmc_run
    tokenizer = AutoTokenizer.from_pretrained(run / "model")
    for text, _ in _kept(TRAIN) + _kept(TEST):
        ids = tokenizer(text)["input_ids"]
        assert ids[-1] == tokenizer.eos_token_id
        assert tokenizer.decode(ids, skip_special_tokens=True) == text
        assert tokenizer(unicodedata.normalize("NFD", text))["input_ids"] == ids
    unseen = "ㅋㅋㅋ 이 영화 진짜 강추합니다 👍"  # words the tokenizer never saw
    assert tokenizer.decode(tokenizer(unseen)["input_ids"], skip_special_tokens=True) == unseen
    assert tokenizer.unk_token_id not in tokenizer(unseen)["input_ids"]
    # A frequent word is one token of whole syllables, not their UTF-8 bytes or jamo.
    pieces = [tokenizer.convert_tokens_to_string([token]) for token in tokenizer.tokenize("정말 좋은 영화")]
    assert pieces[-1] == " 영화"
