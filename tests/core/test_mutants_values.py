"""Value rules the mutation check found unpinned (docs/mutation.md lists each mutant)."""

from __future__ import annotations

import pytest

from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import (
    SUMMARY_LIMIT,
    KnownStop,
    SubagentResult,
    TextBlock,
    as_content,
    bound_summary,
    output_text,
)


def test_one_11_a_plain_string_is_one_text_block() -> None:
    assert as_content("hi") == (TextBlock("hi"),)


def test_one_11_output_text_reads_only_text_blocks() -> None:
    output = ({"type": "data", "text": "no"}, {"type": "text", "text": "yes"})
    assert output_text(output) == "yes"


def test_notice_9_a_summary_of_exactly_the_limit_is_kept_whole() -> None:
    summary = "s" * SUMMARY_LIMIT
    assert bound_summary(summary) == summary


def test_struct_output_as_without_a_structured_value_says_how_to_get_one() -> None:
    with pytest.raises(SubagentError) as info:
        SubagentResult((), KnownStop.COMPLETED).output_as(int)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    assert info.value.field == "structured"
    assert info.value.message == (
        "structured: the run has no structured value (start it with an output_schema)"
    )


class _Refuser:
    """A factory without a ``__name__`` that refuses every value."""

    def __call__(self, value: object) -> object:
        raise ValueError("no")

    def __repr__(self) -> str:
        return "<refuser>"


def test_struct_output_as_names_a_nameless_factory_by_its_repr() -> None:
    result = SubagentResult((), KnownStop.COMPLETED, structured=1, has_structured=True)
    with pytest.raises(SubagentError) as info:
        result.output_as(_Refuser())
    assert info.value.field == "structured"
    assert info.value.message == "structured: the value does not fit <refuser>: no"
