"""The boundary's limits and the iterative JSON check (DESIGN decision 10)."""

from __future__ import annotations

import attrs
import pytest

from dsh_subagent.core.capabilities import validate_agent_options, validate_intent
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.jsonvalue import SAFE_INT, check_json, utf8_size
from dsh_subagent.core.limits import (
    DEFAULT_LIMITS,
    Limits,
    check_child_id,
    check_content,
    check_label,
    check_schema_value,
)
from dsh_subagent.core.values import DataBlock, SubagentIntent, TextBlock, ToolFilter


def _field(call: object, *args: object, **kwargs: object) -> str | None:
    with pytest.raises(SubagentError) as raised:
        call(*args, **kwargs)  # type: ignore[operator]
    assert raised.value.code is ErrorCode.INVALID_ARGUMENT
    return raised.value.field


def _nested(depth: int) -> object:
    value: object = None
    for index in range(depth):
        value = [value] if index % 2 else {"k": value}
    return value


def test_err_18_check_json_measures_strings_keys_and_values() -> None:
    assert check_json(None, "v") == 1
    assert check_json({"ab": ["é", 1.5, True]}, "v") == 1 + 2 + 1 + (1 + 2) + 1 + 1
    assert utf8_size("é") == 2
    assert utf8_size("\ud800") is None


def test_err_18_check_json_names_the_path_of_a_bad_member() -> None:
    assert _field(check_json, {"a": [0, {"b": float("nan")}]}, "f") == "f.a[1].b"
    assert _field(check_json, [{"k": "\udc00"}], "f") == "f[0].k"
    assert _field(check_json, {"\udc00": 1}, "f") == "f"
    assert _field(check_json, {3: 1}, "f") == "f"
    assert _field(check_json, [b"x"], "f") == "f[0]"


def test_err_18_check_json_refuses_cycles_and_accepts_shared_members() -> None:
    cycle: list[object] = []
    cycle.append({"again": cycle})
    assert _field(check_json, cycle, "f") == "f[0].again"
    shared = [1, 2]
    assert check_json({"a": shared, "b": shared}, "f") == 1 + 1 + 3 + 1 + 3


def test_err_18_check_json_is_iterative_at_any_depth_and_bounds_it() -> None:
    deep = _nested(300_000)
    assert check_json(deep, "f") > 300_000
    with pytest.raises(SubagentError) as raised:
        check_json(_nested(10), "f", max_depth=4)
    assert raised.value.field == "f[0].k[0].k"
    assert "nests deeper than 4 levels" in str(raised.value)
    check_json(_nested(4), "f", max_depth=4)


def test_err_18_check_json_stops_once_over_the_size_bound() -> None:
    wide = ["abcd"] * 1_000
    assert check_json(wide, "f", max_size=10) == 11  # stopped early, over the bound
    assert check_json(wide, "f", max_size=10**6) == 1 + 1_000 * 5


def test_err_18_safe_ints_are_checked_only_when_asked() -> None:
    assert check_json(2**60, "f") == 1
    check_json([SAFE_INT, -SAFE_INT], "f", safe_ints=True)
    assert _field(check_json, [SAFE_INT + 1], "f", safe_ints=True) == "f[0]"
    assert _field(check_json, {"n": -SAFE_INT - 1}, "f", safe_ints=True) == "f.n"


def test_err_18_limits_are_positive_ints_with_documented_defaults() -> None:
    assert Limits(64, 1024, 256, 4 * 1024 * 1024, 256 * 1024) == DEFAULT_LIMITS
    assert _field(Limits, label_bytes=0) == "limits.label_bytes"
    assert _field(Limits, id_bytes=True) == "limits.id_bytes"


@pytest.mark.parametrize("label", ["", " ", "a\nb", "\x1b[1m", "\x00", "\x85", "\u2028", 3])
def test_err_18_label_refusals(label: object) -> None:
    assert _field(check_label, label, "spec.label") == "spec.label"


def test_err_18_label_bounds_count_utf8_bytes() -> None:
    limits = Limits(label_bytes=4)
    assert check_label("ab é", "l", Limits(label_bytes=5)) == "ab é"
    assert _field(check_label, "abcde", "l", limits) == "l"
    assert _field(check_label, "abé", "l", Limits(label_bytes=3)) == "l"
    assert check_label("tab-free \u00e9 \U0001f600", "l") == "tab-free \u00e9 \U0001f600"


def test_err_18_child_id_refusals() -> None:
    assert check_child_id("c-1", "id") == "c-1"
    for bad in (" c", "c ", "c\t", "\nc", "c\x07", "", "x" * 257):
        assert _field(check_child_id, bad, "id") == "id"


def test_err_18_content_is_a_bounded_non_blank_sequence_of_blocks() -> None:
    assert check_content([TextBlock("hi")], "c") == (TextBlock("hi"),)
    assert check_content((TextBlock(" "), DataBlock({"k": 1})), "c")
    assert check_content((), "c", non_blank=False) == ()
    assert check_content((TextBlock(" "),), "c", non_blank=False) == (TextBlock(" "),)
    assert _field(check_content, (TextBlock(" "),), "c") == "c"
    assert _field(check_content, (), "c") == "c"
    assert _field(check_content, "hi", "c") == "c"
    assert _field(check_content, (TextBlock("x"), 5), "c") == "c[1]"
    assert _field(check_content, (TextBlock(5),), "c") == "c[0].text"  # type: ignore[arg-type]
    assert _field(check_content, (TextBlock("\ud800"),), "c") == "c[0].text"
    assert _field(check_content, (DataBlock([float("inf")]),), "c") == "c[0].value[0]"


def test_err_18_content_size_is_counted_across_blocks() -> None:
    limits = Limits(message_bytes=10)
    check_content((TextBlock("12345"), DataBlock("123")), "c", limits)  # 5 + (1 + 3)
    assert _field(check_content, (TextBlock("12345678901"),), "c", limits) == "c"
    assert _field(check_content, (TextBlock("123456"), DataBlock("1234")), "c", limits) == "c"
    assert _field(check_content, (TextBlock("x" * 10), DataBlock(None)), "c", limits) == "c"


def test_err_18_schema_values_are_bounded() -> None:
    check_schema_value({"type": "object"}, "s")
    assert _field(check_schema_value, {"d": "x" * 20}, "s", Limits(schema_bytes=10)) == "s"
    assert _field(check_schema_value, {"m": 2**53}, "s") == "s.m"
    assert _field(check_schema_value, _nested(70), "s") is not None


def test_err_18_agent_options_must_be_agent_options() -> None:
    assert _field(validate_agent_options, "fast", "spec.agent_options") == "spec.agent_options"


def test_err_18_one_intent_check_for_both_starts() -> None:
    intent = SubagentIntent((TextBlock("go"),))
    validate_intent(intent, "spec", DEFAULT_LIMITS)
    for name, value, field in [
        ("prompt", (TextBlock(""),), "spec.prompt"),
        ("tool_filter", ToolFilter(allow=("",)), "spec.tool_filter.allow[0]"),
        ("persona", 5, "spec.persona"),
        ("agent_options", "fast", "spec.agent_options"),
    ]:
        bad = attrs.evolve(intent, **{name: value})  # type: ignore[arg-type]
        assert _field(validate_intent, bad, "spec", DEFAULT_LIMITS) == field
    assert _field(validate_intent, intent, "spec", DEFAULT_LIMITS, label="a\nb") == "spec.label"
