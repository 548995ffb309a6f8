"""The README's quick start runs as written."""

import re
from pathlib import Path


def test_quick_start_runs(capsys):
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    block = re.search(r"## Quick start\n\n```python\n(.*?)```", readme, re.S).group(1)
    exec(compile(block, "README.md", "exec"), {})
    assert re.search(r"'label': '(NEGATIVE|POSITIVE)'", capsys.readouterr().out)
