"""The shipped recipes: every file under vanilla_transformer/recipes parses with the loader of its
kind; ``mixed_precision: auto`` resolves as the README's "Mixed precision (bf16)" section documents; and a
seconds-long bf16 run lowers the loss and saves a folder that loads and generates in fp32."""

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

import vanilla_transformer  # noqa: F401  (registers the Auto classes)
from vanilla_transformer.precision import resolve_mixed_precision
from vanilla_transformer.recipes import read_recipe
from vanilla_transformer.train.classification.arguments import load_classification_arguments
from vanilla_transformer.train.run import train
from vanilla_transformer.train.tasks import get_task
from vanilla_transformer.train.translation.ablation import read_study
from vanilla_transformer.train.translation.arguments import load_arguments

CONFIGS = Path(__file__).parent.parent / "vanilla_transformer" / "recipes"
RECIPES = sorted(CONFIGS.glob("*.yaml"))  # a new recipe is covered without editing this file

# -- every shipped recipe parses ------------------------------------------------------------------------------


def _translation(path: Path) -> list[str]:
    return [load_arguments(str(path)).mixed_precision_setting]


TEXT_TASKS = ("classification", "masked-lm", "electra", "causal-lm")


def _text_task(path: Path) -> list[str]:
    """The loader of the text task the recipe names (classification's where it names none of them: a
    translation recipe, whose keys it refuses)."""
    named = read_recipe(path).get("task")
    args = get_task(named if named in TEXT_TASKS else "classification").load_arguments(str(path), {})
    return [args.mixed_precision_setting]


def _study(path: Path) -> list[str]:
    """Table 3's study: every row, as the training command it becomes."""
    study = read_study(path)
    return [
        load_arguments(str(study.recipe), study.overrides(row, Path("ablation"))).mixed_precision_setting
        for row in study.rows
    ]


LOADERS = {  # kind -> (what reads it, the mixed_precision setting of each run it makes)
    "translation (vanilla-transformer train)": _translation,
    "text tasks (vanilla-transformer train: classification, masked-lm, electra, causal-lm)": _text_task,
    "Table 3 study (vanilla-transformer ablate)": _study,
}


def test_recipes_are_shipped():
    assert len(RECIPES) >= 3, f"no recipes found under {CONFIGS}"


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda path: path.name)
def test_every_shipped_recipe_parses_with_the_loader_of_its_kind(recipe):
    """Exactly one loader accepts each file (the others refuse its keys), and every run it describes uses
    `mixed_precision: auto`, as the README says of every shipped recipe."""
    accepted, refused = {}, {}
    for kind, load in LOADERS.items():
        try:
            accepted[kind] = load(recipe)
        except (ValueError, TypeError, FileNotFoundError) as error:
            refused[kind] = f"{type(error).__name__}: {error}"
    assert accepted, f"{recipe.name}: no loader accepts it:\n" + "\n".join(
        f"  {kind}: {reason}" for kind, reason in refused.items()
    )
    assert len(accepted) == 1, f"{recipe.name}: read by more than one kind of command: {sorted(accepted)}"
    ((kind, settings),) = accepted.items()
    assert settings and set(settings) == {"auto"}, f"{recipe.name} ({kind}): mixed_precision {settings}"


# -- `auto` follows the documented hardware rule ------------------------------------------------------------


@pytest.fixture
def hardware(monkeypatch):
    """Set what torch reports: the CPU's capability flags and, optionally, a CUDA GPU's compute capability."""

    def set_hardware(cpu_flags: dict, cuda: tuple[int, int] | None = None):
        monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: {"cpu_name": "Test CPU", **cpu_flags})
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda is not None)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: cuda)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Test GPU")
        # the default device is the accelerator torch finds (devices.pick_device)
        monkeypatch.setattr(torch.accelerator, "is_available", lambda: cuda is not None)
        monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda *a, **k: torch.device("cuda"))

    return set_hardware


CPUS = {  # torch.cpu.get_capabilities() flags -> what `auto` means (README: AMX or AVX512-BF16)
    "amx": ({"avx512": True, "amx_bf16": True}, "bf16"),
    "avx512-bf16": ({"avx512": True, "avx512_bf16": True}, "bf16"),
    "avx512-without-bf16": ({"avx512": True, "avx2": True, "amx_bf16": False, "avx512_bf16": False}, "no"),
    "avx2-only": ({"avx2": True}, "no"),
}


@pytest.mark.parametrize("flags, expected", CPUS.values(), ids=CPUS.keys())
def test_auto_on_a_cpu_is_bf16_exactly_with_amx_or_avx512_bf16(hardware, flags, expected):
    hardware(flags, cuda=None)
    assert resolve_mixed_precision("auto", "cpu") == expected
    assert resolve_mixed_precision("auto") == expected  # no GPU: the run's device is the CPU
    assert resolve_mixed_precision("no", "cpu") == "no"  # `no` forces fp32, native bf16 or not


