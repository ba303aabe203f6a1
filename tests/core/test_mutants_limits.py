"""Input-limit rules the mutation check found unpinned (docs/mutation.md lists each mutant).

Refusals are pinned by their exact field and message, and each bound at its edge: a value of
exactly the limit passes, and an oversize value is refused as soon as the walk passes the
bound, before a later malformed part is even looked at (limits rule 2).
"""

from __future__ import annotations

import pytest

from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.limits import (
    Limits,
    check_child_id,
    check_content,
    check_label,
    check_schema_value,
)
from dsh_subagent.core.values import DataBlock, JsonValue, TextBlock


def _refused(field: str, message: str, call: object, *args: object) -> None:
    assert callable(call)
    with pytest.raises(SubagentError) as info:
        call(*args)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    assert info.value.field == field
    assert info.value.message == message


def test_err_18_a_limit_of_one_is_positive() -> None:
    assert Limits(nesting_depth=1, label_bytes=1, id_bytes=1).label_bytes == 1


def test_err_18_a_label_of_exactly_the_limit_passes_and_one_more_is_refused() -> None:
    limits = Limits(label_bytes=4)
    assert check_label("abcd", "label", limits) == "abcd"
    _refused("label", "label: is longer than 4 bytes", check_label, "abcde", "label", limits)


def test_err_18_a_control_character_is_refused_by_name() -> None:
    _refused(
        "label",
        "label: must not contain control characters (newlines, escapes, NUL)",
        check_label,
        "a\nb",
        "label",
    )


def test_err_18_a_child_id_with_surrounding_whitespace_is_refused_by_name() -> None:
    _refused("id", "id: must not have surrounding whitespace", check_child_id, " c", "id")


def test_err_18_a_text_block_that_is_not_a_string_is_refused_by_path() -> None:
    _refused(
        "p[0].text",
        "p[0].text: expected a string, got int",
        check_content,
        (TextBlock(5),),  # type: ignore[arg-type]
        "p",
    )


def test_err_18_a_text_block_with_a_lone_surrogate_is_refused_by_path() -> None:
    _refused(
        "p[0].text",
        "p[0].text: string contains a lone surrogate",
        check_content,
        (TextBlock("a\ud800"),),
        "p",
    )


def test_err_18_content_of_exactly_the_limit_passes_and_one_more_is_refused() -> None:
    limits = Limits(message_bytes=2)
    assert check_content((TextBlock("ab"),), "p", limits) == (TextBlock("ab"),)
    _refused("p", "p: is larger than 2 bytes", check_content, (TextBlock("abc"),), "p", limits)


def test_err_18_an_oversize_data_block_is_refused_before_its_later_parts() -> None:
    # The walk visits the long string first (a stack), so only the bound can stop it
    # before the non-JSON float.
    value: list[JsonValue] = [float("nan"), "x" * 64]
    _refused(
        "p",
        "p: is larger than 8 bytes",
        check_content,
        (DataBlock(value),),
        "p",
        Limits(message_bytes=8),
    )


def test_err_18_a_schema_of_exactly_the_limit_passes() -> None:
    check_schema_value("abc", "schema", Limits(schema_bytes=4))
    _refused(
        "schema",
        "schema: is larger than 3 bytes",
        check_schema_value,
        "abc",
        "schema",
        Limits(schema_bytes=3),
    )


def test_err_18_an_oversize_schema_is_refused_before_its_later_parts() -> None:
    value = [float("nan"), "x" * 64]
    _refused(
        "schema",
        "schema: is larger than 8 bytes",
        check_schema_value,
        value,
        "schema",
        Limits(schema_bytes=8),
    )
