"""The activity lockstep machine (``dsh_subagent.spec.activity_machine``) under pytest.

At least 300 sequences of up to 40 steps in every profile (a few seconds: the machine is pure).
"""

from __future__ import annotations

import pytest
from hypothesis import settings

from dsh_subagent.spec.activity_machine import ActivityMachine

# Pure-core machines run several times slower under branch tracing; the core's coverage
# comes from its unit tests (tests/core), so coverage pauses here.
pytestmark = pytest.mark.no_cover

_profile = settings()  # the loaded profile (see conftest.py)
ActivityMachine.TestCase.settings = settings(
    parent=_profile,
    max_examples=max(300, _profile.max_examples),
    stateful_step_count=max(40, _profile.stateful_step_count),
    deadline=None,
)

ActivityMachineTest = ActivityMachine.TestCase
