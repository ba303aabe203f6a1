"""Continuable children through the adapter: start, follow-up routing, authority, resume."""

from __future__ import annotations

import asyncio

import pytest

from dsh_subagent.adapters.continuation import (
    ParentAgent,
    UserGrant,
)
from dsh_subagent.adapters.continuation_engine import Handback
from dsh_subagent.adapters.reference.agent_loop import ReferenceAgent
from dsh_subagent.adapters.reference.persistence import InMemoryPersistence
from dsh_subagent.adapters.reference.scripted_model import Gate, Gated, reply
from dsh_subagent.adapters.signals import AbortController
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.manager.events import Event
from dsh_subagent.core.policy import DELEGATION_STATEMENT
from dsh_subagent.core.residency import ActivationState
from dsh_subagent.core.values import (
    DESCRIPTOR_EVENT,
    END_SEED,
    INBOX_SPLICED,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
    USER_SOURCE,
    AgentOptions,
    BaseSource,
    CoordinatorSource,
    JsonObject,
    KnownStop,
    Origin,
    SessionEvent,
    SessionHeader,
    SessionId,
    ToolFilter,
)
from tests.adapters.continuation_harness import (
    GatedPersistence,
    Harness,
    Latch,
    OneShotOnly,
    SpawnDouble,
    run,
    text,
    user_messages,
    user_texts,
)

C = SessionId("c1")


def coordinator(parent: ReferenceAgent) -> CoordinatorSource:
    return CoordinatorSource(parent.id)


async def _code(awaitable: object) -> ErrorCode:
    with pytest.raises(SubagentError) as raised:
        await awaitable  # type: ignore[misc]
    return raised.value.code


# --------------------------------------------------------------------------- start


def test_cont_8_start_resolves_at_inbox_acceptance_before_the_turn() -> None:
    async def main() -> None:
        h = Harness()
        gate = Gate()
        h.script("c1", Gated(gate, reply("answer")))
        root = await h.root()
        started = await h.manager.start_continuable(h.spec(root, "do it", child_id="c1"))
        child = h.agents.get(C)
        assert child is not None
        assert started.child_id == C
        # Write-ahead acceptance (DUR-1): it resolves once the accepted prompt is stored, so
        # the turn may have claimed it already; the turn's model step is still held.
        assert await stored_inserted_ids(h, C) == [started.message_id]
        assert h.manager.activation_state(C) is ActivationState.RUNNING
        gate.open()
        await h.quiet()
        assert [m.id for m in user_messages(child)] == [started.message_id]

    run(main)


def test_cont_1_start_spec_fields_are_validated_before_any_child() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        bad = h.spec(root, label="")
        with pytest.raises(SubagentError) as raised:
            await h.manager.start_continuable(bad)
        assert raised.value.code is ErrorCode.INVALID_ARGUMENT
        assert raised.value.field == "spec.label"
        with pytest.raises(SubagentError):
            await h.manager.start_continuable("nope")  # type: ignore[arg-type]
        assert h.agents.list() == [root]

    run(main)


def test_cont_2_missing_persistence_refuses_start() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        h.persistence = None
        assert await _code(h.manager.start_continuable(h.spec(root))) is (
            ErrorCode.PERSISTENCE_UNAVAILABLE
        )
        assert h.agents.list() == [root]
        assert h.events == []

    run(main)


def test_cont_3_live_id_is_a_duplicate_child() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        code = await _code(h.manager.start_continuable(h.spec(root, child_id="root")))
        assert code is ErrorCode.DUPLICATE_CHILD

    run(main)


def test_cont_5_provider_lookup_and_capability() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        assert await _code(h.manager.start_continuable(h.spec(root, provider="nobody"))) is (
            ErrorCode.NO_PROVIDER
        )
        assert await _code(h.manager.start_continuable(h.spec(root, provider="solo"))) is (
            ErrorCode.UNSUPPORTED_CAPABILITY
        )
        assert isinstance(h.providers["solo"], OneShotOnly)
        assert h.agents.list() == [root]

    run(main)


