"""Fetch transformers' own common model tests for the installed version, to run them on our models.

``ModelTesterMixin`` lives in ``tests/test_modeling_common.py`` of the transformers source distribution
on PyPI, not in the wheel. We download that sdist once (``pip download``, cached under
``<repo>/.cache/transformers-src/<version>/``, or ``$VT_TRANSFORMERS_TESTS_DIR``), extract the one file
into a package named ``hf_tests`` (so it cannot clash with our own ``tests/``), and add empty stand-ins
for the two modules the archive does not ship (``exporters.test_export`` and ``generation.test_utils``:
the export and generation mixins, which ``ModelTesterMixin`` only inherits from or re-exports).
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

STANDINS = {
    "exporters/test_export.py": "class ExportTesterMixin:\n    pass\n",
    "generation/test_utils.py": "class GenerationTesterMixin:\n    pass\n",
}


def ensure_transformers_tests() -> Path | None:
    """Return a folder holding the ``hf_tests`` package (put it on ``sys.path``), or None when offline."""
    version = transformers.__version__
    root = Path(
        os.environ.get("VT_TRANSFORMERS_TESTS_DIR")
        or Path(__file__).resolve().parents[2] / ".cache" / "transformers-src" / version
    )
    if (root / "hf_tests" / "test_modeling_common.py").is_file():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root.parent) as scratch:
        download = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"transformers=={version}",
                "-d",
                scratch,
            ],
            capture_output=True,
            text=True,
        )
        archives = list(Path(scratch).glob("transformers-*.tar.gz"))
        if download.returncode != 0 or not archives:
            return None
        staging = Path(scratch) / "staging"
        package = staging / "hf_tests"
        (package / "exporters").mkdir(parents=True)
        (package / "generation").mkdir(parents=True)
        with tarfile.open(archives[0]) as archive:
            member = archive.getmember(f"transformers-{version}/tests/test_modeling_common.py")
            source = archive.extractfile(member).read()
        (package / "test_modeling_common.py").write_bytes(source)
        for name in ("__init__.py", "exporters/__init__.py", "generation/__init__.py"):
            (package / name).write_text("")
        for name, text in STANDINS.items():
            (package / name).write_text(text)
        if root.exists():
            shutil.rmtree(root)
        os.replace(staging, root)
    return root
