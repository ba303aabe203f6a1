"""PostgreSQL session persistence: one shared store for harnesses on many processes and hosts.

Theory of operation
-------------------
1. Driver: psycopg 3 (the ``postgres`` extra), async, with ``psycopg_pool``: native asyncio,
   static types, server-side ``LISTEN``/``NOTIFY`` as an async iterator, and a pool that
   checks connections out per transaction. Every statement is parameterised; nothing runs
   on a thread. A missing driver is one line naming the extra (``MissingExtra``).
2. Same rows, same rules: the row codec and the lease decisions (``grant``, ``fence``,
   ``held_elsewhere``) are ``persistence``'s and the lease statements and the holder's book
   ``sql_leases``'s, so this backend behaves exactly as the SQLite one
   (``docs/durability.md``); only the atomicity comes from PostgreSQL.
3. Migrations (PG-2): ordered, versioned scripts (``MIGRATIONS``) recorded in
   ``dsh_schema_migrations``. A writer applies the missing ones at open in one transaction
   that first takes ``pg_advisory_xact_lock``, so workers starting together apply each
   exactly once and every one of them sees the finished schema. A read-only open
   (``readonly=True``: listings, ``catalog``) creates nothing: a database without the table
   is "not a dsh-subagent store", and its sessions run in read-only transactions. A
   database at a version newer than this code is refused (``PERSISTENCE_UNAVAILABLE``).
4. The lease (PG-3) is one compare-and-set: read the row, decide (``grant``), then one
   ``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` (the row still as read) ``RETURNING``; no
   row back means another grant or a renewal came between, and the decision is taken
   again on the new row. Each grant and release is also appended to ``lease_audit``, an
   append-only history of epochs (PG-6).
5. The fence (PG-4): every write of a child's log locks the child's lease row (``FOR
   UPDATE``) inside its own transaction and runs ``fence`` before its first insert, so a
   takeover waits for a write in flight and a stale epoch writes nothing. Appends also lock
   the session row, so two writers of one log are serialised and the next seq is exact.
   Each stored event keeps the epoch it was written under (``events.epoch``).
6. The mailbox (PG-5): ``post`` locks the lease row, decides (``held_elsewhere``), inserts
   and calls ``pg_notify`` in one transaction: the holder's ``LISTEN`` connection hears of
   the row only once it is committed. The listener names the child to the watchers when
   the notice is for this backend's owner and it still holds the child. After every
   (re)connect it sweeps the held children's mailboxes once, so a notice missed while the
   connection was down is not lost. A ``release`` deletes, in its transaction, the rows this
   backend read and then logged (``ReadMail``).
7. Orphans (PG-7): every ``lease_ttl / 3`` seconds a watching backend claims children
   whose mailbox has rows while their lease is free or expired (``FOR UPDATE SKIP
   LOCKED``: concurrent workers split them; found from the mailbox, so bounded by the
   undelivered mail, not by every lease ever held) and names them to its watchers, which
   resume them through a normal lease grant. So mail for a child whose holder died is delivered
   after expiry even if nobody follows it up again.
8. Commits: each write is its own transaction on a pooled connection; concurrent commits
   share PostgreSQL's WAL flushes, so acceptances do not cost one fsync each (DUR-3).
9. No driver error reaches a caller: a failed statement is ``PERSISTENCE_UNAVAILABLE``
   naming the session and the (password-free) address, with the driver's error as the
   cause.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import json
import logging
import socket
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Final, TypeVar

from dsh_subagent.adapters.clock import epoch_ms
from dsh_subagent.adapters.protocols import (
    CachedProjection,
    Lease,
    SessionRecord,
    SessionSnapshot,
)
from dsh_subagent.adapters.reference.persistence import (
    DEFAULT_LEASE_TTL,
    Clock,
    EventRow,
    LeaseOwner,
    LeaseRow,
    MailboxListener,
    MailRow,
    ReadMail,
    check_header,
    closed_error,
    decode_events,
    decode_header,
    decode_mail,
    decode_projection,
    encode_events,
    encode_mail,
    encode_new_log,
    encode_projection,
    grant,
    held_elsewhere,
    is_postgres_address,
    lease_of,
    redact,
    repair_event,
    require_continues,
    require_folded,
    require_ids,
    require_session_id,
    require_ttl,
    session_exists,
    unknown_session,
)
from dsh_subagent.adapters.reference.sql_leases import (
    LeaseHolder,
    LeaseSql,
    Renewal,
    grant_values,
    lease_key,
)
from dsh_subagent.adapters.signals import Unsubscribe
from dsh_subagent.core.errors import ErrorCode, SubagentError, invalid
from dsh_subagent.core.extras import MissingExtra
from dsh_subagent.core.jsonvalue import require_int, require_str
from dsh_subagent.core.values import (
    JsonValue,
    MessageId,
    SessionEvent,
    SessionHeader,
    SessionId,
    UserMessage,
)

try:
    import psycopg
    from psycopg_pool import AsyncConnectionPool
except ImportError as missing:  # pragma: no cover - the dev install has the extra
    raise MissingExtra("the PostgreSQL session store", "psycopg", "postgres") from missing

_log = logging.getLogger("dsh_subagent.adapters.postgres")
_T = TypeVar("_T")
Conn = psycopg.AsyncConnection[tuple[object, ...]]

CHANNEL: Final = "dsh_subagent_mailbox"
_MIGRATION_LOCK: Final = 0x64736873  # "dshs": the advisory lock key of the migration
DEFAULT_POOL_SIZE: Final = 4

MIGRATIONS: Final[tuple[tuple[int, tuple[str, ...]], ...]] = (
    (
        1,
        (
            """CREATE TABLE sessions (
                id text PRIMARY KEY,
                header text NOT NULL,
                created_seq bigint GENERATED ALWAYS AS IDENTITY UNIQUE
            )""",
            """CREATE TABLE events (
                session_id text NOT NULL REFERENCES sessions (id),
                seq bigint NOT NULL,
                type text NOT NULL,
                time double precision NOT NULL,
                data text NOT NULL,
                PRIMARY KEY (session_id, seq)
            )""",
            """CREATE TABLE projection_cache (
                session_id text PRIMARY KEY REFERENCES sessions (id),
                as_of_seq bigint NOT NULL,
                projection text NOT NULL
            )""",
            """CREATE TABLE leases (
                session_id text PRIMARY KEY,
                owner text,
                host text NOT NULL,
                pid integer NOT NULL,
                epoch bigint NOT NULL,
                expires_at double precision NOT NULL
            )""",
            """CREATE TABLE mailbox (
                seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                session_id text NOT NULL,
                message_id text NOT NULL,
                sender text NOT NULL,
                content text NOT NULL,
                created_at double precision NOT NULL,
                UNIQUE (session_id, message_id)
            )""",
            "CREATE INDEX mailbox_by_session ON mailbox (session_id, seq)",
        ),
    ),
    (
        2,
        (
            "ALTER TABLE events ADD COLUMN epoch bigint",
            """CREATE TABLE lease_audit (
                id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                session_id text NOT NULL,
                epoch bigint NOT NULL,
                owner text NOT NULL,
                action text NOT NULL CHECK (action IN ('grant', 'release')),
                at double precision NOT NULL
            )""",
        ),
    ),
)
"""The schema, as ordered migrations (rule 3); a released one is never edited."""
SCHEMA_VERSION: Final = MIGRATIONS[-1][0]

_LEASE_SQL: Final = LeaseSql.written(
    "%s",
    """ AND leases.expires_at = %s AND leases.owner IS NOT DISTINCT FROM %s
    RETURNING epoch""",
)
"""PG-3's compare-and-set also compares the expiry and owner read (the row is read
unlocked) and returns the row it wrote: none back means another grant came between."""


def _unavailable(where: str, error: psycopg.Error, session_id: str | None) -> SubagentError:
    on = "" if session_id is None else f" on session {session_id!r}"
    return SubagentError(
        ErrorCode.PERSISTENCE_UNAVAILABLE,
        f"the PostgreSQL session store {where} failed{on}: {str(error).strip()}",
        cause=error,
    )


def _not_a_store(where: str) -> SubagentError:
    return SubagentError(
        ErrorCode.PERSISTENCE_UNAVAILABLE, f"{where} is not a dsh-subagent store", field="db"
    )


async def _applied(conn: Conn) -> int | None:
    """The schema version of the database, None when it has no migration table."""
    cur = await conn.execute("SELECT to_regclass('dsh_schema_migrations') IS NOT NULL")
    row = await cur.fetchone()
    if row is None or not row[0]:
        return None
    cur = await conn.execute("SELECT COALESCE(MAX(version), 0) FROM dsh_schema_migrations")
    found = await cur.fetchone()
    assert found is not None
    return int(str(found[0]))


async def migrate(conn: Conn, where: str) -> int:
    """Apply the missing migrations once, under the advisory lock (rule 3)."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        version = await _applied(conn)
        if version is None:
            cur = await conn.execute(
                "SELECT 1 FROM pg_tables WHERE schemaname = current_schema() LIMIT 1"
            )
            if await cur.fetchone() is not None:
                raise _not_a_store(where)  # another application's tables: left alone
            await conn.execute(
                """CREATE TABLE dsh_schema_migrations (
                    version integer PRIMARY KEY,
                    applied_at timestamptz NOT NULL DEFAULT now()
                )"""
            )
            version = 0
        _require_known(version, where)
        for number, statements in MIGRATIONS:
            if number > version:
                for statement in statements:
                    await conn.execute(statement)
                await conn.execute(
                    "INSERT INTO dsh_schema_migrations (version) VALUES (%s)", (number,)
                )
    return SCHEMA_VERSION


