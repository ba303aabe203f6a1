"""Every Python block of the README runs as pasted and imports only ``dsh_subagent`` (issue 20).

The program of "Use it in your program" runs twice on one store: the second run resumes the
parent the first one stored (``harness.agent``) instead of crashing at close.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def _section_block(heading: str) -> str:
    section = README.read_text().split(f"## {heading}\n", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None
    return match.group(1)


def _run(source: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-X", "dev", "-c", source],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr, done.stderr  # -X dev shows any unclosed resource
    return done


def test_issue20_the_readme_has_its_examples() -> None:
    assert len(_blocks()) >= 2


@pytest.mark.parametrize("index", range(len(_blocks())))
def test_issue20_every_readme_block_imports_only_the_public_package(index: int) -> None:
    modules = set()
    for node in ast.walk(ast.parse(_blocks()[index])):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
    assert {m for m in modules if m.startswith("dsh_subagent")} == {"dsh_subagent"}


@pytest.mark.parametrize("index", range(len(_blocks())))
def test_issue20_every_readme_block_runs_as_pasted(index: int, tmp_path: Path) -> None:
    _run(_blocks()[index], tmp_path)


def test_issue20_the_readme_program_is_short_and_runs_twice_on_one_store(tmp_path: Path) -> None:
    program = _section_block("Use it in your program")
    assert len(program.strip().splitlines()) < 25
    for _ in range(2):
        assert "done" in _run(program, tmp_path).stdout
    assert (tmp_path / "sessions.db").exists()


def test_issue20_the_delegating_example_prints_the_childs_answer(tmp_path: Path) -> None:
    done = _run(_section_block("Give your model the subagent tool"), tmp_path)
    assert done.stdout.strip() == "the child answered: 42"
