"""Tree budgets under concurrent fan-out (``dsh_subagent.spec.budget_machine.BudgetMachine``).

At least 1,000 sequences of up to 40 steps in every profile (pure core: seconds); larger
profiles such as ``soak`` run more.
"""

from __future__ import annotations

import pytest
from hypothesis import settings

from dsh_subagent.spec.budget_machine import BudgetMachine

# Pure-core machines run several times slower under branch tracing; the core's coverage
# comes from its unit tests (tests/core), so coverage pauses here.
pytestmark = pytest.mark.no_cover

_profile = settings()  # the loaded profile (see conftest.py)
BudgetMachine.TestCase.settings = settings(
    parent=_profile,
    max_examples=max(1_000, _profile.max_examples),
    stateful_step_count=max(40, _profile.stateful_step_count),
    deadline=None,
)

BudgetMachineTest = BudgetMachine.TestCase
