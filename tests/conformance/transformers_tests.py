"""Fetch transformers' own common model tests for the installed version, to run them on our models.

``ModelTesterMixin`` lives in ``tests/test_modeling_common.py`` and ``ConfigTester`` in
``tests/test_configuration_common.py`` of the transformers source distribution on PyPI, not in the
wheel. We download that sdist once (``pip download``, cached under
``<repo>/.cache/transformers-src/<version>/``, or ``$VT_TRANSFORMERS_TESTS_DIR``), extract the two files
into a package named ``hf_tests`` (so it cannot clash with our own ``tests/``), and add stand-ins for the
modules the archive does not ship: the export and generation mixins (``exporters.test_export``,
``generation.test_utils``), which ``ModelTesterMixin`` only inherits from or re-exports, and
``utils.test_configuration_utils.config_common_kwargs`` (non-default values of ``PretrainedConfig``'s
common fields, written here).
Extraction goes to a temporary folder renamed into place, so an interrupted run leaves no half cache.
Nothing of transformers' code is committed to this repository.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import transformers

DOWNLOAD_TIMEOUT_S = 300
SOURCES = ("test_modeling_common.py", "test_configuration_common.py")
# Non-default values for PretrainedConfig's common fields, for ConfigTester.check_config_arguments_init.
COMMON_KWARGS = {
    "return_dict": False,
    "output_hidden_states": True,
    "output_attentions": True,
    "dtype": "float16",
    "tie_word_embeddings": False,
    "chunk_size_feed_forward": 5,
    "architectures": ["BertModel"],
    "id2label": {0: "label"},
    "label2id": {"label": "0"},
    "problem_type": "regression",
    "bos_token_id": 6,
    "pad_token_id": 7,
    "eos_token_id": 8,
    "sep_token_id": 9,
    "decoder_start_token_id": 10,
    "task_specific_params": {"translation": "some_params"},
}
STANDINS = {
    "exporters/test_export.py": "class ExportTesterMixin:\n    pass\n",
    "generation/test_utils.py": "class GenerationTesterMixin:\n    pass\n",
    "utils/test_configuration_utils.py": f"config_common_kwargs = {COMMON_KWARGS!r}\n",
}


class UpstreamTestsUnavailable(RuntimeError):
    """transformers' source distribution could not be had (offline, PyPI unreachable or too slow)."""


def ensure_transformers_tests() -> Path:
    """Return a folder holding the ``hf_tests`` package (put it on ``sys.path``); raise
    ``UpstreamTestsUnavailable``, saying why, when the sdist could not be had.

    ``.ci/run`` calls this before the tests (``python tests/conformance/transformers_tests.py``), so the
    download happens once, outside test collection, and a failure there stops CI."""
    version = transformers.__version__
    root = Path(
        os.environ.get("VT_TRANSFORMERS_TESTS_DIR")
        or Path(__file__).resolve().parents[2] / ".cache" / "transformers-src" / version
    )
    if all((root / "hf_tests" / name).is_file() for name in (*SOURCES, *STANDINS)):
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root.parent) as scratch:
        try:
            download = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--quiet",
                    "--no-deps",
                    "--retries",
                    "1",
                    "--timeout",
                    "30",
                    "--no-binary",
                    ":all:",
                    f"transformers=={version}",
                    "-d",
                    scratch,
                ],
                capture_output=True,
                text=True,
                timeout=DOWNLOAD_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired as error:
            raise UpstreamTestsUnavailable(
                f"PyPI did not deliver transformers {version}'s sdist within {DOWNLOAD_TIMEOUT_S} s"
            ) from error
        archives = list(Path(scratch).glob("transformers-*.tar.gz"))
        if download.returncode != 0 or not archives:
            said = [line for line in download.stderr.splitlines() if line.strip()]
            raise UpstreamTestsUnavailable(
                f"could not download transformers {version}'s sdist from PyPI (offline?): "
                + (said[-1].strip() if said else f"pip exited with {download.returncode}")
            )
        staging = Path(scratch) / "staging"
        package = staging / "hf_tests"
        for subpackage in ("", "exporters", "generation", "utils"):
            (package / subpackage).mkdir(parents=True, exist_ok=True)
            (package / subpackage / "__init__.py").write_text("")
        with tarfile.open(archives[0]) as archive:
            for name in SOURCES:
                member = archive.getmember(f"transformers-{version}/tests/{name}")
                (package / name).write_bytes(archive.extractfile(member).read())
        for name, text in STANDINS.items():
            (package / name).write_text(text)
        if root.exists():
            shutil.rmtree(root)
        os.replace(staging, root)
    return root


if __name__ == "__main__":  # .ci/run warms the cache with this
    try:
        folder = ensure_transformers_tests()
    except UpstreamTestsUnavailable as error:
        raise SystemExit(f"transformers' common tests: {error}") from error
    print(f"transformers' common tests cached in {folder}")
