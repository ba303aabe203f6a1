"""Settlement notices, reports, interrupts and teardown through the adapter, with races."""

from __future__ import annotations

import asyncio

import pytest

from dsh_subagent.adapters.continuation import (
    AncestorAuthority,
    ParentAgent,
    ReportDelivery,
    UserInterruptAuthority,
)
from dsh_subagent.adapters.durability import DurabilityFailed
from dsh_subagent.adapters.providers.base import ContinuableCreateRequest, ContinuableCreateSpec
from dsh_subagent.adapters.reference.scripted_model import Gate, Gated, fail, hit_max_tokens, reply
from dsh_subagent.adapters.signals import AbortController, Scope
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.residency import ActivationState
from dsh_subagent.core.values import (
    STEP_START,
    TURN_END,
    USER_MESSAGE,
    BaseSource,
    KnownStop,
    SessionId,
    SubagentReportSource,
    SubagentSettledSource,
    TextBlock,
    text_of,
)
from tests.adapters.continuation_harness import (
    GatedPersistence,
    Harness,
    Latch,
    SpawnDouble,
    notices,
    run,
    text,
    user_messages,
    user_texts,
)

C = SessionId("c1")


def summaries(agent: object) -> list[str]:
    return [text_of(m.content[:1]) for m in notices(agent)]  # type: ignore[arg-type]


# --------------------------------------------------------------------------- notices


@pytest.mark.parametrize(
    ("item", "ending"),
    [
        (reply("done"), "finished and will do no further work unless you send it more."),
        (fail("boom"), "failed before it finished."),
        (hit_max_tokens("partial"), "ran out of room before it finished."),
    ],
)
def test_notice_6_exact_summary_line_per_stop_reason(item: object, ending: str) -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        h.script("c1", item)  # type: ignore[arg-type]
        await h.start(root, "c1")
        await h.quiet()
        assert summaries(root) == [f"Background subagent c1 {ending}"]

    run(main)


def test_notice_5_notice_7_closing_labels_and_output_blocks() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        h.script("a", reply("the answer"))
        h.script("b", hit_max_tokens())
        await h.start(root, "a")
        await h.quiet()
        await h.start(root, "b")
        await h.quiet()
        first, second = notices(root)
        assert first.content[1:] == (TextBlock("Its closing message:"), TextBlock("the answer"))
        assert second.content[1:] == (TextBlock("It left no closing message."),)

    run(main)


def test_notice_9_provenance_is_the_runtime_not_the_child() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        await h.start(root, "c1")
        await h.quiet()
        (notice,) = notices(root)
        summary = (
            "Background subagent c1 finished and will do no further work unless you send it more."
        )
        assert notice.source == SubagentSettledSource(C, summary)
        assert notice.source.form == "notice"

    run(main)


def test_notice_10_idle_parent_gets_one_new_turn() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        await h.start(root, "c1")
        await h.quiet()
        turns = [e for e in root.session.events if e.type == TURN_END]
        assert len(turns) == 1
        assert summaries(root)
        assert len(h.model("root").requests) == 1

    run(main)


def test_notice_10_several_children_settling_while_parent_is_busy_cost_one_step() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        busy = Gate()
        h.script("root", Gated(busy, reply("working")))
        h.script("p", reply("x"))
        await h.start(root, "p", "kick root")  # root's notice turn will hold at the gate
        await busy.reached()
        for name in ("a", "b", "c"):
            await h.manager.start_continuable(h.spec(root, child_id=name))
        for name in ("a", "b", "c"):
            await h.quiet_child(name)
        busy.open()
        await h.quiet()
        events = root.session.events
        steps: list[int] = []
        for event in events:
            if event.type == STEP_START:
                steps.append(0)
            elif event.type == USER_MESSAGE:
                steps[-1] += 1
        assert steps == [1, 3]
        assert len([e for e in events if e.type == TURN_END]) == 1

    run(main)


def test_notice_4_departed_parent_drops_the_notice_without_disturbing_teardown() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        gate = Gate()
        h.script("c1", Gated(gate, reply("late")))
        await h.start(root, "c1")
        await gate.reached()
        await h.handles["root"].dispose()
        gate.open()
        await h.quiet()
        assert h.ends()[-1].stop_reason is KnownStop.COMPLETED
        assert h.agents.get(C) is None

    run(main)


def test_notice_3_selected_drain_notifies_the_parent_that_the_child_was_stopped() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        gate = Gate()
        h.script("c1", Gated(gate, reply("never")))
        await h.start(root, "c1")
        await gate.reached()
        await h.manager.drain_children(root, [C])
        await h.quiet()
        assert summaries(root) == ["Background subagent c1 was stopped before it finished."]
        assert h.ends()[-1].stop_reason is KnownStop.ABORTED

    run(main)


