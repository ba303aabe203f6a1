"""Output schemas: the supported subset and argument validation (STRUCT-1, STRUCT-3, ONE-2)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh_subagent.adapters.schema import (
    SUPPORTED_KEYWORDS,
    check_output_schema,
    schema_violations,
)
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import JsonObject

GOOD: JsonObject = {
    "type": "object",
    "title": "Answer",
    "properties": {
        "answer": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "kind": {"anyOf": [{"const": "a"}, {"enum": ["b", "c"]}]},
    },
    "required": ["answer"],
    "additionalProperties": False,
}


def test_struct_1_a_subset_schema_is_accepted_unchanged() -> None:
    assert check_output_schema(GOOD) is GOOD
    assert check_output_schema({"type": "object", "additionalProperties": {"type": "string"}})


@pytest.mark.parametrize(
    ("schema", "field"),
    [
        ([], "request.output_schema"),
        ({"type": "string"}, "request.output_schema.type"),
        ({"type": "object", "$ref": "#/$defs/x"}, "request.output_schema.$ref"),
        (
            {"type": "object", "properties": {"a": {"oneOf": []}}},
            "request.output_schema.properties.a.oneOf",
        ),
        ({"type": "object", "properties": []}, "request.output_schema.properties"),
        ({"type": "object", "properties": {"a": 3}}, "request.output_schema.properties.a"),
        ({"type": "object", "anyOf": []}, "request.output_schema.anyOf"),
        ({"type": "object", "items": {"not": {}}}, "request.output_schema.items.not"),
        ({"type": "object", "required": "answer"}, "request.output_schema.required"),
        (
            {"type": "object", "properties": {"a": {"minLength": -2}}},
            "request.output_schema.properties.a.minLength",
        ),
    ],
)
def test_struct_1_one_2_an_unsupported_or_malformed_schema_names_its_field(
    schema: object, field: str
) -> None:
    with pytest.raises(SubagentError) as caught:
        check_output_schema(schema)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert caught.value.field == field


def test_struct_3_violations_are_listed_in_a_stable_order() -> None:
    assert schema_violations(GOOD, {"answer": 1, "tags": ["x"]}) == ()
    assert schema_violations(GOOD, {"answer": -1, "extra": True}) == (
        "<root>: Additional properties are not allowed ('extra' was unexpected)",
        "answer: -1 is less than the minimum of 0",
    )


@given(st.sampled_from(sorted(SUPPORTED_KEYWORDS)), st.text(min_size=1).filter(str.isidentifier))
def test_struct_1_only_subset_keywords_pass_the_subset_walk(supported: str, other: str) -> None:
    schema: dict[str, object] = {"type": "object", other: {}}
    if other in SUPPORTED_KEYWORDS:
        return
    with pytest.raises(SubagentError) as caught:
        check_output_schema(schema)
    assert caught.value.field == f"request.output_schema.{other}"
    assert supported in SUPPORTED_KEYWORDS
