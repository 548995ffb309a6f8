"""The package's layout: nothing outside ``train/`` imports the training code but the commands that train
(``cli.py``'s ``cmd_train``, ``cmd_ablate`` and ``cmd_classify``'s pretrain / train aliases), so serving a
model (``evaluate``, ``classify evaluate``, ``average --last`` ...) reads a recipe's data settings, its data
and a run's checkpoints without it; and what those commands read of a recipe."""

import ast
import dataclasses
from pathlib import Path

import pytest

from vanilla_transformer.cli import main
from vanilla_transformer.data.classification import ClassificationData
from vanilla_transformer.data.translation import TranslationData
from vanilla_transformer.recipes import find_recipe

PACKAGE = Path(__file__).resolve().parents[1] / "vanilla_transformer"
TRAINING = "vanilla_transformer.train"
# The functions of cli.py that train (cmd_classify: its pretrain / train aliases call cmd_train).
TRAINING_COMMANDS = {"cmd_train", "cmd_ablate", "cmd_classify"}


def imported_modules(node: ast.AST, package: list[str]) -> list[str]:
    """The modules an import statement imports, absolute (a relative one resolved against ``package``,
    the module's package); ``from PACKAGE import name`` counts as ``PACKAGE.name``."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        parent = package[: len(package) - (node.level - 1)]
        base = ".".join([*parent, node.module] if node.module else parent)
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def training_imports(path: Path) -> list[tuple[str, int]]:
    """``(the top-level function it is in, or "<module>"; line)`` of every import of ``train/`` in a module."""
    package = ["vanilla_transformer", *path.relative_to(PACKAGE).parent.parts]
    found = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            modules = imported_modules(child, package)
            if any(module == TRAINING or module.startswith(f"{TRAINING}.") for module in modules):
                found.append((function, child.lineno))
            inside = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) and function == "<module>"
            visit(child, child.name if inside else function)

    visit(ast.parse(path.read_text(encoding="utf-8")), "<module>")
    return found


def test_the_scan_finds_relative_and_absolute_imports_of_train():
    module = PACKAGE / "cli.py"
    package = ["vanilla_transformer"]
    for line in (
        "from .train.run import train_recipe",
        "from . import train",
        "import vanilla_transformer.train",
    ):
        (node,) = ast.parse(line).body
        assert any(name.startswith(TRAINING) for name in imported_modules(node, package)), line
    (node,) = ast.parse("from ..train import run").body  # from vanilla_transformer/data/
    assert f"{TRAINING}.run" in imported_modules(node, ["vanilla_transformer", "data"])
    assert {function for function, _ in training_imports(module)} >= {"cmd_train"}


def test_nothing_outside_train_imports_it_but_the_training_commands():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] == "train":
            continue
        for function, line in training_imports(path):
            if relative == Path("cli.py") and function in TRAINING_COMMANDS:
                continue
            wrong.append(f"{relative}:{line} ({function})")
    assert not wrong, f"imports of vanilla_transformer.train outside the training commands: {wrong}"


# -- what a serving command reads of a recipe ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "misspelt", "meant"),
    [
        (["evaluate", "--model", "no-such-model"], "tset_file", "test_file"),
        (["classify", "evaluate", "--model", "no-such-model"], "label_colum", "label_column"),
    ],
)
def test_a_misspelt_set_key_is_refused_naming_the_closest_data_setting(command, misspelt, meant):
    """Refused in one line before anything else (the model folder does not exist), not silently unused."""
    with pytest.raises(SystemExit) as refused:
        main([*command, f"--set={misspelt}=x.jsonl"])
    message = str(refused.value.code)
    assert message.startswith(f"error: --set {misspelt}: not a data setting of a ")
    assert f"did you mean {meant}" in message and "\n" not in message


def test_a_recipe_is_read_for_its_data_settings_alone():
    """The file's other keys (training's, the model block) are the training command's to check; a training
    setting given with --set changes nothing here and is refused, listing the data settings."""
    data = TranslationData.from_recipe(find_recipe("multi30k_de_en"), {"seed": 3})
    assert (data.dataset, data.source_lang, data.target_lang, data.seed) == ("json", "de", "en", 3)
    with pytest.raises(
        ValueError, match=r"^--set max_steps: not a data setting .*; they are: data_dir, dataset"
    ):
        TranslationData.from_recipe(None, {"max_steps": 5})
    with pytest.raises(
        ValueError, match=r"^--set: `per_device_eval_batch_size` must be at least 1, got 0\.$"
    ):
        TranslationData.from_recipe(None, {"per_device_eval_batch_size": 0})
    with pytest.raises(ValueError, match=r"^--set: `validation_size` must be a number, got 'x'\.$"):
        ClassificationData.from_recipe(None, {"validation_size": "x"})


def test_the_data_settings_have_the_training_arguments_defaults():
    """A run's arguments inherit the data settings, so `evaluate` and `train` read a recipe alike."""
    from vanilla_transformer.train.classification.arguments import ClassificationArguments
    from vanilla_transformer.train.translation.arguments import TranslationTrainingArguments

    for data, arguments in (
        (TranslationData, TranslationTrainingArguments),
        (ClassificationData, ClassificationArguments),
    ):
        defaults = {field.name: field for field in dataclasses.fields(arguments)}
        for field in dataclasses.fields(data):
            assert defaults[field.name].default == field.default, (arguments.__name__, field.name)
            assert defaults[field.name].metadata == field.metadata, (arguments.__name__, field.name)
    assert (TranslationData().seed, ClassificationData().seed) == (
        0,
        42,
    )  # the Trainer's 42 for classification
