"""The HARNESS contract the seam depends on, checked against the harness under test.

Each test names the catalog rule it checks (section 17). The agents come from
``harness.create_agent``/``registry`` and answer from the suite's ``ModelBook``.
"""

from __future__ import annotations

import pytest

from dsh_subagent.adapters.protocols import AgentStatus, CreateOptions
from dsh_subagent.adapters.reference.scripted_model import fail, hit_max_tokens, reply
from dsh_subagent.adapters.signals import AbortSignal, Scope
from dsh_subagent.conformance.probes import USER, Trace, msg, reasons
from dsh_subagent.conformance.support import (
    HarnessFactory,
    HarnessUnderTest,
    ModelBook,
    harness_test,
    parked,
    run,
)
from dsh_subagent.core.values import INBOX_SPLICED, TURN_END, SessionId, TurnEndReason


async def opened(factory: HarnessFactory, book: ModelBook) -> HarnessUnderTest:
    return await factory(book, None)


@harness_test
async def test_harness_32_followup_splices_notifies_and_runs_before_returning(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    agent = await h.create_agent("a")
    trace = Trace(agent)
    message = msg("hi")
    agent.followup(message)  # no await between the call and the checks
    assert agent.session.events[-1].type == INBOX_SPLICED
    assert trace.log == [("inserted", message.id), ("status", "running")]
    await agent.when_idle()
    assert trace.of("claimed") == [message.id]
    assert trace.log[-1] == ("status", "idle")


@harness_test
async def test_harness_3_waking_send_during_maintenance_latches_then_replays(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    agent = await h.create_agent("a")

    async def task(signal: AbortSignal) -> None:
        agent.followup(msg("during maintenance"))
        assert agent.status is AgentStatus.IDLE  # latched, not started

    await agent.run_maintenance(task)
    await agent.when_idle()
    assert reasons(agent) == [TurnEndReason.COMPLETED]


@harness_test
async def test_harness_5_cancel_keep_inbox_keeps_messages_and_writes_nothing(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    agent = await h.create_agent("a")
    kept = msg("kept")
    agent.inject(kept)
    before = agent.session.seq
    agent.cancel(USER, keep_inbox=True)
    assert agent.session.seq == before
    assert len(agent.pending()) == 1
    trace = Trace(agent)
    agent.cancel(USER)
    assert trace.of("discarded") == [kept.id]
    assert agent.pending() == ()


@harness_test
async def test_harness_5_interrupt_with_keep_inbox_parks_the_queue_for_the_next_wake(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    agent, _gate = await parked(h, book, msg("work"), reply("first"), reply("second"))
    queued = msg("queued")
    agent.followup(queued)
    agent.cancel(USER, keep_inbox=True)
    await agent.when_idle()
    assert reasons(agent) == [TurnEndReason.ABORTED]
    assert agent.pending() == (queued.id,)
    agent.followup(msg("resume"))
    await agent.when_idle()
    assert reasons(agent)[1:] == [TurnEndReason.COMPLETED, TurnEndReason.COMPLETED]


@harness_test
async def test_harness_9_turn_end_reasons_completed_max_tokens_error(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    book.script("a", reply("fine"), hit_max_tokens("cut"), fail("boom"))
    agent = await h.create_agent("a")
    for text in ("one", "two", "three"):
        agent.followup(msg(text))
        await agent.when_idle()
    assert reasons(agent) == [
        TurnEndReason.COMPLETED,
        TurnEndReason.MAX_TOKENS,
        TurnEndReason.ERROR,
    ]


@harness_test
async def test_harness_18_dispose_order_is_cancel_idle_scope_agent_then_session(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    trace: list[str] = []

    async def setup(ctx: Scope) -> None:
        ctx.defer(lambda: trace.append("scope"))

    handle = await h.registry.create(CreateOptions(SessionId("d"), setup=setup))
    handle.agent.discarded.subscribe(lambda _n: trace.append("discarded"))
    h.registry.disposed.subscribe(lambda a: trace.append(f"agent/disposed {a.id}"))
    h.store.disposed.subscribe(lambda s: trace.append(f"session/disposed {s.id}"))
    handle.agent.inject(msg("unclaimed"))
    first = handle.dispose()
    assert trace == ["discarded"]
    assert handle.dispose() is first
    await first
    assert trace == ["discarded", "scope", "agent/disposed d", "session/disposed d"]
    assert h.registry.get(SessionId("d")) is None


@harness_test
async def test_harness_16_failed_setup_publishes_nothing(
    h: HarnessUnderTest, book: ModelBook
) -> None:

    async def setup(ctx: Scope) -> None:
        raise RuntimeError("setup failed")

    with pytest.raises(RuntimeError, match="setup failed"):
        await h.registry.create(CreateOptions(SessionId("x"), setup=setup))
    assert h.registry.get(SessionId("x")) is None
    assert h.store.get(SessionId("x")) is None


def test_harness_17_resume_continues_the_log_and_turn_numbers(
    dsh_harness: HarnessFactory, dsh_db: str
) -> None:
    async def main() -> None:
        first = await dsh_harness(ModelBook(), dsh_db)
        agent = await first.create_agent("r")
        agent.followup(msg("before"))
        await agent.when_idle()
        await first.close()
        second = await dsh_harness(ModelBook(), dsh_db)
        resumed = await second.resume_agent("r")
        resumed.followup(msg("after"))
        await resumed.when_idle()
        ends = [e.data for e in resumed.session.events if e.type == TURN_END]
        assert ends == [{"turn": 1, "reason": "completed"}, {"turn": 2, "reason": "completed"}]
        await second.close()

    run(main)
