"""The durable mailbox (DUR-20..29): two harness instances on one store in one process.

The holder learns of a posted message on its own (SQLite: the ``PRAGMA data_version`` poll
on its worker thread; in memory: a direct notification); the tests wait on the child's
``inserted`` notification, never on time.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

import pytest

from dsh_subagent.adapters.protocols import InboxNotification
from dsh_subagent.adapters.reference.agent_loop import ReferenceAgent
from dsh_subagent.adapters.reference.persistence import InMemoryPersistence
from dsh_subagent.adapters.reference.scripted_model import Gate, Gated, reply
from dsh_subagent.adapters.reference.sqlite_persistence import SqlitePersistence
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import CoordinatorSource, MessageId, SessionId, UserMessage
from tests.adapters.continuation_harness import Harness, run, text, user_messages

if TYPE_CHECKING:
    from dsh_subagent.adapters.reference.postgres_persistence import PostgresPersistence

CHILD = SessionId("c")


Store: TypeAlias = "InMemoryPersistence | SqlitePersistence | PostgresPersistence"
BACKENDS = ["memory", "sqlite", "postgres"]


@pytest.fixture
def where(request: pytest.FixtureRequest, tmp_path: Path, backend: str) -> str:
    """The store's address: a SQLite path, or a fresh PostgreSQL database."""
    if backend == "postgres":
        address: str = request.getfixturevalue("postgres_db")
        return address
    return str(tmp_path / "sessions.db")


async def _stores(backend: str, where: str) -> tuple[Store, Store]:
    if backend == "memory":
        first = InMemoryPersistence()
        return first, first.peer()
    if backend == "postgres":
        from dsh_subagent.adapters.reference.postgres_persistence import PostgresPersistence

        shared = await PostgresPersistence.open(where)
        return shared, await PostgresPersistence.open(where)
    path = Path(where)
    one = await SqlitePersistence.open(path, mailbox_poll=0.01)
    return one, await SqlitePersistence.open(path, mailbox_poll=0.01)


async def _held_child_on_two(
    backend: str, where: str
) -> tuple[tuple[Store, Store], tuple[Harness, Harness], ReferenceAgent, ReferenceAgent, Gate]:
    """Two harnesses on one store, harness one holding child ``c`` (its turn held by the
    gate, its log flushed): ``((a, b), (one, two), root, child, gate)``."""
    a, b = await _stores(backend, where)
    one, two = Harness(a, ids="one"), Harness(b, ids="two")
    root = await one.root()
    gate = Gate()
    one.script("c", Gated(gate, reply("working")))
    child = await one.start(root, "c")
    await one.store.flush(child.session)
    return (a, b), (one, two), root, child, gate


@pytest.mark.parametrize("backend", BACKENDS)
def test_dur_22_the_holder_delivers_mail_from_another_harness_on_the_store(
    where: str, backend: str
) -> None:
    async def main() -> None:
        (a, b), (one, two), root, child, gate = await _held_child_on_two(backend, where)
        arrived: list[UserMessage] = []
        three = asyncio.Event()

        def on_inserted(note: InboxNotification) -> None:
            arrived.append(note.message)
            if len(arrived) == 3:
                three.set()

        child.inserted.subscribe(on_inserted)
        grant = two.manager.user_authority()
        source = CoordinatorSource(root.id)
        ids = [
            await two.manager.followup(CHILD, text(f"m{index}"), grant, source=source)
            for index in range(3)
        ]
        assert two.manager.activation_state(CHILD) is None  # accepted there, runs here
        await asyncio.wait_for(three.wait(), 30)
        assert [(m.id, m.source) for m in arrived] == [(MessageId(i), source) for i in ids]
        gate.open()
        await one.quiet()
        await one.quiet_child("c")
        texts = [m.content for m in user_messages(child) if m.id in ids]
        assert texts == [text("m0"), text("m1"), text("m2")]  # exactly once, in order
        await one.manager.drain()
        await a.close()
        await b.close()

    run(main)


