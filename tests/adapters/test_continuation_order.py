"""One per-child order for follow-ups, through the public service (RES-6, CONT-22).

Follow-ups issued without awaiting each other reach the child in call order, and the ones
that arrive while an Activation is resuming or being torn down join one Activation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from dsh_subagent.adapters.continuation_types import ContinuableStartSpec, ParentAgent
from dsh_subagent.adapters.providers.base import ContinuableCreateRequest, ContinuableCreateSpec
from dsh_subagent.adapters.signals import AbortController
from dsh_subagent.core import wire
from dsh_subagent.core.lifecycle import SUBAGENT_START, RunStartInfo
from dsh_subagent.core.values import USER_MESSAGE, Content, SessionId, TextBlock, text_of
from tests.adapters.continuation_harness import Latch, yield_once
from tests.adapters.tools_world import ToolsWorld, run

C = SessionId("c")


def text(value: str) -> Content:
    return (TextBlock(value),)


async def started(world: ToolsWorld) -> list[RunStartInfo]:
    """Start child ``c`` under a root parent; return the list its starts are recorded in."""
    starts: list[RunStartInfo] = []
    world.service.on(SUBAGENT_START, starts.append)  # type: ignore[arg-type]
    parent = await world.parent()
    spec = ContinuableStartSpec("spawn", "worker", parent, text("first"), child_id=C)
    await world.service.start_continuable(spec)
    return starts


async def user_texts(world: ToolsWorld) -> list[str]:
    """The child's persisted user messages, in log order."""
    record = await world.persistence.inspect(C)
    texts = []
    for event in record.events:
        if event.type == USER_MESSAGE:
            assert isinstance(event.data, Mapping)
            texts.append(text_of(wire.decode_message(event.data["message"], "m").content))
    return texts


def test_res_6_followups_to_a_cold_child_join_one_activation_in_call_order() -> None:
    async def main() -> None:
        world = ToolsWorld()
        starts = await started(world)
        await world.settle()
        assert world.registry.get(C) is None  # cold: settled, released, persisted
        grant = world.service.user_authority()
        ids = await asyncio.gather(
            *(world.service.followup(C, text(f"m{i}"), grant) for i in range(5))
        )
        assert len(set(ids)) == 5
        await world.settle()
        assert await user_texts(world) == ["first", "m0", "m1", "m2", "m3", "m4"]
        assert [info.child_id for info in starts] == [C, C]  # the start and one cold resume

    run(main)


def test_cont_22_followups_during_teardown_join_the_next_single_activation() -> None:
    async def main() -> None:
        world = ToolsWorld()
        latch = Latch()
        # Only the final flush holds (acceptance commits pass: DUR-1).
        world.store.on_flush(
            lambda _s: latch.hold() if world.service.activation_state(C) is None else None
        )
        starts = await started(world)
        await latch.reached.wait()  # settled; its disposal holds at the final flush
        assert world.service.activation_state(C) is None
        assert world.registry.get(C) is not None
        grant = world.service.user_authority()
        pending = [
            asyncio.ensure_future(world.service.followup(C, text(f"m{i}"), grant)) for i in range(3)
        ]
        latch.open()
        await asyncio.gather(*pending)
        await world.settle()
        assert await user_texts(world) == ["first", "m0", "m1", "m2"]
        assert [info.child_id for info in starts] == [C, C]

    run(main)


def test_cont_20_a_followup_aborted_while_queued_is_skipped_and_the_order_kept() -> None:
    async def main() -> None:
        world = ToolsWorld()
        starts = await started(world)
        await world.settle()
        latch = Latch()
        inspect = world.persistence.inspect

        async def held_inspect(session_id: SessionId) -> object:
            await latch.hold()
            return await inspect(session_id)

        world.persistence.inspect = held_inspect  # type: ignore[assignment,method-assign]
        grant = world.service.user_authority()
        controller = AbortController()
        first = asyncio.ensure_future(world.service.followup(C, text("m0"), grant))
        await latch.reached.wait()  # m0 is cold-resuming the child
        aborted = asyncio.ensure_future(
            world.service.followup(C, text("m1"), grant, signal=controller.signal)
        )
        last = asyncio.ensure_future(world.service.followup(C, text("m2"), grant))
        await yield_once()  # both take their places behind m0 (one scheduling round)
        reason = RuntimeError("caller gave up")
        controller.abort(reason)
        latch.open()
        await asyncio.gather(first, last)
        with pytest.raises(RuntimeError) as raised:
            await aborted
        assert raised.value is reason
        await world.settle()
        assert await user_texts(world) == ["first", "m0", "m2"]
        assert [info.child_id for info in starts] == [C, C]

    run(main)


def test_cont_14_a_followup_during_the_start_joins_after_the_prompt() -> None:
    """A follow-up issued while the start awaits its provider waits for the start's acceptance
    and is delivered right after the prompt: never an internal transition error."""

    async def main() -> None:
        world = ToolsWorld()
        latch = Latch()
        prepare = world.spawn.prepare_continuable

        async def slow_prepare(request: ContinuableCreateRequest) -> ContinuableCreateSpec:
            await latch.hold()
            return await prepare(request)

        world.spawn.prepare_continuable = slow_prepare  # type: ignore[method-assign]
        parent = await world.parent()
        spec = ContinuableStartSpec("spawn", "worker", parent, text("first"), child_id=C)
        start = asyncio.ensure_future(world.service.start_continuable(spec))
        await latch.reached.wait()
        followup = asyncio.ensure_future(
            world.service.followup(C, text("second"), ParentAgent(parent))
        )
        await yield_once()
        latch.open()
        await start
        await followup
        await world.settle()
        assert await user_texts(world) == ["first", "second"]

    run(main)
