"""Delegated policy (catalog section 10, POLICY-*; HARNESS-27 sandbox modes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.policy import (
    DELEGATION_STATEMENT,
    AddPromptSection,
    AddRuntimeContext,
    DelegatedPolicy,
    EffectivePolicy,
    JoinParentPreset,
    LogEntry,
    RestrictTools,
    SandboxMode,
    approval_policy_data,
    capture_delegated_policy,
    child_composition,
    delegation_log_entries,
    effective_policy,
    parse_sandbox_mode,
    sandbox_mode_data,
)
from dsh_subagent.core.values import (
    APPROVAL_POLICY,
    END_SEED,
    SANDBOX_MODE,
    TURN_END,
    JsonValue,
    SessionEvent,
    ToolFilter,
)

SEED_000 = Path("/work/shared/seeds/000_fa1c7806c2ead74b.txt")


def log(*entries: tuple[str, JsonValue]) -> tuple[SessionEvent, ...]:
    return tuple(SessionEvent(t, seq, float(seq), data) for seq, (t, data) in enumerate(entries))


def appended(entries: tuple[LogEntry, ...]) -> list[tuple[str, JsonValue]]:
    return [(entry.type, entry.data) for entry in entries]


def test_policy_1_capture_takes_the_explicit_override_and_pins_approval() -> None:
    policy = capture_delegated_policy("read-only", approval_available=True)
    assert policy == DelegatedPolicy(SandboxMode.READ_ONLY, approval_never=True)
    assert capture_delegated_policy(None, approval_available=False) == DelegatedPolicy()


def test_policy_1_parent_override_comes_from_the_parent_log() -> None:
    parent = log(
        (SANDBOX_MODE, sandbox_mode_data(SandboxMode.WORKSPACE_WRITE, source=None)),
        (APPROVAL_POLICY, approval_policy_data("on-request", source=None)),
    )
    replay = effective_policy(parent)
    assert replay == EffectivePolicy(SandboxMode.WORKSPACE_WRITE, "on-request")
    assert replay.sandbox_mode is not None
    policy = capture_delegated_policy(replay.sandbox_mode.value, approval_available=True)
    assert policy.approval_never  # the parent's own approval policy is ignored


def test_policy_1_unknown_sandbox_override_is_rejected_naming_the_field() -> None:
    with pytest.raises(SubagentError) as caught:
        capture_delegated_policy("yolo", approval_available=False)
    assert (caught.value.code, caught.value.field) == (
        ErrorCode.INVALID_ARGUMENT,
        "sandbox_override",
    )


def test_policy_2_capture_is_a_value_unaffected_by_a_later_parent_switch() -> None:
    policy = capture_delegated_policy("read-only", approval_available=True)
    parent_later = log((SANDBOX_MODE, sandbox_mode_data(SandboxMode.DANGER_FULL_ACCESS)))
    assert effective_policy(parent_later).sandbox_mode is SandboxMode.DANGER_FULL_ACCESS
    assert delegation_log_entries(policy, fresh=True)[0].data["mode"] == "read-only"


def test_policy_3_fresh_child_appends_sandbox_then_approval_with_delegation_source() -> None:
    policy = DelegatedPolicy(SandboxMode.READ_ONLY, approval_never=True)
    assert appended(delegation_log_entries(policy, fresh=True)) == [
        (SANDBOX_MODE, {"mode": "read-only", "source": "delegation"}),
        (APPROVAL_POLICY, {"policy": "never", "source": "delegation"}),
    ]
    sandbox_only = DelegatedPolicy(SandboxMode.WORKSPACE_WRITE, approval_never=False)
    assert appended(delegation_log_entries(sandbox_only, fresh=True)) == [
        (SANDBOX_MODE, {"mode": "workspace-write", "source": "delegation"}),
    ]


def test_policy_3_delegation_events_win_over_seed_state_and_lose_to_child_switches() -> None:
    seed: list[tuple[str, JsonValue]] = [
        (SANDBOX_MODE, sandbox_mode_data(SandboxMode.DANGER_FULL_ACCESS, source=None)),
        (APPROVAL_POLICY, approval_policy_data("on-request", source=None)),
        (TURN_END, {"turn": 1, "reason": "completed"}),
        (END_SEED, {}),
    ]
    policy = DelegatedPolicy(SandboxMode.READ_ONLY, approval_never=True)
    child = [*seed, *appended(delegation_log_entries(policy, fresh=True))]
    assert effective_policy(log(*child)) == EffectivePolicy(SandboxMode.READ_ONLY, "never")
    switched = [*child, (SANDBOX_MODE, sandbox_mode_data(SandboxMode.WORKSPACE_WRITE, source=None))]
    assert effective_policy(log(*switched)).sandbox_mode is SandboxMode.WORKSPACE_WRITE


def test_policy_4_unswitched_parent_writes_no_sandbox_event_but_still_pins_approval() -> None:
    policy = capture_delegated_policy(None, approval_available=True)
    entries = delegation_log_entries(policy, fresh=True)
    assert [entry.type for entry in entries] == [APPROVAL_POLICY]
    assert effective_policy(log(*appended(entries))).sandbox_mode is None


@given(st.sampled_from([None, *SandboxMode]), st.booleans())
def test_policy_5_cold_resume_appends_nothing(mode: SandboxMode | None, pinned: bool) -> None:
    assert delegation_log_entries(DelegatedPolicy(mode, pinned), fresh=False) == ()


def test_policy_6_grandchild_captures_the_childs_delegated_mode() -> None:
    child_policy = capture_delegated_policy("workspace-write", approval_available=True)
    child_log = log(*appended(delegation_log_entries(child_policy, fresh=True)))
    override = effective_policy(child_log).sandbox_mode
    assert override is SandboxMode.WORKSPACE_WRITE
    grandchild = capture_delegated_policy(override.value, approval_available=True)
    assert grandchild == DelegatedPolicy(SandboxMode.WORKSPACE_WRITE, approval_never=True)


def test_policy_7_composition_order_preset_context_persona_filter() -> None:
    tools = ToolFilter(allow=("read",))
    steps = child_composition(preset_roster=True, persona="", tool_filter=tools)
    assert steps == (
        JoinParentPreset(),
        AddRuntimeContext("subagent:delegation", 120, DELEGATION_STATEMENT),
        AddPromptSection("deployment:persona", 0, ""),
        RestrictTools(tools),
    )
    assert child_composition(preset_roster=False, persona=None, tool_filter=None) == (
        AddRuntimeContext("subagent:delegation", 120, DELEGATION_STATEMENT),
    )


def test_policy_8_delegation_statement_is_seed_000_verbatim() -> None:
    lines = SEED_000.read_text(encoding="utf-8").splitlines()
    assert DELEGATION_STATEMENT in lines
    assert DELEGATION_STATEMENT.startswith("You are a delegated subagent:")


@pytest.mark.parametrize("mode", list(SandboxMode))
def test_harness_27_sandbox_modes_round_trip(mode: SandboxMode) -> None:
    assert parse_sandbox_mode(mode.value, "mode") is mode


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ((SANDBOX_MODE, {"mode": "everything"}), "sandbox/mode.mode"),
        ((SANDBOX_MODE, {"source": "delegation"}), "sandbox/mode.mode"),
        ((SANDBOX_MODE, "read-only"), "sandbox/mode.mode"),
        ((APPROVAL_POLICY, {"policy": ""}), "approval/policy.policy"),
    ],
)
def test_harness_27_malformed_policy_event_is_a_corrupt_session(
    entry: tuple[str, JsonValue], field: str
) -> None:
    with pytest.raises(SubagentError) as caught:
        effective_policy(log(entry))
    assert (caught.value.code, caught.value.field) == (ErrorCode.CORRUPT_SESSION, field)
