"""Print the exact installed version of every package vanilla-transformer needs (its dependency closure,
extras included), as a pip constraints file: what a measured result ran on, to reinstall later.

    python3 .ci/installed_versions.py --extras dev > constraints/results.txt
    pip install -c constraints/results.txt -e ".[dev]"

Only the closure is written (not every package of the environment); torch carries its local build tag
(``2.13.0+cpu``), so the file reinstalls the same build.
"""

from __future__ import annotations

import argparse
import re
from importlib.metadata import PackageNotFoundError, distribution

from packaging.markers import default_environment
from packaging.requirements import Requirement


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(root: str, extras: set[str]) -> dict[str, str]:
    """{canonical name: installed version} of ``root`` and everything it requires, transitively."""
    found: dict[str, str] = {}
    seen: set[tuple[str, frozenset]] = set()  # (package, extras) already expanded: cycles end here
    pending = [(root, frozenset(extras))]
    while pending:
        name, wanted = pending.pop()
        if (_canonical(name), wanted) in seen:
            continue
        seen.add((_canonical(name), wanted))
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue  # a requirement whose marker excludes this platform, or an optional one not installed
        found[_canonical(dist.metadata["Name"])] = dist.version
        for line in dist.requires or []:
            requirement = Requirement(line)
            environments = [{**default_environment(), "extra": extra} for extra in (wanted or {""})]
            if requirement.marker is None or any(requirement.marker.evaluate(env) for env in environments):
                pending.append((requirement.name, frozenset(requirement.extras)))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--extras", default="", help="comma-separated extras of vanilla-transformer, e.g. dev"
    )
    args = parser.parse_args()
    extras = {extra for extra in args.extras.split(",") if extra}
    versions = closure("vanilla-transformer", extras)
    versions.pop("vanilla-transformer", None)
    print("\n".join(f"{name}=={version}" for name, version in sorted(versions.items())))


if __name__ == "__main__":
    main()
