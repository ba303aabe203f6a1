"""The agent registry: create/resume transactions, publication and disposal (HARNESS-14..18)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import attrs
import pytest

from dsh_subagent.adapters.protocols import (
    Agent,
    CancelCause,
    CreateOptions,
    ResumeOptions,
    SessionMeta,
    SessionRecord,
    SessionStartSource,
    SetupCommit,
    create_user_message,
)
from dsh_subagent.adapters.reference.agent_loop import ReferenceAgent
from dsh_subagent.adapters.reference.registry import AgentRegistry
from dsh_subagent.adapters.reference.scripted_model import Gate, Gated, ScriptedModel, reply
from dsh_subagent.adapters.reference.session import LiveSession, SessionStore
from dsh_subagent.adapters.signals import Scope
from dsh_subagent.conformance.test_harness_registry import abort_in_setup
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import (
    TURN_END,
    TURN_START,
    AgentOptions,
    CancelKind,
    SessionEvent,
    SessionHeader,
    SessionId,
    TextBlock,
)

SID = SessionId("child-1")


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(main())  # type: ignore[arg-type]


class World:
    """A store, a registry whose factory uses one scripted model, and an event trace."""

    def __init__(self, script: Sequence[object] = (), persistence: object = None) -> None:
        self.trace: list[str] = []
        self.model = ScriptedModel(script)  # type: ignore[arg-type]
        self.built: list[ReferenceAgent] = []
        self.store = SessionStore(clock=lambda: 1.0)
        self.registry = AgentRegistry(self.store, self.factory, persistence=persistence)  # type: ignore[arg-type]
        self.store.created.subscribe(lambda s: self.trace.append(f"session/created {s.id}"))
        self.store.disposed.subscribe(lambda s: self.trace.append(f"session/disposed {s.id}"))
        self.registry.created.subscribe(lambda a: self.trace.append(f"agent/created {a.id}"))
        self.registry.disposed.subscribe(lambda a: self.trace.append(f"agent/disposed {a.id}"))
        self.registry.session_start.subscribe(
            lambda s: self.trace.append(f"agent/session-start {s.source.value}")
        )

    def factory(self, session: LiveSession, options: AgentOptions) -> ReferenceAgent:
        agent = ReferenceAgent(session, model=self.model, options=options)
        agent.discarded.subscribe(lambda n: self.trace.append("discarded"))
        self.built.append(agent)
        return agent


# ------------------------------------------------------------------ HARNESS-14, -15, -16


def test_harness_16_create_publishes_in_order_after_setup_and_commit() -> None:
    async def main() -> None:
        world = World()

        class Commit:
            def commit(self) -> None:
                world.trace.append("commit")

        async def setup(ctx: Scope) -> SetupCommit:
            world.trace.append("setup")
            assert world.registry.get(SID) is None
            return Commit()

        handle = await world.registry.create(
            CreateOptions(SID, agent_options=AgentOptions(model="m"), setup=setup)
        )
        assert world.registry.get(SID) is handle.agent
        assert world.store.get(SID) is not None
        assert handle.agent.options.model == "m"
        assert world.registry.list() == [handle.agent]
        assert world.trace == [
            "setup",
            "commit",
            f"session/created {SID}",
            f"agent/created {SID}",
            "agent/session-start startup",
        ]

    run(main)


def test_harness_15_create_options_fill_the_header_and_seed() -> None:
    async def main() -> None:
        world = World()
        seed = [SessionEvent("note", 0, 0.0, {"x": 1})]
        meta = SessionMeta(parent_session=SessionId("p"), seed_length=1, delegation_depth=1)
        handle = await world.registry.create(CreateOptions(SID, meta=meta, seed=seed))
        header = handle.agent.session.header
        assert (header.parent_session, header.seed_length, header.delegation_depth) == ("p", 1, 1)
        assert [e.type for e in handle.agent.session.events] == ["note", "session/end-seed"]

    run(main)


def test_harness_16_invalid_seed_is_rejected_before_anything_is_built() -> None:
    async def main() -> None:
        world = World()
        bad = [SessionEvent("note", 1, 0.0, None)]
        with pytest.raises(SubagentError) as err:
            await world.registry.create(CreateOptions(SID, seed=bad))
        assert err.value.field == "seed[0].seq"
        assert world.built == []
        assert world.trace == []
        with pytest.raises(SubagentError) as wrong:
            await world.registry.create("child")  # type: ignore[arg-type]
        assert wrong.value.field == "options"

    run(main)


def test_harness_16_setup_failure_disposes_and_publishes_nothing() -> None:
    async def main() -> None:
        world = World()
        cleaned: list[str] = []

        async def setup(ctx: Scope) -> None:
            ctx.defer(lambda: cleaned.append("contribution"))
            raise RuntimeError("setup failed")

        with pytest.raises(RuntimeError, match="setup failed"):
            await world.registry.create(CreateOptions(SID, setup=setup))
        assert cleaned == ["contribution"]
        assert world.registry.get(SID) is None
        assert world.store.get(SID) is None
        assert world.trace == []

    run(main)


def test_harness_16_caller_signal_aborts_setup_with_its_reason() -> None:
    async def main() -> None:
        world = World()
        signal, reason = await abort_in_setup(world.registry, SID)
        assert world.registry.get(SID) is None
        assert world.trace == []
        with pytest.raises(SubagentError) as early:
            await world.registry.create(CreateOptions(SID, signal=signal))
        assert early.value is reason

    run(main)


def test_harness_14_created_veto_rolls_back_publication() -> None:
    async def main() -> None:
        world = World()

        def veto(agent: ReferenceAgent) -> None:
            raise PermissionError("no")

        world.registry.created.subscribe(veto)
        with pytest.raises(PermissionError):
            await world.registry.create(CreateOptions(SID))
        assert world.registry.get(SID) is None
        assert world.store.get(SID) is None
        assert "agent/session-start startup" not in world.trace

    run(main)


def test_harness_16_session_created_veto_rolls_back_without_agent_events() -> None:
    async def main() -> None:
        world = World()

        def veto(session: LiveSession) -> None:
            raise PermissionError("no")

        world.store.created.subscribe(veto)
        with pytest.raises(PermissionError):
            await world.registry.create(CreateOptions(SID))
        assert world.registry.get(SID) is None
        assert world.store.get(SID) is None
        assert world.trace == [f"session/created {SID}", f"session/disposed {SID}"]

    run(main)


def test_harness_14_same_id_collision_raises_at_enter() -> None:
    async def main() -> None:
        world = World()
        await world.registry.create(CreateOptions(SID))
        twin = world.factory(LiveSession.detached(SID), AgentOptions())
        with pytest.raises(SubagentError) as err:
            world.registry.enter(twin)
        assert err.value.field == "session_id"
        with pytest.raises(SubagentError):
            await world.registry.create(CreateOptions(SID))
        # A prepared session whose id is entered meanwhile collides at publication.
        other = World()

        async def setup(ctx: Scope) -> None:
            other.store.enter(LiveSession.detached(SID))

        with pytest.raises(SubagentError):
            await other.registry.create(CreateOptions(SID, setup=setup))
        assert other.registry.get(SID) is None
        # An agent already in the registry collides after its session entered.
        third = World()

        async def sneak(ctx: Scope) -> None:
            third.registry.enter(third.factory(LiveSession.detached(SID), AgentOptions()))

        with pytest.raises(SubagentError):
            await third.registry.create(CreateOptions(SID, setup=sneak))
        assert third.store.get(SID) is None

    run(main)


# ------------------------------------------------------------------ HARNESS-17


class RepairingPersistence:
    def __init__(self, record: SessionRecord) -> None:
        self.record = record
        self.loads = 0

    async def load(self, session_id: SessionId) -> SessionRecord:
        if session_id != self.record.header.id:
            raise LookupError(session_id)
        self.loads += 1
        return self.record


def test_harness_17_resume_requires_persistence() -> None:
    async def main() -> None:
        world = World()
        with pytest.raises(SubagentError) as err:
            await world.registry.resume(ResumeOptions(SID))
        assert err.value.code is ErrorCode.PERSISTENCE_UNAVAILABLE
        with pytest.raises(SubagentError) as wrong:
            await world.registry.resume(SID)  # type: ignore[arg-type]
        assert wrong.value.field == "options"

    run(main)


def test_harness_17_resume_uses_the_repairing_load_and_continues_turns() -> None:
    async def main() -> None:
        header = SessionHeader(SID, created_at=5.0, parent_session=SessionId("p"))
        events = (
            SessionEvent(TURN_START, 0, 0.0, {"turn": 1}),
            SessionEvent(TURN_END, 1, 0.0, {"turn": 1, "reason": "interrupted"}),
        )
        persistence = RepairingPersistence(SessionRecord(header, events))
        world = World([reply("resumed")], persistence=persistence)
        handle = await world.registry.resume(ResumeOptions(SID))
        assert persistence.loads == 1
        assert handle.agent.session.header == header
        assert world.trace[-1] == f"agent/session-start {SessionStartSource.RESUME.value}"
        handle.agent.followup(create_user_message((TextBlock("again"),)))
        await handle.agent.when_idle()
        ends = [e.data for e in handle.agent.session.events if e.type == TURN_END]
        assert ends[-1] == {"turn": 2, "reason": "completed"}
        with pytest.raises(LookupError):
            await world.registry.resume(ResumeOptions(SessionId("unknown")))

    run(main)


@pytest.mark.parametrize(
    ("events", "stored", "loads"),
    [
        ((SessionEvent(TURN_START, 0, 0.0, {"turn": 1}),), 1, 1),  # open tail: repair
        ((), 1, 1),  # the log grew since it was inspected
        ((), 0, 0),  # whole and current: the inspected record is reused
    ],
)
def test_harness_17_resume_reuses_an_inspected_record_only_when_whole_and_current(
    events: tuple[SessionEvent, ...], stored: int, loads: int
) -> None:
    class Counting(RepairingPersistence):
        async def revision(self, session_id: SessionId) -> int:
            return stored

    async def main() -> None:
        record = SessionRecord(SessionHeader(SID, created_at=5.0), events)
        closed = (SessionEvent(TURN_END, len(events), 0.0, {"turn": 1, "reason": "interrupted"}),)
        persistence = Counting(attrs.evolve(record, events=events + closed if events else ()))
        world = World(persistence=persistence)
        options = ResumeOptions(SID, inspected=record)
        handle = await world.registry.resume(options)
        assert persistence.loads == loads
        assert handle.agent.session.header == record.header

    run(main)


# ------------------------------------------------------------------ HARNESS-18


def test_harness_18_dispose_runs_in_order_and_is_memoized() -> None:
    async def main() -> None:
        world = World()

        async def setup(ctx: Scope) -> None:
            ctx.defer(lambda: world.trace.append("scope"))

        handle = await world.registry.create(CreateOptions(SID, setup=setup))
        handle.agent.inject(create_user_message((TextBlock("unclaimed"),)))
        world.trace.clear()
        first = handle.dispose()
        assert world.trace == ["discarded"]  # the disposed cancel ran synchronously
        assert handle.dispose() is first
        await first
        assert world.trace == [
            "discarded",
            "scope",
            f"agent/disposed {SID}",
            f"session/disposed {SID}",
        ]
        assert world.registry.get(SID) is None
        assert world.store.get(SID) is None

    run(main)


def test_harness_18_dispose_aborts_a_running_turn_with_cause_disposed() -> None:
    async def main() -> None:
        gate = Gate()
        world = World([Gated(gate, reply("never"))])

        def boom(agent: ReferenceAgent) -> None:
            raise RuntimeError("listener")

        world.registry.disposed.subscribe(boom)
        handle = await world.registry.create(CreateOptions(SID))
        handle.agent.followup(create_user_message((TextBlock("work"),)))
        await gate.reached()
        await handle.dispose()
        ends = [e.data for e in handle.agent.session.events if e.type == TURN_END]
        assert ends == [{"turn": 1, "reason": "aborted", "cause": {"kind": "disposed"}}]
        assert f"agent/disposed {SID}" in world.trace  # peers still ran

    run(main)


def test_harness_16_registry_close_aborts_setups_and_disposes_agents() -> None:
    async def main() -> None:
        world = World()
        live = await world.registry.create(CreateOptions(SessionId("live")))
        entered = asyncio.Event()

        async def setup(ctx: Scope) -> None:
            entered.set()
            await asyncio.Event().wait()

        pending = asyncio.ensure_future(world.registry.create(CreateOptions(SID, setup=setup)))
        await entered.wait()
        await world.registry.close()
        with pytest.raises(SubagentError) as err:
            await pending
        assert err.value.code is ErrorCode.CANCELLED
        assert world.registry.get(live.agent.id) is None
        assert world.registry.list() == []
        assert live.agent.ctx.disposed
        assert CancelCause(CancelKind.DISPOSED) == CancelCause(CancelKind.DISPOSED)

    run(main)


def test_harness_17_resume_after_crash_through_bound_persistence() -> None:
    from dsh_subagent.adapters.reference.persistence import InMemoryPersistence
    from dsh_subagent.adapters.reference.session import bind_persistence

    async def main() -> None:
        persistence = InMemoryPersistence()
        gate = Gate()
        first, second = World([reply("one"), Gated(gate, reply("never"))]), World([reply("two")])
        for world in (first, second):
            world.registry.persistence = persistence
            bind_persistence(world.store, persistence)
        handle = await first.registry.create(CreateOptions(SID))
        handle.agent.followup(create_user_message((TextBlock("a"),)))
        await handle.agent.when_idle()
        handle.agent.followup(create_user_message((TextBlock("b"),)))
        await gate.reached()
        assert await first.store.flush(handle.agent.session)  # "crash" with turn 2 open
        resumed = await second.registry.resume(ResumeOptions(SID))
        ends = [e.data for e in resumed.agent.session.events if e.type == TURN_END]
        assert ends[-1] == {"turn": 2, "reason": "interrupted"}
        resumed.agent.followup(create_user_message((TextBlock("c"),)))
        await resumed.agent.when_idle()
        assert await second.store.flush(resumed.agent.session)
        stored = await persistence.inspect(SID)
        assert stored.events == resumed.agent.session.events
        gate.open()
        await handle.dispose()
        await resumed.dispose()

    run(main)


def test_harness_16_configure_runs_before_setup_and_a_failure_rolls_back() -> None:
    async def main() -> None:
        world = World()
        order: list[str] = []

        def configure(agent: Agent) -> None:
            order.append(f"configure {agent.id}")
            agent.ctx.defer(lambda: order.append("unwound"))
            raise RuntimeError("configure failed")

        async def setup(ctx: Scope) -> None:
            order.append("setup")

        with pytest.raises(RuntimeError, match="configure failed"):
            await world.registry.create(CreateOptions(SID, setup=setup, configure=configure))
        assert order == [f"configure {SID}", "unwound"]
        assert world.registry.get(SID) is None
        assert world.store.get(SID) is None

    run(main)


def test_harness_16_registry_close_reports_a_failed_disposal_after_disposing_the_rest() -> None:
    async def main() -> None:
        world = World()
        broken = await world.registry.create(CreateOptions(SessionId("broken")))
        fine = await world.registry.create(CreateOptions(SessionId("fine")))

        def explode() -> None:
            raise OSError("disk gone")

        broken.agent.ctx.defer(explode)
        with pytest.raises(SubagentError) as err:
            await world.registry.close()
        assert err.value.code is ErrorCode.ACTIVATION_TEARDOWN_FAILED
        assert "agent registry teardown failed in 1 branch(es)" in str(err.value)
        assert "disk gone" in str(err.value)
        assert fine.agent.ctx.disposed
        assert world.registry.list() == []

    run(main)
