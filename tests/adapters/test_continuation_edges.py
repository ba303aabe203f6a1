"""Edge rules of the continuation adapter: lock, memoized disposal, edges, notice delivery."""

from __future__ import annotations

import asyncio

import pytest

from dsh_subagent.adapters.continuation import AncestorAuthority, ContinuableStart, ReportDelivery
from dsh_subagent.adapters.continuation_engine import LifecycleInfo
from dsh_subagent.adapters.continuation_support import await_branches
from dsh_subagent.adapters.protocols import InboxTarget
from dsh_subagent.adapters.reference.scripted_model import Gate, Gated, reply
from dsh_subagent.core import wire
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.lifecycle import RunStartInfo
from dsh_subagent.core.residency import ActivationState
from dsh_subagent.core.values import (
    INBOX_SPLICED,
    KnownStop,
    Mode,
    SessionId,
    SubagentSettledSource,
    UserMessage,
)
from tests.adapters.continuation_harness import Harness, notices, run, text, user_texts

C = SessionId("c1")


def test_cont_22_concurrent_followups_to_an_absent_child_resume_it_once() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        await h.start(root, "c1")
        await h.quiet()
        gate = Gate()
        h.script("c1", Gated(gate, reply("a")))
        first, second = await asyncio.gather(
            h.followup(root, "c1", "one"), h.followup(root, "c1", "two")
        )
        assert first != second
        assert len([s for s in h.starts() if s.child_id == "c1"]) == 2  # one new epoch
        child = h.agents.get(C)
        assert child is not None
        gate.open()
        await h.quiet()
        assert user_texts(child)[-2:] == ["one", "two"]
        assert len(h.manager._locks) == 0

    run(main)


def test_cont_27_start_returns_identities_only() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        started = await h.manager.start_continuable(h.spec(root, child_id="c1"))
        assert isinstance(started, ContinuableStart)
        assert [field.name for field in started.__attrs_attrs__] == ["child_id", "message_id"]
        assert started.child_id == C
        await h.quiet()

    run(main)


def test_tear_1_concurrent_drains_share_one_disposal() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        gate = Gate()
        h.script("c1", Gated(gate, reply("x")))
        await h.start(root, "c1")
        await gate.reached()
        await asyncio.gather(
            h.manager.drain_children(root, [C]), h.manager.drain_children(root, [C])
        )
        assert [end.start.child_id for end in h.ends()] == ["c1"]
        assert len(notices(root)) <= 1
        await h.quiet()
        assert len(notices(root)) == 1

    run(main)


def test_evt_8_start_precedes_the_first_message_and_end_follows_notice_and_release() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        seen: list[tuple[str, tuple[str, ...], bool]] = []

        def observe(name: str, info: LifecycleInfo) -> None:
            child = h.agents.get(C)
            if name == "subagent/start":
                assert child is not None
                seen.append((name, child.pending(), True))
            else:
                seen.append((name, tuple(m.id for m in root.next_turn), child is not None))
            h.events.append((name, info))

        h.manager._engine._emit = observe
        await h.start(root, "c1")
        await h.quiet()
        assert seen[0] == ("subagent/start", (), True)
        name, notice_ids, child_registered = seen[1]
        assert name == "subagent/end"
        assert len(notice_ids) == 1  # the notice was sent first ...
        assert not child_registered  # ... and the child's handle released

    run(main)


def test_evt_2_evt_4_evt_5_evt_12_start_payload_identity() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        await h.start(root, "c1")
        await h.quiet()
        (start,) = h.starts()
        assert start == RunStartInfo(
            start.run_id, "spawn", "c1", True, SessionId("root"), Mode.CONTINUABLE, "worker"
        )
        assert h.ends()[0].start == start

    run(main)


def test_evt_11_resumed_epoch_without_a_turn_does_not_report_the_previous_answer() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        # The resumed turn is held before its answer (a follow-up returns once it is durable,
        # by which time the resumed turn may have begun).
        h.script("c1", reply("first answer"), Gated(Gate(), reply("second answer")))
        await h.start(root, "c1")
        await h.quiet()
        await h.followup(root, "c1", "again")
        await h.manager.drain_children(root, [C])
        end = h.ends()[-1]
        assert end.last_assistant_message is None
        assert end.stop_reason is KnownStop.ABORTED
        await h.quiet()

    run(main)


