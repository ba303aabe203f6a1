"""The README's harness example runs as pasted and imports only ``dsh_subagent``."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _harness_example() -> str:
    section = README.read_text().split("## Using it in your harness", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None
    return match.group(1)


def test_readme_example_imports_only_the_public_package() -> None:
    tree = ast.parse(_harness_example())
    modules = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    assert {m for m in modules if m.startswith("dsh_subagent")} == {"dsh_subagent"}


def test_readme_example_runs_as_pasted(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-X", "dev", "-c", _harness_example()],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "done" in done.stdout
