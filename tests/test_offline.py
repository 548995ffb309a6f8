"""Offline (no package index), the suite still runs: the module of transformers' common tests, whose
sources come from PyPI, is skipped with its reason in pytest's summary; under ``CI=true`` it fails."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

# How the suite behaves without a package index: the same on every release of the dependencies.
pytestmark = pytest.mark.newest_only

ROOT = Path(__file__).resolve().parents[1]


def _pytest_without_network(tmp_path: Path, ci: bool) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "VT_TRANSFORMERS_TESTS_DIR": str(tmp_path / "nothing-cached"),
        "PIP_CONFIG_FILE": os.devnull,  # no configured mirrors or wheel folders
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",  # an index nobody answers: as offline as it gets
        "PIP_FIND_LINKS": "",
        "PIP_EXTRA_INDEX_URL": "",
        "CI": "true" if ci else "",
    }
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            "tests/test_transformers_conformance.py",
            "tests/test_positional_encoding.py",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_offline_the_projects_tests_run_and_the_upstream_module_skips_with_its_reason(tmp_path):
    result = _pytest_without_network(tmp_path, ci=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    skipped = [line for line in result.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) == 1, result.stdout[-3000:]
    assert "tests/test_transformers_conformance.py" in skipped[0]
    assert "could not download transformers" in skipped[0] and "(offline?)" in skipped[0]
    assert " passed" in result.stdout.splitlines()[-1] and "error" not in result.stdout.splitlines()[-1]


def test_in_ci_missing_upstream_tests_fail_the_run(tmp_path):
    result = _pytest_without_network(tmp_path, ci=True)
    assert result.returncode != 0
    assert "CI=true and transformers' common tests are missing" in result.stdout