def test_dur_21_bad_input_is_refused_before_any_write() -> None:
    async def main() -> None:
        store = InMemoryPersistence()
        with pytest.raises(SubagentError) as bad:
            await store.post(CHILD, "hello")  # type: ignore[arg-type]
        assert (bad.value.code, bad.value.field) == (ErrorCode.INVALID_ARGUMENT, "message")
        assert await store.mailbox(CHILD) == []

    run(main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dur_21_post_writes_only_while_another_live_holder_has_the_lease(
    where: str, backend: str
) -> None:
    async def main() -> None:
        a, b = await _stores(backend, where)
        message = UserMessage(MessageId("m1"), text("hi"), CoordinatorSource(SessionId("r")))
        assert await b.post(CHILD, message) is False  # nobody holds it: take it yourself
        lease = await a.reserve(CHILD)
        assert await a.post(CHILD, message) is False  # the holder itself never posts
        assert await b.post(CHILD, message) is True
        assert await a.mailbox(CHILD) == [message]  # id, content and source kept
        await a.prune(CHILD, [message.id])
        assert await b.mailbox(CHILD) == []
        await a.release(lease)
        await a.close()
        await b.close()

    run(main)


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_dur_23_no_mailbox_pass_runs_after_a_whole_drain(
    where: str, backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A child released by the drain with rows in its mailbox schedules no pass that would
    read the store after the harness closed it; the rows stay for the next taker."""

    async def main() -> None:
        (a, b), (one, two), root, child, gate = await _held_child_on_two(backend, where)
        arrived = asyncio.Event()
        child.inserted.subscribe(lambda _note: arrived.set())
        grant = two.manager.user_authority()
        await two.manager.followup(CHILD, text("m0"), grant, source=CoordinatorSource(root.id))
        await asyncio.wait_for(arrived.wait(), 30)
        gate.open()
        await one.manager.drain()  # releases the child: its mailbox row is still stored
        assert not one.manager._mailbox._tasks  # no pass outlives the drain
        await a.close()
        await b.close()

    with caplog.at_level("WARNING", logger="dsh_subagent.adapters.continuation"):
        run(main)
    assert not [r for r in caplog.records if "mailbox delivery" in r.getMessage()]


@pytest.mark.parametrize("backend", BACKENDS)
def test_dur_25_delivered_mail_leaves_the_mailbox_when_its_holder_releases_the_child(
    where: str, backend: str
) -> None:
    """Ten follow-ups posted from another harness and delivered by the holder stay in the
    mailbox while the holder lives (if it died, the orphan scan would resume the child for
    them, DUR-26); the holder's release of the child removes them, with no later taker to
    prune them, so the mailbox does not grow with the mail delivered."""

    async def main() -> None:
        (a, b), (one, two), root, child, gate = await _held_child_on_two(backend, where)
        arrived: list[MessageId] = []
        ten = asyncio.Event()

        def on_inserted(note: InboxNotification) -> None:
            arrived.append(note.message.id)
            if len(arrived) == 10:
                ten.set()

        child.inserted.subscribe(on_inserted)
        grant = two.manager.user_authority()
        source = CoordinatorSource(root.id)
        ids = [
            await two.manager.followup(CHILD, text(f"m{index}"), grant, source=source)
            for index in range(10)
        ]
        assert len(await b.mailbox(CHILD)) > 0  # posted, not delivered yet
        await asyncio.wait_for(ten.wait(), 30)
        assert arrived == ids
        await one.store.flush(child.session)
        assert [m.id for m in await b.mailbox(CHILD)] == ids  # logged, the holder alive
        gate.open()
        await one.quiet()
        await one.quiet_child("c")
        assert [m.id for m in user_messages(child) if m.id in ids] == ids  # exactly once
        await one.manager.drain()
        assert one.manager.activation_state(CHILD) is None
        assert await b.mailbox(CHILD) == []
        await a.close()
        await b.close()

    run(main)


def test_dur_26_a_probe_reads_only_the_mailbox_rows_after_the_last_it_saw(tmp_path: Path) -> None:
    """The SQLite probe's scan of new rows is a range of the primary key, not a scan of
    the table or its index; and a mailbox written before its seq was ``AUTOINCREMENT`` is
    rebuilt at open with its rows, so the seq of a removed last row is never given again."""
    import sqlite3

    from dsh_subagent.adapters.reference import sqlite_persistence
    from dsh_subagent.adapters.reference.persistence import encode_mail

    path = tmp_path / "s.db"

    async def make() -> None:
        await (await SqlitePersistence.open(path)).close()

    run(make)
    raw = sqlite3.connect(path, isolation_level=None)
    plan = raw.execute(f"EXPLAIN QUERY PLAN {sqlite_persistence._MAIL_AFTER}", (0,)).fetchall()
    assert [row[3] for row in plan] == ["SEARCH mailbox USING INTEGER PRIMARY KEY (rowid>?)"]
    raw.execute("DROP TABLE mailbox")  # the table as the previous code created it
    raw.execute(
        """CREATE TABLE mailbox (seq INTEGER PRIMARY KEY, session_id TEXT NOT NULL,
        message_id TEXT NOT NULL, sender TEXT NOT NULL, content TEXT NOT NULL,
        created_at REAL NOT NULL, UNIQUE (session_id, message_id)) STRICT"""
    )
    message = UserMessage(MessageId("m1"), text("hi"), CoordinatorSource(SessionId("r")))
    raw.execute("INSERT INTO mailbox VALUES (7, 'c', ?, ?, ?, 0)", encode_mail(message))
    raw.close()

    async def main() -> None:
        store = await SqlitePersistence.open(path)
        try:
            assert await store.mailbox(CHILD) == [message]
            await store.prune(CHILD, [message.id])
        finally:
            await store.close()

    run(main)
    raw = sqlite3.connect(path, isolation_level=None)
    try:
        (sql,) = raw.execute("SELECT sql FROM sqlite_master WHERE name = 'mailbox'").fetchone()
        assert "AUTOINCREMENT" in sql
        assert raw.execute("SELECT seq FROM sqlite_sequence WHERE name = 'mailbox'").fetchone() == (
            7,
        )
        index = "SELECT 1 FROM sqlite_master WHERE name = 'mailbox_by_session'"
        assert raw.execute(index).fetchone() == (1,)
    finally:
        raw.close()
