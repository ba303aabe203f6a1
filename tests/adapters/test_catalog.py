"""Listing children and descendants over real sessions and persistence (LIST-*)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path

import attrs
import pytest

from dsh_subagent.adapters.catalog import (
    ListingPersistence,
    ListingSessions,
    list_children,
    list_descendants,
)
from dsh_subagent.adapters.projections import (
    ProjectionDefinition,
    SessionProjectionRegistry,
    register_subagent_projections,
)
from dsh_subagent.adapters.protocols import (
    CachedProjection,
    ProjectionCache,
    ProjectionRegistry,
    Session,
    SessionMeta,
    SessionRecord,
)
from dsh_subagent.adapters.reference.persistence import InMemoryPersistence
from dsh_subagent.adapters.reference.session import LiveSession, SessionStore
from dsh_subagent.adapters.reference.sqlite_persistence import SqlitePersistence
from dsh_subagent.adapters.signals import AbortController
from dsh_subagent.core.budget import Budget
from dsh_subagent.core.budget_log import BUDGET_CHARGED, BUDGET_SET
from dsh_subagent.core.descriptor import descriptor_to_payload
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.listing import (
    COLD_READ_CONCURRENCY,
    Activity,
    ChildRow,
    DescendantRow,
    DiagnosticKind,
    ListingDiagnostic,
    ListingRow,
)
from dsh_subagent.core.projections import IDENTITY_KEY
from dsh_subagent.core.values import (
    DESCRIPTOR_EVENT,
    TURN_START,
    ContinuableDescriptor,
    JsonValue,
    Mode,
    OneShotDescriptor,
    Origin,
    SessionEvent,
    SessionHeader,
    SessionId,
    SubagentDescriptorData,
)
from dsh_subagent.core.wire import turn_start_data

PARENT = SessionId("parent")
Hook = Callable[[], Awaitable[None]]


def sid(name: str) -> SessionId:
    return SessionId(name)


def continuable(label: str = "worker") -> ContinuableDescriptor:
    return ContinuableDescriptor(provider="fork", label=label)


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(main())  # type: ignore[arg-type]


def ticking() -> Callable[[], float]:
    now = [1000.0]

    def clock() -> float:
        now[0] += 1
        return now[0]

    return clock


class SpyPersistence:
    """Real persistence behind the two listing reads, with hooks and a call log."""

    def __init__(self, inner: InMemoryPersistence | SqlitePersistence) -> None:
        self.inner = inner
        self.calls: list[str] = []
        self.on_list: Hook | None = None
        self.on_inspect: Callable[[SessionId], Awaitable[None]] | None = None
        self.listed_headers: dict[SessionId, SessionHeader] = {}

    async def list(self) -> Sequence[SessionHeader]:
        self.calls.append("list")
        if self.on_list is not None:
            await self.on_list()
        headers = await self.inner.list()
        return [self.listed_headers.get(header.id, header) for header in headers]

    async def inspect(self, session_id: SessionId) -> SessionRecord:
        self.calls.append(f"inspect {session_id}")
        if self.on_inspect is not None:
            await self.on_inspect(session_id)
        return await self.inner.inspect(session_id)


class SpyCache:
    """The real projection cache with a hook before each read."""

    def __init__(self, inner: InMemoryPersistence) -> None:
        self.inner = inner
        self.reads: list[SessionId] = []
        self.before: Hook | None = None

    async def cached_snapshot(self, header: SessionHeader) -> CachedProjection | None:
        self.reads.append(header.id)
        if self.before is not None:
            await self.before()
        return await self.inner.cached_snapshot(header)

    async def store_projection(
        self, session_id: SessionId, as_of_seq: int, values: Mapping[str, JsonValue]
    ) -> None:
        await self.inner.store_projection(session_id, as_of_seq, values)


class World:
    """A live store, persistence and registry; the listing services are swappable."""

    def __init__(self, persistence: InMemoryPersistence | SqlitePersistence | None = None) -> None:
        self.store = SessionStore(clock=ticking())
        self.memory = InMemoryPersistence()
        self.spy = SpyPersistence(persistence or self.memory)
        self.registry = SessionProjectionRegistry()
        register_subagent_projections(self.registry)
        self.controller = AbortController()
        self.projections: ProjectionRegistry | None = self.registry
        self.sessions: ListingSessions | None = self.store
        self.persistence: ListingPersistence | None = self.spy
        self.cache: ProjectionCache | None = None

    def make(
        self,
        name: str,
        parent: SessionId | None = PARENT,
        *,
        descriptor: SubagentDescriptorData | None = None,
        origin: Origin | None = Origin.SUBAGENT,
        seed: Sequence[SessionEvent] | None = None,
        own_descriptor: bool = True,
    ) -> LiveSession:
        meta = SessionMeta(
            parent_session=parent,
            origin=origin,
            seed_length=None if seed is None else len(seed),
        )
        session = self.store.prepare(sid(name), seed=seed, meta=meta)
        if own_descriptor and origin is Origin.SUBAGENT:
            payload = descriptor_to_payload(descriptor or continuable(name))
            session.append(DESCRIPTOR_EVENT, payload)
        return session

    def live(self, name: str, parent: SessionId | None = PARENT, **kw: object) -> LiveSession:
        session = self.make(name, parent, **kw)  # type: ignore[arg-type]
        self.store.enter(session)
        return session

    async def cold(self, name: str, parent: SessionId | None = PARENT, **kw: object) -> Session:
        session = self.make(name, parent, **kw)  # type: ignore[arg-type]
        await self.spy.inner.create(session.header, session.events)
        return session

    def signal_aborted(self) -> None:
        self.controller.abort(RuntimeError("stop"))

    async def children(self, parent: SessionId = PARENT) -> list[ListingRow]:
        return await list_children(
            parent,
            projections=self.projections,
            sessions=self.sessions,
            persistence=self.persistence,
            cache=self.cache,
            signal=self.controller.signal,
        )

    async def descendants(self, root: SessionId = PARENT) -> list[DescendantRow]:
        return await list_descendants(
            root,
            projections=self.projections,
            sessions=self.sessions,
            persistence=self.persistence,
            cache=self.cache,
            signal=self.controller.signal,
        )


def row(
    name: str, activity: Activity, *, label: str | None = None, children: bool = False
) -> ChildRow:
    return ChildRow(sid(name), activity, children, Mode.CONTINUABLE, label or name)


def kinds(rows: Sequence[ListingRow]) -> list[tuple[str, str]]:
    return [
        (r.child_id, r.kind.value) if isinstance(r, ListingDiagnostic) else (r.id, r.activity.value)
        for r in rows
    ]


async def cancelled(listing: Awaitable[object]) -> SubagentError:
    with pytest.raises(SubagentError) as error:
        await listing
    assert error.value.code is ErrorCode.CANCELLED
    return error.value


# --------------------------------------------------------------------------- LIST-1, LIST-2


def test_list_1_missing_services_fail_loud_before_any_read() -> None:
    async def main() -> None:
        world = World()
        world.projections, world.sessions = None, None
        with pytest.raises(SubagentError) as error:
            await world.children()
        assert error.value.code is ErrorCode.SUBAGENT_CONTROL_PROJECTIONS_UNAVAILABLE
        world.projections = world.registry
        with pytest.raises(SubagentError) as error:
            await world.descendants()
        assert error.value.code is ErrorCode.SUBAGENT_CONTROL_SESSION_STORE_UNAVAILABLE
        assert world.spy.calls == []

    run(main)


def test_list_1_already_aborted_signal_is_cancelled_before_any_read() -> None:
    async def main() -> None:
        world = World()
        world.signal_aborted()
        error = await cancelled(world.children(sid("nobody")))
        assert isinstance(error.cause, RuntimeError)
        world.controller = AbortController()
        world.controller.abort("not an exception")
        assert (await cancelled(world.children())).cause is None
        assert world.spy.calls == []

    run(main)


def test_list_1_bad_id_is_refused_naming_the_field() -> None:
    async def main() -> None:
        world = World()
        for listing, field in [(world.children, "parent_id"), (world.descendants, "root_id")]:
            with pytest.raises(SubagentError) as error:
                await listing(sid(""))
            assert (error.value.code, error.value.field) == (ErrorCode.INVALID_ARGUMENT, field)
        assert world.spy.calls == []

    run(main)


def test_list_2_lists_live_children_without_persistence_or_cache() -> None:
    async def main() -> None:
        world = World()
        world.live("a")
        await world.cold("stored")
        world.persistence = None
        assert await world.children() == [row("a", Activity.RUNNING)]

    run(main)


# --------------------------------------------------------------------------- LIST-3 .. LIST-6


def test_list_3_live_record_replaces_the_persisted_one_wholesale() -> None:
    async def main() -> None:
        world = World()
        stored = world.make("moved", parent=sid("old-parent"))
        await world.memory.create(stored.header, stored.events)
        world.live("moved", parent=PARENT)
        await world.cold("stored-only")
        assert await world.children(sid("old-parent")) == []
        assert kinds(await world.children()) == [("moved", "running"), ("stored-only", "inactive")]

    run(main)


def test_list_4_failed_persisted_listing_fails_the_whole_listing() -> None:
    async def main() -> None:
        world = World()
        world.live("a")

        async def broken() -> None:
            raise OSError("disk gone")

        world.spy.on_list = broken
        with pytest.raises(SubagentError) as error:
            await world.children()
        assert error.value.code is ErrorCode.PERSISTENCE_UNAVAILABLE
        assert isinstance(error.value.cause, OSError)
        assert "disk gone" in str(error.value)

        async def refused() -> None:
            raise SubagentError(ErrorCode.CORRUPT_SESSION, "bad header", field="header")

        world.spy.on_list = refused
        with pytest.raises(SubagentError) as error:
            await world.descendants()
        assert (error.value.code, error.value.field) == (ErrorCode.CORRUPT_SESSION, "header")

        async def broken_while_aborted() -> None:
            world.signal_aborted()
            raise OSError("disk gone")

        world.spy.on_list = broken_while_aborted
        await cancelled(world.children())

    run(main)


def test_list_4_a_sqlite_store_missing_its_events_table_is_unavailable(tmp_path: Path) -> None:
    """Issue 18: the damaged store fails the listing typed, not with ``sqlite3`` errors."""

    async def main() -> None:
        path = tmp_path / "sessions.db"
        persistence = await SqlitePersistence.open(path)
        world = World(persistence)
        await world.cold("a")
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("DROP TABLE events")
        conn.close()
        try:
            for listing in (world.children, world.descendants):
                with pytest.raises(SubagentError) as error:
                    await listing()
                assert error.value.code is ErrorCode.PERSISTENCE_UNAVAILABLE
                assert isinstance(error.value.cause, sqlite3.OperationalError)
        finally:
            await persistence.close()

    run(main)


def test_list_5_candidates_are_subagent_children_in_creation_order() -> None:
    async def main() -> None:
        world = World()
        world.live("b-first")
        await world.cold("a-second")
        world.live("fork", origin=None)
        world.live("elsewhere", parent=sid("other"))
        world.live("c-third")
        assert kinds(await world.children()) == [
            ("b-first", "running"),
            ("a-second", "inactive"),
            ("c-third", "running"),
        ]

    run(main)


def test_list_6_unknown_parent_lists_empty() -> None:
    async def main() -> None:
        world = World()
        world.live("a")
        assert await world.children(sid("no-such-parent")) == []
        assert await world.descendants(sid("no-such-parent")) == []

    run(main)


# --------------------------------------------------------------------------- LIST-7 .. LIST-9


def failing_unit() -> ProjectionDefinition[int]:
    def apply(state: int, event: SessionEvent) -> int:
        if event.type == "boom":
            raise ValueError("unit failed")
        return state

    return ProjectionDefinition(
        key="fragile",
        state_version=1,
        init=lambda: 0,
        apply=apply,
        view=lambda state: state,
        encode_state=lambda state: state,
        decode_state=lambda value: 0,
    )


def test_list_7_live_candidates_are_running_corrupt_or_omitted() -> None:
    async def main() -> None:
        world = World()
        world.registry.register(failing_unit())
        world.live("running")
        world.live("window", own_descriptor=False)
        world.live("damaged").append("boom", None)
        assert await world.children() == [
            row("running", Activity.RUNNING),
            ListingDiagnostic(
                DiagnosticKind.CORRUPT, sid("damaged"), "projection snapshot failed: unit failed"
            ),
        ]
        assert world.spy.calls == ["list"]  # a live child needs no log read

    run(main)


def test_list_7_live_child_without_a_registered_identity_unit_is_omitted() -> None:
    async def main() -> None:
        world = World()
        world.live("a")
        world.projections = SessionProjectionRegistry()
        assert await world.children() == []

    run(main)


async def cached_world(identity: JsonValue, *, seed: bool = False) -> tuple[World, SpyCache]:
    world = World()
    seed_events = None
    if seed:
        ancestor = descriptor_to_payload(continuable("ancestor"))
        seed_events = [SessionEvent(DESCRIPTOR_EVENT, 0, 1.0, ancestor)]
    session = await world.cold("kid", seed=seed_events)
    await world.memory.store_projection(session.id, session.seq, {IDENTITY_KEY: identity})
    cache = SpyCache(world.memory)
    world.cache = cache
    return world, cache


def test_list_8_cache_row_with_own_identity_serves_without_inspection() -> None:
    async def main() -> None:
        identity: JsonValue = {"mode": "continuable", "label": "cached", "seq": 0}
        world, cache = await cached_world(identity)
        assert await world.children() == [row("kid", Activity.INACTIVE, label="cached")]
        assert (world.spy.calls, cache.reads) == (["list"], [sid("kid")])

    run(main)


def test_list_8_seq_gate_rejects_a_seed_inherited_identity() -> None:
    async def main() -> None:
        ancestor: JsonValue = {"mode": "continuable", "label": "ancestor", "seq": 0}
        world, _ = await cached_world(ancestor, seed=True)
        await world.cold("no-row")
        assert await world.children() == [
            row("kid", Activity.INACTIVE),
            row("no-row", Activity.INACTIVE),
        ]
        assert world.spy.calls == ["list", "inspect kid", "inspect no-row"]

    run(main)


@pytest.mark.parametrize("identity", [None, {"mode": "weird"}])
def test_list_8_null_or_unreadable_cache_value_falls_through(identity: JsonValue) -> None:
    async def main() -> None:
        world, _ = await cached_world(identity)
        assert await world.children() == [row("kid", Activity.INACTIVE)]
        assert world.spy.calls == ["list", "inspect kid"]

    run(main)


def test_list_8_raising_cache_read_is_a_silent_miss() -> None:
    async def main() -> None:
        world, cache = await cached_world(None)
        await world.cold("uncached")

        async def damaged() -> None:
            raise SubagentError(ErrorCode.CORRUPT_SESSION, "damaged row")

        cache.before = damaged
        rows = await world.children()
        assert rows == [row("kid", Activity.INACTIVE), row("uncached", Activity.INACTIVE)]

    run(main)


def test_list_9_failed_inspection_is_unavailable() -> None:
    async def main() -> None:
        world = World()
        await world.cold("flaky")

        async def fail(_: SessionId) -> None:
            raise OSError("read error")

        world.spy.on_inspect = fail
        assert await world.children() == [
            ListingDiagnostic(DiagnosticKind.UNAVAILABLE, sid("flaky"), "read error")
        ]

    run(main)


def test_list_9_corrupt_when_lifecycle_fold_or_identity_fails() -> None:
    async def main() -> None:
        world = World()
        world.registry.register(failing_unit())
        republished = await world.cold("republished")
        world.spy.listed_headers[republished.id] = attrs.evolve(republished.header, created_at=1.0)
        damaged = world.make("damaged")
        damaged.append("boom", None)
        await world.memory.create(damaged.header, damaged.events)
        await world.cold("no-descriptor", own_descriptor=False)
        await world.cold("fine", descriptor=OneShotDescriptor(provider="spawn"))
        rows = await world.children()
        assert kinds(rows) == [
            ("republished", "corrupt"),
            ("damaged", "corrupt"),
            ("no-descriptor", "corrupt"),
            ("fine", "inactive"),
        ]
        assert rows[-1] == ChildRow(sid("fine"), Activity.INACTIVE, False, Mode.ONE_SHOT, None)
        assert "inspect republished" in world.spy.calls

    run(main)


def test_budget_16_a_cold_row_carries_the_budget_its_log_records() -> None:
    async def main() -> None:
        world = World()
        for name, caps in (("capped", {"model_requests": 3}), ("damaged", {"coffee": 1})):
            session = world.make(name)
            session.append(BUDGET_SET, caps)
            session.append(BUDGET_CHARGED, {"model_requests": 1})
            await world.memory.create(session.header, session.events)
        await world.cold("unbudgeted")
        rows = {row.id: row for row in await world.children() if isinstance(row, ChildRow)}
        assert rows[sid("capped")].budget == Budget(model_requests=2)
        assert rows[sid("damaged")].budget is None  # derived data: a damaged record, no budget
        assert rows[sid("damaged")].activity is Activity.INACTIVE  # the row itself stands
        assert rows[sid("unbudgeted")].budget is None

    run(main)


# --------------------------------------------------------------------------- LIST-10


def test_list_10_at_most_four_cold_inspections_run_at_once() -> None:
    async def main() -> None:
        world = World()
        names = [f"c{index:02d}" for index in range(10)]
        for name in names:
            await world.cold(name)
        in_flight, peak = 0, 0
        gate = asyncio.Event()

        async def gated(_: SessionId) -> None:
            nonlocal in_flight, peak
            in_flight += 1
            peak = max(peak, in_flight)
            if in_flight == COLD_READ_CONCURRENCY:
                # Open the gate only after every read already scheduled has started.
                asyncio.get_running_loop().call_soon(gate.set)
            await gate.wait()
            in_flight -= 1

        world.spy.on_inspect = gated
        rows = await world.children()
        assert peak == COLD_READ_CONCURRENCY
        assert [r.id for r in rows if isinstance(r, ChildRow)] == names

    run(main)


def test_list_10_results_keep_candidate_order_whatever_finishes_first() -> None:
    async def main() -> None:
        world = World()
        names = ["first", "second", "third"]
        for name in names:
            await world.cold(name)
        started = {sid(n): asyncio.Event() for n in names}
        release = {sid(n): asyncio.Event() for n in names}

        async def held(session_id: SessionId) -> None:
            started[session_id].set()
            await release[session_id].wait()

        world.spy.on_inspect = held
        listing = asyncio.ensure_future(world.children())
        for event in started.values():
            await event.wait()
        for name in reversed(names):
            release[sid(name)].set()
        assert [r.id for r in await listing if isinstance(r, ChildRow)] == names

    run(main)


def test_list_10_cancellation_inside_a_worker_rejects_the_listing() -> None:
    async def main() -> None:
        world = World()
        for name in ["a", "b", "c", "d", "e"]:
            await world.cold(name)
        gate = asyncio.Event()

        async def abort_on_c(session_id: SessionId) -> None:
            if session_id == "c":
                world.signal_aborted()
                raise OSError("interrupted read")
            await gate.wait()

        world.spy.on_inspect = abort_on_c
        await cancelled(world.children())
        assert "inspect e" not in world.spy.calls

    run(main)


# --------------------------------------------------------------------------- LIST-11 .. LIST-13


def test_list_11_has_children_counts_subagent_grandchildren_only() -> None:
    async def main() -> None:
        world = World()
        world.live("a")
        world.live("a-fork", parent=sid("a"), origin=None)
        world.live("b")
        await world.cold("b-kid", parent=sid("b"), own_descriptor=False)
        await world.cold("c")
        world.live("c-kid", parent=sid("c"), descriptor=OneShotDescriptor(provider="x"))
        assert await world.children() == [
            row("a", Activity.RUNNING),
            row("b", Activity.RUNNING, children=True),
            row("c", Activity.INACTIVE, children=True),
        ]

    run(main)


def test_list_12_rows_carry_mode_and_label_but_no_seq() -> None:
    async def main() -> None:
        world = World()
        world.live("labelled", descriptor=OneShotDescriptor(provider="spawn", label="job"))
        await world.cold("plain", descriptor=OneShotDescriptor(provider="spawn"))
        world.live("kept", descriptor=continuable("reviewer"))
        assert await world.children() == [
            ChildRow(sid("labelled"), Activity.RUNNING, False, Mode.ONE_SHOT, "job"),
            ChildRow(sid("plain"), Activity.INACTIVE, False, Mode.ONE_SHOT, None),
            ChildRow(sid("kept"), Activity.RUNNING, False, Mode.CONTINUABLE, "reviewer"),
        ]
        assert not hasattr(ChildRow, "seq")

    run(main)


def test_list_13_activity_is_live_store_presence_not_outcome() -> None:
    async def main() -> None:
        world = World()
        settled = world.live("settled")
        await world.memory.create(settled.header, settled.events)
        assert kinds(await world.children()) == [("settled", "running")]
        world.store.leave(settled)
        assert kinds(await world.children()) == [("settled", "inactive")]

    run(main)


# --------------------------------------------------------------------------- LIST-14


def test_list_14_abort_during_the_persisted_listing_is_cancelled() -> None:
    async def main() -> None:
        world = World()
        listed = asyncio.Event()

        async def hang() -> None:
            listed.set()
            await asyncio.Event().wait()

        world.spy.on_list = hang
        listing = asyncio.ensure_future(world.children())
        await listed.wait()
        world.signal_aborted()
        await cancelled(listing)

    run(main)


def test_list_14_abort_observed_after_the_persisted_listing() -> None:
    async def main() -> None:
        world = World()
        await world.cold("a")

        async def abort() -> None:
            world.signal_aborted()

        world.spy.on_list = abort
        await cancelled(world.children())
        assert world.spy.calls == ["list"]

    run(main)


def test_list_14_abort_before_an_inspection_prevents_it() -> None:
    async def main() -> None:
        world, cache = await cached_world(None)

        async def abort() -> None:
            world.signal_aborted()

        cache.before = abort
        await cancelled(world.children())
        assert world.spy.calls == ["list"]

        async def abort_and_fail() -> None:
            world.signal_aborted()
            raise OSError("cache read failed")

        world.controller = AbortController()
        cache.before = abort_and_fail
        await cancelled(world.children())

    run(main)


@pytest.mark.parametrize("inspection_fails", [False, True])
def test_list_14_abort_after_an_inspection_is_never_a_result(inspection_fails: bool) -> None:
    async def main() -> None:
        world = World()
        await world.cold("a")

        async def abort(_: SessionId) -> None:
            world.signal_aborted()
            if inspection_fails:
                raise OSError("read failed")

        world.spy.on_inspect = abort
        await cancelled(world.children())

    run(main)


def test_list_14_abort_after_all_rows_resolved_is_cancelled() -> None:
    async def main() -> None:
        world = World()
        world.live("a")
        registry = world.registry

        class AbortingRegistry:
            def snapshot(self, session: Session) -> Mapping[str, JsonValue]:
                world.signal_aborted()
                return registry.snapshot(session)

            def restore(
                self,
                checkpoint: Mapping[str, JsonValue],
                events: Sequence[SessionEvent],
                base_seq: int,
            ) -> Mapping[str, JsonValue]:
                return registry.restore(checkpoint, events, base_seq)

        world.projections = AbortingRegistry()
        world.persistence = None
        await cancelled(world.children())

    run(main)


# --------------------------------------------------------------------------- LIST-15


def test_list_15_descendants_walk_through_ordinary_and_one_shot_nodes() -> None:
    async def main() -> None:
        world = World()
        world.live("fork", origin=None)
        await world.cold("under-fork", parent=sid("fork"))
        world.live("job", descriptor=OneShotDescriptor(provider="spawn", label="job"))
        world.live("window", parent=sid("job"), own_descriptor=False)
        world.live("deep", parent=sid("window"))
        rows = await world.descendants()
        assert [(r.row.id, r.parent_id, r.depth) for r in rows if isinstance(r.row, ChildRow)] == [
            ("under-fork", "fork", 2),
            ("job", "parent", 1),
            ("deep", "window", 3),
        ]
        assert len(rows) == 3

    run(main)


def test_list_15_a_self_parented_session_is_a_corrupt_row_with_its_subtree_listed() -> None:
    """Issue 18: a header naming itself as its parent is reported, with no read of it, and
    its children are listed below it."""

    async def main() -> None:
        world = World()
        await world.cold("loop", parent=sid("loop"))
        await world.cold("kid", parent=sid("loop"))
        world.live("grandkid", parent=sid("kid"))
        rows = await world.descendants(sid("loop"))
        assert [(r.row.id if isinstance(r.row, ChildRow) else r.row.child_id) for r in rows] == [
            "loop",
            "kid",
            "grandkid",
        ]
        first = rows[0]
        assert isinstance(first.row, ListingDiagnostic)
        assert (first.row.kind, first.parent_id, first.depth) == (
            DiagnosticKind.CORRUPT,
            "loop",
            1,
        )
        assert "parent cycle" in first.row.reason
        assert [(r.parent_id, r.depth) for r in rows[1:]] == [("loop", 1), ("kid", 2)]
        assert kinds(await world.children(sid("loop"))) == [
            ("loop", "corrupt"),
            ("kid", "inactive"),
        ]
        assert "inspect loop" not in world.spy.calls

    run(main)


def test_list_15_two_sessions_naming_each_other_report_the_cycle() -> None:
    """Issue 18: ``a`` and ``b`` name each other as parent; listing from ``a`` lists ``b`` and
    its other child, and reports ``a`` below ``b`` as a parent cycle."""

    async def main() -> None:
        world = World()
        world.live("a", parent=sid("b"))
        await world.cold("b", parent=sid("a"))
        await world.cold("c", parent=sid("b"))
        rows = await world.descendants(sid("a"))
        assert kinds([r.row for r in rows]) == [
            ("b", "inactive"),
            ("a", "corrupt"),
            ("c", "inactive"),
        ]
        assert [(r.parent_id, r.depth) for r in rows] == [("a", 1), ("b", 2), ("b", 2)]

    run(main)


# --------------------------------------------------------------------------- LIST-16 .. LIST-18


def test_list_16_listing_never_writes_or_repairs_on_sqlite(tmp_path: Path) -> None:
    async def main() -> None:
        path = tmp_path / "sessions.db"
        persistence = await SqlitePersistence.open(path)
        try:
            world = World(persistence)
            interrupted = world.make("interrupted")
            interrupted.append(TURN_START, turn_start_data(1))
            await persistence.create(interrupted.header, interrupted.events)
            await persistence.store_projection(interrupted.id, 1, {IDENTITY_KEY: None})
            world.cache = persistence
            before = list(sqlite3.connect(path).iterdump())
            assert await world.children() == [row("interrupted", Activity.INACTIVE)]
            assert await world.descendants() == [
                DescendantRow(row("interrupted", Activity.INACTIVE), PARENT, 1)
            ]
            assert list(sqlite3.connect(path).iterdump()) == before
            assert (await persistence.inspect(interrupted.id)).events == interrupted.events
        finally:
            await persistence.close()

    run(main)


def test_list_17_children_of_unmounted_providers_are_still_listed() -> None:
    async def main() -> None:
        world = World()
        gone = ContinuableDescriptor(provider="provider-never-registered", label="orphan")
        await world.cold("orphan", descriptor=gone)
        assert await world.children() == [row("orphan", Activity.INACTIVE, label="orphan")]

    run(main)


def test_list_18_extra_surface_history_does_not_change_the_row() -> None:
    async def main() -> None:
        world = World()
        plain = await world.cold("plain", descriptor=continuable("same"))
        compacted = world.make("compacted", descriptor=continuable("same"))
        compacted.append("session/compacted", {"summary": "earlier turns"})
        await world.memory.create(compacted.header, compacted.events)
        rows = await world.children()
        assert [attrs.evolve(r, id=plain.id) for r in rows if isinstance(r, ChildRow)] == [
            row("plain", Activity.INACTIVE, label="same")
        ] * 2

    run(main)
