"""The per-child lease contract, the same on both backends (LEASE-1..6).

``pair`` opens two lease owners over one store: two handles on one SQLite file, or an
in-memory backend and its ``peer()``. Both read one controllable clock (ms); the lifetime is
an hour so a backend's own heartbeat timer never fires during a test.
"""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias, TypeVar

import pytest

from dsh_subagent.adapters.protocols import Lease
from dsh_subagent.adapters.reference.persistence import InMemoryPersistence
from dsh_subagent.adapters.reference.sqlite_persistence import SqlitePersistence
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import SessionEvent, SessionHeader, SessionId

if TYPE_CHECKING:
    from dsh_subagent.adapters.reference.postgres_persistence import PostgresPersistence

Store: TypeAlias = "InMemoryPersistence | SqlitePersistence | PostgresPersistence"
Pair: TypeAlias = Callable[[], Awaitable[tuple[Store, Store]]]
T = TypeVar("T")

SID = SessionId("c")
TTL = 3600.0
NOW = [1000.0]


def clock() -> float:
    return NOW[0]


def later(seconds: float) -> None:
    NOW[0] += seconds * 1000


def run(coro: Coroutine[object, object, T]) -> T:
    return asyncio.run(coro)


def note(seq: int) -> SessionEvent:
    return SessionEvent("note", seq, float(seq), None)


def code_of(error: pytest.ExceptionInfo[SubagentError]) -> ErrorCode:
    return error.value.code


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Pair:
    NOW[0] = 1000.0
    address = request.getfixturevalue("postgres_db") if request.param == "postgres" else ""

    async def open_pair() -> tuple[Store, Store]:
        if request.param == "memory":
            first = InMemoryPersistence(clock=clock, lease_ttl=TTL)
            return first, first.peer()
        if request.param == "postgres":  # psycopg imported only here: the file collects without it
            from dsh_subagent.adapters.reference.postgres_persistence import PostgresPersistence

            shared = await PostgresPersistence.open(address, clock=clock, lease_ttl=TTL)
            return shared, await PostgresPersistence.open(address, clock=clock, lease_ttl=TTL)
        path = tmp_path / "sessions.db"
        one = await SqlitePersistence.open(path, clock=clock, lease_ttl=TTL)
        return one, await SqlitePersistence.open(path, clock=clock, lease_ttl=TTL)

    return open_pair


async def _created(a: Store) -> Lease:
    """``a`` reserves ``c``, stores it under the reservation and releases it."""
    lease = await a.reserve(SID)
    await a.create(SessionHeader(SID, created_at=1.0), [note(0)])
    await a.release(lease)
    return lease


async def _close(*stores: Store) -> None:
    for store in stores:
        await store.close()


def test_lease_1_acquire_is_one_compare_and_set_at_a_growing_epoch(pair: Pair) -> None:
    async def main() -> None:
        a, b = await pair()
        reserved = await _created(a)
        first = await a.acquire(SID)
        assert first.epoch == reserved.epoch + 1
        with pytest.raises(SubagentError) as held:
            await b.acquire(SID)
        assert code_of(held) is ErrorCode.ACTIVATION_HELD
        assert first.owner in held.value.message
        await a.release(first)
        second = await b.acquire(SID)
        assert (second.epoch, second.owner != first.owner) == (first.epoch + 1, True)
        await _close(a, b)

    run(main())


def test_lease_1_concurrent_acquires_grant_exactly_one(pair: Pair) -> None:
    async def main() -> None:
        a, b = await pair()
        await _created(a)
        outcomes = await asyncio.gather(a.acquire(SID), b.acquire(SID), return_exceptions=True)
        granted = [o for o in outcomes if isinstance(o, Lease)]
        refused = [o for o in outcomes if isinstance(o, SubagentError)]
        assert len(granted) == 1
        assert [error.code for error in refused] == [ErrorCode.ACTIVATION_HELD]
        await _close(a, b)

    run(main())


def test_lease_3_a_stale_epoch_append_is_refused_and_writes_nothing(pair: Pair) -> None:
    async def main() -> None:
        a, b = await pair()
        await _created(a)
        old = await a.acquire(SID)
        await a.append(SID, [note(1)])
        later(TTL + 1)  # a's lease expired unrenewed: b takes it over
        new = await b.acquire(SID)
        assert new.epoch == old.epoch + 1
        with pytest.raises(SubagentError) as stale:
            await a.append(SID, [note(2)])
        assert code_of(stale) is ErrorCode.LEASE_LOST
        assert await b.revision(SID) == 2
        await b.append(SID, [note(2)])
        assert await a.revision(SID) == 3
        await a.release(old)  # a lost lease is left alone
        with pytest.raises(SubagentError) as still:
            await a.acquire(SID)
        assert code_of(still) is ErrorCode.ACTIVATION_HELD
        await _close(a, b)

    run(main())


