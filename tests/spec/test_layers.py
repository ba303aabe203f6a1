"""The layer boundaries that import-linter cannot see on its own.

1. The seam/harness contract lists its source modules one by one (import-linter would count
   ``dsh_subagent.adapters.reference`` as part of ``dsh_subagent.adapters``); this keeps the
   list complete, so a new seam module cannot slip past the contract.
2. Every module is imported by one name only: ``dsh_subagent.…``. From the repository root,
   ``core``, ``adapters`` and ``spec`` would also import as namespace packages, giving a second
   module object (and a second ``SubagentError`` class); no file may import them that way.
"""

from __future__ import annotations

import ast
import pkgutil
import tomllib
from pathlib import Path
from typing import Any

import dsh_subagent.adapters

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = "the seam reaches the reference harness only through protocols"


def _seam_contract() -> dict[str, Any]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts: list[dict[str, Any]] = config["tool"]["importlinter"]["contracts"]
    return next(c for c in contracts if c["name"] == CONTRACT)


def test_seam_contract_lists_every_seam_module() -> None:
    contract = _seam_contract()
    assert contract["forbidden_modules"] == ["dsh_subagent.adapters.reference"]
    seam = {
        f"dsh_subagent.adapters.{info.name}"
        for info in pkgutil.iter_modules(dsh_subagent.adapters.__path__)
        if info.name != "reference"
    }
    assert set(contract["source_modules"]) == seam


def test_no_file_imports_a_source_root_as_a_package() -> None:
    offenders = []
    for folder in ("core", "adapters", "spec", "tests", "stateful_tests", "bench", "scripts"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = (
                    [alias.name for alias in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""]
                    if isinstance(node, ast.ImportFrom) and node.level == 0
                    else []
                )
                offenders += [
                    f"{path.relative_to(ROOT)}: {name}"
                    for name in names
                    if name.split(".")[0] in {"core", "adapters", "spec"}
                ]
    assert offenders == []
