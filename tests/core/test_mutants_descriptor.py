"""Descriptor and depth rules the mutation check found unpinned (docs/mutation.md lists each)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dsh_subagent.core.depth import MAX_DEPTH, child_depth, validate_depth
from dsh_subagent.core.descriptor import (
    DescriptorProblem,
    ProblemKind,
    fold_descriptor,
    parse_descriptor_payload,
    resume_descriptor,
    snapshot_descriptor,
)
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import (
    DESCRIPTOR_EVENT,
    JsonObject,
    JsonValue,
    Mode,
    SessionEvent,
    ToolFilter,
)

CORRUPT: JsonObject = {"version": 2, "mode": "continuable", "provider": "p"}  # no label


def _refusal(call: Callable[..., object], *args: object, **kwargs: object) -> SubagentError:
    with pytest.raises(SubagentError) as caught:
        call(*args, **kwargs)
    return caught.value


def test_depth_2_a_depth_past_the_largest_is_refused_with_the_bound() -> None:
    error = _refusal(validate_depth, MAX_DEPTH + 1, "d")
    assert error.message == f"d: must be at most {MAX_DEPTH}, got {MAX_DEPTH + 1}"


def test_depth_3_the_largest_depth_is_reachable_and_one_more_is_refused_naming_max_depth() -> None:
    assert child_depth(MAX_DEPTH - 1, None) == MAX_DEPTH
    error = _refusal(child_depth, MAX_DEPTH, None)
    assert (error.code, error.field, error.message) == (
        ErrorCode.DEPTH_LIMIT_EXCEEDED,
        "max_depth",
        f"delegation depth {MAX_DEPTH + 1} would exceed the maximum depth {MAX_DEPTH}",
    )
    assert _refusal(child_depth, 2, 2).field == "max_depth"


@pytest.mark.parametrize(
    ("name", "value"),
    [("agent_provider", "a"), ("agent_model", "m"), ("tool_filter", ToolFilter(allow=("x",)))],
)
def test_desc_5_a_one_shot_descriptor_refuses_each_continuable_field_by_name(
    name: str, value: object
) -> None:
    error = _refusal(snapshot_descriptor, mode=Mode.ONE_SHOT, provider="p", **{name: value})
    assert (error.field, error.message) == (
        f"descriptor.{name}",
        f"descriptor.{name}: only a continuable descriptor carries it",
    )


def test_desc_5_a_continuable_descriptor_needs_a_provider_and_a_label() -> None:
    assert _refusal(snapshot_descriptor, mode=Mode.CONTINUABLE, provider="", label="l").field == (
        "descriptor.provider"
    )
    error = _refusal(snapshot_descriptor, mode=Mode.CONTINUABLE, provider="p")
    assert error.message == "descriptor.label: a continuable descriptor requires a label"


def test_desc_9_a_seed_length_outside_the_log_names_both_lengths() -> None:
    error = _refusal(fold_descriptor, (), 5)
    assert error.message == "seed length 5 does not fit a log of 0 events"


def test_desc_10_a_corrupt_or_missing_descriptor_at_resume_says_why() -> None:
    problem = parse_descriptor_payload(CORRUPT)
    assert isinstance(problem, DescriptorProblem)
    assert problem.message == "label must be a string"
    events = (SessionEvent(DESCRIPTOR_EVENT, 0, 0.0, CORRUPT),)
    error = _refusal(resume_descriptor, fold_descriptor(events, 0))
    assert error.message == "the persisted subagent descriptor is corrupt: label must be a string"
    error = _refusal(resume_descriptor, fold_descriptor((), 0))
    assert error.message == (
        "the child has no supported continuable descriptor and cannot be resumed; "
        "do not retry send_message with this id"
    )


@pytest.mark.parametrize(
    ("tool_filter", "field", "message"),
    [
        ("x", "payload.toolFilter", "toolFilter must be an object"),
        ({}, "payload.toolFilter", "toolFilter must declare allow and/or deny"),
        ({"allow": "x"}, "payload.toolFilter.allow", "allow must be an array of strings"),
        ({"deny": [1]}, "payload.toolFilter.deny", "deny must be an array of strings"),
    ],
)
def test_desc_7_a_malformed_tool_filter_is_corrupt_naming_the_field_and_why(
    tool_filter: JsonValue, field: str, message: str
) -> None:
    payload: JsonObject = {**CORRUPT, "label": "l", "toolFilter": tool_filter}
    problem = parse_descriptor_payload(payload)
    assert problem == DescriptorProblem(ProblemKind.CORRUPT, message, field)


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        ("x", DescriptorProblem(ProblemKind.CORRUPT, "the payload must be an object", "payload")),
        (
            {"version": "2"},
            DescriptorProblem(
                ProblemKind.CORRUPT, "the version must be a number", "payload.version"
            ),
        ),
        (
            {"version": 3, "mode": "continuable"},
            DescriptorProblem(ProblemKind.UNSUPPORTED, "descriptor version 3 is not supported"),
        ),
        (
            {"version": 2, "mode": "x"},
            DescriptorProblem(
                ProblemKind.CORRUPT, 'the mode must be "one-shot" or "continuable"', "payload.mode"
            ),
        ),
        (
            {**CORRUPT, "label": "l", "zz": 1},
            DescriptorProblem(ProblemKind.CORRUPT, "unknown field 'zz'", "payload.zz"),
        ),
        (
            {**CORRUPT, "provider": 5, "label": "l"},
            DescriptorProblem(ProblemKind.CORRUPT, "provider must be a string", "payload.provider"),
        ),
    ],
)
def test_desc_6_desc_7_each_unreadable_payload_is_classified_with_its_reason(
    payload: JsonValue, problem: DescriptorProblem
) -> None:
    assert parse_descriptor_payload(payload) == problem
