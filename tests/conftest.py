"""Shared fixtures: tiny configs in the spirit of transformers' ModelTester (vocab 99, width 16, 2 layers), a
real BPE tokenizer, and the folders every module that only reads one shares: one tiny translation run trained
through the `train` command, and one tiny classifier."""

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

# On a 2-core machine torch's default thread pool makes tiny matmuls ~1000x slower; one thread each.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

from huggingface_hub import CommitInfo, CommitOperationAdd, HfApi  # noqa: E402
from huggingface_hub.hf_api import RepoUrl  # noqa: E402
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForSequenceClassification  # noqa: E402

PAD, BOS, EOS = 0, 1, 2
VOCAB = 99


def tiny_config(**overrides) -> VanillaTransformerConfig:
    """An encoder-decoder of width 16, 4 heads, 2 + 2 layers; dropout off so outputs are deterministic."""
    values = dict(
        vocab_size=VOCAB,
        d_model=16,
        d_ff=37,
        num_heads=4,
        num_encoder_layers=2,
        num_decoder_layers=2,
        dropout=0.0,
        max_position_embeddings=64,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
    )
    values.update(overrides)
    return VanillaTransformerConfig(**values)


def encoder_only_config(**overrides) -> VanillaTransformerConfig:
    return tiny_config(is_encoder_decoder=False, is_decoder=False, **overrides)


def decoder_only_config(**overrides) -> VanillaTransformerConfig:
    return tiny_config(is_encoder_decoder=False, is_decoder=True, **overrides)


def with_short_translations(model):
    """``model`` with a saved 4-token bound past the source instead of §6.1's 50. An untrained model never
    emits EOS, so every translation runs to the bound: where a test's subject is not the output's length
    (the lines of a file, the pictures of a translation), the short bound keeps its decoding short."""
    model.generation_config.max_new_tokens_over_source = 4
    return model


# The package's command on two CPU processes under Accelerate (gloo), as a user launches it.
TWO_PROCESS_LAUNCH = (
    "-m",
    "accelerate.commands.launch",
    "--multi_gpu",
    "--num_processes",
    "2",
    "--num_machines",
    "1",
    "--mixed_precision",
    "no",
    "--dynamo_backend",
    "no",
    "-m",
    "vanilla_transformer.cli",
)