def test_cont_7_reserved_id_colliding_with_a_persisted_child_is_refused() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        assert h.persistence is not None
        await h.persistence.create(SessionHeader(id=SessionId("cold")), [])
        code = await _code(h.manager.start_continuable(h.spec(root, child_id="cold")))
        assert code is ErrorCode.DUPLICATE_CHILD
        assert h.manager.activation_state(SessionId("cold")) is None

    run(main)


def test_desc_11_fresh_descriptor_is_the_first_event_before_any_turn() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        await h.manager.start_continuable(h.spec(root, child_id="c1", persona="terse"))
        child = h.agents.get(C)
        assert child is not None
        events = child.session.events
        assert [events[0].type, events[1].type] == [DESCRIPTOR_EVENT, END_SEED]
        assert events[0].data == {
            "version": 2,
            "mode": "continuable",
            "provider": "spawn",
            "label": "worker",
            "persona": "terse",
        }
        assert child.session.header.seed_length is None
        await h.quiet()

    run(main)


def test_cont_6_desc_12_fork_prefix_precedes_the_descriptor() -> None:
    async def main() -> None:
        prefix = [
            SessionEvent(TURN_START, 0, 0.0, {"turn": 1}),
            SessionEvent(TURN_END, 1, 0.0, {"turn": 1, "reason": "completed"}),
        ]
        h = Harness()
        h.providers["fork"] = SpawnDouble("fork", prefix)
        root = await h.root()
        await h.manager.start_continuable(h.spec(root, child_id="c1", provider="fork"))
        child = h.agents.get(C)
        assert child is not None
        types = [e.type for e in child.session.events[:5]]
        assert types == [TURN_START, TURN_END, END_SEED, DESCRIPTOR_EVENT, END_SEED]
        assert child.session.header.seed_length == 2
        await h.quiet()

    run(main)


def test_cont_12_header_and_options_carry_lineage_depth_and_route() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root(options=AgentOptions(provider="p", model="m", max_tokens=99))
        spec = h.spec(root, child_id="c1", agent_options=AgentOptions(model="m2"))
        await h.manager.start_continuable(spec)
        child = h.agents.get(C)
        assert child is not None
        header = child.session.header
        assert (header.parent_session, header.origin, header.delegation_depth) == (
            SessionId("root"),
            Origin.SUBAGENT,
            1,
        )
        assert child.options == AgentOptions("p", "m2", 99, 1)
        descriptor = child.session.events[0].data
        assert descriptor["agentProvider"] == "p"  # type: ignore[index,call-overload]
        assert descriptor["agentModel"] == "m2"  # type: ignore[index,call-overload]
        await h.quiet()

    run(main)


def test_cont_4_undeclared_composition_fields_are_omitted() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        await h.manager.start_continuable(h.spec(root, child_id="c1"))
        child = h.agents.get(C)
        assert child is not None
        assert set(child.session.events[0].data) == {  # type: ignore[arg-type]
            "version",
            "mode",
            "provider",
            "label",
        }
        await h.quiet()

    run(main)


def test_cont_9_failure_before_acceptance_rolls_back_silently() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        spec = h.spec(root, child_id="c1", tool_filter=ToolFilter(allow=("no-such-tool",)))
        with pytest.raises(SubagentError):
            await h.manager.start_continuable(spec)
        await h.quiet()
        assert h.agents.get(C) is None
        assert h.store.get(C) is None
        assert h.events == []
        assert user_texts(root) == []
        assert h.manager.activation_state(C) is None
        # The id is free again: a corrected start succeeds.
        await h.manager.start_continuable(h.spec(root, child_id="c1"))
        await h.quiet()

    run(main)


def test_cont_9_start_rejected_after_publication_closes_the_pair_without_notice() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        controller = AbortController()
        spec = h.spec(root, child_id="c1", signal=controller.signal)

        def abort_on_start(name: str, info: object) -> None:
            h.events.append((name, info))  # type: ignore[arg-type]
            if name == "subagent/start":
                controller.abort(RuntimeError("caller gave up"))

        h.manager._engine._emit = abort_on_start
        with pytest.raises(RuntimeError, match="caller gave up"):
            await h.manager.start_continuable(spec)
        await h.quiet()
        assert [name for name, _ in h.events] == ["subagent/start", "subagent/end"]
        assert user_texts(root) == []
        assert h.agents.get(C) is None

    run(main)


