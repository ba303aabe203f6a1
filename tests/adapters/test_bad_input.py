"""Bad input at every public entry: a typed refusal naming the caller's field, no side effect.

Each test drives the service through its public API in a world with a parent, a resident
child (``warm``, held running at a gate) and a cold child (``cold``, only persisted), and
compares a snapshot of everything a refusal must leave unchanged (DESIGN decision 10).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import partial

import pytest

from dsh_subagent.adapters.continuation_types import ParentAgent
from dsh_subagent.adapters.frozen_json import freeze_checked
from dsh_subagent.adapters.service import SubagentService
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.limits import Limits
from dsh_subagent.core.manager.events import ReportDelivery
from dsh_subagent.core.values import (
    AgentOptions,
    CoordinatorSource,
    DataBlock,
    JsonValue,
    SessionId,
    TextBlock,
)
from tests.adapters.bad_input_world import BadInputWorld, text
from tests.adapters.service_world import FakeProvider, World, ask
from tests.flat_intent import evolve_flat

Scenario = Callable[[BadInputWorld], Awaitable[object]]


def run_in_world(scenario: Callable[[BadInputWorld], Awaitable[None]]) -> None:
    async def main() -> None:
        world = await BadInputWorld().open()
        try:
            await scenario(world)
        finally:
            await world.close()

    asyncio.run(main())


async def refused(world: BadInputWorld, call: Scenario) -> SubagentError:
    """Run ``call``; it must raise a typed error and leave the world as it was."""
    before = await world.snapshot()
    with pytest.raises(SubagentError) as raised:
        await call(world)
    assert raised.value.field is not None
    assert await world.snapshot() == before
    return raised.value


async def field_of(world: BadInputWorld, call: Scenario) -> str | None:
    error = await refused(world, call)
    assert error.code is ErrorCode.INVALID_ARGUMENT
    return error.field


def nested(depth: int, leaf: JsonValue = 0) -> JsonValue:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def cyclic_list() -> list[object]:
    cycle: list[object] = [1]
    cycle.append(cycle)
    return cycle


def cyclic_dict() -> dict[str, object]:
    cycle: dict[str, object] = {"a": 1}
    cycle["self"] = {"again": cycle}
    return cycle


async def start_continuable(world: BadInputWorld, **fields: object) -> object:
    return await world.service.start_continuable(world.spec(child_id="c", **fields))


async def followup(world: BadInputWorld, content: object, child: str = "cold") -> object:
    parent = world.parent
    return await world.service.followup(
        SessionId(child),
        content,  # type: ignore[arg-type]
        ParentAgent(parent),
        source=CoordinatorSource(parent.id),
    )


async def start(world: BadInputWorld, prompt: object = None, **fields: object) -> object:
    changes = fields if prompt is None else {**fields, "prompt": prompt}
    request = evolve_flat(ask(world.parent), **changes)
    return await world.service.start("fake", request)


# --------------------------------------------------------------------------- side effects


@pytest.mark.parametrize(
    ("block", "field"),
    [
        (DataBlock(float("nan")), "spec.prompt[1].value"),
        (DataBlock(b"raw"), "spec.prompt[1].value"),
        (DataBlock({"k": ["ok", "\ud800"]}), "spec.prompt[1].value.k[1]"),
        (TextBlock("\udfff"), "spec.prompt[1].text"),
    ],
)
def test_cont_1_start_continuable_bad_prompt_has_no_side_effect_and_a_retry_starts(
    block: DataBlock | TextBlock, field: str
) -> None:
    async def scenario(world: BadInputWorld) -> None:
        async def bad(w: BadInputWorld) -> object:
            return await start_continuable(w, prompt=(TextBlock("go"), block))

        assert await field_of(world, bad) == field
        started = await world.service.start_continuable(world.spec(child_id="c"))
        assert started.child_id == "c"  # not DUPLICATE_CHILD: nothing was reserved

    run_in_world(scenario)


def test_cont_1_start_continuable_blank_prompt_refused() -> None:
    async def scenario(world: BadInputWorld) -> None:
        for prompt in (text(""), text(" \n\t"), (), " ", (TextBlock(" "), "raw")):

            async def bad(w: BadInputWorld, prompt: object = prompt) -> object:
                return await start_continuable(w, prompt=prompt)

            assert (await field_of(world, bad) or "").startswith("spec.prompt")

    run_in_world(scenario)


def test_cont_14_followup_bad_content_does_not_cold_resume() -> None:
    async def scenario(world: BadInputWorld) -> None:
        for content, field in [
            ((DataBlock(float("inf")),), "content[0].value"),
            ((TextBlock("ok"), DataBlock({"n": [1, 2**60]})), "content[1].value.n[1]"),
            ((TextBlock("ok"), 5), "content[1]"),
            ([TextBlock(b"x")], "content[0].text"),  # type: ignore[arg-type]
        ]:

            async def bad(w: BadInputWorld, content: object = content) -> object:
                return await followup(w, content)

            assert await field_of(world, bad) == field
        assert world.world.registry.get(SessionId("cold")) is None

    run_in_world(scenario)


def test_cont_14_followup_blank_content_refused() -> None:
    async def scenario(world: BadInputWorld) -> None:
        for child in ("cold", "warm"):
            for content in (text(""), text("  "), (TextBlock(" "), TextBlock("\n")), ()):

                async def bad(w: BadInputWorld, c: object = content, to: str = child) -> object:
                    return await followup(w, c, to)

                assert await field_of(world, bad) == "content"

    run_in_world(scenario)


def test_cont_30_report_from_bad_content_refused_before_delivery() -> None:
    async def scenario(world: BadInputWorld) -> None:
        for content, field in [
            ((DataBlock(cyclic_list()),), "content[0].value[1]"),  # type: ignore[arg-type]
            ((DataBlock(nested(100)),), "content[0].value" + "[0]" * 64),
            (5, "content"),  # a string is one text block, but a number is no content
        ]:

            async def bad(w: BadInputWorld, content: object = content) -> object:
                return w.service.report_from(
                    w.resident,
                    content,  # type: ignore[arg-type]
                    delivery=ReportDelivery.QUIET,
                )

            assert await field_of(world, bad) == field

    run_in_world(scenario)


# --------------------------------------------------------------------------- shape


def test_err_18_cycles_are_refused_at_every_entry() -> None:
    async def scenario(world: BadInputWorld) -> None:
        for cycle, where in ((cyclic_list(), "[1]"), (cyclic_dict(), ".self.again")):
            block = (DataBlock(cycle),)  # type: ignore[arg-type]
            schema = {"type": "object", "default": cycle}
            cases: list[tuple[Scenario, str]] = [
                (partial(start, prompt=block), "request.prompt[0].value"),
                (partial(start, output_schema=schema), "request.output_schema.default"),
                (partial(start_continuable, prompt=block), "spec.prompt[0].value"),
                (partial(followup, content=block), "content[0].value"),
                (partial(followup, content=block, child="warm"), "content[0].value"),
            ]
            for call, field in cases:
                assert await field_of(world, call) == field + where

    run_in_world(scenario)


def test_err_18_deep_values_are_refused_without_recursion() -> None:
    async def scenario(world: BadInputWorld) -> None:
        deep = nested(2_000)
        block = (DataBlock(deep),)
        schema = {"type": "object", "default": nested(5_000)}
        cases: list[tuple[Scenario, str]] = [
            (partial(start, prompt=block), "request.prompt[0].value"),
            (partial(start, output_schema=schema), "request.output_schema.default"),
            (partial(start_continuable, prompt=block), "spec.prompt[0].value"),
            (lambda w: followup(w, (DataBlock(nested(256_000)),)), "content[0].value"),
        ]
        for call, field in cases:
            error = await refused(world, call)
            assert (error.field or "").startswith(field)
            assert "nests deeper than 64 levels" in str(error)

    run_in_world(scenario)


def test_err_18_the_freezer_is_iterative_and_cycle_safe() -> None:
    deep = nested(100_000)
    frozen = freeze_checked(deep, "data")
    node = frozen
    for _ in range(100_000):
        assert isinstance(node, list)
        node = node[0]
    assert node == 0
    with pytest.raises(SubagentError) as raised:
        freeze_checked(cyclic_list(), "data")
    assert raised.value.field == "data[1]"


def test_err_18_validated_content_is_frozen_against_later_mutation() -> None:
    async def scenario(world: BadInputWorld) -> None:
        value: dict[str, JsonValue] = {"k": [1]}
        sending = asyncio.ensure_future(followup(world, (TextBlock("more"), DataBlock(value))))
        await asyncio.sleep(0)  # the cold resume is under way (awaiting the store)
        value["k"] = float("nan")  # would be refused now; the validated copy is what is sent
        message_id = await sending
        child = world.world.registry.get(SessionId("cold"))
        assert child is not None
        inserted = [
            message
            for event in child.session.events
            if event.type == "agent/inbox/spliced"
            for message in event.data["inserted"]  # type: ignore[index,call-overload,union-attr]
            if message["id"] == message_id  # type: ignore[index,call-overload]
        ]
        assert inserted[0]["content"][1] == {"type": "data", "value": {"k": [1]}}  # type: ignore[index,call-overload]

    run_in_world(scenario)


# --------------------------------------------------------------------------- acceptance


def test_err_18_agent_options_of_the_wrong_type_are_refused() -> None:
    async def scenario(world: BadInputWorld) -> None:
        for options in ("fast", 5, {"model": "m"}):
            assert await field_of(world, partial(start, agent_options=options)) == (
                "request.agent_options"
            )
            assert await field_of(world, partial(start_continuable, agent_options=options)) == (
                "spec.agent_options"
            )
        bad = AgentOptions(max_tokens=0)
        assert await field_of(world, partial(start_continuable, agent_options=bad)) == (
            "spec.agent_options.max_tokens"
        )

    run_in_world(scenario)


@pytest.mark.parametrize("label", ["two\nlines", "\x1b[31mred\x1b[0m", "nul\x00", "a\u2028b", ""])
def test_err_18_labels_must_be_single_line_text(label: str) -> None:
    async def scenario(world: BadInputWorld) -> None:
        assert await field_of(world, partial(start, label=label)) == "request.label"
        assert await field_of(world, partial(start_continuable, label=label)) == ("spec.label")

    run_in_world(scenario)


@pytest.mark.parametrize("child_id", [" c ", "c ", "\tc", "c\n", "c\x1b", "", "x" * 257, 5])
def test_err_18_child_ids_are_validated(child_id: object) -> None:
    async def scenario(world: BadInputWorld) -> None:
        assert await field_of(
            world, lambda w: w.service.start_continuable(w.spec(child_id=child_id))
        ) == ("spec.child_id")

        async def send(w: BadInputWorld) -> object:
            return await w.service.followup(
                child_id,  # type: ignore[arg-type]
                text("more"),
                ParentAgent(w.parent),
                source=CoordinatorSource(w.parent.id),
            )

        assert await field_of(world, send) == "child_id"

    run_in_world(scenario)


def test_err_18_oversize_label_and_follow_up_are_refused_by_the_default_limits() -> None:
    async def scenario(world: BadInputWorld) -> None:
        limits = world.service.limits
        assert limits == Limits()
        label = "é" * (limits.label_bytes // 2 + 1)  # two bytes each: just over the bound
        assert await field_of(world, partial(start_continuable, label=label)) == ("spec.label")
        big = text("x" * (limits.message_bytes + 1))
        assert await field_of(world, lambda w: followup(w, big)) == "content"
        split = (TextBlock("x" * limits.message_bytes), DataBlock({"k": 1}))
        assert await field_of(world, lambda w: followup(w, split, "warm")) == "content"
        assert await field_of(world, partial(start, prompt=big)) == "request.prompt"
        schema = {"type": "object", "description": "d" * limits.schema_bytes}
        assert await field_of(world, partial(start, output_schema=schema)) == (
            "request.output_schema"
        )

    run_in_world(scenario)


def test_err_18_limits_are_configurable_on_the_service() -> None:
    async def main() -> None:
        world = World()
        service = SubagentService(world.registry, world.store, limits=Limits(label_bytes=8))
        fake = FakeProvider()
        service.register_provider(fake)
        parent = await world.parent()
        with pytest.raises(SubagentError) as raised:
            await service.start("fake", ask(parent, label="nine char"))
        assert raised.value.field == "request.label"
        assert fake.requests == []
        await service.start("fake", ask(parent, label="eight ch"))
        assert len(fake.requests) == 1

    asyncio.run(main())
    with pytest.raises(SubagentError) as raised:
        Limits(nesting_depth=0)
    assert raised.value.field == "limits.nesting_depth"
    with pytest.raises(SubagentError) as raised:
        SubagentService(limits="small")  # type: ignore[arg-type]
    assert raised.value.field == "limits"


@pytest.mark.parametrize(
    ("schema", "field"),
    [
        ({"type": "object", "properties": {"a": False}, "required": ["a"]}, "required"),
        ({"type": "object", "additionalProperties": False, "required": ["a"]}, "required"),
        ({"type": "object", "minProperties": 3, "maxProperties": 1}, "minProperties"),
        ({"type": "object", "enum": []}, "enum"),
        (
            {
                "type": "object",
                "properties": {"n": {"type": "integer", "minimum": 2, "maximum": 1}},
            },
            "properties.n.minimum",
        ),
        (
            {
                "type": "object",
                "properties": {"s": {"type": "string", "minLength": 3, "maxLength": 2}},
            },
            "properties.s.minLength",
        ),
        (
            {"type": "object", "properties": {"l": {"items": {"enum": []}}}},
            "properties.l.items.enum",
        ),
        (
            {"type": "object", "properties": {"l": {"minItems": 2, "maxItems": 1}}},
            "properties.l.minItems",
        ),
        ({"type": "object", "properties": {"x": {"anyOf": [False, False]}}}, "properties.x.anyOf"),
        (
            {"type": "object", "additionalProperties": {"anyOf": [{"enum": []}]}},
            "additionalProperties.anyOf[0].enum",
        ),
    ],
)
def test_struct_1_an_unsatisfiable_output_schema_is_refused(
    schema: dict[str, object], field: str
) -> None:
    async def scenario(world: BadInputWorld) -> None:
        assert await field_of(world, partial(start, output_schema=schema)) == (
            f"request.output_schema.{field}"
        )

    run_in_world(scenario)


def test_struct_1_false_and_invalid_schemas_are_refused() -> None:
    async def scenario(world: BadInputWorld) -> None:
        for schema, field in [
            (False, "request.output_schema"),
            ({"type": "object", "properties": {"a": {"type": "nope"}}}, "request.output_schema"),
            ({"type": "object", "maximum": 2**60}, "request.output_schema.maximum"),
        ]:
            got = await field_of(world, partial(start, output_schema=schema))
            assert (got or "").startswith(field)

    run_in_world(scenario)


def test_err_18_integers_outside_the_json_safe_range_are_refused() -> None:
    async def scenario(world: BadInputWorld) -> None:
        for number in (2**53, -(2**53), 10**30):
            block = (DataBlock({"n": number}),)
            assert await field_of(world, partial(start, prompt=block)) == (
                "request.prompt[0].value.n"
            )
            assert await field_of(world, partial(start_continuable, prompt=block)) == (
                "spec.prompt[0].value.n"
            )
        edge = (DataBlock([2**53 - 1, -(2**53 - 1)]),)
        await world.service.start_continuable(world.spec(edge, child_id="c"))

    run_in_world(scenario)


def test_err_18_a_provider_name_of_the_wrong_type_is_refused() -> None:
    async def scenario(world: BadInputWorld) -> None:
        async def bad(w: BadInputWorld) -> object:
            return await w.service.start(["fake"], ask(w.parent))  # type: ignore[arg-type]

        assert await field_of(world, bad) == "name"

    run_in_world(scenario)