def test_lease_3_a_writer_without_the_lease_may_not_write_a_held_child(pair: Pair) -> None:
    async def main() -> None:
        a, b = await pair()
        await _created(a)
        await a.acquire(SID)
        with pytest.raises(SubagentError) as held:
            await b.append(SID, [note(1)])
        assert code_of(held) is ErrorCode.ACTIVATION_HELD
        assert await b.revision(SID) == 1
        unleased = SessionHeader(SessionId("other"), created_at=1.0)
        await b.create(unleased, [note(0)])  # a session nobody leases is unfenced
        await b.append(unleased.id, [note(1)])
        await _close(a, b)

    run(main())


def test_lease_4_a_new_id_is_reserved_durably(pair: Pair) -> None:
    async def main() -> None:
        a, b = await pair()
        lease = await a.reserve(SID)
        with pytest.raises(SubagentError) as reserved:
            await b.reserve(SID)
        assert (code_of(reserved), reserved.value.field) == (ErrorCode.DUPLICATE_CHILD, "child_id")
        with pytest.raises(SubagentError) as fenced:
            await b.create(SessionHeader(SID, created_at=1.0), [note(0)])
        assert code_of(fenced) is ErrorCode.ACTIVATION_HELD
        await a.release(lease)
        again = await b.reserve(SID)  # a released reservation of an unstored id is free
        assert again.epoch == lease.epoch + 1
        await b.create(SessionHeader(SID, created_at=1.0), [note(0)])
        await b.release(again)
        with pytest.raises(SubagentError) as stored:
            await a.reserve(SID)
        assert code_of(stored) is ErrorCode.DUPLICATE_CHILD
        await _close(a, b)

    run(main())


def test_lease_5_heartbeat_and_writes_renew_expiry_takes_over(pair: Pair) -> None:
    async def main() -> None:
        a, b = await pair()
        await _created(a)
        held_by_a = await a.acquire(SID)
        later(TTL * 0.6)
        await a.heartbeat()
        later(TTL * 0.6)  # past the first expiry, not the renewed one
        with pytest.raises(SubagentError) as held:
            await b.acquire(SID)
        assert code_of(held) is ErrorCode.ACTIVATION_HELD
        await a.append(SID, [note(1)])  # a holder's write renews too
        later(TTL * 0.6)
        with pytest.raises(SubagentError):
            await b.acquire(SID)
        later(TTL * 0.5)
        assert (await b.acquire(SID)).epoch == held_by_a.epoch + 1
        await _close(a, b)

    run(main())


