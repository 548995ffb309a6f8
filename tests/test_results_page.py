"""docs/results.md is the one home of every measured number: the README's results table shows numbers that
are all there, its scores appear once among results.md's test columns and on no other page, every score of
a test column stays on results.md (other pages link to it), and each row of such a table names its
machine, versions and date. (Links and #anchors of every page: tests/test_docs_commands.py.)

"A number" is a token of digits, with thousands commas and a decimal part allowed ("8,989", "41.75"), that
is not part of a longer word ("multi30k", "bf16", "1.2x" are not numbers); inline code and link targets
are not read. "A score" is a number with two digits on each side of the point ("41.75", "88.26"): BLEU and
accuracy as the pages report them.
"""

import re
from pathlib import Path

import pytest

# The pages' text, checked once; no versioned library is called.
pytestmark = pytest.mark.newest_only

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RESULTS = ROOT / "docs" / "results.md"
CARD = ROOT / "model_card.md"
SCORE = re.compile(r"\d{2}\.\d{2}")
NUMBER = re.compile(r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
# A README results table has at least this many scores: fewer means the table lost its scores.
MIN_HEADLINE_SCORES = 5


def other_pages() -> list[Path]:
    """Every page that must link to results.md instead of repeating its scores (the README apart)."""
    return [page for page in sorted((ROOT / "docs").glob("*.md")) if page != RESULTS] + [CARD]


def prose(text: str) -> str:
    """Text as read for numbers: inline code and fenced blocks dropped, links reduced to their text."""
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", " ", text)
    return re.sub(r"(!?\[[^\]]*\])\([^)]*\)", r"\1", text)


def numbers(text: str) -> list[str]:
    """The numbers of ``text``, in order, as written."""
    found = []
    for token in re.findall(r"[\w.,]+", prose(text)):
        token = token.rstrip(".,")
        if NUMBER.fullmatch(token):
            found.append(token)
    return found


def scores(text: str) -> list[str]:
    return [number for number in numbers(text) if SCORE.fullmatch(number)]


def tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every Markdown table of ``text`` outside code blocks: (header cells, body rows of cells)."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    found = []
    for block in re.findall(r"(?:^\|.*\|[ \t]*\n?)+", text, re.M):
        rows = [
            [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            for line in block.strip().splitlines()
        ]
        if len(rows) >= 2 and all(re.fullmatch(r":?-+:?", cell) for cell in rows[1]):
            found.append((rows[0], rows[2:]))
    return found


def result_columns(header: list[str]) -> list[int]:
    """The columns of a table that hold test-split results (their header names the test)."""
    return [i for i, name in enumerate(header) if re.search(r"\btest\b", name, re.I)]


def results_test_cells() -> list[str]:
    """Every cell of a test column of results.md."""
    return [
        row[i]
        for header, rows in tables(RESULTS.read_text(encoding="utf-8"))
        for row in rows
        for i in result_columns(header)
        if i < len(row)
    ]


def readme_results_section() -> str:
    readme = README.read_text(encoding="utf-8")
    found = re.search(r"^## Results[^\n]*\n(.*?)(?=^## |\Z)", readme, re.M | re.S)
    assert found, "README.md has no `## Results` section"
    return found.group(1)


def readme_results_table() -> tuple[list[str], list[list[str]]]:
    found = tables(readme_results_section())
    assert found, "the README's `## Results` section has no table"
    return found[0]


def headline_scores() -> list[str]:
    """The scores of the README results table's score columns (header: score, test, BLEU or accuracy)."""
    header, rows = readme_results_table()
    columns = [i for i, name in enumerate(header) if re.search(r"score|test|bleu|accuracy", name, re.I)]
    assert columns, f"no score column in the README's results table: {header}"
    return [score for row in rows for i in columns if i < len(row) for score in scores(row[i])]


def test_the_readme_results_section_links_to_the_results_page():
    section = readme_results_section()
    assert re.search(r"\]\(docs/results\.md(?:#[^)]*)?\)", section), (
        "README's Results must link to docs/results.md"
    )


def test_every_number_of_the_readme_results_table_is_on_the_results_page():
    header, rows = readme_results_table()
    on_results = {number.replace(",", "") for number in numbers(RESULTS.read_text(encoding="utf-8"))}
    missing = [
        f"{number} (row: {' | '.join(row)})"
        for row in rows
        for cell in row
        for number in numbers(cell)
        if number.replace(",", "") not in on_results
    ]
    assert not missing, "numbers in README's results table that docs/results.md does not have:\n" + "\n".join(
        missing
    )


def test_headline_scores_appear_once_in_results_and_on_no_other_page():
    headline = headline_scores()
    assert len(headline) >= MIN_HEADLINE_SCORES, f"the README's results table shows only {headline}"
    test_cells = [score for cell in results_test_cells() for score in scores(cell)]
    readme_outside_table = readme_results_section_without_its_table() + readme_outside_results_section()
    for score in headline:
        assert test_cells.count(score) == 1, (
            f"{score}: in {test_cells.count(score)} test-column cells of docs/results.md, expected exactly 1"
        )
        for page in other_pages():
            assert score not in scores(page.read_text(encoding="utf-8")), (
                f"{score} is on {page.name}: link to docs/results.md instead"
            )
        assert score not in scores(readme_outside_table), (
            f"{score} appears in README.md outside its results table: link to docs/results.md instead"
        )


def readme_outside_results_section() -> str:
    readme = README.read_text(encoding="utf-8")
    return readme.replace(readme_results_section(), "")


def readme_results_section_without_its_table() -> str:
    section = readme_results_section()
    table = re.search(r"(?:^\|.*\|[ \t]*\n?)+", section, re.M)
    return section.replace(table.group(0), "") if table else section


def test_scores_of_the_results_page_live_only_there():
    """A test score reported on results.md is not restated on another page (the README's table apart)."""
    reported = {score for cell in results_test_cells() for score in scores(cell)}
    assert len(reported) >= 20, f"results.md's test columns hold only {sorted(reported)}"
    pages = {page.name: set(scores(page.read_text(encoding="utf-8"))) for page in other_pages()}
    pages["README.md (outside its results table)"] = set(
        scores(readme_outside_results_section() + readme_results_section_without_its_table())
    )
    restated = {name: sorted(found & reported) for name, found in pages.items() if found & reported}
    assert not restated, f"test scores of docs/results.md restated elsewhere (link instead): {restated}"


def test_each_result_row_names_its_machine_versions_and_date():
    checked = 0
    for header, rows in tables(RESULTS.read_text(encoding="utf-8")):
        if not result_columns(header):
            continue
        names = [name.lower() for name in header]
        for column in ("machine", "versions", "date"):
            assert column in names, f"a results table with test scores has no `{column}` column: {header}"
            index = names.index(column)
            for row in rows:
                assert index < len(row) and row[index], f"a row without its {column}: {row}"
        checked += len(rows)
    assert checked >= 30, f"only {checked} rows of test results on docs/results.md"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("sacreBLEU **41.75** (8,989 updates, 56.0 min).", ["41.75", "8,989", "56.0"]),
        ("`multi30k_de_en.yaml` bf16 1.2x [row](docs/results.md#m-2) 7,577,600", ["7,577,600"]),
        ("| 88.26 % / 88.32 % |", ["88.26", "88.32"]),
    ],
)
def test_numbers_are_read_as_the_module_says(text, expected):
    assert numbers(text) == expected
