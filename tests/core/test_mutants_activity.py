"""Agent activity rules the mutation check found unpinned (docs/mutation.md lists each)."""

from __future__ import annotations

import pytest

from dsh_subagent.core import activity
from dsh_subagent.core.activity import ActivityPhase, ActivityState, MaintenanceRequested
from dsh_subagent.core.errors import ErrorCode, SubagentError


def test_harness_2_an_idle_state_with_a_latch_names_the_rule() -> None:
    with pytest.raises(SubagentError) as error:
        ActivityState(ActivityPhase.IDLE, None, latched=True)
    assert (error.value.code, error.value.message) == (
        ErrorCode.ILLEGAL_TRANSITION,
        "an idle agent has no abort cause and no latched wake",
    )


def test_harness_8_an_event_the_phase_refuses_names_the_event_and_the_phase() -> None:
    running = ActivityState(ActivityPhase.RUNNING)
    with pytest.raises(SubagentError) as error:
        activity.apply(running, MaintenanceRequested())
    assert error.value.message == "MaintenanceRequested is not accepted in phase running"
