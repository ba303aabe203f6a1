"""Exact refusals of request validation and authority that the mutation check found unpinned."""

from __future__ import annotations

import pytest

from dsh_subagent.core.authority import (
    AgentRef,
    Denied,
    Presented,
    TargetFacts,
    authorize_drain_children,
    authorize_parent_followup,
    authorize_report,
)
from dsh_subagent.core.capabilities import (
    check_continuable_capability,
    validate_output_schema,
    validate_prompt,
    validate_tool_filter,
    validate_tool_names,
)
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import DataBlock, SessionId, TextBlock, ToolFilter

PARENT = AgentRef(SessionId("parent"), 1)
CHILD = AgentRef(SessionId("child"), 7)


def _said(call: object, *args: object, **kwargs: object) -> tuple[ErrorCode, str | None, str]:
    with pytest.raises(SubagentError) as caught:
        call(*args, **kwargs)  # type: ignore[operator]
    return caught.value.code, caught.value.field, caught.value.message


def _invalid(field: str, message: str) -> tuple[ErrorCode, str, str]:
    return ErrorCode.INVALID_ARGUMENT, field, f"{field}: {message}"


@pytest.mark.parametrize(
    ("prompt", "field", "message"),
    [
        ("text", "request.prompt", "must be a non-empty sequence of content blocks"),
        (5, "request.prompt", "must be a non-empty sequence of content blocks"),
        ((), "request.prompt", "must be a non-empty sequence of content blocks"),
        ((TextBlock(" "), TextBlock("\n")), "request.prompt", "must not be blank"),
        ((TextBlock("ok"), "raw"), "request.prompt[1]", "must be a TextBlock or a DataBlock"),
    ],
)
def test_one_2_prompt_refusals(prompt: object, field: str, message: str) -> None:
    assert _said(validate_prompt, prompt) == _invalid(field, message)


def test_one_2_prompt_blank_text_beside_data_or_words_is_accepted() -> None:
    validate_prompt((TextBlock(" "), DataBlock({"k": 1})))
    validate_prompt((TextBlock("word"), TextBlock(" ")))
    validate_prompt((TextBlock(" "), TextBlock("word")))


def test_cap_6_tool_filter_refusals() -> None:
    field = "request.tool_filter"
    assert _said(validate_tool_filter, {"allow": []}) == _invalid(field, "must be a ToolFilter")
    assert _said(validate_tool_filter, ToolFilter()) == _invalid(
        field, "must declare allow and/or deny"
    )
    assert validate_tool_filter(ToolFilter(deny=("a",))) == ToolFilter(allow=None, deny=("a",))


def test_cap_6_tool_name_refusals_and_order() -> None:
    assert _said(validate_tool_names, "ab", "f") == _invalid(
        "f", "must be a sequence of tool names"
    )
    assert _said(validate_tool_names, ("a", "a"), "f") == _invalid(
        "f[1]", "duplicate tool name 'a'"
    )
    assert validate_tool_names(["b", "a", "c"], "f") == ("b", "a", "c")


def test_cap_5_output_schema_refusals() -> None:
    field = "request.output_schema"
    assert _said(validate_output_schema, ["x"]) == _invalid(field, "must be a JSON object")
    assert _said(validate_output_schema, {"type": "array"}) == _invalid(
        f"{field}.type", 'the schema must be object-rooted (type: "object")'
    )


def test_cap_4_continuable_capability_refusal() -> None:
    assert _said(check_continuable_capability, "p", can_prepare=False) == (
        ErrorCode.UNSUPPORTED_CAPABILITY,
        "provider",
        "provider 'p' cannot prepare continuable children",
    )
    check_continuable_capability("p", can_prepare=True)


def test_auth_1_followup_from_another_parent_session_is_named() -> None:
    decision = authorize_parent_followup(Presented(PARENT, 1), SessionId("someone"))
    assert decision == Denied(ErrorCode.UNAUTHORIZED, "child belongs to another parent session")
    stale = authorize_parent_followup(Presented(PARENT, 2), PARENT.session_id)
    assert stale == Denied(ErrorCode.UNAUTHORIZED, "exact live parent required")


def test_auth_9_report_refusals_are_named() -> None:
    assert authorize_report(CHILD, None, False) == Denied(
        ErrorCode.UNAUTHORIZED, "reports come only from a resident child"
    )
    assert authorize_report(CHILD, CHILD, True) == Denied(
        ErrorCode.ACTIVATION_CLOSING, "the reporting child is being released"
    )


def test_auth_10_drain_children_refusal_is_named() -> None:
    foreign = TargetFacts(SessionId("other"), frozenset({PARENT}))
    decision = authorize_drain_children(Presented(PARENT, 1), [None, foreign])
    assert decision == Denied(ErrorCode.UNAUTHORIZED, "a selected child is not this parent's")