# --------------------------------------------------------------------------- reports


def test_cont_34_report_frame_and_provenance() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        gate = Gate()
        h.script("c1", Gated(gate, reply("done")))
        child = await h.start(root, "c1")
        await gate.reached()
        message_id = h.manager.report_from(
            child, text("halfway"), delivery=ReportDelivery.NEXT_STEP
        )
        await root.when_idle()
        report = next(m for m in user_messages(root) if m.id == message_id)
        assert report.content == (
            TextBlock("Background subagent c1 reported:"),
            TextBlock("halfway"),
        )
        assert report.source == SubagentReportSource(C)
        gate.open()
        await h.quiet()

    run(main)


def test_cont_31_quiet_report_does_not_wake_the_parent() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        gate = Gate()
        h.script("c1", Gated(gate, reply("done")))
        child = await h.start(root, "c1")
        await gate.reached()
        message_id = h.manager.report_from(child, text("fyi"), delivery=ReportDelivery.QUIET)
        assert root.status.value == "idle"
        assert message_id in root.pending()
        gate.open()
        await h.quiet()
        assert user_texts(root)[0] == "Background subagent c1 reported:"

    run(main)


def test_auth_9_only_a_resident_child_may_report() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        with pytest.raises(SubagentError) as raised:
            h.manager.report_from(root, text("x"), delivery=ReportDelivery.NEXT_STEP)
        assert raised.value.code is ErrorCode.UNAUTHORIZED
        with pytest.raises(SubagentError) as raised:
            h.manager.report_from(root, text("x"), delivery="loud")  # type: ignore[arg-type]
        assert raised.value.field == "delivery"

    run(main)


def test_cont_30_report_checks_the_signal_first() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        child = await h.start(root, "c1")
        controller = AbortController()
        reason = RuntimeError("cancelled")
        controller.abort(reason)
        with pytest.raises(RuntimeError) as raised:
            h.manager.report_from(
                child, text("x"), delivery=ReportDelivery.QUIET, signal=controller.signal
            )
        assert raised.value is reason
        await h.quiet()

    run(main)


def test_cont_33_report_precedes_its_childs_settlement_notice() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        busy, child_gate = Gate(), Gate()
        h.script("root", Gated(busy, reply("working")))
        h.script("c1", Gated(child_gate, reply("final")))
        await h.start(root, "k", "kick")
        await busy.reached()
        child = await h.start(root, "c1")
        await child_gate.reached()
        h.manager.report_from(child, text("progress"), delivery=ReportDelivery.NEXT_STEP)
        child_gate.open()
        await h.quiet_child("c1")
        busy.open()
        await h.quiet()
        texts = user_texts(root)
        report = texts.index("Background subagent c1 reported:")
        notice = texts.index(
            "Background subagent c1 finished and will do no further work unless you send it more."
        )
        assert report < notice

    run(main)


# --------------------------------------------------------------------------- interrupt


def test_cont_24_cont_25_interrupt_parks_queued_work_and_keeps_residency() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        gate = Gate()
        h.script("c1", Gated(gate, reply("never")), reply("second"), reply("third"))
        child = await h.start(root, "c1", "first")
        await gate.reached()
        parked = await h.followup(root, "c1", "queued")
        h.manager.interrupt(C, AncestorAuthority(root))
        await child.when_idle()
        ends = [e.data for e in child.session.events if e.type == TURN_END]
        assert ends[-1]["reason"] == "aborted"  # type: ignore[index,call-overload]
        assert child.pending() == (parked,)
        assert h.manager.activation_state(C) is ActivationState.RUNNING
        assert h.agents.get(C) is child
        await h.followup(root, "c1", "later")
        await h.quiet()
        assert user_texts(child)[-2:] == ["queued", "later"]

    run(main)


def test_auth_5_auth_6_interrupt_authority() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        sibling = await h.root("sibling")
        gate = Gate()
        h.script("c1", Gated(gate, reply("x")))
        await h.start(root, "c1")
        await gate.reached()
        grant = h.manager.user_authority()
        with pytest.raises(SubagentError) as raised:
            h.manager.interrupt(C, UserInterruptAuthority(grant, SessionId("sibling")))
        assert raised.value.code is ErrorCode.UNAUTHORIZED
        with pytest.raises(SubagentError):
            h.manager.interrupt(C, AncestorAuthority(sibling))
        with pytest.raises(SubagentError):
            h.manager.interrupt(C, object())  # type: ignore[arg-type]
        h.manager.interrupt(SessionId("absent"), AncestorAuthority(root))  # a no-op (AUTH-13)
        assert h.manager.activation_state(C) is ActivationState.RUNNING
        h.manager.interrupt(C, UserInterruptAuthority(grant, SessionId("root")))
        await h.quiet()
        assert h.ends()[-1].stop_reason is KnownStop.ABORTED

    run(main)


