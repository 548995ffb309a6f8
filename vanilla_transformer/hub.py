"""Publishing to the Hugging Face Hub: a model folder goes up complete, in one commit.

A folder written by a training run holds everything a user of the Hub needs: the weights
(safetensors), ``config.json`` with its ``auto_map``, the remote code that ``trust_remote_code=True``
imports, the generation config (§6.1 beam search), the tokenizer, the translation pipeline module
(seq2seq models) and the filled model card ``README.md`` with the run's results. :func:`push_folder`
checks that the folder loads as a model of this package (not another architecture's, no missing or
damaged weights, a tokenizer that fits the vocabulary) and that nothing is missing, and uploads it with
one ``HfApi.create_commit``; :func:`push_model` is what ``model.push_to_hub(...)`` runs, so the card that
goes up is this model's, not transformers' generic one.

An export (``export-ct2``: ``model.bin``; ``export-onnx``: the ONNX graphs) is no PyTorch model:
:func:`push_export` checks that it is complete (the engine's files, its tokenizer, its card) and uploads
it in one commit, ``model.bin`` included, with its parity report (``parity.json``, ``PARITY.md``).
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from pathlib import Path

from huggingface_hub import CommitInfo, CommitOperationAdd, HfApi, ModelCard
from huggingface_hub.utils import filter_repo_objects

from .loading import CTRANSLATE2_FILE, WEIGHTS, WEIGHTS_INDEX, load_saved_model
from .model_card import EXPORT_COMMANDS, HUB_PLACEHOLDER, export_task, write_export_card, write_model_card
from .model_tasks import MODEL_TASKS
from .outputs import MARKER
from .parity import ENGINES, REPORT_FILE, describe, read_report

# Training by-products that may sit in a model folder and do not belong on the Hub, and the marker a
# command leaves in the folder it wrote (outputs.MARKER: `average`'s model folder).
IGNORE_PATTERNS = [
    "checkpoint-*/**",
    "eval/**",
    "trainer-*/**",
    "runs/**",
    "*.pt",
    "*.pth",
    "*.bin",
    MARKER,
]
# An export's files all go up (CTranslate2's weights are model.bin), all but the marker of the command.
EXPORT_IGNORE_PATTERNS = [MARKER]
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def missing_files(folder: str | Path) -> list[str]:
    """What a complete model folder lacks: config, weights, card, tokenizer and every remote-code module
    that ``config.json`` names (``auto_map`` and ``custom_pipelines``), with the modules those import
    relatively (``translation_pipeline.py`` -> ``long_inputs.py``), which ``trust_remote_code`` downloads."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        return ["config.json"]
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    missing = []
    if not any((folder / name).is_file() for name in ("model.safetensors", "model.safetensors.index.json")):
        missing.append("model.safetensors")
    if not (folder / "README.md").is_file():
        missing.append("README.md")
    if not any((folder / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        missing.append("tokenizer.json")
    references = list(config.get("auto_map", {}).values())
    references += [entry["impl"] for entry in config.get("custom_pipelines", {}).values()]
    modules = [reference.split("--")[-1].split(".")[0] + ".py" for reference in references]  # "repo--m.C"
    while modules:  # each module the remote code names, and the modules those import (`from .x import`)
        module = modules.pop()
        if module in missing:
            continue
        if not (folder / module).is_file():
            missing.append(module)
            continue
        imported = re.findall(r"^\s*from \.(\w+) import", (folder / module).read_text(encoding="utf-8"), re.M)
        modules += [f"{name}.py" for name in imported if f"{name}.py" not in modules]
    return missing


def push_folder(
    folder: str | Path,
    repo_id: str,
    *,
    private: bool | None = None,
    token: str | bool | None = None,
    revision: str | None = None,
    create_pr: bool = False,
    commit_message: str | None = None,
    with_demo: bool = False,
) -> CommitInfo:
    """Create ``repo_id`` if needed and upload the model folder in one commit; returns the commit.

    Before anything is sent: the folder must load as a model of this package (``loading.load_saved_model``:
    a ``FileNotFoundError`` or ``ValueError`` naming the missing folder, ``config.json`` or weights, another
    architecture's ``model_type``, a damaged weights file, a tensor the weights lack or a tokenizer larger
    than ``vocab_size``), then a ``FileNotFoundError`` names every file a user would miss (card, tokenizer,
    remote code). ``with_demo`` adds the demo page as ``app.py`` with what it imports and
    a ``requirements.txt`` (``space_files``): run there, or in a Space, it serves this model.
    """
    folder = Path(folder)
    load_saved_model(folder)  # checks the folder, then that every tensor loads (a renamed one would not)
    missing = missing_files(folder)
    if missing:
        raise FileNotFoundError(
            f"{folder} is not a complete model folder: it lacks {', '.join(missing)}. Save the model and its "
            "tokenizer with save_pretrained (a training run writes all of it, model card included)."
        )
    ModelCard.load(folder / "README.md")  # a card that does not parse must not reach the Hub
    architecture = json.loads((folder / "config.json").read_text(encoding="utf-8")).get(
        "architectures", ["model"]
    )
    return _commit(
        folder,
        repo_id,
        commit_message=commit_message or f"Upload {architecture[0]}",
        private=private,
        token=token,
        revision=revision,
        create_pr=create_pr,
        extra=space_files() if with_demo else None,
    )


def export_engine(folder: str | Path) -> str | None:
    """``"ctranslate2"`` or ``"onnx"`` where ``folder`` is an export (its engine's file, else the engine its
    parity report names); None for anything else (a model folder, even one with a PyTorch parity report)."""
    from .onnx_export import ENCODER_ONLY_FILE, SEQ2SEQ_FILES

    folder = Path(folder)
    if (folder / CTRANSLATE2_FILE).is_file():
        return "ctranslate2"
    if any((folder / name).is_file() for name in (WEIGHTS, WEIGHTS_INDEX)):
        return None  # a model folder, whatever else it holds
    if any((folder / name).is_file() for name in (*SEQ2SEQ_FILES, ENCODER_ONLY_FILE)):
        return "onnx"
    engine = (read_export_report(folder) or {}).get("engine")
    return engine if engine in EXPORT_COMMANDS else None


def read_export_report(folder: str | Path) -> dict | None:
    """The folder's parity report (``parity.json``), None where it has none; one that does not parse is a
    ``ValueError`` naming the file."""
    try:
        report = read_report(folder)
    except ValueError as error:  # json.JSONDecodeError
        raise ValueError(f"{Path(folder) / REPORT_FILE} is not a parity report: {error}.") from None
    if report is not None and not isinstance(report, dict):
        raise ValueError(f"{Path(folder) / REPORT_FILE} is not a parity report: it holds no JSON object.")
    return report


def missing_export_files(folder: str | Path, engine: str, report: dict | None = None) -> list[str]:
    """What a complete export lacks: the engine's files (CTranslate2: ``model.bin``, its ``config.json``
    and vocabulary; ONNX: the three seq2seq graphs of a translation model or the encoder-only
    ``model.onnx``, and the model's ``config.json``), the tokenizer, the decoding defaults of a translation
    export (``generation_config.json``, read by ``translate``) and the card."""
    from .onnx_export import ENCODER_ONLY_FILE, SEQ2SEQ_FILES

    folder = Path(folder)
    translation = export_task(folder, engine, report) == "translation"
    if engine == "ctranslate2":
        required = [CTRANSLATE2_FILE, "config.json"]
    else:
        required = [*(SEQ2SEQ_FILES if translation else (ENCODER_ONLY_FILE,)), "config.json"]
    missing = [name for name in required if not (folder / name).is_file()]
    vocabularies = ("source_vocabulary.json", "target_vocabulary.json")
    if engine == "ctranslate2" and not (
        (folder / "shared_vocabulary.json").is_file()
        or all((folder / name).is_file() for name in vocabularies)
    ):
        missing.append("shared_vocabulary.json")
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        missing.append("tokenizer.json")
    if translation and not (folder / "generation_config.json").is_file():
        missing.append("generation_config.json")
    if not (folder / "README.md").is_file():
        missing.append("README.md")
    return missing


def ensure_export_card(folder: str | Path, report: dict) -> Path:
    """Keep the export's card if it has one; otherwise write one from its parity report (the model it came
    from, the engine, the precision, the table: ``model_card.write_export_card``)."""
    card = Path(folder) / "README.md"
    if card.is_file():
        return card
    lacking = [key for key in ("model", "engine", "precision") if key not in report]
    if lacking:
        raise ValueError(
            f"{Path(folder) / REPORT_FILE} names no {', '.join(lacking)}: the export's card cannot be "
            "written from it. Export it again."
        )
    return write_export_card(folder, report["model"], report["engine"], report["precision"], report)


def check_export(folder: str | Path) -> tuple[str, dict | None]:
    """The engine and the parity report (None where it has none) of a complete export; refuses anything
    else in one line: a folder that is no export (``ValueError``), or a ``FileNotFoundError`` naming every
    file the export lacks (:func:`missing_export_files`)."""
    folder = Path(folder)
    engine = export_engine(folder)
    if engine is None:
        raise ValueError(
            f"{folder} is not a CTranslate2 or ONNX export (no {CTRANSLATE2_FILE}, no ONNX graph, no "
            f"{REPORT_FILE} naming an engine); `push` takes a model folder as it is."
        )
    report = read_export_report(folder)
    missing = missing_export_files(folder, engine, report)
    if missing:
        raise FileNotFoundError(
            f"{folder} is not a complete {_describe(engine, report)} export: it lacks {', '.join(missing)}. "
            f"Copy the folder whole, or export it again (`{EXPORT_COMMANDS[engine][0]}` writes all of it, "
            "its card included)."
        )
    return engine, report


def _describe(engine: str, report: dict | None) -> str:
    """``CTranslate2 int8`` where the report says the precision, else ``CTranslate2``."""
    return describe(report) if report else ENGINES[engine]


def push_export(
    folder: str | Path,
    repo_id: str,
    *,
    private: bool | None = None,
    token: str | bool | None = None,
    revision: str | None = None,
    create_pr: bool = False,
    commit_message: str | None = None,
) -> CommitInfo:
    """Create ``repo_id`` if needed and upload the CTranslate2 or ONNX export ``folder`` in one commit;
    returns the commit.

    Before anything is sent the export must be complete (:func:`check_export`) and its card must parse.
    Every file goes up, ``model.bin`` and the parity report included, but the marker of the command that
    wrote the folder (``outputs.MARKER``). The card's download command names ``repo_id`` (in the uploaded
    card; the folder's own is left as it is)."""
    folder = Path(folder)
    engine, report = check_export(folder)
    text = (folder / "README.md").read_text(encoding="utf-8")
    text = text.replace(f"hf download {HUB_PLACEHOLDER} ", f"hf download {repo_id} ")
    ModelCard(text)  # a card that does not parse must not reach the Hub
    return _commit(
        folder,
        repo_id,
        commit_message=commit_message or f"Upload {_describe(engine, report)} export",
        private=private,
        token=token,
        revision=revision,
        create_pr=create_pr,
        extra={"README.md": text.encode("utf-8")},
        ignore_patterns=EXPORT_IGNORE_PATTERNS,
    )


# What a Space imports to run the demo page as app.py without the package; their versions are the ones
# the package declares (pyproject.toml, read back from the installed metadata).
SPACE_PACKAGES = ("torch", "transformers", "tokenizers", "safetensors", "matplotlib", "gradio")
# The demo page and the package modules it imports, uploaded beside it (read as files: the library does
# not import its front end).
SPACE_MODULES = {
    "app.py": "demo.py",
    "attention_maps.py": "attention_maps.py",
    "long_inputs.py": "long_inputs.py",
    "model_tasks.py": "model_tasks.py",
}


def space_requirements() -> list[str]:
    """``requirements.txt`` lines for a Space: each of ``SPACE_PACKAGES`` with the range this package
    declares for it (gradio's from the ``demo`` extra), so the Space and the package never disagree."""
    from importlib.metadata import requires

    from packaging.requirements import Requirement

    declared = {}
    for line in requires("vanilla-transformer") or []:
        requirement = Requirement(line)
        requirement.marker = None  # `extra == "demo"` means nothing in a requirements.txt
        declared.setdefault(requirement.name, str(requirement))
    missing = [name for name in SPACE_PACKAGES if name not in declared]
    if missing:
        raise RuntimeError(f"The installed vanilla-transformer declares no range for {', '.join(missing)}")
    return [declared[name] for name in SPACE_PACKAGES]


def space_files() -> dict[str, bytes]:
    """The files that make a model repository (or a Space) serve the demo page: ``app.py`` (the page),
    the modules it imports and ``requirements.txt``."""
    package = Path(__file__).resolve().parent
    files = {name: (package / module).read_bytes() for name, module in SPACE_MODULES.items()}
    return files | {"requirements.txt": ("\n".join(space_requirements()) + "\n").encode()}


def _commit(
    folder: str | Path,
    repo_id: str,
    *,
    private,
    token,
    extra=None,
    ignore_patterns: list[str] = IGNORE_PATTERNS,
    **commit,
) -> CommitInfo:
    """Create the repository if needed, then send the folder (but what ``ignore_patterns`` match, and with
    ``extra``'s {name: bytes} in place of the folder's files of those names) as one ``HfApi.create_commit``
    (as transformers' own ``push_to_hub`` does; ``upload_folder`` may split a folder into several commits)."""
    folder = Path(folder)
    files = sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file())
    operations = [
        CommitOperationAdd(path_or_fileobj=folder / name, path_in_repo=name)
        for name in filter_repo_objects(files, ignore_patterns=ignore_patterns)
        if name not in (extra or {})  # a folder's own app.py gives way to the one sent with it
    ]
    operations += [
        CommitOperationAdd(path_or_fileobj=data, path_in_repo=name) for name, data in (extra or {}).items()
    ]
    api = HfApi(library_name="vanilla-transformer")
    repo_id = api.create_repo(repo_id, private=private, token=token, exist_ok=True).repo_id
    return api.create_commit(repo_id, operations=operations, token=token, **commit)


def ensure_model_card(folder: str | Path, model=None) -> Path:
    """Keep the folder's card if it has one; otherwise write one for the model (architecture, deviations,
    use), with no results, since none were measured where the model came from. ``model`` defaults to
    the folder's own (the class its ``config.json`` names)."""
    card = Path(folder) / "README.md"
    if card.is_file():
        return card
    if model is None:
        model = load_saved_model(folder)
    task = MODEL_TASKS.get(type(model).__name__, MODEL_TASKS["VanillaTransformerModel"]).pipeline_tag
    return write_model_card(
        folder,
        model,
        task=task,
        summary="A Transformer (Vaswani et al., 2017) of the vanilla-transformer package. This card was "
        "written at upload time: no evaluation results were recorded with these weights.",
        results=[],
        datasets=[],
        training={"weights": str(getattr(model, "name_or_path", "") or "in-memory model")},
    )


def push_model(
    model,
    repo_id: str,
    *,
    tokenizer=None,
    commit_message: str | None = None,
    commit_description: str | None = None,
    private: bool | None = None,
    token: str | bool | None = None,
    revision: str | None = None,
    create_pr: bool = False,
    max_shard_size: int | str | None = "50GB",
    tags: list[str] | None = None,
) -> CommitInfo:
    """``model.push_to_hub``: save the model (and tokenizer) and upload them with the model's card.

    The card is the one next to the weights the model was loaded from (a training run's filled card,
    with its results), else one written now. ``tags`` are added to the card's metadata.
    """
    with tempfile.TemporaryDirectory() as staging:
        model.save_pretrained(staging, max_shard_size=max_shard_size)
        if tokenizer is not None:
            tokenizer.save_pretrained(staging)
        source = str(getattr(model, "name_or_path", "") or "")
        if source and (Path(source) / "README.md").is_file():  # loaded from a folder that has its card
            shutil.copyfile(Path(source) / "README.md", Path(staging) / "README.md")
        ensure_model_card(staging, model)
        if tags:
            card = ModelCard.load(Path(staging) / "README.md")
            card.data.tags = list(dict.fromkeys((card.data.tags or []) + list(tags)))
            card.save(Path(staging) / "README.md")
        missing = [name for name in missing_files(staging) if name != "tokenizer.json"]
        if missing:
            raise FileNotFoundError(f"save_pretrained did not write {', '.join(missing)}.")
        return _commit(
            staging,
            repo_id,
            commit_message=commit_message or f"Upload {type(model).__name__}",
            commit_description=commit_description,
            private=private,
            token=token,
            revision=revision,
            create_pr=create_pr,
        )


__all__ = [
    "push_folder",
    "push_export",
    "push_model",
    "missing_files",
    "missing_export_files",
    "export_engine",
    "check_export",
    "read_export_report",
    "ensure_model_card",
    "ensure_export_card",
    "space_files",
]
