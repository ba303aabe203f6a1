"""The conformance plugin: one fixture, ``dsh_harness``, selects the harness under test.

Theory of operation
-------------------
1. ``--dsh-harness=module:factory`` selects a harness factory by import path; a conftest may
   instead override the ``dsh_harness`` fixture. Without either, the reference harness is
   checked. The factory's contract is in ``dsh_subagent.conformance.support``.
2. A bad ``--dsh-harness`` (no ``module:factory`` shape, a module that does not import, a
   missing or non-callable attribute) is one usage error at configure time, not one
   collection error per test.
3. ``--dsh-timeout=SECONDS`` bounds every await of a conformance test (``support.run`` and
   ``support.bounded`` read ``time_bound``), so a harness that never reaches a step fails
   with what it was waiting for instead of hanging.
4. ``--dsh-db=ADDRESS`` names the store of the tests that persist and reopen a harness (they
   take the ``dsh_db`` fixture, and carry the ``dsh_db`` marker, so ``-m dsh_db`` selects
   them): a ``postgresql://`` address runs them on PostgreSQL. The database must start empty;
   those tests use session ids of their own. Without the option each gets a fresh SQLite file;
   a conftest may override ``dsh_db`` instead (e.g. with a database per test).
5. This module is loaded by pytest (entry point ``pytest11``) in every session of an
   environment where the package is installed, so it imports nothing of the seam (nor
   Hypothesis) at import time: that would load the package before coverage starts measuring
   it, and fail every session of an install without the ``conformance`` extra.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from dsh_subagent.conformance.support import HarnessFactory

OPTION = "--dsh-harness"
TIMEOUT_OPTION = "--dsh-timeout"
DB_OPTION = "--dsh-db"
DB_MARKER = "dsh_db"
MISSING_HYPOTHESIS = (
    "the conformance suite needs Hypothesis: pip install 'dsh-subagent[conformance]'"
)

time_bound: float | None = None
"""Seconds per conformance await, from ``--dsh-timeout`` (``None``: the suite's default)."""


def _positive_seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError(text)
    return value


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dsh_subagent", "dsh_subagent conformance suite")
    group.addoption(
        OPTION,
        default=None,
        help="module:factory of the harness the dsh_subagent conformance suite checks",
    )
    group.addoption(
        TIMEOUT_OPTION,
        type=_positive_seconds,
        default=None,
        help="seconds a conformance test may wait for a step before it fails (default 30)",
    )
    group.addoption(
        DB_OPTION,
        default=None,
        help="store address (a postgresql:// URL or a SQLite path) of the suite's "
        "persistence tests (default: a fresh SQLite file per test)",
    )


def _check_factory(path: str) -> None:
    module, sep, name = path.partition(":")
    if not sep or not module or not name:
        raise pytest.UsageError(f"{OPTION}: expected module:factory, got {path!r}")
    try:
        found = getattr(importlib.import_module(module), name)
    except ImportError as err:
        raise pytest.UsageError(f"{OPTION}: cannot import {module!r}: {err}") from err
    except AttributeError as err:
        raise pytest.UsageError(f"{OPTION}: {module!r} has no attribute {name!r}") from err
    if not callable(found):
        raise pytest.UsageError(f"{OPTION}: {path!r} is not callable")


def pytest_configure(config: pytest.Config) -> None:
    global time_bound  # noqa: PLW0603 - the one process-wide setting the suite reads
    time_bound = config.getoption(TIMEOUT_OPTION)
    config.addinivalue_line("markers", f"{DB_MARKER}: a conformance test that persists to dsh_db")
    path = config.getoption(OPTION)
    if path is not None:
        _check_factory(str(path))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that takes ``dsh_db``, so ``-m dsh_db`` selects them (rule 4)."""
    for item in items:
        if DB_MARKER in getattr(item, "fixturenames", ()):
            item.add_marker(DB_MARKER)


@pytest.fixture
def dsh_db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The store of a persistence test: ``--dsh-db``, else a fresh SQLite file (rule 4)."""
    address = request.config.getoption(DB_OPTION)
    return str(tmp_path / "sessions.db") if address is None else str(address)


@pytest.fixture
def dsh_harness(request: pytest.FixtureRequest) -> HarnessFactory:
    """The harness factory under test (override this fixture, or pass --dsh-harness)."""
    from dsh_subagent.conformance.support import load_factory, reference_harness

    path = request.config.getoption(OPTION)
    return reference_harness if path is None else load_factory(str(path))
