"""The public surface: one import, ``from dsh_subagent import …`` (trio / websockets style).

1. Every name in ``__all__`` resolves lazily to the very object its home module defines.
2. The ``TYPE_CHECKING`` re-exports (what type checkers and IDEs see) are exactly the lazy ones.
3. ``import dsh_subagent.core`` stays pure: it loads neither the adapters nor asyncio.
4. The base install loads every public name but those of an extra (``NEEDS_EXTRA``), and
   ``import dsh_subagent`` never imports an extra's package.
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
from dsh_subagent.core.extras import MissingExtra

ROOT = Path(__file__).resolve().parents[1]
NEEDS_EXTRA = {"PostgresPersistence": "postgres"}
"""Public names whose first use imports an optional extra's package (rule 4)."""


def test_every_public_name_is_its_home_modules_object() -> None:
    assert "__version__" in dsh_subagent.__all__
    assert dsh_subagent.__all__ == sorted(dsh_subagent.__all__)
    for name in dsh_subagent.__all__:
        if name == "__version__":
            continue
        try:
            home = importlib.import_module(dsh_subagent._EXPORTS[name])
        except MissingExtra as missing:  # an install without this name's extra (rule 4)
            lacking = missing.extra
        else:
            assert getattr(dsh_subagent, name) is getattr(home, name), name
            continue
        assert lacking == NEEDS_EXTRA.get(name), name


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
    extras += ["psycopg", "psycopg_pool"]
    probe = (
        f"import sys; sys.modules.update(dict.fromkeys({extras!r}));"
        "import dsh_subagent;"
        f"[getattr(dsh_subagent, n) for n in dsh_subagent.__all__ if n not in {NEEDS_EXTRA!r}]"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_pg_1_postgres_persistence_is_public_and_imports_psycopg_only_on_use() -> None:
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    probe = (
        "import sys, dsh_subagent;"
        f"[getattr(dsh_subagent, n) for n in dsh_subagent.__all__ if n not in {NEEDS_EXTRA!r}];"
        "before = 'psycopg' in sys.modules;"
        "dsh_subagent.PostgresPersistence;"
        "print(before, 'psycopg' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stdout) == (0, "False True\n"), done.stderr


def test_pg_1_without_psycopg_the_public_postgres_store_names_its_extra() -> None:
    probe = (
        "import sys; sys.modules['psycopg'] = None;"
        "import dsh_subagent\n"
        "try:\n    dsh_subagent.PostgresPersistence\n"
        "except ImportError as error:\n    print(error)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False
    )
    assert done.stdout == (
        "the PostgreSQL session store needs psycopg: pip install 'dsh-subagent[postgres]'\n"
    ), done.stderr