def test_evt_14_failed_start_publication_rolls_back_without_an_end_edge() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()

        def broken(name: str, info: object) -> None:
            raise RuntimeError("dispatch machinery failed")

        h.manager._engine._emit = broken
        with pytest.raises(RuntimeError):
            await h.manager.start_continuable(h.spec(root, child_id="c1"))
        await h.quiet()
        assert h.agents.get(C) is None
        assert notices(root) == []

    run(main)


def test_notice_14_a_failing_notice_send_never_fails_teardown() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        gate = Gate()
        h.script("c1", Gated(gate, reply("x")))
        await h.start(root, "c1")
        await gate.reached()

        def refuse(message: UserMessage) -> None:
            raise RuntimeError("inbox full")

        root.followup = refuse  # type: ignore[method-assign]
        gate.open()
        await h.quiet()
        assert h.ends()[-1].stop_reason is KnownStop.COMPLETED
        assert h.agents.get(C) is None

    run(main)


def test_notice_15_notice_injected_during_teardown_is_cancelled_by_the_parents_disposal() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        working, deep = Gate(), Gate()
        h.script("p", Gated(working, reply("delegating")))
        h.script("g", Gated(deep, reply("never")))
        parent = await h.start(root, "p")
        await working.reached()
        await h.start_under("p", "g")
        await deep.reached()
        await h.manager.drain()
        inserted, cancelled = set(), set()
        for event in parent.session.events:
            if event.type != INBOX_SPLICED:
                continue
            data = event.data
            assert isinstance(data, dict)
            for raw in data["inserted"]:
                message = wire.decode_message(raw, "m")
                if isinstance(message.source, SubagentSettledSource):
                    inserted.add(message.id)
            if data.get("outcome") == "canceled":
                cancelled.add(event.seq)
        assert len(inserted) == 1
        assert cancelled
        assert InboxTarget.NEXT_STEP.value == "next-step"

    run(main)


def test_cont_32_failed_report_returns_no_id_and_leaves_the_child_running() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        gate = Gate()
        h.script("c1", Gated(gate, reply("x")))
        child = await h.start(root, "c1")
        await gate.reached()
        await h.handles["root"].dispose()
        with pytest.raises(SubagentError) as raised:
            h.manager.report_from(child, text("news"), delivery=ReportDelivery.NEXT_STEP)
        assert raised.value.code is ErrorCode.PARENT_UNAVAILABLE
        assert h.manager.activation_state(C) is ActivationState.RUNNING
        assert len(h.starts()) == 1
        gate.open()
        await h.quiet()

    run(main)


def test_auth_7_a_deep_ancestor_may_interrupt_and_a_stale_root_drains_nothing() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        working, deep = Gate(), Gate()
        h.script("p", Gated(working, reply("delegating")))
        h.script("g", Gated(deep, reply("never")), reply("after"))
        await h.start(root, "p")
        await working.reached()
        await h.start_under("p", "g")
        await deep.reached()
        stale = type(root)(root.session, model=h.model("root"))
        await h.manager.drain_descendants([stale])  # AUTH-11: ignored, no error
        assert h.manager.activation_state(SessionId("g")) is ActivationState.RUNNING
        h.manager.interrupt(SessionId("g"), AncestorAuthority(root))  # grandparent: allowed
        working.open()
        await h.quiet()
        assert any(end.start.child_id == "g" for end in h.ends())

    run(main)


def test_tear_12_await_branches_awaits_all_then_aggregates_and_cancels_like_gather() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        failure = SubagentError(ErrorCode.ACTIVATION_TEARDOWN_FAILED, "one branch")
        branches = [loop.create_future() for _ in range(3)]
        waiting = asyncio.ensure_future(await_branches(branches, "whole manager"))
        branches[2].set_result(failure)
        branches[0].set_result(None)
        await asyncio.sleep(0)
        assert not waiting.done()  # every branch is awaited, a failed one included
        branches[1].set_result(None)
        with pytest.raises(SubagentError) as raised:
            await waiting
        assert raised.value.code is ErrorCode.ACTIVATION_TEARDOWN_FAILED
        # A cancelled awaiter cancels every branch (as asyncio.gather does).
        branches = [loop.create_future() for _ in range(3)]
        waiting = asyncio.ensure_future(await_branches(branches, "scoped"))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert all(branch.cancelled() for branch in branches)
        # A cancelled branch raises at once and leaves the others.
        branches = [loop.create_future() for _ in range(3)]
        waiting = asyncio.ensure_future(await_branches(branches, "selected"))
        await asyncio.sleep(0)
        branches[0].cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert not branches[1].done()
        assert not branches[2].done()
        await await_branches([], "selected")  # nothing to await

    run(main)
