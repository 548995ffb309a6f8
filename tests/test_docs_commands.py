"""Every command the README and docs/ show runs as written, as far as it can without data or hours: each
`vanilla-transformer` line parses with the CLI's own parser, its recipe exists and its `--set` settings
are ones that recipe's run accepts (read with the run's own loader, no data touched); each script and
each relative link (of the model card too) points to a file that exists, and each #anchor to a heading
of it. (The quick start's Python runs in tests/test_readme.py.)"""

import re
import shlex
from pathlib import Path

import pytest

from vanilla_transformer.cli import build_parser
from vanilla_transformer.data.classification import ClassificationData
from vanilla_transformer.data.translation import TranslationData
from vanilla_transformer.recipes import find_recipe, parse_overrides
from vanilla_transformer.train import run as run_module
from vanilla_transformer.train.run import train_recipe

# The task `classify <stage>` names for `train_recipe` (its aliases of `train`).
CLASSIFY_TASKS = {"train": "classification", "pretrain": "pretraining"}

# Parses the pages' text with the CLI's parser: the same on every release of the dependencies.
pytestmark = pytest.mark.newest_only

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def shell_lines(page: Path) -> list[str]:
    """The command lines of a page's ```bash blocks, continuations joined, comments dropped."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.split(" #")[0].strip() if not line.lstrip().startswith("#") else ""
            loop = re.fullmatch(r"for (\w+) in ([^;]+); do (.+); done", line)
            if loop:  # one command per value of the loop variable
                name, values, body = loop.groups()
                lines += [body.replace(f"${name}", value) for value in values.split()]
            elif line:
                lines.append(line)
    return lines


def cli_commands() -> list[tuple[str, list[str]]]:
    found = []
    for page in PAGES:
        for line in shell_lines(page):
            for part in line.split("|"):
                words = shlex.split(part)
                if "vanilla-transformer" in words:
                    found.append(
                        (f"{page.name}: {part.strip()}", words[words.index("vanilla-transformer") + 1 :])
                    )
                elif "vanilla_transformer.cli" in words:  # accelerate launch ... -m vanilla_transformer.cli
                    found.append(
                        (f"{page.name}: {part.strip()}", words[words.index("vanilla_transformer.cli") + 1 :])
                    )
    return found


COMMANDS = cli_commands()


def test_the_pages_show_commands():
    assert len(COMMANDS) >= 15 and {argv[0] for _, argv in COMMANDS} >= {"train", "evaluate", "classify"}


@pytest.mark.parametrize(("where", "argv"), COMMANDS, ids=[where for where, _ in COMMANDS])
def test_each_command_parses_and_its_settings_are_known(where, argv, monkeypatch):
    monkeypatch.chdir(ROOT)
    try:
        options = build_parser().parse_args(argv)
    except SystemExit as error:
        pytest.fail(f"{where}: the CLI refuses it (exit {error.code})")
    recipe = getattr(options, "recipe", None)
    if recipe and options.command != "ablate":
        recipe = find_recipe(recipe)  # a file, or a shipped recipe's name, as the CLI finds it
    overrides = parse_overrides(getattr(options, "set", None) or [])
    if options.command == "train" or (options.command == "classify" and options.stage in CLASSIFY_TASKS):
        # What the command does up to the run: the task it picks (the recipe's `task:`, the alias's) and that
        # task's arguments; the run itself is left out.
        monkeypatch.setattr(run_module, "run", lambda task, args: {"task": task.name})
        train_recipe(recipe, overrides, CLASSIFY_TASKS.get(getattr(options, "stage", None)))
    elif options.command == "evaluate":  # the recipe's data settings, as `evaluate` reads them
        TranslationData.from_recipe(recipe, overrides)
    elif options.command == "classify":
        ClassificationData.from_recipe(recipe, overrides)


def test_scripts_the_pages_run_exist():
    for page in PAGES:
        for line in shell_lines(page):
            words = shlex.split(line)
            if words[0] in ("python", "python3") and len(words) > 1 and words[1].endswith(".py"):
                assert (ROOT / words[1]).is_file(), f"{page.name}: {line}"
            if words[:2] in (["python", "-m"], ["python3", "-m"]) and words[2] in ("benchmarks", "pytest"):
                continue


# The pages whose links are checked: the docs, and the model card (the template every saved model carries).
LINKED_PAGES = [*PAGES, ROOT / "model_card.md"]


def heading_anchors(page: Path) -> set[str]:
    """The #anchors a page's headings get on GitHub (and explicit `<a id=...>` / `<a name=...>` anchors):
    the heading's text, links reduced to their text, lower-cased, every character but letters, digits,
    `_`, `-` and spaces dropped, spaces turned into `-`; a repeated heading gets `-1`, `-2`, ..."""
    # Headings, not the comments of code blocks.
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    anchors, seen = set(re.findall(r"<a (?:id|name)=\"([^\"]+)\"", text)), {}
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M):
        heading = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


def relative_links(page: Path) -> list[tuple[str, str]]:
    """(path, anchor) of every relative link and image of a page; path "" for a link into the page itself."""
    links = []
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
        if not target.startswith(("http://", "https://", "mailto:")):
            path, _, anchor = target.partition("#")
            links.append((path, anchor))
    return links


def test_heading_anchors_are_githubs(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "# Results: every measurement\n\n## Precision: fp32 against bf16\n\n### The task's own text (H100)\n\n"
        "## De→En, `multi30k_de_en.yaml`\n\n## Notes\n\n## Notes\n\n## See [results](results.md)\n\n"
        '```bash\n# a comment, not a heading\n```\n<a id="old-name"></a>\n',
        encoding="utf-8",
    )
    assert heading_anchors(page) == {
        "results-every-measurement",
        "precision-fp32-against-bf16",
        "the-tasks-own-text-h100",
        "deen-multi30k_de_enyaml",
        "notes",
        "notes-1",
        "see-results",
        "old-name",
    }


@pytest.mark.parametrize("page", LINKED_PAGES, ids=lambda page: page.name)
def test_relative_links_point_to_files_and_headings(page):
    for path, anchor in relative_links(page):
        target = (page.parent / path) if path else page
        assert target.exists(), f"{page.name} links to {path}, which does not exist"
        if anchor and target.suffix == ".md":
            assert anchor in heading_anchors(target), (
                f"{page.name} links to {path or page.name}#{anchor}, a heading {target.name} does not have"
            )
