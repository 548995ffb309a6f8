"""Print a pip constraints file that pins every dependency of pyproject.toml to the lowest release its
declared range allows (``name>=X`` -> ``name==X``), so CI can install the oldest end of every range.

    python3 .ci/lowest_versions.py --extras tensorboard > oldest.txt && pip install -c oldest.txt -e .

The constraints come from pyproject.toml itself each run, so the promise and the test cannot drift apart.
A dependency without a lower bound is an error: an open range is a promise nothing here tests.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement


def lowest_versions(pyproject: Path, extras: list[str]) -> list[str]:
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    dependencies = list(project["dependencies"])
    for extra in extras:
        dependencies += project["optional-dependencies"][extra]
    pins = []
    for dependency in dependencies:
        requirement = Requirement(dependency)
        floors = [spec.version for spec in requirement.specifier if spec.operator == ">="]
        if len(floors) != 1:
            raise SystemExit(f"{pyproject}: {dependency!r} needs exactly one lower bound (>=X) to be tested")
        pins.append(f"{requirement.name}=={floors[0]}")
    return pins


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--extras", default="", help="comma-separated extras whose ranges are pinned too")
    root = Path(__file__).resolve().parents[1]
    extras = [extra for extra in parser.parse_args().extras.split(",") if extra]
    print("\n".join(lowest_versions(root / "pyproject.toml", extras)))