def _require_known(version: int, where: str) -> None:
    if version > SCHEMA_VERSION:
        raise SubagentError(
            ErrorCode.PERSISTENCE_UNAVAILABLE,
            f"{where}: schema version {version} is newer than {SCHEMA_VERSION}",
            field="db",
        )


async def _lease_row(conn: Conn, session_id: SessionId, *, lock: bool) -> LeaseRow | None:
    query = _LEASE_SQL.row + (" FOR UPDATE" if lock else "")
    cur = await conn.execute(query, (session_id,))
    row = await cur.fetchone()
    if row is None:
        return None
    owner, host, pid, epoch, expires_at = row
    return LeaseRow(
        None if owner is None else str(owner),
        str(host),
        int(str(pid)),
        int(str(epoch)),
        float(str(expires_at)),
    )


async def _header_text(conn: Conn, session_id: SessionId, *, lock: bool = False) -> str:
    query = "SELECT header FROM sessions WHERE id = %s" + (" FOR UPDATE" if lock else "")
    cur = await conn.execute(query, (session_id,))
    row = await cur.fetchone()
    if row is None:
        raise unknown_session(session_id)
    return str(row[0])


async def _revision(conn: Conn, session_id: SessionId) -> int:
    cur = await conn.execute(
        "SELECT COALESCE(MAX(seq), -1) + 1 FROM events WHERE session_id = %s", (session_id,)
    )
    row = await cur.fetchone()
    assert row is not None
    return int(str(row[0]))


