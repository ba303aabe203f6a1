"""JSON-value rules the mutation check found unpinned (docs/mutation.md lists each mutant)."""

from __future__ import annotations

import pytest

from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.jsonvalue import require_int


def test_err_18_a_non_integer_is_refused_naming_its_type() -> None:
    with pytest.raises(SubagentError) as info:
        require_int("3", "count")
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    assert info.value.field == "count"
    assert info.value.message == "count: expected an integer, got str"
