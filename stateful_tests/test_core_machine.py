"""The core lockstep machine (``dsh_subagent.spec.machines.CoreMachine``) under pytest.

At least 300 sequences of up to 30 steps in every profile (the core machine is fast: about
10 s for 300 on the 2-core CI machine); larger profiles such as ``soak`` run more.
"""

from __future__ import annotations

import pytest
from hypothesis import settings

from dsh_subagent.spec.machines import CoreMachine

# Pure-core machines run several times slower under branch tracing; the core's coverage
# comes from its unit tests (tests/core), so coverage pauses here.
pytestmark = pytest.mark.no_cover

_profile = settings()  # the loaded profile (see conftest.py)
CoreMachine.TestCase.settings = settings(
    parent=_profile,
    max_examples=max(300, _profile.max_examples),
    stateful_step_count=max(30, _profile.stateful_step_count),
    deadline=None,
)

CoreMachineTest = CoreMachine.TestCase
