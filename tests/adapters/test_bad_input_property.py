"""Property: malformed input at any public entry is a typed refusal that changes nothing.

One world (a parent, a resident child held at a gate, a cold child) serves every example: a
refusal must leave it exactly as it was, so the snapshot taken before each call is compared
after it (DESIGN decision 10).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh_subagent.adapters.continuation_types import ParentAgent
from dsh_subagent.core.errors import SubagentError
from dsh_subagent.core.limits import DEFAULT_LIMITS
from dsh_subagent.core.manager.events import ReportDelivery
from dsh_subagent.core.values import (
    AgentOptions,
    CoordinatorSource,
    DataBlock,
    TextBlock,
    ToolFilter,
)
from tests.adapters.bad_input_world import BadInputWorld
from tests.adapters.service_world import ask
from tests.flat_intent import evolve_flat

Call = Callable[[BadInputWorld], Awaitable[object]]

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53 - 1), 2**53 - 1) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)


def _cyclic(kind: str) -> object:
    if kind == "list":
        cycle: list[object] = [0]
        cycle.append(cycle)
        return cycle
    loop: dict[str, object] = {}
    loop["again"] = [loop]
    return loop


def _deep(depth: int) -> object:
    value: object = 0
    for _ in range(depth):
        value = {"d": value} if depth % 2 else [value]
    return value


_not_json = st.one_of(
    st.sampled_from([float("nan"), float("inf"), -float("inf"), b"raw", "\ud800", object()]),
    st.integers(2**53, 2**80) | st.integers(-(2**80), -(2**53)),
    st.sampled_from(["list", "dict"]).map(_cyclic),
    st.integers(DEFAULT_LIMITS.nesting_depth + 1, 3_000).map(_deep),
    st.just({1: "int key"}),
    st.just({"\udc80": "surrogate key"}),
)


@st.composite
def _bad_json(draw: st.DrawFn) -> object:
    """A JSON value with one non-JSON value placed somewhere inside it."""
    bad = draw(_not_json)
    host = draw(_json)
    if isinstance(host, list):
        return [*host, bad]
    if isinstance(host, dict):
        return {**host, "bad": bad}
    return bad


class _Long(str):
    """Long text with a short repr, so a failing example stays readable."""

    def __repr__(self) -> str:
        return f"<{len(self)} chars>"


_oversize_text = st.just(_Long("x" * (DEFAULT_LIMITS.message_bytes + 1)))

_bad_content = st.one_of(
    _bad_json().map(lambda value: (TextBlock("hi"), DataBlock(value))),  # type: ignore[arg-type]
    st.sampled_from(["", " ", "\n\t"]).map(lambda blank: (TextBlock(blank),)),
    st.sampled_from([(), b"text", 5, None, [object()], (TextBlock("ok"), "raw")]),
    st.sampled_from([b"x", 5, "\ud800"]).map(lambda text: (TextBlock(text),)),  # type: ignore[arg-type]
    _oversize_text.map(lambda text: (TextBlock(text),)),
)

_bad_label = st.one_of(
    st.sampled_from(["", "a\nb", "\x1b[31m", "nul\x00", "a\x7fb", "\u2029", 5, b"l", "\udc00"]),
    st.just(_Long("l" * (DEFAULT_LIMITS.label_bytes + 1))),
)

_bad_id = st.one_of(
    st.sampled_from([" c", "c ", "", "c\n", "\x00", 7, ["c"], "\ud800"]),
    st.just(_Long("i" * (DEFAULT_LIMITS.id_bytes + 1))),
)

_bad_options = st.sampled_from(
    ["fast", 5, {"model": "m"}, AgentOptions(model=""), AgentOptions(max_tokens=0)]
)

_bad_schema = st.one_of(
    _bad_json().map(lambda value: {"type": "object", "default": value}),
    st.sampled_from(
        [
            False,
            True,
            [],
            {"type": "array"},
            {"type": "object", "properties": {"a": False}, "required": ["a"]},
            {"type": "object", "minProperties": 2, "maxProperties": 1},
            {"type": "object", "$ref": "#"},
        ]
    ),
)

_bad_start_field = st.one_of(
    st.tuples(st.just("prompt"), _bad_content),
    st.tuples(st.just("label"), _bad_label),
    st.tuples(st.just("output_schema"), _bad_schema),
    st.tuples(st.just("agent_options"), _bad_options),
    st.tuples(st.just("max_depth"), st.sampled_from([-1, "2", True, 2**70])),
    st.tuples(st.just("tool_filter"), st.sampled_from(["read", ToolFilter(), ToolFilter(("",))])),
    st.tuples(st.just("persona"), st.sampled_from([5, b"p", "\ud800"])),
)

_bad_spec_field = st.one_of(
    st.tuples(st.just("prompt"), _bad_content),
    st.tuples(st.just("label"), _bad_label),
    st.tuples(st.just("child_id"), _bad_id),
    st.tuples(st.just("agent_options"), _bad_options),
    st.tuples(st.just("provider"), st.sampled_from(["", 5])),
    st.tuples(st.just("max_depth"), st.sampled_from([-1, "2", False])),
    st.tuples(st.just("tool_filter"), st.sampled_from(["read", ToolFilter(deny=("a", "a"))])),
    st.tuples(st.just("persona"), st.sampled_from([5, "\udfff"])),
)


def _start(field: tuple[str, object]) -> Call:
    name, value = field

    async def call(world: BadInputWorld) -> object:
        request = evolve_flat(ask(world.parent), **{name: value})
        return await world.service.start("fake", request)

    return call


def _start_continuable(field: tuple[str, object]) -> Call:
    name, value = field

    async def call(world: BadInputWorld) -> object:
        spec = evolve_flat(world.spec(child_id="c"), **{name: value})
        return await world.service.start_continuable(spec)

    return call


def _followup(child_id: object, content: object) -> Call:
    async def call(world: BadInputWorld) -> object:
        return await world.service.followup(
            child_id,  # type: ignore[arg-type]
            content,  # type: ignore[arg-type]
            ParentAgent(world.parent),
            source=CoordinatorSource(world.parent.id),
        )

    return call


def _report(content: object) -> Call:
    async def call(world: BadInputWorld) -> object:
        return world.service.report_from(
            world.resident,
            content,  # type: ignore[arg-type]
            delivery=ReportDelivery.NEXT_STEP,
        )

    return call


def _blank_text(content: object) -> bool:
    """Text-only, whitespace-only content: a report may carry it (it is framed and sent)."""
    return isinstance(content, tuple) and all(
        isinstance(block, TextBlock) and isinstance(block.text, str) and not block.text.strip()
        for block in content
    )


_report_content = _bad_content.filter(lambda content: not _blank_text(content))

_calls = st.one_of(
    _bad_start_field.map(_start),
    _bad_spec_field.map(_start_continuable),
    st.builds(_followup, st.sampled_from(["warm", "cold"]), _bad_content),
    st.builds(_followup, _bad_id, st.just((TextBlock("more"),))),
    _report_content.map(_report),
)


def test_err_18_property_malformed_input_at_every_entry_changes_nothing() -> None:
    loop = asyncio.new_event_loop()
    world = loop.run_until_complete(BadInputWorld().open())

    @settings(max_examples=50)
    @given(_calls)
    def refused_without_side_effect(call: Call) -> None:
        async def attempt() -> None:
            before = await world.snapshot()
            with pytest.raises(SubagentError) as raised:
                await call(world)
            assert raised.value.field is not None
            assert await world.snapshot() == before

        loop.run_until_complete(attempt())

    try:
        refused_without_side_effect()
    finally:
        loop.run_until_complete(world.close())
        loop.close()
