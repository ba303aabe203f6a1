"""Delegation depth (catalog section 9, DEPTH-*; ERR-18 as typed by this port)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh_subagent.core.depth import (
    MAX_DEPTH,
    child_depth,
    delegation_depth_of,
    effective_depth,
    fresh_child_options,
    resumed_child_options,
    validate_depth,
    validate_max_depth,
)
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import AgentOptions, SessionHeader, SessionId

depths = st.integers(min_value=0, max_value=MAX_DEPTH)
optional_depths = st.none() | depths


def header(depth: int | None = None) -> SessionHeader:
    return SessionHeader(id=SessionId("child"), delegation_depth=depth)


def test_depth_1_absent_depth_counts_as_zero() -> None:
    assert delegation_depth_of(header(), AgentOptions()) == 0
    assert effective_depth(None, None) == 0


@given(optional_depths, optional_depths)
def test_depth_2_header_is_a_monotone_floor(floor: int | None, runtime: int | None) -> None:
    depth = delegation_depth_of(header(floor), AgentOptions(subagent_depth=runtime))
    assert depth == max(floor or 0, runtime or 0)
    assert depth >= (floor or 0)


def test_depth_2_runtime_option_deepens_but_never_lowers() -> None:
    assert delegation_depth_of(header(3), AgentOptions(subagent_depth=5)) == 5
    assert delegation_depth_of(header(3), AgentOptions(subagent_depth=1)) == 3


@pytest.mark.parametrize("bad", [-1, True, 1.0, "1", MAX_DEPTH + 1])
def test_depth_2_invalid_runtime_depth_is_rejected_naming_the_field(bad: object) -> None:
    options = AgentOptions(subagent_depth=bad)  # type: ignore[arg-type]
    with pytest.raises(SubagentError) as caught:
        delegation_depth_of(header(), options)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert caught.value.field == "agent_options.subagent_depth"


def test_depth_2_invalid_header_depth_is_rejected_naming_the_field() -> None:
    with pytest.raises(SubagentError) as caught:
        delegation_depth_of(header(-2), AgentOptions())
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert caught.value.field == "header.delegation_depth"


@given(st.integers(min_value=0, max_value=MAX_DEPTH - 1), st.none() | depths)
def test_depth_3_child_depth_is_parent_plus_one_within_the_cap(
    parent: int, cap: int | None
) -> None:
    if cap is not None and parent + 1 > cap:
        with pytest.raises(SubagentError) as caught:
            child_depth(parent, cap)
        assert caught.value.code is ErrorCode.DEPTH_LIMIT_EXCEEDED
    else:
        assert child_depth(parent, cap) == parent + 1


def test_depth_3_exceeded_cap_names_attempted_and_maximum_depth() -> None:
    with pytest.raises(SubagentError) as caught:
        child_depth(2, 2)
    assert caught.value.code is ErrorCode.DEPTH_LIMIT_EXCEEDED
    assert "3" in caught.value.message
    assert "2" in caught.value.message


def test_depth_3_unrepresentable_child_depth_is_refused() -> None:
    with pytest.raises(SubagentError) as caught:
        child_depth(MAX_DEPTH, None)
    assert caught.value.code is ErrorCode.DEPTH_LIMIT_EXCEEDED
    assert str(MAX_DEPTH + 1) in caught.value.message


@pytest.mark.parametrize("good", [None, 0, 1, MAX_DEPTH])
def test_depth_4_max_depth_domain_accepts_absent_and_depths(good: int | None) -> None:
    assert validate_max_depth(good) == good


@pytest.mark.parametrize("bad", [-1, True, False, 1.0, float("nan"), "2", MAX_DEPTH + 1])
def test_depth_4_max_depth_domain_rejects_non_depths(bad: object) -> None:
    with pytest.raises(SubagentError) as caught:
        validate_max_depth(bad)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert caught.value.field == "request.max_depth"


def test_depth_5_child_at_the_cap_is_allowed_and_zero_forbids_any_child() -> None:
    assert child_depth(2, 3) == 3
    with pytest.raises(SubagentError):
        child_depth(0, 0)


def test_depth_6_fresh_creation_stamps_the_child_depth_on_the_options() -> None:
    options = fresh_child_options(AgentOptions(model="m", subagent_depth=0), 1)
    assert options == AgentOptions(model="m", subagent_depth=1)
    assert fresh_child_options(None, 4).subagent_depth == 4


def test_depth_7_cold_resume_sets_no_runtime_depth_and_keeps_the_floor() -> None:
    options = resumed_child_options(AgentOptions(model="m", subagent_depth=9))
    assert options == AgentOptions(model="m")
    assert resumed_child_options(None) == AgentOptions()
    assert delegation_depth_of(header(2), options) == 2


def test_err_18_depth_failures_are_typed_subagent_errors() -> None:
    with pytest.raises(SubagentError):
        validate_depth(-1, "depth")
    with pytest.raises(SubagentError):
        child_depth(5, 1)
