"""Start admission rules the mutation check found unpinned (docs/mutation.md lists each)."""

from __future__ import annotations

from dsh_subagent.core.capabilities import (
    admit_start_request,
    check_capabilities,
    validate_agent_options,
    validate_output_schema,
    validate_start_request,
)
from dsh_subagent.core.errors import ErrorCode
from dsh_subagent.core.limits import Limits
from dsh_subagent.core.values import JsonObject
from tests.core.test_capabilities import ALL, NONE, SCHEMA, refusal, request


def test_cap_1_an_unsupported_capability_is_named_in_the_message() -> None:
    error = refusal(check_capabilities, request(persona="terse"), NONE)
    assert (error.field, error.message) == (
        "persona",
        "the provider does not support the persona capability",
    )


def test_one_2_agent_options_of_the_wrong_type_are_refused_naming_the_field() -> None:
    error = refusal(validate_agent_options, {"model": "m"})
    assert (error.code, error.field, error.message) == (
        ErrorCode.INVALID_ARGUMENT,
        "request.agent_options",
        "request.agent_options: must be AgentOptions",
    )


def test_one_2_the_callers_limits_bound_the_schema_the_prompt_and_the_label() -> None:
    tight_schema = Limits(schema_bytes=8)
    assert refusal(validate_output_schema, SCHEMA, "s", tight_schema).field == "s"
    schema_request = request(output_schema=SCHEMA)
    assert refusal(validate_start_request, schema_request, tight_schema).field == (
        "request.output_schema"
    )
    checked: list[JsonObject] = []
    error = refusal(admit_start_request, schema_request, ALL, tight_schema, checked.append)
    assert (error.field, checked) == ("request.output_schema", [])
    tight_prompt = Limits(message_bytes=4)
    assert refusal(validate_start_request, request(), tight_prompt).field == "request.prompt"
    tight_label = Limits(label_bytes=2)
    labelled = request(label="long")
    assert refusal(validate_start_request, labelled, tight_label).field == "request.label"
    assert refusal(admit_start_request, labelled, NONE, tight_label).field == "request.label"
