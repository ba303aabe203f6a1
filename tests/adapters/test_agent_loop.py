"""The reference agent loop, rule by rule (catalog section 17, HARNESS-1 .. HARNESS-13, -31/-32)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh_subagent.adapters.protocols import (
    AgentStatus,
    CancelCause,
    InboxNotification,
    InboxTarget,
    SessionMeta,
    Tool,
    ToolOutcome,
    create_user_message,
)
from dsh_subagent.adapters.reference.agent_loop import ReferenceAgent
from dsh_subagent.adapters.reference.scripted_model import (
    Gate,
    Gated,
    NullModel,
    ScriptedModel,
    ScriptItem,
    call_tool,
    fail,
    hit_max_tokens,
    reply,
)
from dsh_subagent.adapters.reference.session import LiveSession, SessionStore
from dsh_subagent.adapters.signals import (
    AbortController,
    AbortError,
    AbortSignal,
    Emitter,
    Scope,
    abortable,
    any_signal,
    race_abort,
)
from dsh_subagent.core import wire
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import (
    INBOX_SPLICED,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
    AgentOptions,
    CancelKind,
    JsonValue,
    MessageId,
    SessionEvent,
    SessionId,
    SubagentSettledSource,
    TextBlock,
    UserMessage,
)
from dsh_subagent.spec.inbox import ledger_of

USER = CancelCause(CancelKind.USER)
PARENT = CancelCause(CancelKind.PARENT)
DISPOSED = CancelCause(CancelKind.DISPOSED)


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(main())  # type: ignore[arg-type]


def msg(text: str) -> UserMessage:
    return create_user_message((TextBlock(text),))


def make_agent(
    script: Sequence[ScriptItem] = (),
    *,
    seed: Sequence[SessionEvent] | None = None,
    meta: SessionMeta | None = None,
    **kwargs: object,
) -> tuple[ReferenceAgent, ScriptedModel]:
    session = SessionStore(clock=lambda: 0.0).prepare(SessionId("agent-1"), seed=seed, meta=meta)
    model = ScriptedModel(script)
    return ReferenceAgent(session, model=model, **kwargs), model  # type: ignore[arg-type]


class Recorder:
    """Every notification of one agent, in order, as (kind, message id or status)."""

    def __init__(self, agent: ReferenceAgent) -> None:
        self.log: list[tuple[str, str]] = []
        agent.inserted.subscribe(self._record("inserted"))
        agent.claimed.subscribe(self._record("claimed"))
        agent.discarded.subscribe(self._record("discarded"))
        agent.status_changed.subscribe(lambda n: self.log.append(("status", n.status.value)))

    def _record(self, kind: str) -> Callable[[InboxNotification], None]:
        return lambda n: self.log.append((kind, n.message.id))

    def of(self, kind: str) -> list[str]:
        return [value for k, value in self.log if k == kind]


def turn_ends(agent: ReferenceAgent) -> list[JsonValue]:
    return [e.data for e in agent.session.events if e.type == TURN_END]


def user_texts(agent: ReferenceAgent) -> list[str]:
    texts = []
    for event in agent.session.events:
        if event.type == USER_MESSAGE and isinstance(event.data, dict):
            texts.append(wire.decode_message(event.data["message"], "m").content[0].text)  # type: ignore[union-attr]
    return texts


def types(agent: ReferenceAgent) -> list[str]:
    return [e.type for e in agent.session.events]


# ------------------------------------------------------------------ HARNESS-1, -2


def test_harness_1_agent_id_options_session_and_scope() -> None:
    session = LiveSession.detached(SessionId("a-1"))
    agent = ReferenceAgent(session, model=NullModel(), options=AgentOptions(model="m"))
    assert agent.id == "a-1" == session.id
    assert agent.options.model == "m"
    assert agent.session is session
    assert isinstance(agent.ctx, Scope)
    assert agent.status is AgentStatus.IDLE


def test_harness_2_status_running_while_driver_runs_then_idle() -> None:
    async def main() -> None:
        gate = Gate()
        agent, _ = make_agent([Gated(gate, reply("done"))])
        rec = Recorder(agent)
        agent.followup(msg("hi"))
        assert agent.status is AgentStatus.RUNNING
        await gate.reached()
        assert agent.status is AgentStatus.RUNNING
        gate.open()
        await agent.when_idle()
        assert rec.of("status") == ["running", "idle"]
        assert agent.status.value == "idle"

    run(main)


def test_harness_2_maintenance_reports_idle_and_emits_no_status() -> None:
    async def main() -> None:
        agent, _ = make_agent()
        rec = Recorder(agent)
        seen: list[AgentStatus] = []

        async def task(signal: AbortSignal) -> int:
            seen.append(agent.status)
            return 7

        assert await agent.run_maintenance(task) == 7
        assert seen == [AgentStatus.IDLE]
        assert rec.of("status") == []

    run(main)


# ------------------------------------------------------------------ HARNESS-3, -32


def test_harness_3_insert_notification_fires_before_the_wake() -> None:
    async def main() -> None:
        agent, _ = make_agent([reply("ok")])
        seen: list[tuple[AgentStatus, str]] = []
        agent.inserted.subscribe(
            lambda n: seen.append((agent.status, agent.session.events[-1].type))
        )
        agent.followup(msg("hi"))
        assert seen == [(AgentStatus.IDLE, INBOX_SPLICED)]
        assert agent.status is AgentStatus.RUNNING
        await agent.when_idle()

    run(main)


def test_harness_32_send_splices_notifies_and_sets_status_before_returning() -> None:
    async def main() -> None:
        agent, _ = make_agent([reply("ok")])
        rec = Recorder(agent)
        message = msg("hi")
        agent.followup(message)  # no await between the call and the checks
        assert types(agent) == [INBOX_SPLICED]
        assert rec.log == [("inserted", message.id), ("status", "running")]
        await agent.when_idle()

    run(main)


def test_harness_3_live_driver_claims_steer_at_its_next_step() -> None:
    async def main() -> None:
        gate = Gate()

        async def noop(args: object, signal: AbortSignal) -> ToolOutcome:
            return ToolOutcome((TextBlock("ok"),))

        agent, _ = make_agent([Gated(gate, call_tool("noop")), reply("done")])
        agent.tools.register(Tool("noop", noop))
        agent.followup(msg("first"))
        await gate.reached()
        agent.steer(msg("correction"))
        assert [m.id for m in agent.next_step]
        assert not agent.next_turn
        gate.open()
        await agent.when_idle()
        assert user_texts(agent) == ["first", "correction"]
        assert [e.data for e in agent.session.events if e.type == TURN_START] == [{"turn": 1}]

    run(main)


def test_harness_3_waking_send_into_aborted_turn_is_redirected_and_latched() -> None:
    async def main() -> None:
        gate = Gate()
        agent, _ = make_agent([Gated(gate, reply("never")), reply("second")])
        agent.followup(msg("first"))
        await gate.reached()
        agent.cancel(USER, keep_inbox=True)
        late = msg("late")
        agent.steer(late)  # aimed at next-step, redirected to next-turn
        assert agent.next_turn == (late,)
        assert agent.next_step == ()
        await agent.when_idle()
        assert turn_ends(agent) == [
            {"turn": 1, "reason": "aborted", "cause": {"kind": "user"}},
            {"turn": 2, "reason": "completed"},
        ]
        assert user_texts(agent) == ["first", "late"]

    run(main)


def test_harness_3_latched_wake_cleared_by_cancel_does_not_replay() -> None:
    async def main() -> None:
        gate = Gate()
        agent, model = make_agent([Gated(gate, reply("never"))])
        rec = Recorder(agent)
        agent.followup(msg("first"))
        await gate.reached()
        agent.cancel(USER, keep_inbox=True)
        agent.followup(msg("late"))
        agent.cancel(PARENT)  # clears the inbox and the latch
        await agent.when_idle()
        assert agent.status is AgentStatus.IDLE
        assert rec.of("status") == ["running", "idle"]
        assert len(turn_ends(agent)) == 1
        assert model.remaining == 0

    run(main)


def test_harness_3_latched_replay_sees_what_the_idle_listeners_did() -> None:
    """The replay checks for pending work after ``agent/status idle`` is delivered: a listener
    that disposes the agent on idle (as the seam does on settlement) leaves nothing to replay."""

    async def main() -> None:
        gate = Gate()
        agent, model = make_agent([Gated(gate, reply("never")), reply("unused")])
        rec = Recorder(agent)
        agent.followup(msg("first"))
        await gate.reached()
        agent.cancel(USER, keep_inbox=True)
        late = msg("late")
        agent.followup(late)  # redirected and latched
        agent.status_changed.subscribe(
            lambda n: agent.cancel(DISPOSED) if n.status is AgentStatus.IDLE else None
        )
        await agent.when_idle()
        assert rec.of("status") == ["running", "idle"]
        assert rec.of("discarded") == [late.id]
        assert len(turn_ends(agent)) == 1
        assert model.remaining == 1

    run(main)


def test_harness_3_disposed_cancel_never_latches() -> None:
    async def main() -> None:
        gate = Gate()
        agent, _ = make_agent([Gated(gate, reply("never")), reply("unused")])
        agent.followup(msg("first"))
        await gate.reached()
        agent.cancel(DISPOSED)
        late = msg("late")
        agent.followup(late)
        await agent.when_idle()
        assert agent.next_turn == (late,)
        assert agent.status is AgentStatus.IDLE
        assert turn_ends(agent) == [{"turn": 1, "reason": "aborted", "cause": {"kind": "disposed"}}]

    run(main)


def test_harness_3_waking_send_during_maintenance_latches_then_replays() -> None:
    async def main() -> None:
        release = asyncio.Event()
        agent, _ = make_agent([reply("ok")])

        async def task(signal: AbortSignal) -> None:
            await release.wait()

        maintenance = agent.run_maintenance(task)
        agent.followup(msg("queued"))
        assert agent.status is AgentStatus.IDLE
        assert agent.in_maintenance
        assert TURN_START not in types(agent)
        release.set()
        await maintenance
        await agent.when_idle()
        assert turn_ends(agent) == [{"turn": 1, "reason": "completed"}]

    run(main)


def test_harness_3_maintenance_latch_not_replayed_without_pending_work() -> None:
    async def main() -> None:
        agent, model = make_agent([reply("unused")])

        async def task(signal: AbortSignal) -> None:
            agent.followup(msg("queued"))
            agent.cancel(USER)  # clears the message (and aborts the maintenance signal)
            assert signal.aborted

        await agent.run_maintenance(task)
        await agent.when_idle()
        assert agent.status is AgentStatus.IDLE
        assert TURN_START not in types(agent)
        assert model.remaining == 1

    run(main)


# ------------------------------------------------------------------ HARNESS-4


def test_harness_4_followups_run_as_separate_turns() -> None:
    async def main() -> None:
        agent, _ = make_agent([reply("a"), reply("b")])
        agent.followup(msg("one"))
        agent.followup(msg("two"))
        await agent.when_idle()
        assert turn_ends(agent) == [
            {"turn": 1, "reason": "completed"},
            {"turn": 2, "reason": "completed"},
        ]
        assert user_texts(agent) == ["one", "two"]

    run(main)


def test_harness_4_inject_waits_for_a_later_wake_and_joins_its_first_step() -> None:
    async def main() -> None:
        agent, model = make_agent([reply("both")])
        agent.inject(msg("context"))
        assert agent.status is AgentStatus.IDLE
        agent.followup(msg("prompt"))
        await agent.when_idle()
        assert user_texts(agent) == ["context", "prompt"]
        assert len(model.requests) == 1

    run(main)


def test_harness_4_steer_on_idle_agent_starts_a_turn() -> None:
    async def main() -> None:
        agent, _ = make_agent([reply("ok")])
        agent.steer(msg("now"))
        assert agent.status is AgentStatus.RUNNING
        await agent.when_idle()
        assert turn_ends(agent) == [{"turn": 1, "reason": "completed"}]

    run(main)


# ------------------------------------------------------------------ HARNESS-5, -6


def test_harness_5_cancel_discards_every_message_once_next_step_first() -> None:
    async def main() -> None:
        agent, _ = make_agent()
        rec = Recorder(agent)
        a, b, c = msg("a"), msg("b"), msg("c")
        agent.send(c, InboxTarget.NEXT_TURN, False)
        agent.inject(a)
        agent.inject(b)
        agent.cancel(USER)
        assert rec.of("discarded") == [a.id, b.id, c.id]
        splices = [e.data for e in agent.session.events if e.type == INBOX_SPLICED][-2:]
        assert splices == [
            {
                "target": "next-step",
                "start": 0,
                "inserted": [],
                "removedCount": 2,
                "outcome": "canceled",
            },
            {
                "target": "next-turn",
                "start": 0,
                "inserted": [],
                "removedCount": 1,
                "outcome": "canceled",
            },
        ]
        assert agent.pending() == ()

    run(main)


def test_harness_5_keep_inbox_preserves_messages_and_writes_no_splice() -> None:
    async def main() -> None:
        agent, _ = make_agent()
        agent.inject(msg("a"))
        before = agent.session.seq
        agent.cancel(USER, keep_inbox=True)
        assert agent.session.seq == before
        assert len(agent.pending()) == 1

    run(main)


def test_harness_5_cancel_without_activity_does_not_arm_against_later_work() -> None:
    async def main() -> None:
        agent, _ = make_agent([reply("ok")])
        agent.cancel(USER)
        agent.followup(msg("later"))
        await agent.when_idle()
        assert turn_ends(agent) == [{"turn": 1, "reason": "completed"}]

    run(main)


def test_harness_5_first_cause_wins() -> None:
    async def main() -> None:
        gate = Gate()
        agent, _ = make_agent([Gated(gate, reply("never"))])
        agent.followup(msg("x"))
        await gate.reached()
        agent.cancel(PARENT, keep_inbox=True)
        agent.cancel(USER, keep_inbox=True)
        await agent.when_idle()
        assert turn_ends(agent) == [{"turn": 1, "reason": "aborted", "cause": {"kind": "parent"}}]

    run(main)


def test_harness_6_hook_cause_and_reason_recorded_on_turn_end() -> None:
    async def main() -> None:
        gate = Gate()
        agent, _ = make_agent([Gated(gate, reply("never"))])
        agent.followup(msg("x"))
        await gate.reached()
        agent.cancel(CancelCause(CancelKind.HOOK, "budget"))
        await agent.when_idle()
        assert turn_ends(agent) == [
            {"turn": 1, "reason": "aborted", "cause": {"kind": "hook", "reason": "budget"}}
        ]

    run(main)


def test_harness_5_bad_arguments_raise_before_any_side_effect() -> None:
    agent, _ = make_agent()
    with pytest.raises(SubagentError) as bad_cause:
        agent.cancel("user")  # type: ignore[arg-type]
    assert bad_cause.value.field == "cause"
    with pytest.raises(SubagentError) as bad_message:
        agent.inject("text")  # type: ignore[arg-type]
    assert bad_message.value.field == "message"
    with pytest.raises(SubagentError) as bad_target:
        agent.send(msg("x"), "next-turn", False)  # type: ignore[arg-type]
    assert bad_target.value.field == "target"
    assert agent.session.seq == 0


# ------------------------------------------------------------------ HARNESS-7, -8


def test_harness_7_when_idle_follows_a_replacement_activity() -> None:
    async def main() -> None:
        release = asyncio.Event()
        agent, _ = make_agent([reply("ok")])

        async def task(signal: AbortSignal) -> None:
            await release.wait()

        agent.run_maintenance(task)
        agent.followup(msg("queued"))  # latched behind maintenance
        waiter = asyncio.ensure_future(agent.when_idle())
        release.set()
        await waiter
        assert turn_ends(agent) == [{"turn": 1, "reason": "completed"}]
        assert agent.status is AgentStatus.IDLE

    run(main)


def test_harness_7_when_idle_on_fresh_agent_returns_at_once() -> None:
    async def main() -> None:
        agent, _ = make_agent()
        await agent.when_idle()

    run(main)


def test_harness_7_on_idle_is_when_idle_as_a_callback() -> None:
    async def main() -> None:
        release = asyncio.Event()
        agent, _ = make_agent([reply("ok")])
        fresh = asyncio.get_running_loop().create_future()
        agent.on_idle(lambda: fresh.set_result(agent.status))
        assert await fresh is AgentStatus.IDLE  # no activity yet: called from the loop

        async def task(signal: AbortSignal) -> None:
            await release.wait()

        agent.run_maintenance(task)
        agent.followup(msg("queued"))  # latched behind maintenance, then a replacement turn
        idle = asyncio.get_running_loop().create_future()
        agent.on_idle(lambda: idle.set_result(turn_ends(agent)))
        release.set()
        assert await idle == [{"turn": 1, "reason": "completed"}]

    run(main)


def test_harness_8_maintenance_requires_true_idle_and_is_aborted_by_cancel() -> None:
    async def main() -> None:
        gate = Gate()
        agent, _ = make_agent([Gated(gate, reply("x"))])
        agent.followup(msg("x"))

        async def task(signal: AbortSignal) -> None:
            return None

        with pytest.raises(SubagentError) as busy:
            agent.run_maintenance(task)
        assert busy.value.code is ErrorCode.ILLEGAL_TRANSITION
        gate.open()
        await agent.when_idle()

        started = asyncio.Event()

        async def long(signal: AbortSignal) -> object:
            started.set()
            await race_abort(asyncio.Event().wait(), signal)
            return None

        maintenance = agent.run_maintenance(long)
        await started.wait()
        agent.cancel(PARENT)
        with pytest.raises(AbortError) as aborted:
            await maintenance
        assert aborted.value.reason == PARENT

    run(main)


# ------------------------------------------------------------------ HARNESS-9


def test_harness_9_turn_shape_with_tool_step() -> None:
    async def main() -> None:
        async def echo(args: object, signal: AbortSignal) -> ToolOutcome:
            return ToolOutcome((TextBlock(repr(args)),))

        agent, _ = make_agent([call_tool("echo", {"x": 1}), reply("done", chunks=["do", "ne"])])
        agent.tools.register(Tool("echo", echo))
        agent.followup(msg("go"))
        await agent.when_idle()
        assert types(agent) == [
            "agent/inbox/spliced",
            "turn/start",
            "agent/inbox/spliced",
            "step/start",
            "user/message",
            "assistant/message",
            "tool/result",
            "step/end",
            "step/start",
            "assistant/chunk",
            "assistant/chunk",
            "assistant/message",
            "step/end",
            "turn/end",
        ]

    run(main)


def test_harness_9_user_message_shares_the_form_its_splice_logged() -> None:
    """A claimed message's ``user/message`` carries the very frozen message its inserting
    splice logged (one copy in memory); a message replayed from the log is encoded anew."""

    async def main() -> None:
        agent, _ = make_agent([reply("one")])
        first, second = msg("a"), msg("b")
        agent.followup(first)
        await agent.when_idle()
        events = agent.session.events
        splice = next(e for e in events if e.type == INBOX_SPLICED)
        claimed = next(e for e in events if e.type == USER_MESSAGE)
        assert claimed.data == wire.user_message_data(first)
        assert claimed.data["message"] is splice.data["inserted"][0]  # type: ignore[call-overload,index]
        agent.send(second, InboxTarget.NEXT_TURN, False)  # pending, then replayed by a twin
        twin = ReferenceAgent(agent.session, model=ScriptedModel([reply("two")]))
        twin.wake()
        await twin.when_idle()
        replayed = [e for e in twin.session.events if e.type == USER_MESSAGE][-1]
        assert replayed.data == wire.user_message_data(second)

    run(main)


def test_harness_9_concluding_tool_ends_the_turn() -> None:
    async def main() -> None:
        async def final(args: object, signal: AbortSignal) -> ToolOutcome:
            return ToolOutcome((TextBlock("reported"),), concludes=True)

        agent, model = make_agent([call_tool("final"), reply("unused")])
        agent.tools.register(Tool("final", final))
        agent.followup(msg("go"))
        await agent.when_idle()
        assert turn_ends(agent) == [{"turn": 1, "reason": "completed"}]
        assert model.remaining == 1

    run(main)


def test_harness_9_turn_numbers_continue_from_seed_history() -> None:
    async def main() -> None:
        seed = [
            SessionEvent(TURN_START, 0, 0.0, {"turn": 4}),
            SessionEvent(TURN_END, 1, 0.0, {"turn": 4, "reason": "completed"}),
        ]
        agent, _ = make_agent([reply("ok")], seed=seed, meta=SessionMeta(seed_length=2))
        agent.followup(msg("x"))
        await agent.when_idle()
        assert turn_ends(agent)[-1] == {"turn": 5, "reason": "completed"}

    run(main)


def test_harness_9_max_tokens_is_sticky_across_later_steps() -> None:
    async def main() -> None:
        gate = Gate()
        agent, _ = make_agent([Gated(gate, hit_max_tokens("cut")), reply("fine")])
        agent.followup(msg("x"))
        await gate.reached()
        agent.steer(msg("more"))
        gate.open()
        await agent.when_idle()
        assert turn_ends(agent) == [{"turn": 1, "reason": "max-tokens"}]
        assert user_texts(agent) == ["x", "more"]

    run(main)


def test_harness_9_model_error_ends_turn_error_and_driver() -> None:
    async def main() -> None:
        agent, _ = make_agent([fail("boom")])
        agent.followup(msg("x"))
        await agent.when_idle()
        assert turn_ends(agent) == [{"turn": 1, "reason": "error", "error": "RuntimeError: boom"}]
        assert agent.status is AgentStatus.IDLE

    run(main)


def test_harness_9_pre_step_rejection_ends_turn_blocked() -> None:
    async def main() -> None:
        async def reject(
            claimed: tuple[UserMessage, ...], turn: int, step: int, signal: AbortSignal
        ) -> bool:
            return False

        agent, model = make_agent([reply("unused")], pre_step=reject)
        agent.followup(msg("x"))
        await agent.when_idle()
        assert turn_ends(agent) == [{"turn": 1, "reason": "blocked"}]
        assert model.requests == []

    run(main)


def test_harness_9_pre_step_sees_each_claimed_batch() -> None:
    async def main() -> None:
        batches: list[tuple[int, int, list[str]]] = []

        async def allow(
            claimed: tuple[UserMessage, ...], turn: int, step: int, signal: AbortSignal
        ) -> bool:
            batches.append((turn, step, [m.content[0].text for m in claimed]))  # type: ignore[union-attr]
            return True

        async def noop(args: object, signal: AbortSignal) -> ToolOutcome:
            return ToolOutcome(())

        agent, _ = make_agent([call_tool("noop"), reply("done")], pre_step=allow)
        agent.tools.register(Tool("noop", noop))
        agent.followup(msg("x"))
        await agent.when_idle()
        assert batches == [(1, 1, ["x"]), (1, 2, [])]
        assert turn_ends(agent) == [{"turn": 1, "reason": "completed"}]

    run(main)


def test_harness_9_empty_first_claim_completes_without_model_call() -> None:
    async def main() -> None:
        agent, model = make_agent([reply("unused")])
        rec = Recorder(agent)
        message = msg("x")
        agent.followup(message)
        assert agent.remove(message.id)
        assert not agent.remove(message.id)
        await agent.when_idle()
        assert turn_ends(agent) == [{"turn": 1, "reason": "completed"}]
        assert model.requests == []
        assert "step/start" not in types(agent)
        assert rec.of("discarded") == [message.id]

    run(main)


def test_harness_9_empty_first_claim_completes_even_when_the_pre_step_enters() -> None:
    async def main() -> None:
        seen: list[tuple[int, int]] = []

        async def allow(
            claimed: tuple[UserMessage, ...], turn: int, step: int, signal: AbortSignal
        ) -> bool:
            seen.append((turn, step))
            return True

        agent, model = make_agent([reply("unused")], pre_step=allow)
        message = msg("x")
        agent.followup(message)
        assert agent.remove(message.id)
        await agent.when_idle()
        assert seen == [(1, 1)]
        assert turn_ends(agent) == [{"turn": 1, "reason": "completed"}]
        assert model.requests == []

    run(main)


def test_harness_9_abort_ends_driver_then_pending_input_waits() -> None:
    async def main() -> None:
        gate = Gate()
        agent, _ = make_agent([Gated(gate, reply("never")), reply("unused")])
        agent.followup(msg("one"))
        agent.followup(msg("two"))
        await gate.reached()
        agent.cancel(USER, keep_inbox=True)
        await agent.when_idle()
        assert agent.status is AgentStatus.IDLE
        assert len(agent.next_turn) == 1
        assert len(turn_ends(agent)) == 1

    run(main)


# ------------------------------------------------------------------ HARNESS-10, -11


def test_harness_10_inbox_replays_from_the_own_suffix() -> None:
    async def main() -> None:
        agent, _ = make_agent()
        a, b = msg("a"), msg("b")
        agent.inject(a)
        agent.send(b, InboxTarget.NEXT_TURN, False)
        twin = ReferenceAgent(agent.session, model=NullModel())
        assert twin.next_step == (a,)
        assert twin.next_turn == (b,)
        forked_seed = list(agent.session.events)
        fork, _ = make_agent(seed=forked_seed, meta=SessionMeta(seed_length=len(forked_seed)))
        assert fork.pending() == ()

    run(main)


def test_dur_26_wake_runs_the_pending_input_of_a_restored_inbox() -> None:
    """A restored inbox's pending messages stay parked (no insert notification, no turn)
    until ``wake``, which runs them as a waking send would; with nothing pending it does
    nothing."""

    async def main() -> None:
        agent, _ = make_agent()
        a, b = msg("a"), msg("b")
        agent.send(a, InboxTarget.NEXT_TURN, False)
        agent.send(b, InboxTarget.NEXT_TURN, False)
        model = ScriptedModel([reply("one"), reply("two")])
        restored = ReferenceAgent(agent.session, model=model)
        recorder = Recorder(restored)
        assert restored.status is AgentStatus.IDLE
        assert restored.pending() == (a.id, b.id)
        restored.wake()
        await restored.when_idle()
        assert recorder.of("inserted") == []
        assert recorder.of("claimed") == [a.id, b.id]
        assert user_texts(restored) == ["a", "b"]
        events = len(restored.session.events)
        restored.wake()
        assert restored.status is AgentStatus.IDLE
        assert len(restored.session.events) == events

    run(main)


def test_harness_10_duplicate_pending_id_rejected_before_the_log() -> None:
    agent, _ = make_agent()
    message = msg("a")
    agent.inject(message)
    before = agent.session.seq
    for target in InboxTarget:
        with pytest.raises(SubagentError) as dup:
            agent.send(message, target, False)
        assert dup.value.field == "message.id"
    assert agent.session.seq == before


def test_harness_10_corrupt_splice_in_own_suffix_raises_corrupt_session() -> None:
    session = LiveSession.detached(SessionId("c"))
    session.append(INBOX_SPLICED, {"target": "next-turn", "start": 3, "inserted": []})
    with pytest.raises(SubagentError) as bad:
        ReferenceAgent(session, model=NullModel())
    assert bad.value.code is ErrorCode.CORRUPT_SESSION
    assert bad.value.field == "events[0]"
    other = LiveSession.detached(SessionId("d"))
    other.append(INBOX_SPLICED, {"target": "sideways", "start": 0, "inserted": []})
    other.append(INBOX_SPLICED, ["not", "an", "object"])
    with pytest.raises(SubagentError):
        ReferenceAgent(other, model=NullModel())
    payloads: list[JsonValue] = [{"target": "next-turn", "start": 0, "inserted": "x"}, ["x"]]
    for data in payloads:
        broken = LiveSession.detached(SessionId("e"))
        broken.append(INBOX_SPLICED, data)
        with pytest.raises(SubagentError):
            ReferenceAgent(broken, model=NullModel())


def test_harness_10_corrupt_turn_number_raises_corrupt_session() -> None:
    session = LiveSession.detached(SessionId("t"))
    session.append(TURN_START, {"turn": "one"})
    with pytest.raises(SubagentError) as bad:
        ReferenceAgent(session, model=NullModel())
    assert bad.value.code is ErrorCode.CORRUPT_SESSION


def test_harness_11_claim_notifications_carry_the_turn() -> None:
    async def main() -> None:
        agent, _ = make_agent([reply("a"), reply("b")])
        claims: list[tuple[MessageId, int | None]] = []
        agent.claimed.subscribe(lambda n: claims.append((n.message.id, n.turn)))
        one, two = msg("one"), msg("two")
        agent.followup(one)
        agent.followup(two)
        await agent.when_idle()
        assert claims == [(one.id, 1), (two.id, 2)]

    run(main)


OPS = st.lists(
    st.sampled_from(["followup", "steer", "inject", "cancel", "cancel_keep", "tick", "idle"]),
    max_size=25,
)


@given(OPS)
def test_harness_11_every_accepted_message_leaves_exactly_once(ops: list[str]) -> None:
    async def main() -> None:
        agent = ReferenceAgent(LiveSession.detached(SessionId("p")), model=NullModel())
        rec = Recorder(agent)
        for index, op in enumerate(ops):
            if op in {"followup", "steer", "inject"}:
                getattr(agent, op)(msg(str(index)))
            elif op == "cancel":
                agent.cancel(USER)
            elif op == "cancel_keep":
                agent.cancel(PARENT, keep_inbox=True)
            elif op == "tick":
                await asyncio.sleep(0)  # yields one scheduling step; not a timing wait
            else:
                await agent.when_idle()
        agent.cancel(DISPOSED)
        await agent.when_idle()
        # The core oracle raises on a second exit or an exit without acceptance (HARNESS-11).
        ledger = ledger_of((k, MessageId(v)) for k, v in rec.log if k != "status")
        assert ledger.pending() == frozenset()
        assert len(ledger.states) == len(rec.of("inserted"))
        assert agent.pending() == ()

    run(main)


# ------------------------------------------------------------------ HARNESS-12, -13


def test_harness_12_user_messages_get_fresh_ids_and_are_frozen() -> None:
    a, b = msg("same"), msg("same")
    assert a.id != b.id
    assert a.content == b.content
    with pytest.raises(AttributeError):
        a.id = MessageId("x")  # type: ignore[misc]


def test_harness_13_sources_survive_the_log() -> None:
    async def main() -> None:
        agent, _ = make_agent([reply("ok")])
        source = SubagentSettledSource(SessionId("child"), "x" * 200)
        agent.followup(create_user_message((TextBlock("notice"),), source))
        await agent.when_idle()
        logged = next(e for e in agent.session.events if e.type == USER_MESSAGE)
        decoded = wire.decode_message(logged.data["message"], "m")  # type: ignore[index,call-overload]
        assert decoded.source == source
        assert len(source.summary) == 120
        assert source.summary.endswith("\u2026")

    run(main)


# ------------------------------------------------------------------ HARNESS-29, -31


def test_harness_31_throw_if_aborted_raises_the_reason_unchanged() -> None:
    controller = AbortController()
    controller.signal.throw_if_aborted()
    reason = SubagentError(ErrorCode.CANCELLED, "stop")
    controller.abort(reason)
    controller.abort(ValueError("later"))
    with pytest.raises(SubagentError) as raised:
        controller.signal.throw_if_aborted()
    assert raised.value is reason
    other = AbortController()
    other.abort()
    with pytest.raises(AbortError):
        other.signal.throw_if_aborted()


def test_harness_31_race_abort_and_fused_signals() -> None:
    async def main() -> None:
        first, second = AbortController(), AbortController()
        fused, detach = any_signal(first.signal, None, second.signal)
        reason = KeyError("k")
        pending = asyncio.ensure_future(race_abort(asyncio.Event().wait(), fused))
        await asyncio.sleep(0)
        second.abort(reason)
        with pytest.raises(KeyError) as raised:
            await pending
        assert raised.value is reason
        assert fused.reason is reason
        detach()
        detached, undo = any_signal(first.signal)
        undo()
        first.abort("late")
        assert not detached.aborted
        assert fused.reason is reason
        assert await race_abort(asyncio.sleep(0, "v"), None) == "v"
        assert await race_abort(asyncio.sleep(0, "w"), AbortController().signal) == "w"
        with pytest.raises(KeyError):
            await race_abort(asyncio.sleep(0), fused)
        cancelled = asyncio.ensure_future(asyncio.Event().wait())
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await race_abort(cancelled, AbortController().signal)
        late: list[object] = []
        fused.add_listener(late.append)
        assert late == [reason]

    run(main)


def test_harness_31_abortable_runs_in_the_calling_task_and_raises_the_reason() -> None:
    async def main() -> None:
        controller = AbortController()
        assert await abortable(asyncio.sleep(0, "v"), controller.signal) == "v"
        unwound: list[str] = []

        async def honours() -> None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                unwound.append("cancelled")
                raise

        pending = asyncio.ensure_future(abortable(honours(), controller.signal))
        await asyncio.sleep(0)
        controller.abort(KeyError("stop"))  # from another task
        with pytest.raises(KeyError):
            await pending
        assert unwound == ["cancelled"]
        assert pending.cancelling() == 0  # nothing left pending on the task
        with pytest.raises(KeyError):  # already aborted: the operation never runs
            await abortable(honours(), controller.signal)

        inner = AbortController()

        async def aborts_itself(then_wait: bool) -> str:
            inner.abort(ValueError("self"))  # inside the operation, in the same task
            if then_wait:
                await asyncio.Event().wait()
            return "finished first"

        assert await abortable(aborts_itself(False), inner.signal) == "finished first"
        inner = AbortController()
        with pytest.raises(ValueError, match="self"):
            await abortable(aborts_itself(True), inner.signal)

        outer_signal = AbortController()
        outer = asyncio.ensure_future(abortable(asyncio.Event().wait(), outer_signal.signal))
        await asyncio.sleep(0)
        outer.cancel()  # an outer cancellation together with an abort stays a cancellation
        outer_signal.abort("too")
        with pytest.raises(asyncio.CancelledError):
            await outer

    run(main)


def test_harness_29_emitter_contains_listeners_and_disposers_are_single_shot() -> None:
    emitter: Emitter[int] = Emitter("e")
    seen: list[int] = []

    def boom(_: int) -> None:
        raise RuntimeError("listener")

    emitter.subscribe(boom)
    remove = emitter.subscribe(seen.append)
    emitter.emit(1)
    assert seen == [1]
    with pytest.raises(RuntimeError):
        emitter.emit_vetoable(2)
    remove()
    remove()
    assert len(emitter.listeners) == 1


def test_harness_29_the_same_listener_twice_is_two_subscriptions_in_order() -> None:
    emitter: Emitter[int] = Emitter("e")
    assert emitter.listeners == ()  # no table until someone listens
    seen: list[tuple[str, int]] = []
    first = emitter.subscribe(lambda n: seen.append(("a", n)))
    again = emitter.subscribe(lambda n: seen.append(("b", n)))
    third = emitter.subscribe(lambda n: seen.append(("a", n)))
    again()
    emitter.emit(1)
    assert seen == [("a", 1), ("a", 1)]
    first()
    third()
    assert emitter.listeners == ()


def test_harness_29_one_listener_then_more_keeps_order_and_single_shot_disposers() -> None:
    emitter: Emitter[int] = Emitter("e")
    seen: list[tuple[str, int]] = []
    only = emitter.subscribe(lambda n: seen.append(("a", n)))
    emitter.emit(1)
    stale = emitter.subscribe(lambda n: seen.append(("x", n)))
    stale()
    second = emitter.subscribe(lambda n: seen.append(("b", n)))
    emitter.emit(2)
    only()
    emitter.emit(3)
    second()
    emitter.emit(4)
    assert seen == [("a", 1), ("a", 2), ("b", 2), ("b", 3)]
    again = emitter.subscribe(lambda n: seen.append(("c", n)))
    stale()  # a used disposer removes nothing, even after the table shrank to one
    other = emitter.subscribe(lambda n: seen.append(("d", n)))
    again()
    again()
    emitter.emit(5)
    assert seen[-1:] == [("d", 5)]
    other()
    assert emitter.listeners == ()


def test_harness_29_scope_unwinds_in_reverse_and_raises_first_failure() -> None:
    async def main() -> None:
        scope = Scope()
        order: list[str] = []

        async def async_cleanup() -> None:
            order.append("async")

        def failing() -> None:
            order.append("failing")
            raise ValueError("cleanup")

        scope.defer(lambda: order.append("first"))
        scope.defer(failing)
        scope.defer(async_cleanup)

        async def early_cleanup() -> None:
            order.append("early")

        early = scope.defer(early_cleanup)
        early()
        early()
        scope.defer(lambda: order.append("sync-early"))()
        with pytest.raises(ValueError, match="cleanup"):
            await scope.dispose()
        assert order == ["sync-early", "early", "async", "failing", "first"]
        assert scope.disposed
        with pytest.raises(RuntimeError):
            scope.defer(lambda: None)

    run(main)


# ------------------------------------------------------------------ issue #6 hooks


def test_harness_9_step_entering_fires_before_step_start_and_can_veto() -> None:
    from dsh_subagent.adapters.protocols import StepEntering
    from dsh_subagent.adapters.reference.composition import PromptComposer
    from dsh_subagent.core.values import STEP_START

    async def main() -> None:
        prompt = PromptComposer()
        prompt.section("s", 1, "section")
        prompt.context("c", 2, "context")
        agent, model = make_agent([reply("a")], prompt=prompt)
        seen: list[tuple[int, int, bool]] = []

        def record(entering: StepEntering) -> None:
            started = any(e.type == STEP_START for e in agent.session.events)
            seen.append((entering.turn, entering.step, started))

        agent.step_entering.subscribe(record)
        agent.followup(msg("go"))
        await agent.when_idle()
        assert seen == [(1, 1, False)]
        assert model.requests[0].system_prompt == (("s", 1, "section"),)
        assert model.requests[0].runtime_context == (("c", 2, "context"),)

        def veto(entering: StepEntering) -> None:
            raise RuntimeError("no step")

        agent.step_entering.subscribe(veto)
        agent.followup(msg("again"))
        await agent.when_idle()
        end = agent.session.events[-1]
        assert end.type == TURN_END
        assert wire.turn_end_reason(end.data).value == "error"

    run(main)
