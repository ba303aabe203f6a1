"""The live session and session store (HARNESS-19 .. HARNESS-23)."""

from __future__ import annotations

import asyncio
import builtins
import gc
import weakref
from collections.abc import Awaitable, Callable, Sequence

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh_subagent.adapters import clock
from dsh_subagent.adapters.frozen_json import FrozenDict
from dsh_subagent.adapters.protocols import Lease, SessionMeta, SessionRecord, SessionSnapshot
from dsh_subagent.adapters.reference.session import (
    LiveSession,
    LogOverride,
    SessionStore,
    adopt_seed,
    bind_persistence,
)
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import (
    APPROVAL_POLICY,
    END_SEED,
    SANDBOX_MODE,
    STEP_END,
    STEP_START,
    TURN_END,
    TURN_START,
    JsonValue,
    Origin,
    SessionEvent,
    SessionHeader,
    SessionId,
)

SID = SessionId("s-1")


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(main())  # type: ignore[arg-type]


def ticking() -> Callable[[], float]:
    now = [100.0]

    def clock() -> float:
        now[0] += 1
        return now[0]

    return clock


def ev(seq: int, type: str = "note", data: object = None) -> SessionEvent:
    return SessionEvent(type, seq, 0.0, data)  # type: ignore[arg-type]


# ------------------------------------------------------------------ HARNESS-20


class _Sub(str):
    """A str subclass: lossless JSON, but not a shape the one-pass freeze decides."""


def test_harness_20_append_assigns_seq_and_time_and_freezes_data() -> None:
    session = LiveSession(SessionHeader(SID), clock=ticking())
    source: dict[str, list[JsonValue]] = {"items": [1, {"k": "v"}]}
    event = session.append("note", source)
    assert (event.seq, event.time, session.seq) == (0, 101.0, 1)
    source["items"].append(2)
    assert event.data == {"items": [1, {"k": "v"}]}
    with pytest.raises(TypeError):
        event.data["x"] = 1  # type: ignore[index]
    with pytest.raises(TypeError):
        event.data["items"].append(3)  # type: ignore[union-attr]
    assert session.events == (event,)
    assert session.events is session.events


def test_harness_20_default_clock_is_whole_milliseconds_one_float_per_millisecond(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1_700_000_000_123_456_789]
    monkeypatch.setattr("dsh_subagent.adapters.clock.time.time_ns", lambda: now[0])
    first = clock.epoch_ms()
    assert first == 1_700_000_000_123.0
    now[0] += 500_000  # the same millisecond: the same float
    assert clock.epoch_ms() is first
    now[0] += 600_000  # the next one
    assert clock.epoch_ms() == 1_700_000_000_124.0


@pytest.mark.parametrize(
    ("data", "field"),
    [(float("nan"), "data"), ({"k": object()}, "data.k"), ({1: "x"}, "data")],
)
def test_harness_20_append_rejects_lossy_json_naming_the_field(data: object, field: str) -> None:
    session = LiveSession.detached(SID)
    with pytest.raises(SubagentError) as bad:
        session.append("note", data)  # type: ignore[arg-type]
    assert bad.value.code is ErrorCode.INVALID_ARGUMENT
    assert bad.value.field == field
    with pytest.raises(SubagentError) as bad_type:
        session.append("", {})
    assert bad_type.value.field == "type"
    assert session.seq == 0


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"k": ["a", "\ud800"]}, "data.k[1]"),  # a lone surrogate in a value
        ({"é": float("inf")}, "data.é"),  # the general path: a non-ASCII key
        ({"k": _Sub("x"), "n": [float("nan")]}, "data.n[0]"),  # a str subclass
        ({"k": {"k": {"k": [float("-inf")]}}}, "data.k.k.k[0]"),
    ],
)
def test_harness_20_one_pass_freeze_names_the_bad_path(data: object, field: str) -> None:
    session = LiveSession.detached(SID)
    with pytest.raises(SubagentError) as bad:
        session.append("note", data)  # type: ignore[arg-type]
    assert (bad.value.code, bad.value.field) == (ErrorCode.INVALID_ARGUMENT, field)
    assert session.seq == 0


def test_harness_20_frozen_data_is_reused_and_odd_shapes_take_the_general_path() -> None:
    session = LiveSession.detached(SID)
    first = session.append("note", {"items": [1, "é", None, True, 2.5], "n": {"m": ()}})
    again = session.append("note", first.data)
    assert again.data is first.data  # already frozen: walked, not copied
    deep: JsonValue = 0
    for _ in range(200):  # deeper than the fast path goes
        deep = [deep]
    odd = session.append("note", {"é": _Sub("x"), "deep": deep})
    assert odd.data == {"é": "x", "deep": deep}
    with pytest.raises(TypeError):
        odd.data["x"] = 1  # type: ignore[index]
    mixed = session.append("note", FrozenDict({"k": [1]}))  # a frozen shell, mutable inside
    assert mixed.data == {"k": [1]}
    with pytest.raises(TypeError):
        mixed.data["k"].append(2)  # type: ignore[union-attr]
    reseeded = LiveSession.detached(SessionId("s2"), session.events)
    assert reseeded.events[0] is session.events[0]


