"""What only the PostgreSQL store has: migrations, read-only opens, address selection, the
missing extra, LISTEN/NOTIFY and orphan claims (PG-1..7; the shared contract tests run it in
``test_lease``, ``test_mailbox`` and ``test_persistence``)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Coroutine
from typing import TypeVar

import psycopg
import pytest

from dsh_subagent.adapters.reference.harness import ReferenceHarness
from dsh_subagent.adapters.reference.postgres_persistence import (
    MIGRATIONS,
    SCHEMA_VERSION,
    PostgresPersistence,
)
from dsh_subagent.adapters.reference.scripted_model import NullModel
from dsh_subagent.adapters.reference.session import LiveSession
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import (
    AgentOptions,
    CoordinatorSource,
    MessageId,
    SessionEvent,
    SessionHeader,
    SessionId,
    UserMessage,
)
from tests.adapters.continuation_harness import text

T = TypeVar("T")
SID = SessionId("c")
HEADER = SessionHeader(SID, created_at=1.0)


def run(coro: Coroutine[object, object, T]) -> T:
    return asyncio.run(coro)


def note(seq: int) -> SessionEvent:
    return SessionEvent("note", seq, float(seq), None)


def tables(address: str) -> list[str]:
    with psycopg.connect(address) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename"
        ).fetchall()
    return [str(row[0]) for row in rows]


def versions(address: str) -> list[int]:
    with psycopg.connect(address) as conn:
        rows = conn.execute("SELECT version FROM dsh_schema_migrations ORDER BY version")
        return [int(str(row[0])) for row in rows.fetchall()]


def test_pg_2_concurrent_writers_apply_each_migration_exactly_once(postgres_db: str) -> None:
    async def main() -> None:
        stores = await asyncio.gather(*(PostgresPersistence.open(postgres_db) for _ in range(4)))
        await stores[0].create(HEADER, [note(0)])
        assert [await store.revision(SID) for store in stores] == [1] * 4
        for store in stores:
            await store.close()

    run(main())
    assert versions(postgres_db) == [number for number, _ in MIGRATIONS]


def test_pg_2_a_store_of_the_first_schema_is_upgraded_in_place(postgres_db: str) -> None:
    number, first = MIGRATIONS[0]
    with psycopg.connect(postgres_db, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE dsh_schema_migrations (version integer PRIMARY KEY, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for statement in first:
            conn.execute(statement.encode())
        conn.execute("INSERT INTO dsh_schema_migrations (version) VALUES (%s)", (number,))
        conn.execute(
            "INSERT INTO sessions (id, header) VALUES ('old', %s)",
            ('{"version":1,"id":"old","createdAt":1.0}',),
        )

    async def main() -> None:
        store = await PostgresPersistence.open(postgres_db)
        assert [h.id for h in await store.list()] == ["old"]
        lease = await store.reserve(SID)  # the lease audit came with migration 2
        await store.release(lease)
        await store.close()

    run(main())
    assert versions(postgres_db) == [number for number, _ in MIGRATIONS]


def test_pg_2_a_newer_schema_is_refused(postgres_db: str) -> None:
    run(_open_close(postgres_db))
    with psycopg.connect(postgres_db, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO dsh_schema_migrations (version) VALUES (%s)", (SCHEMA_VERSION + 1,)
        )
    for readonly in (False, True):
        with pytest.raises(SubagentError) as caught:
            run(PostgresPersistence.open(postgres_db, readonly=readonly))
        assert caught.value.code is ErrorCode.PERSISTENCE_UNAVAILABLE
        assert f"schema version {SCHEMA_VERSION + 1}" in str(caught.value)


async def _open_close(address: str, **options: object) -> None:
    store = await PostgresPersistence.open(address, **options)  # type: ignore[arg-type]
    await store.close()


@pytest.mark.parametrize("readonly", [True, False])
def test_list_16_pg_1_a_foreign_database_is_not_a_store_and_stays_unchanged(
    postgres_db: str, readonly: bool
) -> None:
    with psycopg.connect(postgres_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE notes (body text)")
    with pytest.raises(SubagentError) as caught:
        run(PostgresPersistence.open(postgres_db, readonly=readonly))
    assert (caught.value.code, caught.value.field) == (ErrorCode.PERSISTENCE_UNAVAILABLE, "db")
    assert str(caught.value).endswith("is not a dsh-subagent store")
    assert tables(postgres_db) == ["notes"]


def test_list_16_pg_1_a_read_only_open_creates_nothing_and_writes_nothing(
    postgres_db: str,
) -> None:
    with pytest.raises(SubagentError) as empty:
        run(PostgresPersistence.open(postgres_db, readonly=True))
    assert str(empty.value).endswith("is not a dsh-subagent store")
    assert tables(postgres_db) == []

    async def main() -> None:
        writer = await PostgresPersistence.open(postgres_db)
        await writer.create(HEADER, [note(0)])
        await writer.close()
        reader = await PostgresPersistence.open(postgres_db, readonly=True)
        assert [s.revision for s in await reader.list_snapshots()] == [1]
        assert (await reader.inspect(SID)).events == (note(0),)
        with pytest.raises(SubagentError) as caught:
            await reader.append(SID, [note(1)])
        assert caught.value.code is ErrorCode.PERSISTENCE_UNAVAILABLE
        assert "read-only" in str(caught.value)
        await reader.close()

    run(main())


def test_pg_1_a_bad_address_is_unavailable_without_the_password(postgres_db: str) -> None:
    address = postgres_db.replace("postgres@", "nobody_here:secret@")
    with pytest.raises(SubagentError) as caught:
        run(PostgresPersistence.open(address))
    assert (caught.value.code, caught.value.field) == (ErrorCode.PERSISTENCE_UNAVAILABLE, "db")
    assert "secret" not in str(caught.value)
    assert "nobody_here@" in str(caught.value)
    with pytest.raises(SubagentError) as bad:
        run(PostgresPersistence.open("/a/path.db"))
    assert (bad.value.code, bad.value.field) == (ErrorCode.INVALID_ARGUMENT, "db")


def _null(_session: LiveSession, _options: AgentOptions) -> NullModel:
    return NullModel()


def test_pg_1_the_harness_selects_the_backend_by_address(postgres_db: str) -> None:
    async def main() -> None:
        harness = await ReferenceHarness.open(_null, db=postgres_db)
        assert isinstance(harness.persistence, PostgresPersistence)
        await harness.create_agent(SessionId("root"))
        await harness.close()
        reader = await ReferenceHarness.open(_null, db=postgres_db, readonly=True)
        assert [h.id for h in await reader.persistence.list()] == ["root"]
        await reader.close()

    run(main())


def test_pg_1_the_catalog_lists_a_postgres_store(postgres_db: str) -> None:
    run(_open_close(postgres_db))
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from dsh_subagent.cli.entry import main; main()",
            "catalog",
            "--db",
            postgres_db,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "no subagent children in postgresql://postgres@/" in done.stdout


def test_pg_1_without_psycopg_the_store_names_the_postgres_extra() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.modules['psycopg'] = None;"
            "sys.argv = ['dsh-subagent', 'catalog', '--db', 'postgresql://x@/y'];"
            "from dsh_subagent.cli.entry import main; main()",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr == (
        "error: MISSING_EXTRA: the PostgreSQL session store needs psycopg:"
        " pip install 'dsh-subagent[postgres]'\n"
    )


def test_pg_5_notify_wakes_the_holder_only_for_its_own_children(postgres_db: str) -> None:
    async def main() -> None:
        holder = await PostgresPersistence.open(postgres_db)
        poster = await PostgresPersistence.open(postgres_db)
        heard: asyncio.Queue[SessionId] = asyncio.Queue()
        holder.watch_mailbox(heard.put_nowait)
        other_heard: list[SessionId] = []
        poster.watch_mailbox(other_heard.append)
        lease = await holder.reserve(SID)
        message = UserMessage(MessageId("m1"), text("hi"), CoordinatorSource(SessionId("r")))
        assert await poster.post(SID, message) is True
        assert await asyncio.wait_for(heard.get(), 30) == SID
        await holder.release(lease)
        await holder.close()
        await poster.close()
        assert other_heard == []

    run(main())


def test_pg_7_orphaned_mail_is_claimed_skipping_locked_rows(postgres_db: str) -> None:
    now = [1000.0]

    async def main() -> None:
        holder = await PostgresPersistence.open(postgres_db, clock=lambda: now[0], lease_ttl=5)
        other = await PostgresPersistence.open(postgres_db, clock=lambda: now[0], lease_ttl=5)
        for child in ("a", "b"):
            await holder.reserve(SessionId(child))
            source = CoordinatorSource(SessionId("r"))
            message = UserMessage(MessageId(f"m-{child}"), text("hi"), source)
            assert await other.post(SessionId(child), message) is True
        assert await other.orphans() == []  # the holder is live
        now[0] += 6000  # its leases expired unrenewed
        async with await psycopg.AsyncConnection.connect(postgres_db) as locker:
            await locker.execute("SELECT 1 FROM leases WHERE session_id = 'a' FOR UPDATE")
            assert await other.orphans() == [SessionId("b")]  # another worker claims "a"
        assert await other.orphans() == [SessionId("a"), SessionId("b")]
        await holder.close()
        await other.close()

    run(main())


def test_pg_1_without_a_server_a_local_run_skips_and_ci_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dsh_subagent.testing import postgres

    monkeypatch.setenv("CI", "")
    with pytest.raises(pytest.skip.Exception, match="no binaries"):
        postgres._unavailable("no binaries")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="cannot run under CI: no binaries"):
        postgres._unavailable("no binaries")
