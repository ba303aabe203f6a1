"""Delegated-policy rules the mutation check found unpinned (docs/mutation.md lists each
mutant): the refusals' exact messages and causes, and a log's default when it sets nothing."""

from __future__ import annotations

import pytest

from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.policy import EffectivePolicy, effective_policy, parse_sandbox_mode
from dsh_subagent.core.values import APPROVAL_POLICY, SANDBOX_MODE, SessionEvent

KNOWN = "read-only, workspace-write, danger-full-access"


def test_policy_1_an_unknown_sandbox_mode_is_refused_listing_the_known_ones() -> None:
    with pytest.raises(SubagentError) as info:
        parse_sandbox_mode("open", "mode")
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    assert info.value.field == "mode"
    assert info.value.message == f"mode: 'open' is not a sandbox mode (one of {KNOWN})"


def test_policy_6_a_log_that_sets_nothing_keeps_the_defaults() -> None:
    assert effective_policy([]) == EffectivePolicy(sandbox_mode=None, approval_policy=None)


def test_policy_6_a_missing_approval_policy_is_a_corrupt_session_by_name() -> None:
    with pytest.raises(SubagentError) as info:
        effective_policy([SessionEvent(APPROVAL_POLICY, 0, 0.0, {})])
    assert info.value.code is ErrorCode.CORRUPT_SESSION
    assert info.value.field == "approval/policy.policy"
    assert info.value.message == "approval/policy.policy: missing or not a string"


def test_policy_6_an_unknown_logged_sandbox_mode_is_corrupt_with_its_cause() -> None:
    with pytest.raises(SubagentError) as info:
        effective_policy([SessionEvent(SANDBOX_MODE, 0, 0.0, {"mode": "open"})])
    error = info.value
    assert error.code is ErrorCode.CORRUPT_SESSION
    assert error.field == "sandbox/mode.mode"
    assert error.message == f"sandbox/mode.mode: 'open' is not a sandbox mode (one of {KNOWN})"
    assert isinstance(error.cause, SubagentError)
    assert error.cause.code is ErrorCode.INVALID_ARGUMENT