async def _read_record(conn: Conn, session_id: SessionId, *, lock: bool = False) -> SessionRecord:
    header = decode_header(session_id, await _header_text(conn, session_id, lock=lock))
    cur = await conn.execute(
        "SELECT seq, type, time, data FROM events WHERE session_id = %s ORDER BY seq",
        (session_id,),
    )
    rows: list[EventRow] = [
        (int(str(seq)), str(kind), float(str(moment)), str(data))
        for seq, kind, moment, data in await cur.fetchall()
    ]
    return SessionRecord(header, decode_events(session_id, rows))


async def _delete_mail(conn: Conn, session_id: str, message_ids: Sequence[str]) -> None:
    """Remove these mailbox rows of the child (delivered, or pruned)."""
    if message_ids:
        await conn.execute(
            "DELETE FROM mailbox WHERE session_id = %s AND message_id = ANY(%s)",
            (session_id, builtins.list(message_ids)),
        )


class PostgresPersistence(LeaseHolder):
    """Durable session storage in one PostgreSQL database; ``await open(address)``."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Conn],
        address: str,
        *,
        clock: Clock,
        lease_ttl: float,
        me: LeaseOwner,
        readonly: bool,
    ) -> None:
        """Internal: use ``PostgresPersistence.open``."""
        super().__init__(clock, lease_ttl, me)
        self._pool = pool
        self._address = address
        self._where = redact(address)
        self._readonly = readonly
        self._listener: asyncio.Task[None] | None = None
        self._read = ReadMail()  # releasing a lease removes the rows logged here

    @classmethod
    async def open(
        cls,
        address: str,
        *,
        clock: Clock = epoch_ms,
        readonly: bool = False,
        lease_ttl: float = DEFAULT_LEASE_TTL,
        pool_size: int = DEFAULT_POOL_SIZE,
        host: str | None = None,
    ) -> PostgresPersistence:
        """Open the store at ``address`` (``postgresql://...``); a writer migrates it.

        ``readonly`` opens an existing store for reading only (rule 3); ``lease_ttl``
        (seconds) is how long a held lease outlives its holder's last heartbeat;
        ``pool_size`` bounds the connections; ``host`` names this machine in leases
        (default: the host name; two workers must not share one unless they share a
        process table, rule 8 of ``persistence``).
        """
        ttl = require_ttl(lease_ttl)
        size = require_int(pool_size, "pool_size", minimum=1)
        if not isinstance(readonly, bool):
            raise invalid("readonly", "expected a bool")
        if not is_postgres_address(address):
            raise invalid("db", "expected a postgresql:// address")
        name = socket.gethostname() if host is None else require_str(host, "host", non_empty=True)
        me = LeaseOwner.here()
        me = LeaseOwner(name, me.pid, f"{name}:{me.pid}:{me.token.rsplit(':', 1)[-1]}")
        where = redact(address)
        try:
            async with await psycopg.AsyncConnection.connect(address, autocommit=True) as conn:
                if readonly:
                    version = await _applied(conn)
                    if version is None:
                        raise _not_a_store(where)
                    _require_known(version, where)
                else:
                    await migrate(conn, where)
        except psycopg.Error as error:
            raise SubagentError(
                ErrorCode.PERSISTENCE_UNAVAILABLE,
                f"{where} is not a usable PostgreSQL session store: {str(error).strip()}",
                field="db",
                cause=error,
            ) from error

        async def configure(conn: Conn) -> None:
            if readonly:
                await conn.execute("SET default_transaction_read_only = on")

        pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            address,
            min_size=1,
            max_size=size,
            open=False,
            kwargs={"autocommit": True},
            configure=configure,
        )
        await pool.open(wait=True, timeout=30)
        return cls(pool, address, clock=clock, lease_ttl=ttl, me=me, readonly=readonly)

    # ------------------------------------------------------------------ plumbing

    @contextlib.asynccontextmanager
    async def _transaction(self, session_id: SessionId | None = None) -> AsyncIterator[Conn]:
        """One transaction on a pooled connection; a driver error comes out typed (rule 9)."""
        if self._closed:
            raise closed_error()
        try:
            async with self._pool.connection() as conn, conn.transaction():
                yield conn
        except psycopg.Error as error:
            raise _unavailable(self._where, error, session_id) from error

    async def _fence(self, conn: Conn, session_id: SessionId) -> int | None:
        """Inside a write transaction: lock the lease row, refuse a write its lease no
        longer covers, renew a held one; returns the epoch written under (rule 5)."""
        renewal = self._check_fence(session_id, await _lease_row(conn, session_id, lock=True))
        if renewal is None:
            return None
        held, expires = renewal
        await conn.execute(_LEASE_SQL.renew_one, (expires, session_id))
        return held.epoch

    @staticmethod
    async def _insert_events(
        conn: Conn, session_id: SessionId, rows: Sequence[EventRow], epoch: int | None
    ) -> None:
        async with conn.cursor() as cur:
            await cur.executemany(
                """INSERT INTO events (session_id, seq, type, time, data, epoch)
                VALUES (%s, %s, %s, %s, %s, %s)""",
                [(session_id, *row, epoch) for row in rows],
            )

    # ------------------------------------------------------------------ reads

    async def list_snapshots(self) -> builtins.list[SessionSnapshot]:
        """Every stored header with its revision, in creation order."""
        async with self._transaction() as conn:
            cur = await conn.execute(
                """SELECT id, header,
                (SELECT COALESCE(MAX(seq), -1) + 1 FROM events WHERE session_id = sessions.id)
                FROM sessions ORDER BY created_seq"""
            )
            rows = await cur.fetchall()
        return [
            SessionSnapshot(decode_header(str(sid), str(text)), int(str(count)))
            for sid, text, count in rows
        ]

    async def revision(self, session_id: SessionId) -> int | None:
        """How many events are stored for ``session_id``; None when no row exists."""
        sid = require_session_id(session_id)
        async with self._transaction(sid) as conn:
            cur = await conn.execute(
                """SELECT (SELECT COALESCE(MAX(seq), -1) + 1 FROM events WHERE session_id = %s)
                FROM sessions WHERE id = %s""",
                (sid, sid),
            )
            row = await cur.fetchone()
        return None if row is None else int(str(row[0]))

    async def inspect(self, session_id: SessionId) -> SessionRecord:
        """The stored session as it is; never mutates storage."""
        sid = require_session_id(session_id)
        async with self._transaction(sid) as conn:
            return await _read_record(conn, sid)

    # ------------------------------------------------------------------ writes

    async def load(self, session_id: SessionId) -> SessionRecord:
        """The stored session, after durably closing an interrupted tail turn."""
        sid = require_session_id(session_id)
        async with self._transaction(sid) as conn:
            record = await _read_record(conn, sid, lock=not self._readonly)
            repair = repair_event(sid, record.events, self._clock)
            if repair is None:
                return record
            epoch = await self._fence(conn, sid)
            await self._insert_events(conn, sid, encode_events([repair]), epoch)
        return SessionRecord(record.header, (*record.events, repair))

    async def create(self, header: SessionHeader, events: Sequence[SessionEvent]) -> None:
        """Store a new session whose log starts at seq 0."""
        if self._closed:
            raise closed_error()
        text, rows = encode_new_log(header, events)
        sid = header.id
        async with self._transaction(sid) as conn:
            cur = await conn.execute("SELECT 1 FROM sessions WHERE id = %s", (sid,))
            if await cur.fetchone() is not None:
                raise session_exists(sid)
            epoch = await self._fence(conn, sid)
            cur = await conn.execute(
                """INSERT INTO sessions (id, header) VALUES (%s, %s)
                ON CONFLICT (id) DO NOTHING RETURNING id""",
                (sid, text),
            )
            if await cur.fetchone() is None:  # created concurrently, after the check
                raise session_exists(sid)
            await self._insert_events(conn, sid, rows, epoch)
        self._read.wrote(sid, events)

    async def append(self, session_id: SessionId, events: Sequence[SessionEvent]) -> None:
        """Append events that continue the stored log exactly."""
        sid = self._checked(session_id)
        rows = encode_events(events)
        async with self._transaction(sid) as conn:
            await _header_text(conn, sid, lock=True)  # one writer of a log at a time
            require_continues(rows, await _revision(conn, sid))
            epoch = await self._fence(conn, sid)
            await self._insert_events(conn, sid, rows, epoch)
        self._read.wrote(sid, events)

    async def cached_snapshot(self, header: SessionHeader) -> CachedProjection | None:
        """The cached values for this exact session lifecycle, or ``None``."""
        if self._closed:
            raise closed_error()
        normal = check_header(header)
        sid = normal.id
        async with self._transaction(sid) as conn:
            cur = await conn.execute(
                "SELECT as_of_seq, projection FROM projection_cache WHERE session_id = %s",
                (sid,),
            )
            row = await cur.fetchone()
            if row is None or decode_header(sid, await _header_text(conn, sid)) != normal:
                return None
            revision = await _revision(conn, sid)
        return decode_projection(sid, int(str(row[0])), str(row[1]), revision)

    async def store_projection(
        self, session_id: SessionId, as_of_seq: int, values: Mapping[str, JsonValue]
    ) -> None:
        """Record values folded from the first ``as_of_seq`` events of the session."""
        sid = self._checked(session_id)
        seq, text = encode_projection(as_of_seq, values)
        async with self._transaction(sid) as conn:
            await _header_text(conn, sid)
            revision = await _revision(conn, sid)
            require_folded(seq, revision)
            await conn.execute(
                """INSERT INTO projection_cache (session_id, as_of_seq, projection)
                VALUES (%s, %s, %s) ON CONFLICT (session_id) DO UPDATE
                SET as_of_seq = excluded.as_of_seq, projection = excluded.projection
                WHERE excluded.as_of_seq >= projection_cache.as_of_seq""",
                (sid, seq, text),
            )

    # ------------------------------------------------------------------ leases (rule 4)

    async def _grant(self, session_id: SessionId, *, reserve: bool) -> Lease:
        sid = self._checked(session_id)
        while True:
            async with self._transaction(sid) as conn:
                row = await _lease_row(conn, sid, lock=False)
                cur = await conn.execute("SELECT 1 FROM sessions WHERE id = %s", (sid,))
                stored = await cur.fetchone() is not None
                new = grant(
                    sid, row, self._me, self._clock(), self._ttl, reserve=reserve, stored=stored
                )
                read = (None, None) if row is None else (row.expires_at, row.owner)
                cur = await conn.execute(_LEASE_SQL.grant, (*grant_values(sid, new), *read))
                if await cur.fetchone() is None:
                    continue  # another grant or a renewal came between: decide again
                await self._audit(conn, sid, new.epoch, "grant")
            break
        return self._hold(lease_of(sid, new))

    async def _audit(self, conn: Conn, session_id: SessionId, epoch: int, action: str) -> None:
        await conn.execute(
            "INSERT INTO lease_audit (session_id, epoch, owner, action, at) "
            "VALUES (%s, %s, %s, %s, %s)",
            (session_id, epoch, self._me.token, action, self._clock()),
        )

    async def release(self, lease: Lease) -> None:
        """Give the lease up; a lease another holder took meanwhile is left alone."""
        lease = self._let_go(lease)
        logged = self._read.logged(lease.session_id)
        async with self._transaction(lease.session_id) as conn:
            cur = await conn.execute(_LEASE_SQL.release, lease_key(lease))
            if cur.rowcount == 1:
                await self._audit(conn, lease.session_id, lease.epoch, "release")
                await _delete_mail(conn, lease.session_id, logged)  # its logged mail is done
        self._read.removed(lease.session_id, logged)

    async def _renew(self, renewals: Sequence[Renewal]) -> None:
        async with self._transaction() as conn, conn.cursor() as cur:
            await cur.executemany(_LEASE_SQL.renew, renewals)

    async def _after_beat(self) -> None:
        """Claim orphaned mail at the heartbeat's pace (rule 7)."""
        if self._watchers:
            with contextlib.suppress(SubagentError):
                self._tell(await self.orphans())

    # ------------------------------------------------------------------ mailbox (rules 6, 7)

    async def post(self, session_id: SessionId, message: UserMessage) -> bool:
        """Accept ``message`` into the mailbox iff another live holder has the lease; the
        insert is committed, and its holder notified, when this returns True (rule 6)."""
        sid = self._checked(session_id)
        message_id, sender, content = encode_mail(message)
        async with self._transaction(sid) as conn:
            row = await _lease_row(conn, sid, lock=True)
            if not held_elsewhere(row, self._me, self._clock()):
                return False
            assert row is not None
            await conn.execute(
                """INSERT INTO mailbox (session_id, message_id, sender, content, created_at)
                VALUES (%s, %s, %s, %s, %s)""",
                (sid, message_id, sender, content, self._clock()),
            )
            await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, json.dumps([row.owner, sid])))
        return True

    async def mailbox(self, session_id: SessionId) -> builtins.list[UserMessage]:
        """The child's mailbox messages, in acceptance order."""
        sid = require_session_id(session_id)
        async with self._transaction(sid) as conn:
            cur = await conn.execute(
                """SELECT seq, message_id, sender, content FROM mailbox
                WHERE session_id = %s ORDER BY seq""",
                (sid,),
            )
            rows: builtins.list[MailRow] = [
                (int(str(seq)), str(mid), str(sender), str(content))
                for seq, mid, sender, content in await cur.fetchall()
            ]
        messages = decode_mail(sid, rows)
        self._read.saw(sid, messages)
        return messages

    async def prune(self, session_id: SessionId, message_ids: Sequence[MessageId]) -> None:
        """Remove these mailbox rows (their messages are in the log); a fenced write."""
        sid = self._checked(session_id)
        ids = require_ids(message_ids)
        if not ids:
            return
        async with self._transaction(sid) as conn:
            await self._fence(conn, sid)
            await _delete_mail(conn, sid, ids)
        self._read.removed(sid, ids)

    async def orphans(self, limit: int = 16) -> builtins.list[SessionId]:
        """Children with mailbox rows whose lease is free or expired (rule 7); concurrent
        callers skip each other's rows (``FOR UPDATE SKIP LOCKED``)."""
        async with self._transaction() as conn:
            # Driven by the mailbox (only undelivered mail), never by every lease ever held.
            cur = await conn.execute(
                """SELECT session_id FROM leases
                WHERE session_id IN (SELECT session_id FROM mailbox)
                AND (owner IS NULL OR expires_at <= %s)
                ORDER BY session_id LIMIT %s FOR UPDATE SKIP LOCKED""",
                (self._clock(), limit),
            )
            return [SessionId(str(row[0])) for row in await cur.fetchall()]

    def watch_mailbox(self, listener: MailboxListener) -> Unsubscribe:
        """Call ``listener(child_id)`` when mail may be pending for a child held here (on a
        ``NOTIFY`` for this owner) or for an orphaned child (rules 6, 7)."""
        stop = self._watch(listener)
        if self._listener is None and not self._closed:
            self._listener = asyncio.get_running_loop().create_task(self._listen())
            self._start_heartbeat()
        return stop

    async def _listen(self) -> None:
        """Until closed: hear ``NOTIFY`` on the mailbox channel; reconnect after a failure,
        sweeping the held children's mailboxes once after every connect (rule 6)."""
        while not self._closed:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self._address, autocommit=True
                ) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    self._tell(await self._held_with_mail(conn))
                    async for notice in conn.notifies():
                        owner, sid = json.loads(notice.payload)
                        if owner == self._me.token and sid in self._held:
                            self._tell([SessionId(sid)])
            except (psycopg.Error, OSError, ValueError):
                _log.warning("mailbox listener on %s failed; reconnecting", self._where)
                await asyncio.sleep(min(1.0, self._ttl / 3))

    async def _held_with_mail(self, conn: Conn) -> builtins.list[SessionId]:
        held = builtins.list(self._held)
        if not held:
            return []
        cur = await conn.execute(
            "SELECT DISTINCT session_id FROM mailbox WHERE session_id = ANY(%s)", (held,)
        )
        return sorted(SessionId(str(row[0])) for row in await cur.fetchall())

    async def close(self) -> None:
        """Release every held lease, stop the listener and close the pool; later calls
        raise ``PERSISTENCE_UNAVAILABLE``."""
        if self._closed:
            return
        await self._stop(self._listener)
        await self._pool.close()