def test_cont_11_policy_events_and_composition_precede_the_first_request() -> None:
    async def main() -> None:
        h = Harness(approval=object())
        root = await h.root()
        spec = h.spec(root, child_id="c1", persona="terse", tool_filter=ToolFilter(deny=("write",)))
        await h.manager.start_continuable(spec)
        await h.quiet()
        model = h.model("c1")
        request = model.requests[0]
        assert ("deployment:persona", 0, "terse") in request.system_prompt
        assert any(part[2] == DELEGATION_STATEMENT for part in request.runtime_context)
        assert request.tools == ("read",)
        assert request.events[2].type == "approval/policy"

    run(main)


# --------------------------------------------------------------------------- routing


def test_cont_15_followup_to_running_child_is_queued_as_the_next_turn() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        gate = Gate()
        h.script("c1", Gated(gate, reply("first")), reply("second"))
        child = await h.start(root, "c1", "one")
        await gate.reached()
        message_id = await h.followup(root, "c1", "two")
        assert h.agents.get(C) is child
        assert child.pending() == (message_id,)
        gate.open()
        await h.quiet()
        assert user_texts(child) == ["one", "two"]
        turns = [e for e in child.session.events if e.type == TURN_START]
        assert len(turns) == 2

    run(main)


def test_res_10_a_followup_to_a_resident_child_is_one_dispatch() -> None:
    """The first acceptance is reported back to the core; a later one is not (INV-RES-3)."""

    async def main() -> None:
        h = Harness()
        root = await h.root()
        gate = Gate()
        h.script("c1", Gated(gate, reply("first")), reply("second"))
        engine = h.manager._engine
        dispatched: list[str] = []
        dispatch = engine.dispatch

        def recording(event: Event) -> Handback:
            dispatched.append(type(event).__name__)
            return dispatch(event)

        engine.dispatch = recording  # type: ignore[method-assign]
        await h.start(root, "c1", "one")
        assert "MessageAccepted" in dispatched
        await gate.reached()
        dispatched.clear()
        await h.followup(root, "c1", "two")
        assert dispatched == ["FollowupRequested"]
        gate.open()
        await h.quiet()

    run(main)


def test_res_12_waiting_child_is_woken_in_the_same_epoch() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        gate, working = Gate(), Gate()
        h.script("p", Gated(working, reply("delegated")))
        parent = await h.start(root, "p")
        await working.reached()
        h.script("g", Gated(gate, reply("grandchild done")))
        await h.manager.start_continuable(h.spec(parent, child_id="g"))
        working.open()
        await parent.when_idle()
        assert h.manager.activation_state(SessionId("p")) is ActivationState.WAITING
        await h.followup(root, "p", "more")
        assert h.agents.get(SessionId("p")) is parent
        assert len(h.starts()) == 2
        gate.open()
        await h.quiet()
        assert user_texts(parent)[1] == "more"
        assert len([s for s in h.starts() if s.child_id == "p"]) == 1

    run(main)


def test_cont_17_absent_child_is_cold_resumed_without_the_provider() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        first = await h.start(root, "c1")
        await h.quiet()
        assert h.manager.activation_state(C) is None
        assert h.agents.get(C) is None
        spawn = h.providers.pop("spawn")
        assert isinstance(spawn, SpawnDouble)
        assert len(spawn.calls) == 1
        h.script("c1", reply("resumed answer"))
        await h.followup(root, "c1", "again")
        second = h.agents.get(C)
        assert second is not None
        assert second is not first
        await h.quiet()
        starts = [s for s in h.starts() if s.child_id == "c1"]
        assert len(starts) == 2
        assert starts[0].run_id != starts[1].run_id
        assert starts[1].provider == "spawn"
        end = h.ends()[-1]
        assert end.last_assistant_message == ({"type": "text", "text": "resumed answer"},)

    run(main)


