"""The frozen-JSON freezer: validated once, certified, never copied twice (HARNESS-20)."""

from __future__ import annotations

import pytest

from dsh_subagent.adapters.frozen_json import (
    EMPTY,
    FrozenDict,
    FrozenList,
    freeze_checked,
    freeze_decoded,
    freeze_json,
    is_certified,
)
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import JsonValue


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


def test_harness_20_a_decoded_value_is_certified_as_it_is_frozen() -> None:
    decoded: JsonValue = {"a": [1, {"b": "c"}, []], "e": {}, "s": "t"}
    frozen = freeze_decoded(decoded)
    assert frozen == {"a": [1, {"b": "c"}, []], "e": {}, "s": "t"}
    assert is_certified(frozen)
    assert isinstance(frozen, dict)
    assert is_certified(frozen["a"])
    assert frozen["e"] is EMPTY
    assert freeze_checked(frozen, "data") is frozen
    deep: JsonValue = 0
    for _ in range(100):  # past the fast depth: the general path
        deep = [deep]
    assert freeze_decoded(deep) == deep
    assert is_certified(freeze_decoded(deep))
    assert freeze_decoded("x") == "x"


def test_harness_20_a_hand_built_frozen_container_is_checked_like_any_other() -> None:
    with pytest.raises(SubagentError) as bad:
        freeze_checked(FrozenDict({"k": FrozenList([float("nan")])}), "data")
    assert (bad.value.code, bad.value.field) == (ErrorCode.INVALID_ARGUMENT, "data.k[0]")
    rebuilt = freeze_checked(FrozenList([1]), "data")
    assert rebuilt == [1]
    assert is_certified(rebuilt)
