"""The Agent half of the HARNESS contract (catalog section 17), on the harness under test.

Each test names the rule it checks. Agents come from ``harness.create_agent`` or the
registry and answer from the suite's ``ModelBook``; everything is observed through the
seam's protocols (``probes``), never through a reference-harness internal.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from dsh_subagent.adapters.protocols import (
    AgentStatus,
    CancelCause,
    CreateOptions,
    InboxNotification,
    InboxTarget,
    SessionMeta,
    Tool,
    ToolOutcome,
    create_user_message,
)
from dsh_subagent.adapters.reference.scripted_model import (
    Gate,
    Gated,
    call_tool,
    fail,
    hit_max_tokens,
    reply,
)
from dsh_subagent.adapters.signals import AbortError, AbortSignal, race_abort
from dsh_subagent.conformance.probes import (
    DISPOSED,
    PARENT,
    USER,
    Trace,
    logged_messages,
    msg,
    reasons,
    turn_ends,
    types,
    user_texts,
)
from dsh_subagent.conformance.support import (
    HarnessUnderTest,
    ModelBook,
    harness_test,
    parked,
)
from dsh_subagent.core.errors import SubagentError
from dsh_subagent.core.values import (
    ASSISTANT_CHUNK,
    INBOX_SPLICED,
    TURN_START,
    AgentOptions,
    CancelKind,
    CoordinatorSource,
    JsonObject,
    SessionEvent,
    SessionId,
    SubagentReportSource,
    SubagentSettledSource,
    TextBlock,
    TurnEndReason,
)

COMPLETED = {"turn": 1, "reason": "completed"}


def _noop_tool(name: str, ran: list[JsonObject] | None = None, *, concludes: bool = False) -> Tool:
    async def handler(args: JsonObject, signal: AbortSignal) -> ToolOutcome:
        if ran is not None:
            ran.append(args)
        return ToolOutcome((TextBlock("done"),), concludes=concludes)

    return Tool(name, handler)


# ------------------------------------------------------------------ HARNESS-1, -2


@harness_test
async def test_harness_1_agent_id_options_session_status_and_scope(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    options = AgentOptions(model="m", max_tokens=64, subagent_depth=1)
    handle = await h.registry.create(CreateOptions(SessionId("a"), agent_options=options))
    agent = handle.agent
    assert agent.id == agent.session.id == "a"
    assert agent.options == options
    assert agent.status is AgentStatus.IDLE
    unwound: list[str] = []
    agent.ctx.defer(lambda: unwound.append("ctx"))
    await handle.dispose()
    assert unwound == ["ctx"]


@harness_test
async def test_harness_2_status_is_running_while_a_driver_runs_then_idle(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    gate = book.held("a", reply("done"))
    agent = await h.create_agent("a")
    trace = Trace(agent)
    agent.followup(msg("hi"))
    assert agent.status is AgentStatus.RUNNING
    await gate.reached()
    assert agent.status is AgentStatus.RUNNING
    gate.open()
    await agent.when_idle()
    assert trace.of("status") == ["running", "idle"]
    assert agent.status.value == "idle"  # mypy keeps the RUNNING narrowing


@harness_test
async def test_harness_2_maintenance_is_folded_into_idle_and_emits_no_status(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    agent = await h.create_agent("a")
    trace = Trace(agent)
    seen: list[AgentStatus] = []

    async def task(signal: AbortSignal) -> int:
        seen.append(agent.status)
        return 7

    assert await agent.run_maintenance(task) == 7
    assert seen == [AgentStatus.IDLE]
    assert trace.of("status") == []


# ------------------------------------------------------------------ HARNESS-3 (wake latch)


@harness_test
async def test_harness_3_insert_notification_fires_in_the_splice_before_the_wake(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    agent = await h.create_agent("a")
    seen: list[tuple[AgentStatus, str]] = []
    agent.inserted.subscribe(lambda n: seen.append((agent.status, agent.session.events[-1].type)))
    agent.followup(msg("hi"))
    assert seen == [(AgentStatus.IDLE, INBOX_SPLICED)]
    assert agent.status is AgentStatus.RUNNING
    await agent.when_idle()


@harness_test
async def test_harness_3_waking_send_into_an_aborted_turn_is_redirected_and_latched(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    agent, _gate = await parked(h, book, msg("first"), reply("second"))
    agent.cancel(USER, keep_inbox=True)
    agent.steer(msg("late"))  # aimed at next-step, redirected to next-turn
    splice = agent.session.events[-1]
    assert splice.type == INBOX_SPLICED
    assert isinstance(splice.data, Mapping)
    assert splice.data["target"] == InboxTarget.NEXT_TURN.value
    await agent.when_idle()
    assert turn_ends(agent) == [
        {"turn": 1, "reason": "aborted", "cause": {"kind": "user"}},
        {"turn": 2, "reason": "completed"},
    ]
    assert user_texts(agent) == ["first", "late"]


@harness_test
async def test_harness_3_a_latched_wake_cleared_by_cancel_does_not_replay(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    gate = book.held("a", reply("never"))
    agent = await h.create_agent("a")
    trace = Trace(agent)
    agent.followup(msg("first"))
    await gate.reached()
    agent.cancel(USER, keep_inbox=True)
    agent.followup(msg("late"))
    agent.cancel(PARENT)  # clears the inbox and the latch
    await agent.when_idle()
    assert trace.of("status") == ["running", "idle"]
    assert reasons(agent) == [TurnEndReason.ABORTED]


@harness_test
async def test_harness_3_a_disposed_cancel_never_latches(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    agent, _gate = await parked(h, book, msg("first"))
    agent.cancel(DISPOSED)
    late = msg("late")
    agent.followup(late)
    await agent.when_idle()
    assert agent.pending() == (late.id,)
    assert agent.status is AgentStatus.IDLE
    assert turn_ends(agent) == [{"turn": 1, "reason": "aborted", "cause": {"kind": "disposed"}}]


@harness_test
async def test_harness_3_maintenance_latch_is_not_replayed_without_pending_work(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    agent = await h.create_agent("a")

    async def task(signal: AbortSignal) -> None:
        agent.followup(msg("queued"))
        agent.cancel(USER)  # clears the message and aborts the maintenance signal
        assert signal.aborted

    await agent.run_maintenance(task)
    await agent.when_idle()
    assert agent.status is AgentStatus.IDLE
    assert TURN_START not in types(agent)


# ------------------------------------------------------------------ HARNESS-4


@harness_test
async def test_harness_4_followups_run_as_separate_turns(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    agent = await h.create_agent("a")
    agent.followup(msg("one"))
    agent.followup(msg("two"))
    await agent.when_idle()
    assert turn_ends(agent) == [COMPLETED, {"turn": 2, "reason": "completed"}]
    assert user_texts(agent) == ["one", "two"]


@harness_test
async def test_harness_4_inject_waits_for_a_later_wake_and_joins_its_first_step(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    agent = await h.create_agent("a")
    agent.inject(msg("context"))
    assert agent.status is AgentStatus.IDLE
    assert TURN_START not in types(agent)
    agent.followup(msg("prompt"))
    await agent.when_idle()
    assert user_texts(agent) == ["context", "prompt"]
    assert turn_ends(agent) == [COMPLETED]


@harness_test
async def test_harness_4_steer_starts_an_idle_agent_and_joins_a_running_turn(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    gate = Gate()
    book.script("a", reply("ok"), Gated(gate, call_tool("noop")), reply("done"))
    agent = await h.create_agent("a")
    agent.tools.register(_noop_tool("noop"))
    agent.steer(msg("now"))
    assert agent.status is AgentStatus.RUNNING
    await agent.when_idle()
    agent.followup(msg("first"))
    await gate.reached()
    agent.steer(msg("correction"))  # claimed at the running turn's next step
    gate.open()
    await agent.when_idle()
    assert turn_ends(agent) == [COMPLETED, {"turn": 2, "reason": "completed"}]
    assert user_texts(agent) == ["now", "first", "correction"]


# ------------------------------------------------------------------ HARNESS-5, -6


@harness_test
async def test_harness_5_cancel_discards_every_message_once_next_step_first(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    agent = await h.create_agent("a")
    trace = Trace(agent)
    a, b, c = msg("a"), msg("b"), msg("c")
    agent.send(c, InboxTarget.NEXT_TURN, False)
    agent.inject(a)
    agent.inject(b)
    assert agent.pending() == (a.id, b.id, c.id)
    agent.cancel(USER)
    assert trace.of("discarded") == [a.id, b.id, c.id]
    assert agent.pending() == ()
    agent.cancel(USER)  # nothing left: no second discard
    assert trace.of("discarded") == [a.id, b.id, c.id]


@harness_test
async def test_harness_5_cancel_without_activity_does_not_arm_against_later_work(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    agent = await h.create_agent("a")
    agent.cancel(USER)
    agent.followup(msg("later"))
    await agent.when_idle()
    assert turn_ends(agent) == [COMPLETED]


@harness_test
async def test_harness_5_the_first_cause_wins(h: HarnessUnderTest, book: ModelBook) -> None:
    agent, _gate = await parked(h, book, msg("x"))
    agent.cancel(PARENT, keep_inbox=True)
    agent.cancel(USER, keep_inbox=True)
    await agent.when_idle()
    assert turn_ends(agent) == [{"turn": 1, "reason": "aborted", "cause": {"kind": "parent"}}]


@harness_test
async def test_harness_6_a_hook_cause_and_its_reason_are_recorded_on_the_turn_end(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    agent, _gate = await parked(h, book, msg("x"))
    agent.cancel(CancelCause(CancelKind.HOOK, "budget"))
    await agent.when_idle()
    assert turn_ends(agent) == [
        {"turn": 1, "reason": "aborted", "cause": {"kind": "hook", "reason": "budget"}}
    ]


# ------------------------------------------------------------------ HARNESS-7, -8, -31


@harness_test
async def test_harness_7_when_idle_follows_a_replacement_activity(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    agent = await h.create_agent("a")
    await agent.when_idle()  # a fresh agent is idle at once
    release = asyncio.Event()

    async def task(signal: AbortSignal) -> None:
        await release.wait()

    maintenance = agent.run_maintenance(task)
    agent.followup(msg("queued"))  # latched behind maintenance, then a replacement turn
    waiter = asyncio.ensure_future(agent.when_idle())
    called: list[object] = []
    agent.on_idle(lambda: called.append(turn_ends(agent)))
    release.set()
    await waiter
    await maintenance
    assert turn_ends(agent) == [COMPLETED]
    assert called == [[COMPLETED]]
    assert agent.status is AgentStatus.IDLE


@harness_test
async def test_harness_8_maintenance_starts_only_from_true_idle(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    gate = book.held("a", reply("x"))
    agent = await h.create_agent("a")
    agent.followup(msg("x"))

    async def task(signal: AbortSignal) -> None:
        return None

    with pytest.raises(SubagentError):
        agent.run_maintenance(task)
    gate.open()
    await agent.when_idle()
    assert reasons(agent) == [TurnEndReason.COMPLETED]


@harness_test
async def test_harness_31_cancel_aborts_the_maintenance_signal_with_its_cause(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    agent = await h.create_agent("a")
    started = asyncio.Event()
    seen: list[object] = []

    async def long(signal: AbortSignal) -> None:
        started.set()
        try:
            await race_abort(asyncio.Event().wait(), signal)
        finally:
            seen.append(signal.reason)

    maintenance = agent.run_maintenance(long)
    await started.wait()
    agent.cancel(PARENT)
    with pytest.raises(AbortError) as aborted:
        await maintenance
    assert aborted.value.reason == PARENT
    assert seen == [PARENT]


# ------------------------------------------------------------------ HARNESS-9


@harness_test
async def test_harness_9_turn_shape_with_a_tool_step(h: HarnessUnderTest, book: ModelBook) -> None:
    book.script("a", call_tool("echo", {"x": 1}), reply("done"))
    agent = await h.create_agent("a")
    ran: list[JsonObject] = []
    agent.tools.register(_noop_tool("echo", ran))
    agent.followup(msg("go"))
    await agent.when_idle()
    assert ran == [{"x": 1}]
    assert [t for t in types(agent) if t != ASSISTANT_CHUNK] == [
        "agent/inbox/spliced",
        "turn/start",
        "agent/inbox/spliced",
        "step/start",
        "user/message",
        "assistant/message",
        "tool/result",
        "step/end",
        "step/start",
        "assistant/message",
        "step/end",
        "turn/end",
    ]
    assert turn_ends(agent) == [COMPLETED]


@harness_test
async def test_harness_9_a_concluding_tool_ends_the_turn(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    book.script("a", call_tool("final"), reply("unused"))
    agent = await h.create_agent("a")
    agent.tools.register(_noop_tool("final", concludes=True))
    agent.followup(msg("go"))
    await agent.when_idle()
    assert turn_ends(agent) == [COMPLETED]
    assert book.model("a").remaining == 1


@harness_test
async def test_harness_9_turn_numbers_continue_from_seed_history(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    seed = [
        SessionEvent(TURN_START, 0, 0.0, {"turn": 4}),
        SessionEvent("turn/end", 1, 0.0, {"turn": 4, "reason": "completed"}),
    ]
    handle = await h.registry.create(
        CreateOptions(SessionId("s"), seed=seed, meta=SessionMeta(seed_length=2))
    )
    handle.agent.followup(msg("x"))
    await handle.agent.when_idle()
    assert turn_ends(handle.agent)[-1] == {"turn": 5, "reason": "completed"}


@harness_test
async def test_harness_9_max_tokens_is_sticky_across_later_steps(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    gate = book.held("a", hit_max_tokens("cut"), reply("fine"))
    agent = await h.create_agent("a")
    agent.followup(msg("x"))
    await gate.reached()
    agent.steer(msg("more"))
    gate.open()
    await agent.when_idle()
    assert turn_ends(agent) == [{"turn": 1, "reason": "max-tokens"}]
    assert user_texts(agent) == ["x", "more"]


@harness_test
async def test_harness_9_a_model_error_ends_the_turn_and_the_driver(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    book.script("a", fail("boom"))
    agent = await h.create_agent("a")
    agent.followup(msg("x"))
    await agent.when_idle()
    assert reasons(agent) == [TurnEndReason.ERROR]
    assert agent.status is AgentStatus.IDLE


@harness_test
async def test_harness_9_an_abort_ends_the_driver_and_pending_input_waits(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    gate = book.held("a", reply("never"))
    agent = await h.create_agent("a")
    agent.followup(msg("one"))
    two = msg("two")
    agent.followup(two)
    await gate.reached()
    agent.cancel(USER, keep_inbox=True)
    await agent.when_idle()
    assert agent.status is AgentStatus.IDLE
    assert agent.pending() == (two.id,)
    assert reasons(agent) == [TurnEndReason.ABORTED]


# ------------------------------------------------------------------ HARNESS-10, -11 (splices)


@harness_test
async def test_harness_10_every_mutation_is_spliced_into_the_log_before_memory(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    agent = await h.create_agent("a")
    seen: list[tuple[str, bool]] = []

    def record(kind: str) -> object:
        def check(n: InboxNotification) -> None:
            last = agent.session.events[-1]
            seen.append((kind, last.type == INBOX_SPLICED))

        return check

    agent.inserted.subscribe(record("inserted"))  # type: ignore[arg-type]
    agent.discarded.subscribe(record("discarded"))  # type: ignore[arg-type]
    agent.inject(msg("a"))
    agent.send(msg("b"), InboxTarget.NEXT_TURN, False)
    before = agent.session.seq
    agent.cancel(USER)
    assert seen == [("inserted", True), ("inserted", True)] + [("discarded", True)] * 2
    assert agent.session.seq > before


@harness_test
async def test_harness_10_ids_are_unique_across_both_lists(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    agent = await h.create_agent("a")
    message = msg("a")
    agent.inject(message)
    before = agent.session.seq
    for target in InboxTarget:
        with pytest.raises(SubagentError):
            agent.send(message, target, False)
    assert agent.session.seq == before
    assert agent.pending() == (message.id,)


@harness_test
async def test_harness_10_construction_replays_the_splices_of_the_own_suffix_only(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    agent = await h.create_agent("a")
    a, b = msg("a"), msg("b")
    agent.send(b, InboxTarget.NEXT_TURN, False)
    agent.inject(a)
    log = list(agent.session.events)
    twin = await h.registry.create(CreateOptions(SessionId("twin"), seed=log))
    assert twin.agent.pending() == (a.id, b.id)  # replayed: next-step first
    fork = await h.registry.create(
        CreateOptions(SessionId("fork"), seed=log, meta=SessionMeta(seed_length=len(log)))
    )
    assert fork.agent.pending() == ()  # inherited splices are not the fork's inbox
    twin.agent.followup(msg("c"))
    await twin.agent.when_idle()
    assert user_texts(twin.agent) == ["a", "b", "c"]
    assert turn_ends(twin.agent) == [COMPLETED, {"turn": 2, "reason": "completed"}]


@harness_test
async def test_harness_11_claim_notifications_carry_the_turn(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    agent = await h.create_agent("a")
    trace = Trace(agent)
    one, two = msg("one"), msg("two")
    agent.followup(one)
    agent.followup(two)
    await agent.when_idle()
    assert trace.turns == [(one.id, 1), (two.id, 2)]


# ------------------------------------------------------------------ HARNESS-12, -13


@harness_test
async def test_harness_12_the_message_id_is_its_identity_across_inbox_and_log(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    agent = await h.create_agent("a")
    trace = Trace(agent)
    message = msg("same")
    twin = msg("same")
    assert message.id != twin.id
    agent.followup(message)
    agent.followup(twin)
    await agent.when_idle()
    assert trace.of("inserted") == trace.of("claimed") == [message.id, twin.id]
    assert logged_messages(agent) == [message, twin]


@harness_test
async def test_harness_13_seam_sources_survive_the_log(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    agent = await h.create_agent("a")
    sources = (
        CoordinatorSource(SessionId("peer")),
        SubagentReportSource(SessionId("child")),
        SubagentSettledSource(SessionId("child"), "x" * 200),
    )
    for source in sources:
        agent.inject(create_user_message((TextBlock("m"),), source))
    agent.followup(msg("go"))
    await agent.when_idle()
    logged = [m.source for m in logged_messages(agent)]
    assert logged[:3] == list(sources)
    settled = logged[2]
    assert isinstance(settled, SubagentSettledSource)
    assert len(settled.summary) == 120


# ------------------------------------------------------------------ HARNESS-29, -32


@harness_test
async def test_harness_29_a_raising_listener_is_contained_and_disposers_are_single_shot(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    agent = await h.create_agent("a")
    seen: list[str] = []

    def broken(n: InboxNotification) -> None:
        raise RuntimeError("listener failed")

    agent.inserted.subscribe(broken)
    stop = agent.inserted.subscribe(lambda n: seen.append(n.message.id))
    first = msg("first")
    agent.followup(first)
    await agent.when_idle()
    assert seen == [first.id]
    assert turn_ends(agent) == [COMPLETED]
    stop()
    stop()
    agent.inject(msg("unseen"))
    assert seen == [first.id]


@harness_test
async def test_harness_32_every_send_and_cancel_completes_before_returning(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    agent = await h.create_agent("a")
    trace = Trace(agent)
    injected, queued = msg("injected"), msg("queued")
    agent.inject(injected)  # no await between any call and its checks
    assert trace.log == [("inserted", injected.id)]
    agent.send(queued, InboxTarget.NEXT_TURN, False)
    assert trace.log[-1] == ("inserted", queued.id)
    assert agent.status is AgentStatus.IDLE
    agent.cancel(USER)
    assert trace.of("discarded") == [injected.id, queued.id]
    assert agent.pending() == ()
    steered = msg("steered")
    agent.steer(steered)
    assert trace.log[-2:] == [("inserted", steered.id), ("status", "running")]
    await agent.when_idle()
    assert trace.of("claimed") == [steered.id]