def test_harness_20_observers_are_synchronous_and_contained() -> None:
    session = LiveSession.detached(SID)
    seen: list[int] = []

    def boom(_: SessionEvent) -> None:
        raise RuntimeError("observer")

    def nested(_: SessionEvent) -> None:
        session.append("nested", None)

    session.observe(boom)
    session.observe(nested)
    remove = session.observe(lambda e: seen.append(e.seq))
    session.append("a", None)
    assert seen == [0]
    assert session.seq == 1
    remove()
    session.append("b", None)
    assert seen == [0]


def test_harness_20_seed_gets_end_seed_marker_once() -> None:
    fresh = LiveSession.detached(SID, [])
    assert [e.type for e in fresh.events] == [END_SEED]
    seeded = LiveSession.detached(SID, [ev(0), ev(1, END_SEED, {})])
    assert [e.type for e in seeded.events] == ["note", END_SEED]
    assert seeded.first_live_seq == 2
    grown = LiveSession.detached(SID, [ev(0)])
    assert [e.type for e in grown.events] == ["note", END_SEED]
    assert grown.first_live_seq == 1
    assert LiveSession.detached(SID).events == ()


@pytest.mark.parametrize(
    ("seed", "field"),
    [
        ([ev(1)], "seed[0].seq"),
        ([ev(0), ev(0)], "seed[1].seq"),
        ([ev(0, data=float("inf"))], "seed[0].data"),
        ([ev(0, TURN_START), ev(1, TURN_START)], "seed[1]"),
        ([ev(0, TURN_END)], "seed[0]"),
        ([ev(0, STEP_START)], "seed[0]"),
        ([ev(0, STEP_END)], "seed[0]"),
        ([ev(0, TURN_START), ev(1, STEP_START), ev(2, STEP_START)], "seed[2]"),
        ([ev(0, TURN_START)], "seed"),
        (["not an event"], "seed[0]"),
        ([ev(0, "")], "seed[0].type"),
        ([attrs.evolve(ev(0), seq=True)], "seed[0].seq"),
    ],
)
def test_harness_20_seed_must_be_contiguous_json_and_balanced(
    seed: Sequence[SessionEvent], field: str
) -> None:
    with pytest.raises(SubagentError) as bad:
        LiveSession.detached(SID, seed)
    assert bad.value.field == field


BALANCED_TURN = [TURN_START, STEP_START, "user/message", STEP_END, TURN_END]
REPAIRED_TURN = [TURN_START, STEP_START, "user/message", TURN_END]


@given(st.lists(st.sampled_from(["a", "turn", "repaired", "note"]), max_size=20))
def test_harness_20_balanced_logs_are_valid_seeds(shape: list[str]) -> None:
    types: list[str] = []
    for item in shape:
        types.extend({"turn": BALANCED_TURN, "repaired": REPAIRED_TURN}.get(item, [item]))
    seed = [ev(i, t, {"i": i}) for i, t in enumerate(types)]
    adopt_seed(seed)
    session = LiveSession.detached(SID, seed)
    assert [e.data for e in session.events[: len(seed)]] == [e.data for e in seed]


# ------------------------------------------------------------------ HARNESS-19, -21


def test_harness_19_prepare_fills_header_without_entering() -> None:
    store = SessionStore(clock=lambda: 42.0)
    meta = SessionMeta(
        cwd="/work",
        parent_session=SessionId("parent"),
        seed_length=1,
        origin=Origin.SUBAGENT,
        delegation_depth=2,
        agent_preset="coder",
    )
    session = store.prepare(SID, seed=[ev(0)], meta=meta)
    assert session.header == SessionHeader(
        id=SID,
        created_at=42.0,
        cwd="/work",
        parent_session=SessionId("parent"),
        seed_length=1,
        origin=Origin.SUBAGENT,
        delegation_depth=2,
        agent_preset="coder",
    )
    assert store.get(SID) is None
    assert store.prepare(SID, meta=SessionMeta(created_at=7.0)).header.created_at == 7.0