# --------------------------------------------------------------------------- teardown


def test_tear_3_handles_are_released_child_first() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        working, deep = Gate(), Gate()
        h.script("p", Gated(working, reply("delegating")))
        h.script("g", Gated(deep, reply("never")))
        await h.start(root, "p")
        await working.reached()
        await h.start_under("p", "g")
        working.open()
        disposed: list[str] = []
        h.agents.disposed.subscribe(lambda agent: disposed.append(agent.id))
        await deep.reached()
        await h.manager.drain_children(root, [SessionId("p")])
        assert disposed == ["g", "p"]
        assert [end.start.child_id for end in h.ends()] == ["g", "p"]

    run(main)


def test_tear_11_selected_drain_validates_the_parent_and_targets() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        other = await h.root("other")
        gate = Gate()
        h.script("c1", Gated(gate, reply("x")))
        await h.start(root, "c1")
        await gate.reached()
        with pytest.raises(SubagentError) as raised:
            await h.manager.drain_children(other, [C])
        assert raised.value.code is ErrorCode.UNAUTHORIZED
        assert h.manager.activation_state(C) is ActivationState.RUNNING
        await h.manager.drain_children(root, [C, C, SessionId("absent")])
        assert h.agents.get(C) is None
        assert await h.followup(root, "c1", "cold") is not None  # admission stayed open
        await h.quiet()

    run(main)


def test_tear_4_unconfirmed_or_failed_flush_is_reported_not_retained() -> None:
    async def main() -> None:
        h = Harness(bind=False)
        root = await h.root()
        await h.start(root, "c1")
        await h.quiet()
        end = h.ends()[-1]
        assert end.durability_failed
        assert end.stop_reason is KnownStop.COMPLETED
        assert h.agents.get(C) is None

        async def broken(_session: object) -> None:
            raise OSError("disk gone")

        h.store.on_flush(broken)
        # The prompt is accepted in this process but not durable: the start says so (DUR-1).
        with pytest.raises(DurabilityFailed) as raised:
            await h.start(root, "c2")
        assert raised.value.code is ErrorCode.DURABILITY_FAILED
        child = h.agents.get(SessionId("c2"))
        assert child is not None
        await h.quiet()
        # Accepted in this process all the same: the child ran it.
        assert raised.value.message_id in [m.id for m in user_messages(child)]
        assert h.ends()[-1].durability_failed
        assert h.ends()[-1].stop_reason is KnownStop.COMPLETED

    run(main)


def _failing_disposer(scope: Scope) -> object:
    def release() -> None:
        raise RuntimeError("cleanup failed")

    return release


def test_tear_5_notice_8_handle_failure_fails_the_epoch_and_the_drain() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        gates = {name: Gate() for name in ("a", "b")}
        for name, gate in gates.items():
            h.script(name, Gated(gate, reply("answer")))
        await h.start(root, "a")
        remove = h.setups.register(_failing_disposer)  # type: ignore[arg-type]
        await h.start(root, "b")
        remove_failure = remove
        await gates["b"].reached()
        with pytest.raises(SubagentError) as raised:
            await h.manager.drain()
        assert raised.value.code is ErrorCode.ACTIVATION_TEARDOWN_FAILED
        assert "1 branch" in str(raised.value)
        assert h.agents.get(SessionId("a")) is None
        assert h.agents.get(SessionId("b")) is None
        by_child = {end.start.child_id: end for end in h.ends()}
        assert by_child["b"].stop_reason is KnownStop.ERROR
        assert by_child["b"].last_assistant_message is None
        assert by_child["a"].stop_reason is KnownStop.ABORTED
        del remove_failure

    run(main)


def test_tear_13_whole_drain_closes_admission_for_good() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        await h.start(root, "c1")
        await h.manager.drain()
        assert h.agents.get(C) is None
        with pytest.raises(SubagentError) as raised:
            await h.manager.start_continuable(h.spec(root))
        assert raised.value.code is ErrorCode.DRAINING
        with pytest.raises(SubagentError) as raised:
            await h.followup(root, "c1", "x")
        assert raised.value.code is ErrorCode.DRAINING

    run(main)