def test_cont_13_cold_resume_uses_only_the_recorded_route() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root(options=AgentOptions(provider="p", model="m", max_tokens=7))
        await h.start(root, "c1")
        await h.quiet()
        await h.followup(root, "c1", "again")
        child = h.agents.get(C)
        assert child is not None
        assert child.options == AgentOptions(provider="p", model="m")
        await h.quiet()

    run(main)


def test_cont_19_cold_resume_reapplies_persona_and_tool_filter() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        spec = h.spec(root, child_id="c1", persona="terse", tool_filter=ToolFilter(allow=("read",)))
        await h.manager.start_continuable(spec)
        await h.quiet()
        await h.followup(root, "c1", "again")
        await h.quiet()
        request = h.model("c1").requests[-1]
        assert ("deployment:persona", 0, "terse") in request.system_prompt
        assert request.tools == ("read",)
        assert any(part[2] == DELEGATION_STATEMENT for part in request.runtime_context)

    run(main)


async def stored_inserted_ids(h: Harness, child_id: str) -> list[str]:
    """The message ids the stored log of ``child_id`` has inserted into its inbox."""
    assert h.persistence is not None
    record = await h.persistence.inspect(SessionId(child_id))
    return [
        message["id"]  # type: ignore[call-overload, index, misc]
        for event in record.events
        if event.type == INBOX_SPLICED
        for message in event.data["inserted"]  # type: ignore[call-overload, index, union-attr]
    ]


def test_cont_21_followup_returns_only_the_accepted_message_id() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        await h.start(root, "c1")
        child = h.agents.get(C)
        assert child is not None
        message_id = await h.followup(root, "c1", "two")
        assert isinstance(message_id, str)
        assert message_id in await stored_inserted_ids(h, C)  # durable when returned (DUR-1)
        await h.quiet()
        assert h.persistence is not None
        record = await h.persistence.inspect(C)
        claimed = [e.data["message"]["id"] for e in record.events if e.type == USER_MESSAGE]  # type: ignore[index, call-overload]
        assert claimed.count(message_id) == 1

    run(main)


def test_auth_3_source_is_recorded_verbatim_and_initial_prompt_is_user() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        gate = Gate()
        h.script("c1", Gated(gate, reply("a")))
        child = await h.start(root, "c1")
        await gate.reached()
        await h.followup(root, "c1", "two")
        gate.open()
        await h.quiet()
        messages = list(user_messages(child))
        assert messages[0].source == USER_SOURCE
        assert messages[1].source == CoordinatorSource(SessionId("root"))

    run(main)


# --------------------------------------------------------------------------- authority


def test_auth_1_only_the_exact_live_direct_parent_may_deliver() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        other = await h.root("other")
        gate = Gate()
        h.script("c1", Gated(gate, reply("a")))
        await h.start(root, "c1")
        code = await _code(h.followup(other, "c1", "x"))
        assert code is ErrorCode.UNAUTHORIZED
        stale = ReferenceAgent(root.session, model=h.model("root"))
        code = await _code(h.followup(stale, "c1", "x"))
        assert code is ErrorCode.UNAUTHORIZED
        gate.open()
        await h.quiet()

    run(main)


def test_auth_2_cold_resume_authorizes_the_inspected_header_first() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        other = await h.root("other")
        await h.start(root, "c1")
        await h.quiet()
        code = await _code(h.followup(other, "c1", "x"))
        assert code is ErrorCode.UNAUTHORIZED
        assert h.agents.get(C) is None
        assert h.events[-1][0] == "subagent/end"

    run(main)


def test_auth_4_user_grant_cold_resumes_without_the_parent_and_cannot_be_forged() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        await h.start(root, "c1")
        await h.quiet()
        forged = UserGrant.__new__(UserGrant)
        code = await _code(h.manager.followup(C, text("x"), forged, source=BaseSource()))
        assert code is ErrorCode.UNAUTHORIZED
        with pytest.raises(SubagentError):
            UserGrant(object())
        grant = h.manager.user_authority()
        await h.manager.followup(C, text("hello"), grant, source=BaseSource())
        assert h.agents.get(C) is not None
        await h.quiet()

    run(main)


