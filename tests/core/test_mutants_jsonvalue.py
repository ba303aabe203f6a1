"""JSON-value rules the mutation check found unpinned (docs/mutation.md lists each mutant)."""

from __future__ import annotations

import pytest

from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.jsonvalue import check_json, require_int


def test_err_18_a_non_integer_is_refused_naming_its_type() -> None:
    with pytest.raises(SubagentError) as info:
        require_int("3", "count")
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    assert info.value.field == "count"
    assert info.value.message == "count: expected an integer, got str"


# The whole-core run at 7d8972a (docs/mutation.md).


def _refusal(value: object, *, safe_ints: bool = False) -> tuple[str | None, str]:
    with pytest.raises(SubagentError) as info:
        check_json(value, "v", safe_ints=safe_ints)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    return info.value.field, info.value.message


def test_err_18_an_unsafe_integer_and_a_cycle_are_refused_by_path_and_reason() -> None:
    assert _refusal({"n": [2**53]}, safe_ints=True) == (
        "v.n[0]",
        "v.n[0]: integer is outside the JSON-safe range ±(2**53-1)",
    )
    looped: list[object] = [1]
    looped.append(looped)
    assert _refusal(looped) == ("v[1]", "v[1]: the value contains itself (a cycle)")


def test_err_18_a_size_bound_stops_the_walk_only_once_it_is_passed() -> None:
    assert check_json([1, 2], "v", max_size=1) == 2  # passed: reported as above the bound
    assert check_json([1, 2], "v", max_size=3) == 3  # exactly at the bound: the whole walk