def test_tear_8_tear_9_scoped_drain_closes_only_that_root_until_it_is_disposed() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        other = await h.root("other")
        gates = {name: Gate() for name in ("c1", "o1")}
        for name, gate in gates.items():
            h.script(name, Gated(gate, reply("x")))
        await h.start(root, "c1")
        await h.start(other, "o1")
        await gates["o1"].reached()
        await h.manager.drain_descendants([root])
        assert h.agents.get(C) is None
        assert h.manager.activation_state(SessionId("o1")) is not None
        with pytest.raises(SubagentError) as raised:
            await h.manager.start_continuable(h.spec(root))
        assert raised.value.code is ErrorCode.DRAINING
        await h.handles["root"].dispose()
        again = await h.root()
        await h.manager.start_continuable(h.spec(again, child_id="fresh"))
        gates["o1"].open()
        await h.quiet()

    run(main)


# --------------------------------------------------------------------------- races


def test_race_followup_during_disposal_waits_for_release_then_cold_resumes() -> None:
    async def main() -> None:
        h = Harness()
        latch = Latch()
        # Only the final flush holds (acceptance commits pass: DUR-1).
        h.store.on_flush(lambda _s: latch.hold() if h.manager.activation_state(C) is None else None)
        root = await h.root()
        first = await h.start(root, "c1")
        await latch.reached.wait()  # c1 settled; its disposal holds at the final flush
        assert h.manager.activation_state(C) is None
        followup = asyncio.ensure_future(h.followup(root, "c1", "again"))
        for _ in range(3):
            await asyncio.sleep(0)
        assert not followup.done()
        latch.open()
        await followup
        assert h.agents.get(C) is not first
        await h.quiet()
        assert len([s for s in h.starts() if s.child_id == "c1"]) == 2

    run(main)


def test_race_drain_waits_for_an_in_flight_start_and_refuses_it() -> None:
    async def main() -> None:
        h = Harness()
        latch = Latch()

        class SlowSpawn(SpawnDouble):
            async def prepare_continuable(
                self, request: ContinuableCreateRequest
            ) -> ContinuableCreateSpec:
                await latch.hold()
                return ContinuableCreateSpec()

        h.providers["slow"] = SlowSpawn("slow")
        root = await h.root()
        start = asyncio.ensure_future(
            h.manager.start_continuable(h.spec(root, child_id="c1", provider="slow"))
        )
        await latch.reached.wait()
        drain = asyncio.ensure_future(h.manager.drain())
        for _ in range(3):
            await asyncio.sleep(0)
        assert not drain.done()
        latch.open()
        with pytest.raises(SubagentError) as raised:
            await start
        assert raised.value.code is ErrorCode.DRAINING
        await drain
        assert h.agents.get(C) is None
        assert h.events == []

    run(main)


def test_race_parent_replaced_during_cold_resume_is_refused_and_rolled_back() -> None:
    async def main() -> None:
        persistence = GatedPersistence()
        h = Harness(persistence)
        root = await h.root()
        await h.start(root, "c1")
        await h.quiet()
        latch = persistence.load_latch = Latch()
        followup = asyncio.ensure_future(h.followup(root, "c1", "again"))
        await latch.reached.wait()
        await h.handles["root"].dispose()
        await h.root()  # a same-id replacement
        latch.open()
        with pytest.raises(SubagentError) as raised:
            await followup
        assert raised.value.code is ErrorCode.UNAUTHORIZED
        await h.quiet()
        assert h.agents.get(C) is None
        assert len(h.starts()) == len(h.ends())

    run(main)


def test_res_3_maintenance_with_a_latched_delivery_keeps_the_child_running() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        working, deep = Gate(), Gate()
        h.script("p", Gated(working, reply("delegating")))
        h.script("g", Gated(deep, reply("g done")))
        parent = await h.start(root, "p")
        await working.reached()
        await h.start_under("p", "g")
        working.open()
        await parent.when_idle()
        assert h.manager.activation_state(SessionId("p")) is ActivationState.WAITING
        latch = Latch()
        maintenance = parent.run_maintenance(lambda _signal: latch.hold())
        await h.followup(root, "p", "during maintenance")
        assert parent.status.value == "idle"
        assert h.manager.activation_state(SessionId("p")) is ActivationState.RUNNING
        deep.open()
        await h.quiet_child("g")
        assert h.agents.get(SessionId("p")) is parent  # the notice and the message keep it
        latch.open()
        await maintenance
        await h.quiet()
        assert "during maintenance" in user_texts(parent)
        assert any("subagent g" in t for t in user_texts(parent))

    run(main)


def test_auth_4_user_grant_followup_is_unaffected_by_a_missing_parent() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        await h.start(root, "c1")
        await h.quiet()
        await h.handles["root"].dispose()
        grant = h.manager.user_authority()
        await h.manager.followup(C, text("hi"), grant, source=BaseSource())
        await h.quiet()
        assert len(h.ends()) == 2
        assert h.ends()[-1].stop_reason is KnownStop.COMPLETED
        assert ParentAgent is not None

    run(main)