GPUS = {(7, 5): "fp16", (8, 0): "bf16", (8, 6): "bf16", (9, 0): "bf16"}  # bf16 from compute capability 8.0


@pytest.mark.parametrize("capability, expected", GPUS.items(), ids=[f"sm{a}{b}" for a, b in GPUS])
def test_auto_on_a_gpu_follows_its_compute_capability_not_the_cpu(hardware, capability, expected):
    hardware({"amx_bf16": True}, cuda=capability)  # the CPU would say bf16; the GPU is where the run computes
    assert resolve_mixed_precision("auto", "cuda") == expected
    assert resolve_mixed_precision("auto") == expected
    hardware({"avx2": True}, cuda=capability)
    assert resolve_mixed_precision("auto") == expected


def test_forced_bf16_without_native_bf16_runs_emulated_with_a_warning(hardware, recwarn):
    """README: `bf16` forces bf16, "with a warning where it is emulated"; none where it is native."""
    hardware({"avx2": True}, cuda=None)
    with pytest.warns(UserWarning, match=r"mixed_precision='bf16' on Test CPU \(no native bf16\).*emulated"):
        assert resolve_mixed_precision("bf16") == "bf16"
    hardware({"avx512_bf16": True}, cuda=None)
    recwarn.clear()
    assert resolve_mixed_precision("bf16") == "bf16"
    assert not [w for w in recwarn if "emulated" in str(w.message)]


def test_a_misspelt_setting_is_refused_naming_the_field():
    with pytest.raises(
        ValueError, match=r"`mixed_precision` must be one of auto \| no \| bf16 \| fp16, got 'fp8'"
    ):
        resolve_mixed_precision("fp8")


# -- a seconds-long bf16 run --------------------------------------------------------------------------------

SHORT_BF16_RUN = {  # the synthetic recipe shrunk to seconds: a 1+1-layer model of width 32, 40 updates
    "mixed_precision": "bf16",  # CPU autocast to bf16 runs on any CPU (emulated where not native)
    "synthetic_train_size": 400,
    "synthetic_eval_size": 2,
    "vocab_size": 400,
    "max_tokens": 600,
    "max_steps": 40,
    "warmup_steps": 10,
    "eval_steps": 1000,
    "save_steps": 1000,
    "eval_bleu_samples": 2,
    "num_beams": 2,
    "logging_steps": 1,
    "report_to": "none",
    "model.d_model": 32,
    "model.d_ff": 64,
    "model.num_encoder_layers": 1,
    "model.num_decoder_layers": 1,
}


def test_a_short_bf16_run_learns_and_its_folder_loads_and_generates_in_fp32(tmp_path):
    output = tmp_path / "run"
    args = load_arguments(
        str(CONFIGS / "synthetic_en_de.yaml"), {**SHORT_BF16_RUN, "output_dir": str(output)}
    )
    results = train(args)  # where bf16 is emulated, with the warning tested above
    assert results["mixed_precision"]["used"] == "bf16"

    rows = [json.loads(line) for line in (output / "train_log.jsonl").read_text().splitlines()]
    losses = [row["train/loss"] for row in rows if "train/loss" in row]
    assert len(losses) == 40 and all(map(torch.isfinite, torch.tensor(losses)))
    first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3  # means of three: one batch is noisy
    assert last < first - 1.0, (first, last)  # measured: 6.14 -> 4.08

    tokenizer = AutoTokenizer.from_pretrained(output / "model")
    sources = ["The big fast street hears the cat .", "A dog sees 12 old houses ."]
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    translations = []
    for _ in range(2):  # two loads: nothing in the folder is left to chance (no missing, re-initialised key)
        model = AutoModelForSeq2SeqLM.from_pretrained(output / "model").eval()
        assert {name: p.dtype for name, p in model.named_parameters() if p.dtype != torch.float32} == {}
        greedy = model.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=10)
        # generate() casts each step's scores to fp32 itself: read the model's own logits.
        with torch.no_grad():
            logits = model(**batch, decoder_input_ids=greedy).logits
        assert logits.dtype == torch.float32 and torch.isfinite(logits).all()
        translations.append(greedy)
    torch.testing.assert_close(translations[0], translations[1], rtol=0, atol=0)
    texts = tokenizer.batch_decode(translations[0], skip_special_tokens=True)
    assert all(text.strip() for text in texts), texts