def test_lease_5_a_dead_holder_on_this_host_is_taken_over_at_once(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()

    async def main() -> None:
        path = tmp_path / "sessions.db"
        a = await SqlitePersistence.open(path, clock=clock, lease_ttl=TTL)
        b = await SqlitePersistence.open(path, clock=clock, lease_ttl=TTL)
        await _created(a)
        await a.acquire(SID)
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE leases SET pid = ?", (gone.pid,))
        taken = await b.acquire(SID)  # no expiry waited for
        with pytest.raises(SubagentError) as lost:
            await a.append(SID, [note(1)])
        assert code_of(lost) is ErrorCode.LEASE_LOST
        await b.release(taken)
        await _close(a, b)

    run(main())


def test_lease_1_lease_6_grants_and_releases_skip_their_own_fsync_writes_keep_full(
    tmp_path: Path,
) -> None:
    """A grant and a release commit at ``synchronous=NORMAL`` (visible to every connection
    at once, never lost by a process crash; the next fsync'd commit makes them durable), a
    reservation at the store's ``FULL``, and the level is ``FULL`` again for the log writes
    and mailbox posts that follow."""

    async def main() -> None:
        path = tmp_path / "sessions.db"
        a = await SqlitePersistence.open(path, clock=clock, lease_ttl=TTL)
        b = await SqlitePersistence.open(path, clock=clock, lease_ttl=TTL)
        seen: list[str] = []

        def level(conn: sqlite3.Connection) -> int:
            conn.set_trace_callback(seen.append)
            value: int = conn.execute("PRAGMA synchronous").fetchone()[0]
            return value

        await a._run(level)
        first = await _created(a)
        lease = await a.acquire(SID)
        with pytest.raises(SubagentError) as held:
            await b.acquire(SID)  # the grant is committed: the other connection sees it
        assert code_of(held) is ErrorCode.ACTIVATION_HELD
        await a.release(lease)
        assert (await b.acquire(SID)).epoch == first.epoch + 2
        assert await a._run(level) == 2  # FULL
        lowered = [i for i, s in enumerate(seen) if s == "PRAGMA synchronous=NORMAL"]
        assert len(lowered) == 3, seen  # _created's release, the grant, the release
        for start in lowered:
            assert seen[start + 1 : start + 2] == ["BEGIN IMMEDIATE"], seen
            assert "PRAGMA synchronous=FULL" in seen[start + 2 :], seen
        await _close(a, b)

    run(main())


def test_lease_6_close_releases_every_held_lease(pair: Pair) -> None:
    async def main() -> None:
        a, b = await pair()
        first = await _created(a)
        await a.acquire(SID)
        await a.close()
        lease = await b.acquire(SID)
        assert lease.epoch == first.epoch + 2
        await _close(b)

    run(main())


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_lease_bad_input_is_refused_before_any_write(tmp_path: Path, backend: str) -> None:
    async def main() -> None:
        async def bad_ttl() -> object:
            if backend == "memory":
                return InMemoryPersistence(lease_ttl=0)
            return await SqlitePersistence.open(tmp_path / "s.db", lease_ttl=-1.0)

        with pytest.raises(SubagentError) as ttl:
            await bad_ttl()
        assert (ttl.value.code, ttl.value.field) == (ErrorCode.INVALID_ARGUMENT, "lease_ttl")
        store: Store = (
            InMemoryPersistence()
            if backend == "memory"
            else await SqlitePersistence.open(tmp_path / "s.db")
        )
        with pytest.raises(SubagentError) as lease:
            await store.release("c")  # type: ignore[arg-type]
        assert (lease.value.code, lease.value.field) == (ErrorCode.INVALID_ARGUMENT, "lease")
        with pytest.raises(SubagentError) as sid:
            await store.acquire("")  # type: ignore[arg-type]
        assert sid.value.field == "session_id"
        await store.close()
        with pytest.raises(SubagentError) as closed:
            await store.reserve(SID)
        assert closed.value.code is ErrorCode.PERSISTENCE_UNAVAILABLE

    run(main())


def test_lease_2_lease_6_a_child_resident_elsewhere_is_held_until_released() -> None:
    """A follow-up from a second harness goes to the holder's child through the durable
    mailbox (DUR-20, DUR-22); the lease stays with the holder until it is released."""
    from dsh_subagent.adapters.reference.scripted_model import Gate, Gated, reply
    from dsh_subagent.core.values import CoordinatorSource
    from tests.adapters.continuation_harness import Harness, text, user_messages

    async def main() -> None:
        store = InMemoryPersistence()
        one, two = Harness(store, ids="one"), Harness(store.peer(), ids="two")
        root = await one.root()
        gate = Gate()
        one.script("c", Gated(gate, reply("working")))
        child = await one.start(root, "c")
        await one.store.flush(child.session)  # stored while it runs (issue 19 item 2)
        grant = two.manager.user_authority()
        source = CoordinatorSource(root.id)
        message_id = await two.manager.followup(SID, text("again"), grant, source=source)
        assert two.manager.activation_state(SID) is None  # nothing of it runs here
        await one.manager.settled()  # the holder's delivery pass
        assert child.pending() == (message_id,)  # in the holder's inbox, its id kept
        with pytest.raises(SubagentError) as duplicate:
            await two.start(await two.root("root-2"), "c")
        assert code_of(duplicate) is ErrorCode.DUPLICATE_CHILD
        gate.open()
        await one.quiet()
        await one.quiet_child("c")  # released: its lease with it
        delivered = [m for m in user_messages(child) if m.id == message_id]
        assert [(m.source, m.content) for m in delivered] == [(source, text("again"))]
        await two.manager.followup(SID, text("later"), grant, source=source)  # free: resumes
        await two.quiet()
        assert (await store.inspect(SID)).events[-1].type == "turn/end"
        assert two.manager.activation_state(SID) is None

    run(main())
