"""The conformance plugin: one fixture, ``dsh_harness``, selects the harness under test.

Theory of operation
-------------------
1. ``--dsh-harness=module:factory`` selects a harness factory by import path; a conftest may
   instead override the ``dsh_harness`` fixture. Without either, the reference harness is
   checked. The factory's contract is in ``dsh_subagent.conformance.support``.
2. This module is loaded by pytest (entry point ``pytest11``) in every session of an
   environment where the package is installed, so it imports nothing of the seam at import
   time: that would load the package before coverage starts measuring it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from dsh_subagent.conformance.support import HarnessFactory

OPTION = "--dsh-harness"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        OPTION,
        default=None,
        help="module:factory of the harness the dsh_subagent conformance suite checks",
    )


@pytest.fixture
def dsh_harness(request: pytest.FixtureRequest) -> HarnessFactory:
    """The harness factory under test (override this fixture, or pass --dsh-harness)."""
    from dsh_subagent.conformance.support import load_factory, reference_harness

    path = request.config.getoption(OPTION)
    return reference_harness if path is None else load_factory(str(path))
