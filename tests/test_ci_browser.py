"""The browser tests find Chromium and its driver on PATH, as .ci/run does before installing them, and
under CI=true a missing browser fails the run instead of skipping the tests."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

# How the suite finds a browser under CI: the same on every release of the dependencies.
pytestmark = pytest.mark.newest_only

BROWSER_TEST = "tests/test_demo.py::test_a_folder_that_is_no_model_of_ours_gets_a_page_that_says_so"
ROOT = Path(__file__).resolve().parents[1]


def _run_browser_test(tmp_path, ci: str | None) -> subprocess.CompletedProcess:
    """The browser test in a fresh pytest, with a PATH that holds Python and nothing else."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    env = {key: value for key, value in os.environ.items() if key != "CI"}
    env["PATH"] = str(bin_dir)
    if ci is not None:
        env["CI"] = ci
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", BROWSER_TEST]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("ci", ["true"])
def test_a_missing_browser_fails_under_ci(tmp_path, ci):
    done = _run_browser_test(tmp_path, ci)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "No headless browser: chromium and chromedriver not on PATH" in done.stdout
    assert "1 error" in done.stdout and "skipped" not in done.stdout


def test_a_missing_browser_skips_outside_ci_and_says_how_to_install_it(tmp_path):
    done = _run_browser_test(tmp_path, None)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 skipped" in done.stdout
    assert "chromium and chromedriver not on PATH (apt-get install chromium chromium-driver" in done.stdout