@pytest.mark.parametrize(
    ("meta", "field"),
    [
        (SessionMeta(cwd="relative"), "meta.cwd"),
        (SessionMeta(parent_session=SessionId("")), "meta.parent_session"),
        (SessionMeta(seed_length=True), "meta.seed_length"),
        (SessionMeta(seed_length=3), "meta.seed_length"),
        (SessionMeta(origin="subagent"), "meta.origin"),  # type: ignore[arg-type]
        (SessionMeta(delegation_depth=-1), "meta.delegation_depth"),
        (SessionMeta(agent_preset=5), "meta.agent_preset"),  # type: ignore[arg-type]
        (SessionMeta(created_at=float("nan")), "meta.created_at"),
        ({"cwd": "/x"}, "meta"),
    ],
)
def test_harness_21_header_fields_validated_by_name(meta: SessionMeta, field: str) -> None:
    with pytest.raises(SubagentError) as bad:
        SessionStore().prepare(SID, meta=meta)
    assert bad.value.code is ErrorCode.INVALID_ARGUMENT
    assert bad.value.field == field


def test_harness_19_enter_collides_list_keeps_creation_order_and_leave_pairs_disposal() -> None:
    store = SessionStore()
    created: list[str] = []
    disposed: list[str] = []
    store.created.subscribe(lambda s: created.append(s.id))
    store.disposed.subscribe(lambda s: disposed.append(s.id))
    b, a = store.prepare(SessionId("b")), store.prepare(SessionId("a"))
    store.enter(b)
    store.enter(a)
    assert [s.id for s in store.list()] == ["b", "a"]
    with pytest.raises(SubagentError):
        store.enter(LiveSession.detached(SessionId("a")))
    with pytest.raises(SubagentError):
        store.prepare(SessionId("a"))
    with pytest.raises(SubagentError):
        store.restore(a.header, [])
    store.announce(a)
    with pytest.raises(SubagentError):
        store.announce(a)
    assert not store.leave(LiveSession.detached(SessionId("a")))
    assert store.leave(b)
    assert store.leave(a)
    assert not store.leave(a)
    assert created == ["a"]
    assert disposed == ["a"]
    with pytest.raises(SubagentError):
        store.restore("header", [])  # type: ignore[arg-type]


def test_harness_19_flush_awaits_every_listener() -> None:
    async def main() -> None:
        store = SessionStore()
        session = store.prepare(SID)
        with pytest.raises(SubagentError) as not_live:
            await store.flush(session)
        assert not_live.value.field == "session"
        store.enter(session)
        assert await store.flush(session) is False
        done: list[str] = []
        release = asyncio.Event()

        async def slow(s: LiveSession) -> None:
            await release.wait()
            done.append("slow")

        def failing(s: LiveSession) -> None:
            done.append("failing")
            raise OSError("disk")

        async def failing_later(s: LiveSession) -> None:
            raise ValueError("second")

        store.on_flush(lambda s: done.append("sync"))
        assert await store.flush(session) is True
        store.on_flush(failing)
        store.on_flush(slow)
        store.on_flush(failing_later)
        flushing = asyncio.ensure_future(store.flush(session))
        await asyncio.sleep(0)
        assert not flushing.done()  # still waiting for the slow listener
        release.set()
        with pytest.raises(OSError, match="disk"):
            await flushing
        assert done[-1] == "slow"

    run(main)


def test_harness_19_commit_settles_after_every_listener_with_the_first_failure() -> None:
    async def main() -> None:
        store = SessionStore()
        session = store.prepare(SID)
        assert await store.commit(session) is False  # no listener: nothing promised
        release = asyncio.Event()
        settled: list[str] = []

        async def slow(s: LiveSession) -> None:
            await release.wait()
            settled.append("slow")

        def cancelled(s: LiveSession) -> Awaitable[None]:
            gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            gone.cancel()
            return gone

        def failing(s: LiveSession) -> None:
            raise OSError("disk")

        store.on_flush(lambda s: settled.append("sync"))
        assert await store.commit(session) is True
        store.on_flush(slow)
        store.on_flush(cancelled)
        store.on_flush(failing)
        committing = store.commit(session)  # every listener is called now
        assert settled == ["sync", "sync"]
        await asyncio.sleep(0)
        assert not committing.done()  # still waiting for the slow listener
        release.set()
        with pytest.raises(asyncio.CancelledError):  # the first failure, in listener order
            await committing
        assert settled[-1] == "slow"

    run(main)


# ------------------------------------------------------------------ HARNESS-23 (binding)


