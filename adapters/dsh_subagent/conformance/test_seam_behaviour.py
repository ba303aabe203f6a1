"""The service's one-shot and continuable behaviour, on the harness under test."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from dsh_subagent.adapters.continuation_types import (
    AncestorAuthority,
    ContinuableStartSpec,
    ParentAgent,
)
from dsh_subagent.adapters.protocols import Agent
from dsh_subagent.adapters.providers.base import StartRequest
from dsh_subagent.adapters.reference.scripted_model import fail, reply
from dsh_subagent.adapters.service import LifecyclePayload
from dsh_subagent.adapters.signals import AbortController
from dsh_subagent.conformance.probes import reasons
from dsh_subagent.conformance.support import (
    HarnessUnderTest,
    ModelBook,
    harness_test,
)
from dsh_subagent.core import wire
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.lifecycle import RunEndInfo, RunStartInfo
from dsh_subagent.core.residency import ActivationState
from dsh_subagent.core.values import (
    USER_MESSAGE,
    KnownStop,
    SessionId,
    SubagentSettledSource,
    TextBlock,
    TurnEndReason,
    UserMessage,
    text_of,
)


class Ends:
    """``subagent/start`` and ``subagent/end`` as the service emits them."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.ends: dict[str, RunEndInfo] = {}
        self.ended: dict[str, asyncio.Event] = {}

    def __call__(self, payload: LifecyclePayload) -> None:
        if isinstance(payload, RunStartInfo):
            self.log.append(f"start {payload.child_id}")
        elif isinstance(payload, RunEndInfo):
            child = payload.start.child_id
            self.log.append(f"end {child}")
            self.ends[child] = payload
            self.ended.setdefault(child, asyncio.Event()).set()

    async def of(self, child: str) -> None:
        await self.ended.setdefault(child, asyncio.Event()).wait()


def notices(agent: Agent) -> list[UserMessage]:
    found = []
    for event in agent.session.events:
        if event.type == USER_MESSAGE and isinstance(event.data, Mapping):
            message = wire.decode_message(event.data.get("message"), "message")
            if isinstance(message.source, SubagentSettledSource):
                found.append(message)
    return found


@harness_test
async def test_one_4_one_shot_spawn_runs_a_child_and_settles_completed(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    ends = Ends()
    for name in ("subagent/start", "subagent/end"):
        h.service.on(name, ends)
    parent = await h.create_agent("parent")
    request = StartRequest((TextBlock("do it"),), parent, AbortController().signal)
    started = await h.service.start("spawn", request)
    result = await started.result
    await started.dispose()
    assert result.stop_reason is KnownStop.COMPLETED
    assert "ok" in str(result.output)
    assert ends.log == [f"start {started.id}", f"end {started.id}"]


@harness_test
async def test_notice_6_continuable_child_settles_and_the_parent_gets_the_exact_notice(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    book.script("c1", reply("found it"))
    ends = Ends()
    h.service.on("subagent/end", ends)
    parent = await h.create_agent("parent")
    spec = ContinuableStartSpec(
        "spawn", "c1", parent, (TextBlock("look"),), child_id=SessionId("c1")
    )
    started = await h.service.start_continuable(spec)
    assert started.child_id == "c1"
    await ends.of("c1")
    await parent.when_idle()
    assert [text_of(n.content[:1]) for n in notices(parent)] == [
        "Background subagent c1 finished and will do no further work unless you send it more."
    ]
    assert h.service.activation_state(SessionId("c1")) is None


@harness_test
async def test_cont_14_followup_wakes_a_settled_child_for_a_new_turn(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    book.script("c1", reply("first"), fail("second fails"))
    parent = await h.create_agent("parent")
    spec = ContinuableStartSpec("spawn", "c1", parent, (TextBlock("a"),), child_id=SessionId("c1"))
    await h.service.start_continuable(spec)
    child = h.registry.get(SessionId("c1"))
    assert child is not None
    await child.when_idle()
    await h.service.followup(SessionId("c1"), (TextBlock("b"),), ParentAgent(parent))
    child = h.registry.get(SessionId("c1"))
    assert child is not None
    await child.when_idle()
    assert reasons(child) == [TurnEndReason.COMPLETED, TurnEndReason.ERROR]


@harness_test
async def test_cont_23_interrupt_aborts_the_running_turn_and_keeps_the_queue(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    gate = book.held("c1", reply("never"))
    parent = await h.create_agent("parent")
    spec = ContinuableStartSpec(
        "spawn", "c1", parent, (TextBlock("work"),), child_id=SessionId("c1")
    )
    await h.service.start_continuable(spec)
    await gate.reached()
    assert h.service.activation_state(SessionId("c1")) is ActivationState.RUNNING
    await h.service.followup(SessionId("c1"), (TextBlock("queued"),), ParentAgent(parent))
    h.service.interrupt(SessionId("c1"), AncestorAuthority(parent))
    child = h.registry.get(SessionId("c1"))
    assert child is not None
    await child.when_idle()
    assert reasons(child) == [TurnEndReason.ABORTED]
    assert len(child.pending()) == 1


@harness_test
async def test_harness_19_the_seam_reports_a_raising_final_flush_on_subagent_end(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    ends = Ends()
    h.service.on("subagent/end", ends)
    parent = await h.create_agent("parent")

    async def settle(child: str, *, durable: bool = True) -> RunEndInfo:
        spec = ContinuableStartSpec(
            "spawn", child, parent, (TextBlock("go"),), child_id=SessionId(child)
        )
        if durable:
            await h.service.start_continuable(spec)
        else:
            # Accepted but not durable: the write-ahead commit of the prompt failed too
            # (DUR-1); the child runs all the same.
            with pytest.raises(SubagentError) as refused:
                await h.service.start_continuable(spec)
            assert refused.value.code is ErrorCode.DURABILITY_FAILED
        await ends.of(child)
        return ends.ends[child]

    async def broken(_session: object) -> None:
        raise OSError("disk gone")

    confirmed = await settle("c1")
    stop = h.store.on_flush(broken)
    raised = await settle("c2", durable=False)
    stop()
    assert (confirmed.stop_reason, confirmed.durability_failed) == (KnownStop.COMPLETED, False)
    assert (raised.stop_reason, raised.durability_failed) == (KnownStop.COMPLETED, True)


@harness_test
async def test_harness_3_a_followup_right_after_an_interrupt_runs_once_the_abort_converges(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    gate = book.held("c1", reply("never"), reply("second"))
    parent = await h.create_agent("parent")
    spec = ContinuableStartSpec(
        "spawn", "c1", parent, (TextBlock("work"),), child_id=SessionId("c1")
    )
    await h.service.start_continuable(spec)
    await gate.reached()
    child = h.registry.get(SessionId("c1"))
    assert child is not None
    h.service.interrupt(SessionId("c1"), AncestorAuthority(parent))
    await h.service.followup(SessionId("c1"), (TextBlock("again"),), ParentAgent(parent))
    await child.when_idle()
    assert reasons(child) == [TurnEndReason.ABORTED, TurnEndReason.COMPLETED]
    assert child.pending() == ()
