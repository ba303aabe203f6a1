"""The frozen-JSON freezer: validated once, certified, never copied twice (HARNESS-20)."""

from __future__ import annotations

import pytest

from dsh_subagent.adapters.frozen_json import (
    EMPTY,
    FrozenDict,
    FrozenList,
    freeze_checked,
    freeze_json,
    is_certified,
)
from dsh_subagent.core.errors import ErrorCode, SubagentError


def test_harness_20_frozen_values_are_certified_and_returned_as_they_are() -> None:
    frozen = freeze_checked({"a": [1, {"b": "c"}], "e": {}}, "data")
    assert frozen == {"a": [1, {"b": "c"}], "e": {}}
    assert is_certified(frozen)
    assert freeze_checked(frozen, "data") is frozen
    assert freeze_json(frozen) is frozen
    assert isinstance(frozen, FrozenDict)
    assert isinstance(frozen["a"], FrozenList)
    assert frozen["e"] is EMPTY
    assert freeze_json({"x": (1, 2)}) == {"x": [1, 2]}
    assert not is_certified(FrozenDict())
    assert not is_certified({})
    assert is_certified(None)


def test_harness_20_a_hand_built_frozen_container_is_checked_like_any_other() -> None:
    with pytest.raises(SubagentError) as bad:
        freeze_checked(FrozenDict({"k": FrozenList([float("nan")])}), "data")
    assert (bad.value.code, bad.value.field) == (ErrorCode.INVALID_ARGUMENT, "data.k[0]")
    rebuilt = freeze_checked(FrozenList([1]), "data")
    assert rebuilt == [1]
    assert is_certified(rebuilt)
