"""Start-request admission: capability checks (CAP-*) and pure field validation (ONE-2)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh_subagent.core.capabilities import (
    CAPABILITY_ORDER,
    admit_start_request,
    check_capabilities,
    check_continuable_capability,
    first_missing_capability,
    validate_start_request,
    validate_tool_filter,
)
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import (
    AgentOptions,
    DataBlock,
    ParentRef,
    SessionId,
    SubagentCapabilities,
    SubagentStartRequest,
    TextBlock,
    ToolFilter,
)
from tests.flat_intent import evolve_flat

ALL = SubagentCapabilities(output_schema=True, depth_limit=True, tool_filter=True, persona=True)
NONE = SubagentCapabilities()
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}}


def request(**changes: Any) -> SubagentStartRequest:
    """A valid request with ``changes`` (intent fields go to its intent)."""
    base = SubagentStartRequest((TextBlock("do the thing"),), ParentRef(SessionId("parent")))
    return evolve_flat(base, **changes)


def full_request() -> SubagentStartRequest:
    return request(
        output_schema=SCHEMA, max_depth=2, tool_filter=ToolFilter(allow=("bash",)), persona="p"
    )


def refusal(call: object, *args: object) -> SubagentError:
    with pytest.raises(SubagentError) as caught:
        call(*args)  # type: ignore[operator]
    return caught.value


@pytest.mark.parametrize(
    ("field", "value", "capability"),
    [
        ("output_schema", SCHEMA, "outputSchema"),
        ("max_depth", 1, "depthLimit"),
        ("tool_filter", ToolFilter(deny=("x",)), "toolFilter"),
        ("persona", "terse", "persona"),
    ],
)
def test_cap_1_each_capability_guards_one_request_field(
    field: str, value: object, capability: str
) -> None:
    error = refusal(check_capabilities, request(**{field: value}), NONE)
    assert error.code is ErrorCode.UNSUPPORTED_CAPABILITY
    assert error.field == capability
    flag = {"outputSchema": "output_schema", "depthLimit": "depth_limit"}.get(capability, field)
    check_capabilities(request(**{field: value}), SubagentCapabilities(**{flag: True}))


@given(
    st.lists(st.booleans(), min_size=4, max_size=4), st.lists(st.booleans(), min_size=4, max_size=4)
)
def test_cap_2_reports_only_the_first_missing_capability_in_fixed_order(
    wanted: list[bool], supported: list[bool]
) -> None:
    values = (SCHEMA, 1, ToolFilter(allow=()), "")
    fields = ("output_schema", "max_depth", "tool_filter", "persona")
    req = request(**{f: v for f, v, w in zip(fields, values, wanted, strict=True) if w})
    caps = SubagentCapabilities(*supported)
    expected = next(
        (n for n, w, s in zip(CAPABILITY_ORDER, wanted, supported, strict=True) if w and not s),
        None,
    )
    assert first_missing_capability(req, caps) == expected
    if expected is None:
        check_capabilities(req, caps)
    else:
        assert refusal(check_capabilities, req, caps).field == expected


def test_cap_2_all_missing_reports_output_schema_first() -> None:
    assert refusal(check_capabilities, full_request(), NONE).field == "outputSchema"
    admit_start_request(full_request(), ALL)


def test_cap_3_presence_not_truthiness_requires_the_capability() -> None:
    for empty in ({"persona": ""}, {"tool_filter": ToolFilter(allow=())}, {"max_depth": 0}):
        assert first_missing_capability(request(**empty), NONE) is not None
    assert first_missing_capability(request(), NONE) is None


def test_cap_4_capability_check_precedes_value_validation() -> None:
    error = refusal(admit_start_request, request(max_depth=-1), NONE)
    assert error.code is ErrorCode.UNSUPPORTED_CAPABILITY
    error = refusal(admit_start_request, request(max_depth=-1), ALL)
    assert error.code is ErrorCode.INVALID_ARGUMENT
    assert error.field == "request.max_depth"


def test_cap_5_continuable_capability_is_the_preparation_method() -> None:
    check_continuable_capability("fork", can_prepare=True)
    error = refusal(lambda: check_continuable_capability("acp", can_prepare=False))
    assert error.code is ErrorCode.UNSUPPORTED_CAPABILITY
    assert "acp" in error.message


def test_cap_6_continuable_validation_ignores_the_capability_flags() -> None:
    validate_start_request(full_request())


def test_one_2_validation_order_depth_then_schema_then_fields() -> None:
    bad = request(max_depth=-1, output_schema={"type": "array"}, label="")
    assert refusal(validate_start_request, bad).field == "request.max_depth"
    bad = evolve_flat(bad, max_depth=None)
    assert refusal(validate_start_request, bad).field == "request.output_schema.type"
    bad = attrs.evolve(bad, output_schema=None)
    assert refusal(validate_start_request, bad).field == "request.label"


@pytest.mark.parametrize(
    ("schema", "field"),
    [
        (["type", "object"], "request.output_schema"),
        ({"type": "string"}, "request.output_schema.type"),
        ({"properties": {}}, "request.output_schema.type"),
        ({"type": "object", "minimum": float("nan")}, "request.output_schema.minimum"),
    ],
)
def test_one_2_output_schema_must_be_an_object_rooted_json_object(
    schema: object, field: str
) -> None:
    error = refusal(validate_start_request, request(output_schema=schema))
    assert (error.code, error.field) == (ErrorCode.INVALID_ARGUMENT, field)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"prompt": ()}, "request.prompt"),
        ({"prompt": 5}, "request.prompt"),
        ({"prompt": (TextBlock("  "),)}, "request.prompt"),
        ({"prompt": ("raw",)}, "request.prompt[0]"),
        ({"prompt": (TextBlock("a"), DataBlock({1: 2}))}, "request.prompt[1].value"),  # type: ignore[dict-item]
        ({"prompt": (TextBlock("\ud800"),)}, "request.prompt[0].text"),
        ({"parent": ParentRef(SessionId(""))}, "request.parent.session_id"),
        (
            {"parent": ParentRef(SessionId("p"), delegation_depth=-1)},
            "request.parent.delegation_depth",
        ),
        (
            {"parent": ParentRef(SessionId("p"), options=AgentOptions(max_tokens=0))},
            "request.parent.options.max_tokens",
        ),
        ({"label": ""}, "request.label"),
        ({"label": 3}, "request.label"),
        ({"persona": 7}, "request.persona"),
        ({"tool_filter": ToolFilter()}, "request.tool_filter"),
        ({"tool_filter": ("bash",)}, "request.tool_filter"),
        ({"tool_filter": ToolFilter(allow=("a", ""))}, "request.tool_filter.allow[1]"),
        ({"tool_filter": ToolFilter(allow=("a", "b", "a"))}, "request.tool_filter.allow[2]"),
        ({"tool_filter": ToolFilter(deny="bash")}, "request.tool_filter.deny"),  # type: ignore[arg-type]
        ({"tool_filter": ToolFilter(deny=(1,))}, "request.tool_filter.deny[0]"),  # type: ignore[arg-type]
        ({"agent_options": AgentOptions(provider="")}, "request.agent_options.provider"),
        ({"agent_options": AgentOptions(model="")}, "request.agent_options.model"),
        ({"agent_options": AgentOptions(max_tokens=0)}, "request.agent_options.max_tokens"),
        ({"agent_options": AgentOptions(max_tokens=True)}, "request.agent_options.max_tokens"),
        (
            {"agent_options": AgentOptions(subagent_depth=-1)},
            "request.agent_options.subagent_depth",
        ),
    ],
)
def test_one_2_bad_request_field_is_rejected_naming_the_field(
    changes: dict[str, object], field: str
) -> None:
    error = refusal(validate_start_request, request(**changes))
    assert (error.code, error.field) == (ErrorCode.INVALID_ARGUMENT, field)


def test_one_2_well_formed_request_passes_validation() -> None:
    validate_start_request(
        request(
            prompt=(TextBlock(""), DataBlock({"k": [1, 2.5, None]})),
            label="fix the build",
            persona="",
            tool_filter=ToolFilter(allow=(), deny=("rm",)),
            agent_options=AgentOptions(provider="p", model="m", max_tokens=1, subagent_depth=0),
        )
    )


def test_one_2_tool_filter_is_detached_into_tuples() -> None:
    checked = validate_tool_filter(ToolFilter(allow=["a", "b"]))  # type: ignore[arg-type]
    assert checked == ToolFilter(allow=("a", "b"))


def test_one_2_admission_runs_the_schema_check_after_the_depth_domain() -> None:
    seen: list[object] = []
    admit_start_request(full_request(), ALL, check_schema=seen.append)
    assert seen == [SCHEMA]
    with pytest.raises(SubagentError) as caught:
        admit_start_request(
            request(max_depth=-1, output_schema=SCHEMA), ALL, check_schema=seen.append
        )
    assert caught.value.field == "request.max_depth"
    assert seen == [SCHEMA]  # the depth domain is refused before the schema is looked at