@pytest.mark.parametrize("installed", [True, False], ids=["tensorboard-installed", "tensorboard-absent"])
def test_the_default_tracker_is_tensorboard_only_where_it_is_installed(monkeypatch, installed):
    """TensorBoard is an optional extra: without it a run logs to its own files and no tracker."""
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: (
            (find_spec(name, *a) if installed else None) if name == "tensorboard" else find_spec(name, *a)
        ),
    )
    expected = [] if not installed else ["tensorboard"]  # the trainer's list of trackers: both tasks
    assert load_arguments(None, {}).report_to == expected
    assert load_classification_arguments(None, {}, "train").report_to == expected


# Once: the recipe's own settings. Its data layout's load_dataset call and the training it runs are
# tests/test_training.py's, at both ends of the ranges.
@pytest.mark.newest_only
def test_the_wmt14_base_recipe_states_the_papers_setup_and_runs_three_updates_on_its_layout(tmp_path):
    """``wmt14_en_de_base.yaml`` is the paper's experiment (base model, shared 37k BPE, ~25k target tokens
    an update, Eq. 3 with warmup 4,000, 100k updates, the last 5 checkpoints averaged, beam 4 alpha 0.6,
    wmt/wmt14 de-en); a 3-update dry run on a local data set of WMT14's layout (a `translation` dict per
    row, read through the load_dataset call the Hub id takes) trains, averages and scores."""
    import pandas as pd

    from vanilla_transformer.data.synthetic import synthetic_pairs

    recipe = str(CONFIGS / "wmt14_en_de_base.yaml")
    args = load_arguments(recipe)
    assert (args.dataset, args.dataset_config, args.source_lang, args.target_lang) == (
        "wmt/wmt14",
        "de-en",
        "en",
        "de",
    )
    assert args.model == {"preset": "base"} and args.vocab_size == 37000
    assert (args.tokens_per_update, args.warmup_steps, args.max_steps) == (25000, 4000, 100000)
    assert (args.average_last, args.num_beams, args.length_penalty) == (5, 4, 0.6)

    folder = tmp_path / "wmt14"
    folder.mkdir()
    for offset, (split, size) in enumerate({"train": 64, "validation": 4, "test": 4}.items()):
        pairs = synthetic_pairs(size, seed=offset)
        pd.DataFrame({"translation": [dict(p) for p in pairs]}).to_parquet(folder / f"{split}.parquet")
    dry_run = {
        "dataset": str(folder),
        "dataset_config": None,
        "max_steps": 3,
        "save_steps": 1,  # three checkpoints, so the final model is their average, as the recipe's is
        "vocab_size": 300,
        "max_tokens": 512,
        "tokens_per_update": None,  # one batch an update (25,000 tokens would be the whole toy set, 67 times)
        "eval_bleu_samples": 2,
        "num_beams": 2,
        "report_to": "none",
        "output_dir": str(tmp_path / "run"),
    }
    results = train(load_arguments(recipe, dry_run))
    assert results["updates"] == 3 and results["parameters"] > 44_000_000  # the base model (small vocabulary)
    assert results["averaged_checkpoints"] == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]
    assert 0 <= results["test"]["sacrebleu"] <= 100


@pytest.mark.parametrize(
    ("recipe_text", "overrides", "message"),
    [
        ("max_tokens: [1, 2\nwarmup_steps: 4\n", {}, r"recipe.yaml, line 2, column \d+: not valid YAML"),
        ("max_tokens: many\n", {}, r"recipe.yaml: `max_tokens` must be an integer, got 'many'"),
        ("", {"max_tokens": "many"}, r"--set: `max_tokens` must be an integer, got 'many'"),
        ("", {"lr_scale": True}, r"--set: `lr_scale` must be a number, got True"),
        ("", {"max_steps": None}, r"--set: `max_steps` must be set \(it cannot be null\)"),
        ("", {"source_lang": 7}, r"--set: `source_lang` must be a string, got 7"),
    ],
    ids=[
        "malformed-yaml",
        "wrong-type-in-file",
        "wrong-type-by-set",
        "flag-for-number",
        "null",
        "int-for-string",
    ],
)
def test_bad_recipe_values_are_refused_naming_the_file_line_or_key(tmp_path, recipe_text, overrides, message):
    """Malformed YAML names the file and line; a value of the wrong type names the key and where it came
    from; both before any work starts (no run folder)."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(recipe_text)
    with pytest.raises(ValueError, match=message):
        load_arguments(str(recipe), {**overrides, "output_dir": str(tmp_path / "run")})
    assert not (tmp_path / "run").exists()


def test_a_wrong_trainer_setting_type_is_refused_by_name():
    with pytest.raises(ValueError, match=r"--set: `learning_rate` must be a number, got 'fast'"):
        load_classification_arguments(None, {"learning_rate": "fast"}, "train")


def test_set_with_malformed_yaml_names_the_key():
    from vanilla_transformer.recipes import parse_overrides

    with pytest.raises(ValueError, match=r"--set max_tokens: '\[1' is not valid YAML"):
        parse_overrides(["max_tokens=[1"])