class FakePersistence:
    """A minimal in-test persistence (the real ones live in ``persistence.py``)."""

    def __init__(self) -> None:
        self.rows: dict[SessionId, SessionRecord] = {}
        self.calls: list[str] = []

    async def list(self) -> list[SessionHeader]:
        return [r.header for r in self.rows.values()]

    async def list_snapshots(self) -> builtins.list[SessionSnapshot]:
        return [SessionSnapshot(r.header, len(r.events)) for r in self.rows.values()]

    async def inspect(self, session_id: SessionId) -> SessionRecord:
        if session_id not in self.rows:
            raise LookupError(session_id)
        return self.rows[session_id]

    async def load(self, session_id: SessionId) -> SessionRecord:
        return await self.inspect(session_id)

    async def revision(self, session_id: SessionId) -> int | None:
        record = self.rows.get(session_id)
        return None if record is None else len(record.events)

    async def create(self, header: SessionHeader, events: Sequence[SessionEvent]) -> None:
        self.calls.append(f"create:{len(events)}")
        self.rows[header.id] = SessionRecord(header, tuple(events))

    async def append(self, session_id: SessionId, events: Sequence[SessionEvent]) -> None:
        self.calls.append(f"append:{len(events)}")
        row = self.rows[session_id]
        self.rows[session_id] = attrs.evolve(row, events=(*row.events, *events))

    async def reserve(self, session_id: SessionId) -> Lease:
        return Lease(session_id, "fake", 1)

    async def acquire(self, session_id: SessionId) -> Lease:
        return Lease(session_id, "fake", 1)

    async def release(self, lease: Lease) -> None:
        pass

    async def close(self) -> None:
        self.calls.append("close")


def test_harness_23_bind_persistence_writes_only_the_unpersisted_suffix() -> None:
    async def main() -> None:
        store, persistence = SessionStore(), FakePersistence()
        unbind = bind_persistence(store, persistence)
        session = store.prepare(SID)
        store.enter(session)
        session.append("a", None)
        assert await store.flush(session) is True
        session.append("b", None)
        session.append("c", None)
        await store.flush(session)
        await store.flush(session)
        assert persistence.calls == ["create:1", "append:2"]
        assert persistence.rows[SID].events == session.events
        # A restored session continues from the stored length.
        store.leave(session)
        restored = store.restore(session.header, session.events)
        store.enter(restored)
        restored.append("d", None)
        await store.flush(restored)
        assert persistence.calls[-1] == "append:2"  # end-seed marker + "d"
        persistence.rows[SID] = SessionRecord(session.header, (*restored.events, *restored.events))
        store.leave(restored)
        again = store.restore(session.header, session.events)
        store.enter(again)
        with pytest.raises(SubagentError) as longer:
            await store.flush(again)
        assert longer.value.code is ErrorCode.CORRUPT_SESSION
        unbind()
        assert await store.flush(again) is False

    run(main)


async def bound_and_flushed(
    *, announce: bool = False
) -> tuple[SessionStore, FakePersistence, LiveSession]:
    """A store bound to a fake persistence, holding one live session flushed once."""
    store, persistence = SessionStore(), FakePersistence()
    bind_persistence(store, persistence)
    session = store.prepare(SID)
    store.enter(session)
    if announce:
        store.announce(session)
    session.append("a", None)
    await store.flush(session)
    return store, persistence, session


def test_harness_19_a_disposed_session_is_not_kept_alive_by_the_binding() -> None:
    async def main() -> None:
        store, _, session = await bound_and_flushed(announce=True)
        gone = weakref.ref(session)
        store.leave(session)
        del session
        gc.collect()
        assert gone() is None

    run(main)


def test_harness_23_a_session_restored_from_the_bound_persistence_flushes_without_asking() -> None:
    async def main() -> None:
        store, persistence, session = await bound_and_flushed()
        store.leave(session)
        asked: list[SessionId] = []
        counted = persistence.revision

        async def revision(session_id: SessionId) -> int | None:
            asked.append(session_id)
            return await counted(session_id)

        persistence.revision = revision  # type: ignore[method-assign]
        stored = persistence.rows[SID].events
        restored = store.restore(session.header, stored, source=persistence)
        store.enter(restored)
        await store.flush(restored)
        assert (asked, persistence.rows[SID].events) == ([], restored.events)
        store.leave(restored)
        other = store.restore(session.header, stored, source=FakePersistence())
        store.enter(other)
        await store.flush(other)  # another persistence's length is not trusted
        assert asked == [SID]

    run(main)


# ------------------------------------------------------------------ HARNESS-27


def test_harness_27_override_of_reads_the_last_policy_event() -> None:
    sandbox, approval = LogOverride(SANDBOX_MODE, "mode"), LogOverride(APPROVAL_POLICY, "policy")
    session = LiveSession.detached(SID)
    assert sandbox.override_of(session) is None
    session.append(SANDBOX_MODE, {"mode": "read-only", "source": "delegation"})
    session.append(APPROVAL_POLICY, {"policy": "never"})
    session.append(SANDBOX_MODE, {"mode": "workspace-write"})
    assert sandbox.override_of(session) == "workspace-write"
    assert approval.override_of(session) == "never"
    session.append(APPROVAL_POLICY, ["malformed"])
    assert approval.override_of(session) is None
