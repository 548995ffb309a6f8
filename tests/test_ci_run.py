""".ci/run's exit handler, run as .ci/run runs it (`set -euo pipefail`, an EXIT trap): a green run exits 0
whether or not its background install has finished, a red one keeps its exit status, and both remove the
scratch folder and stop a background job still running. A handler whose `kill` of a finished job failed
under `set -e` once turned a passing CI red ("CI passed in 861 s", exit 1)."""

import re
import subprocess
from pathlib import Path

import pytest

# CI's own machinery: the same on every release of the dependencies.
pytestmark = pytest.mark.newest_only

CI_RUN = Path(__file__).resolve().parents[1] / ".ci" / "run"


def _cleanup_function() -> str:
    """The `cleanup() { ... }` definition and its `trap` line, as .ci/run has them."""
    text = CI_RUN.read_text()
    match = re.search(r"^cleanup\(\) \{.*?^\}\ntrap cleanup EXIT\n", text, flags=re.M | re.S)
    assert match, ".ci/run no longer defines cleanup() followed by `trap cleanup EXIT`"
    return match.group(0)


def _run(
    tmp_path, background: str, exit_code: int, wait: bool, job: str = "oldest_install"
) -> tuple[subprocess.CompletedProcess, Path, Path]:
    """``background`` runs as .ci/run's background install held in ``job`` (stage 2's packages or the
    browser), then the script exits with ``exit_code``."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    marker = tmp_path / "background-finished"
    script = "\n".join(
        [
            "set -euo pipefail",
            f"scratch={scratch}",
            'oldest_install=""',
            'browser_install=""',
            _cleanup_function(),
            f"( {background} && touch {marker} ) &",
            f"{job}=$!",
            f"wait ${job}" if wait else "true",  # .ci/run waits for each before the tests that need it
            f"exit {exit_code}",
        ]
    )
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    return done, scratch, marker


@pytest.mark.parametrize("exit_code", [0, 3])
def test_the_exit_status_survives_a_background_job_that_already_finished(tmp_path, exit_code):
    done, scratch, marker = _run(tmp_path, "true", exit_code, wait=True)
    assert done.returncode == exit_code, done.stderr
    assert marker.exists() and not scratch.exists()


@pytest.mark.parametrize("job", ["oldest_install", "browser_install"])
def test_a_background_job_still_running_is_stopped_and_scratch_removed(tmp_path, job):
    done, scratch, marker = _run(tmp_path, "sleep 1", 0, wait=False, job=job)
    assert done.returncode == 0, done.stderr
    assert not scratch.exists()
    subprocess.run(["sleep", "1.5"], check=True)
    assert not marker.exists(), "the background job ran on after CI exited"