def test_cont_20_abort_before_acceptance_rejects_with_the_signal_reason() -> None:
    async def main() -> None:
        persistence = GatedPersistence()
        h = Harness(persistence)
        root = await h.root()
        await h.start(root, "c1")
        await h.quiet()
        latch = persistence.load_latch = Latch()
        controller = AbortController()
        followup = asyncio.ensure_future(
            h.manager.followup(
                C, text("x"), ParentAgent(root), source=coordinator(root), signal=controller.signal
            )
        )
        await latch.reached.wait()  # cold-resuming
        reason = RuntimeError("stop")
        controller.abort(reason)
        latch.open()
        with pytest.raises(RuntimeError) as raised:
            await followup
        assert raised.value is reason
        await h.quiet()
        assert h.agents.get(C) is None

    run(main)


def test_cont_20_a_signal_aborted_on_entry_is_cancelled_before_any_side_effect() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        await h.start(root, "c1")
        await h.quiet()
        starts = len(h.starts())
        controller = AbortController()
        controller.abort("early")
        with pytest.raises(SubagentError) as followup:
            await h.manager.followup(
                C, text("x"), ParentAgent(root), source=coordinator(root), signal=controller.signal
            )
        assert (followup.value.code, followup.value.field) == (ErrorCode.CANCELLED, "signal")
        spec = h.spec(root, child_id="c2", signal=controller.signal)
        with pytest.raises(SubagentError) as start:
            await h.manager.start_continuable(spec)
        assert (start.value.code, start.value.field) == (ErrorCode.CANCELLED, "spec.signal")
        provider = h.providers["spawn"]
        assert isinstance(provider, SpawnDouble)
        assert len(provider.calls) == 1  # only c1's start reached the provider
        assert len(h.starts()) == starts
        assert h.agents.get(C) is None
        assert h.agents.get(SessionId("c2")) is None
        assert h.manager.activation_state(SessionId("c2")) is None

    run(main)


def test_cont_20_abort_after_acceptance_changes_nothing() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        controller = AbortController()
        gate = Gate()
        h.script("c1", Gated(gate, reply("kept")))
        spec = h.spec(root, child_id="c1", signal=controller.signal)
        await h.manager.start_continuable(spec)
        await gate.reached()
        controller.abort()
        gate.open()
        await h.quiet()
        assert h.ends()[-1].stop_reason is KnownStop.COMPLETED

    run(main)


def test_desc_10_children_without_a_continuable_descriptor_are_not_resumable() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        grant = h.manager.user_authority()
        assert (
            await _code(
                h.manager.followup(SessionId("ghost"), text("x"), grant, source=BaseSource())
            )
            is ErrorCode.NOT_RESUMABLE
        )
        assert h.persistence is not None
        header = SessionHeader(id=SessionId("one"), parent_session=SessionId("root"))
        payload: JsonObject = {"version": 2, "mode": "one-shot", "provider": "spawn"}
        await h.persistence.create(header, [SessionEvent(DESCRIPTOR_EVENT, 0, 0.0, payload)])
        assert await _code(h.followup(root, "one", "x")) is ErrorCode.NOT_RESUMABLE
        assert h.agents.get(SessionId("one")) is None

    run(main)


def test_cont_2_cold_resume_needs_persistence() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        await h.start(root, "c1")
        await h.quiet()
        h.persistence = None
        assert await _code(h.followup(root, "c1", "x")) is ErrorCode.PERSISTENCE_UNAVAILABLE

    run(main)


def test_cont_14_followup_validates_arguments() -> None:
    async def main() -> None:
        h = Harness()
        root = await h.root()
        with pytest.raises(SubagentError) as raised:
            await h.manager.followup(C, "x", ParentAgent(root), source=BaseSource())  # type: ignore[arg-type]
        assert raised.value.field == "content"
        with pytest.raises(SubagentError) as raised:
            await h.manager.followup(C, text("x"), root, source=BaseSource())  # type: ignore[arg-type]
        assert raised.value.field == "authority"
        with pytest.raises(SubagentError) as raised:
            await h.manager.followup(C, text("x"), ParentAgent(root), source="user")  # type: ignore[arg-type]
        assert raised.value.field == "source"
        assert isinstance(InMemoryPersistence(), InMemoryPersistence)

    run(main)