def random_ids(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    """Token ids that avoid the special tokens (so no accidental padding or EOS)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (batch, length), generator=generator)


# The device tests/test_on_device.py runs on: `VT_TEST_DEVICE=cuda` (the GPU check, benchmarks/gpu_check.py,
# sets it), else the CPU. The rest of the suite runs where each command would put it by default.
TEST_DEVICE_VARIABLE = "VT_TEST_DEVICE"


@pytest.fixture(scope="session")
def test_device() -> torch.device:
    """``$VT_TEST_DEVICE`` (cpu, cuda, cuda:1, mps, xpu) as a device; a device that is not there is an error
    naming what is (``devices.pick_device``), never a silent fall-back to the CPU."""
    from vanilla_transformer.devices import pick_device

    return pick_device(os.environ.get(TEST_DEVICE_VARIABLE, "cpu"))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


CORPUS = [
    "a wonderful film with a great cast",
    "a boring film with a terrible plot",
    "great acting and a wonderful story",
    "terrible acting and a boring story",
    "정말 재미있는 영화",
    "정말 지루한 영화",
]


@pytest.fixture(scope="session")
def tokenizer():
    """A real BPE fast tokenizer (English and Korean) whose special ids match the tiny configs."""
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.normalizer = normalizers.NFKC()
    bpe.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=99, special_tokens=["<pad>", "<s>", "</s>", "<unk>"])
    bpe.train_from_iterator(CORPUS, trainer)
    bpe.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])
    bpe.decoder = decoders.Metaspace()
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        model_max_length=64,
    )


def run_without_the_package(
    script: str, *args: str, folder: Path, python: str | Path = sys.executable
) -> subprocess.CompletedProcess:
    """Run ``script`` in a fresh Python where ``vanilla_transformer`` cannot be imported (the script
    blocks it, or ``python`` is a virtualenv without it) and the Hub is offline, as a user who
    downloaded a saved folder would; asserts success."""
    result = subprocess.run(
        [str(python), "-c", script, *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        env={
            "PATH": "/usr/bin:/bin",
            "OMP_NUM_THREADS": "1",
            "HF_HUB_OFFLINE": "1",
            "HF_HOME": str(folder / "hf"),
        },
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result


# -- the shared folders -----------------------------------------------------------------------------------

# A translation run in seconds: the synthetic English -> German task, a 1 + 1 layer model of width 32.
TINY_MODEL = dict(d_model=32, d_ff=64, num_heads=4, num_encoder_layers=1, num_decoder_layers=1)
TINY_RUN = dict(
    synthetic_train_size=400,
    synthetic_eval_size=8,
    vocab_size=400,
    model=TINY_MODEL,
    mixed_precision="no",  # fp32 unless a test says otherwise (tests/test_training.py::test_bf16_*)
    max_tokens=300,
    warmup_steps=4,
    lr_scale=1.0,
    eval_steps=1000,
    eval_bleu_samples=4,
    num_beams=2,
    logging_steps=1,
    report_to="none",
)
# The shared run's settings, the model block aside (trained_run_settings adds it).
TRAINED_RUN = {
    **{key: value for key, value in TINY_RUN.items() if key != "model"},
    "max_steps": 150,  # enough for sentences with some right words
    "lr_scale": 0.5,  # at 1.0 the tiny model can fall into repetition by update 150 (the random stream decides)
    "warmup_steps": 30,
    "save_steps": 50,
    "synthetic_eval_size": 6,
}


def trained_run_settings(folder) -> list[str]:
    """The shared run's `--set` options with ``output_dir=folder``: `train` trains it, and
    training/choose_on_validation.py reads its data splits with them."""
    values = [f"{key}={value}" for key, value in TRAINED_RUN.items()]
    values += [f"model.{key}={value}" for key, value in TINY_MODEL.items()] + [f"output_dir={folder}"]
    return [f"--set={value}" for value in values]


def trained_run_data_settings() -> list[str]:
    """The `--set` options of the shared run's data settings: what `evaluate` reads its splits with (it
    refuses a setting that is not a data setting)."""
    from vanilla_transformer.data.translation import TranslationData

    names = {field.name for field in dataclasses.fields(TranslationData)}
    return [f"--set={key}={value}" for key, value in TRAINED_RUN.items() if key in names]


def _read_only(folder: Path):
    """Yield ``folder``; afterwards, fail if any file under it was added, removed or written."""

    def listing() -> dict[str, tuple[int, int]]:
        files = (path for path in sorted(folder.rglob("*")) if path.is_file())
        return {
            str(path.relative_to(folder)): (path.stat().st_size, path.stat().st_mtime_ns) for path in files
        }

    before = listing()
    yield folder
    assert listing() == before, f"a test changed the shared folder {folder}: copy it first (shutil.copytree)"


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory):
    """A tiny translation run through the `train` command, as a user runs it (~3 s): 150 updates of
    TRAINED_RUN, checkpoints at 50, 100 and 150, the final model with its card in ``model/``, the test
    split's hypotheses and BLEU in ``results.json``. Shared by every module (built once per xdist worker),
    so no test may change it: one that writes into it copies it first (a changed file is an error at the
    end of the session)."""
    from vanilla_transformer.cli import main

    folder = tmp_path_factory.mktemp("trained") / "run"
    main(["train", *trained_run_settings(folder)])
    yield from _read_only(folder)


@pytest.fixture(scope="session")
def translation_model(trained_run) -> Path:
    """The shared run's final model folder (weights, tokenizer, generation config, card, remote code)."""
    return trained_run / "model"


@pytest.fixture(scope="session")
def classifier_folder(tmp_path_factory, tokenizer):
    """An untrained tiny classifier (2 labels) saved with the test tokenizer, for the commands that load a
    classifier folder; read-only, as ``trained_run``."""
    folder = tmp_path_factory.mktemp("classifier") / "model"
    torch.manual_seed(0)
    model = VanillaTransformerForSequenceClassification(encoder_only_config(num_labels=2)).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    yield from _read_only(folder)


@pytest.fixture
def hub(monkeypatch, tmp_path):
    """The Hub, offline: what `push` sends lands in a folder (:class:`CapturedHub`)."""
    captured = CapturedHub(tmp_path / "hub")
    monkeypatch.setattr(
        HfApi, "create_repo", lambda api, repo_id, **kw: captured.create_repo(api, repo_id, **kw)
    )
    monkeypatch.setattr(
        HfApi,
        "create_commit",
        lambda api, repo_id, operations, **kw: captured.create_commit(api, repo_id, operations, **kw),
    )
    return captured


class CapturedHub:
    """Stands in for the Hub: ``create_repo`` answers, ``create_commit`` writes the files it was given."""

    def __init__(self, root: Path):
        self.root = root
        self.commits: list[dict] = []

    def create_repo(self, api, repo_id, **kwargs):
        return RepoUrl(f"https://huggingface.co/{repo_id}")

    def create_commit(self, api, repo_id, operations, *, commit_message, **kwargs):
        folder = self.root / repo_id
        for operation in operations:
            assert isinstance(operation, CommitOperationAdd), operation
            target = folder / operation.path_in_repo
            target.parent.mkdir(parents=True, exist_ok=True)
            with operation.as_file() as source:
                target.write_bytes(source.read())
        self.commits.append(
            {"repo_id": repo_id, "message": commit_message, "files": len(operations), **kwargs}
        )
        return CommitInfo(
            commit_url=f"https://huggingface.co/{repo_id}/commit/{'0' * 40}",
            commit_message=commit_message,
            commit_description=kwargs.get("commit_description") or "",
            oid="0" * 40,
        )

    def folder(self, repo_id: str) -> Path:
        return self.root / repo_id
