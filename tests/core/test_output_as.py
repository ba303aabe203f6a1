"""``SubagentResult.output_as``: the structured value as a typed object (issue 20)."""

from __future__ import annotations

import dataclasses

import attrs
import pytest

from dsh_subagent import ErrorCode, KnownStop, SubagentError, SubagentResult


def with_value(value: object) -> SubagentResult:
    return SubagentResult((), KnownStop.COMPLETED, structured=value, has_structured=True)  # type: ignore[arg-type]


@attrs.frozen
class Verdict:
    ok: bool
    reasons: list[str]


@dataclasses.dataclass
class Count:
    n: int


class Validated:
    """Has ``model_validate``, as a pydantic model does."""

    def __init__(self, value: object) -> None:
        self.value = value

    @classmethod
    def model_validate(cls, value: object) -> Validated:
        if not isinstance(value, dict):
            raise ValueError("not an object")
        return cls(value)


def test_struct_output_as_builds_a_class_from_a_json_object() -> None:
    result = with_value({"ok": True, "reasons": ["tests pass"]})
    assert result.output_as(Verdict) == Verdict(ok=True, reasons=["tests pass"])
    assert with_value({"n": 3}).output_as(Count) == Count(3)


def test_struct_output_as_passes_a_scalar_to_the_factory() -> None:
    assert with_value("42").output_as(int) == 42


def test_struct_output_as_uses_model_validate_when_the_class_has_it() -> None:
    assert with_value({"k": 1}).output_as(Validated).value == {"k": 1}


@pytest.mark.parametrize(("value", "kind"), [({"ok": True}, Verdict), ("x", int), ([1], Validated)])
def test_struct_output_as_a_value_that_does_not_fit_names_structured(
    value: object, kind: type
) -> None:
    with pytest.raises(SubagentError) as raised:
        with_value(value).output_as(kind)
    assert (raised.value.code, raised.value.field) == (ErrorCode.INVALID_ARGUMENT, "structured")
    assert f"does not fit {kind.__name__}" in raised.value.message
    assert isinstance(raised.value.cause, TypeError | ValueError)


def test_struct_output_as_without_a_structured_value_is_refused() -> None:
    with pytest.raises(SubagentError) as raised:
        SubagentResult((), KnownStop.COMPLETED).output_as(Count)
    assert (raised.value.code, raised.value.field) == (ErrorCode.INVALID_ARGUMENT, "structured")
    assert "output_schema" in raised.value.message
