"""The public surface: one import, ``from dsh_subagent import …`` (trio / websockets style).

1. Every name in ``__all__`` resolves lazily to the very object its home module defines.
2. The ``TYPE_CHECKING`` re-exports (what type checkers and IDEs see) are exactly the lazy ones.
3. ``import dsh_subagent.core`` stays pure: it loads neither the adapters nor asyncio.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import dsh_subagent

ROOT = Path(__file__).resolve().parents[1]


def test_every_public_name_is_its_home_modules_object() -> None:
    assert "__version__" in dsh_subagent.__all__
    assert dsh_subagent.__all__ == sorted(dsh_subagent.__all__)
    for name in dsh_subagent.__all__:
        if name == "__version__":
            continue
        home = importlib.import_module(dsh_subagent._EXPORTS[name])
        assert getattr(dsh_subagent, name) is getattr(home, name), name


def test_type_checking_reexports_match_the_lazy_table() -> None:
    tree = ast.parse(Path(dsh_subagent.__file__).read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.dump(n))
    seen = {}
    for node in block.body:
        if isinstance(node, ast.AnnAssign):  # the lazily computed __version__
            continue
        assert isinstance(node, ast.ImportFrom)
        for alias in node.names:
            assert alias.asname == alias.name  # an explicit re-export
            seen[alias.name] = node.module
    assert seen == dsh_subagent._EXPORTS


def test_version_is_the_projects() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert dsh_subagent.__version__ == project["version"]


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchName"):
        getattr(dsh_subagent, "NoSuchName")  # noqa: B009


def test_importing_the_core_loads_no_adapters_and_no_asyncio() -> None:
    probe = (
        "import sys, dsh_subagent.core, dsh_subagent.core.manager;"
        "bad = [m for m in sys.modules if m.startswith('dsh_subagent.adapters') or m == 'asyncio'];"
        "print(bad); raise SystemExit(1 if bad else 0)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_issue20_the_offline_test_models_are_public() -> None:
    for name in ("FunctionModel", "ScriptedModel", "NullModel", "call_tool", "reply"):
        assert name in dsh_subagent.__all__, name


def test_issue20_every_public_name_loads_without_an_extra() -> None:
    """The base install (attrs, jsonschema) is enough for the whole public import."""
    extras = ["click", "rich", "statemachine", "hypothesis", "pytest", "pydantic_ai", "acp"]
    probe = (
        f"import sys; sys.modules.update(dict.fromkeys({extras!r}));"
        "import dsh_subagent; [getattr(dsh_subagent, n) for n in dsh_subagent.__all__]"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
