"""SQLite session persistence: the embedded default backend, one file, no server.

Theory of operation
-------------------
1. Threading: stdlib ``sqlite3`` (no extra dependency). A ``sqlite3`` connection must not be
   shared between threads, and ``asyncio.to_thread`` would hop between the default pool's
   threads, so the backend owns a single-thread executor that opens the one connection and
   runs every statement: the event loop never blocks on disk, and access is serialised.
2. Durability: WAL journal; ``synchronous=FULL`` by default, so a returned write survives a
   power loss. ``NORMAL`` (configurable) still survives a process crash (SIGKILL) but may lose
   the last commits on power loss; ``OFF`` and ``EXTRA`` are accepted as SQLite defines them.
3. Every write runs in one ``BEGIN IMMEDIATE`` transaction, so it is atomic against crashes and
   against other writers of the file; rows are validated and encoded (``persistence``) before
   the transaction starts, and the continuation and duplicate checks run inside it, before
   any insert. ``load`` reads and repairs in one write transaction; ``inspect`` and the lists
   read in one deferred (read) transaction and never write.
4. Schema (``PRAGMA user_version`` = 1), STRICT tables so a stored value keeps its type:
   ``sessions(id primary key, header, created_seq)``, ``events(session_id, seq, type, time,
   data, primary key(session_id, seq))`` and ``projection_cache(session_id primary key,
   as_of_seq, projection)``. Another ``user_version`` is refused with
   ``PERSISTENCE_UNAVAILABLE``.
5. The log length (revision, next seq) is the last seq + 1, read from the primary key, so an
   append costs the same on a long log as on a short one; a seq gap is damage that the
   reading paths (``inspect``/``load``) report as ``CORRUPT_SESSION``.
6. Behaviour is exactly ``InMemoryPersistence``'s: both use the row codec of ``persistence``.
7. No ``sqlite3`` error reaches a caller (issue 18). When a statement fails, a slow scan of
   the raw bytes the call reads (``_undecodable``, on the failure path only) looks for text
   that is not UTF-8: found, it is ``CORRUPT_SESSION`` naming the session and the field
   (``events[3].data``); otherwise the store is unusable (a missing table, a failing disk),
   ``PERSISTENCE_UNAVAILABLE`` naming the session, with the SQLite error as the cause.
8. Open modes (issue 19). A writer (the default) creates the schema only in an empty
   database, and proves the file writable at open with a write it rolls back: SQLite opens a
   write-protected file read-only without a word, so a read-only store is refused there
   (``PERSISTENCE_UNAVAILABLE`` naming the path), not at every later flush. ``readonly=True``
   (listings, ``dsh-subagent catalog``) connects with the URI ``mode=ro``: it never creates
   the schema nor sets the journal mode, and its writes fail ``PERSISTENCE_UNAVAILABLE``. A
   foreign database (``user_version`` 0 with tables of its own), or an empty file opened
   read-only, is refused as "not a dsh-subagent store" and left unchanged.
9. Leases (``persistence`` rule 8): ``leases(session_id primary key, owner, host, pid, epoch,
   expires_at)``, created if absent on open (an additive table; ``user_version`` stays). A
   grant is one compare-and-set: ``BEGIN IMMEDIATE`` (the file's write lock, so across
   processes), read the row, decide (``grant``), then an update conditional on the epoch
   read. Every write's transaction runs ``fence`` before its first insert. A heartbeat task
   renews the held leases every ``lease_ttl / 3`` seconds while any is held. The statements
   and that book of held leases are ``sql_leases``'s, shared with PostgreSQL. A grant and a
   release commit at ``synchronous=NORMAL`` (no fsync of their own; a reservation keeps the
   store's level): visible to every connection at once and never lost by a process crash,
   and the WAL is one ordered file, so the next fsync'd commit (the first log write the
   grant fences, any acceptance) makes them durable too. Power loss can only undo a grant
   under which nothing durable was written, or a release, whose lease then expires.
10. The durable mailbox (``persistence`` rule 9): ``mailbox(seq integer primary key
   autoincrement, session_id, message_id, sender, content, created_at)``, created if absent
   on open like ``leases`` (a table of an older store, whose seq could be given again after
   its last row was removed, is rebuilt with its rows); ``seq`` is the acceptance order.
   ``post`` decides and inserts inside one ``BEGIN IMMEDIATE``. A ``release`` deletes, in
   its transaction, the rows this backend read and then logged (``ReadMail``), so the
   table keeps only mail no released Activation logged. Once anything watches
   (``watch_mailbox``), a poll task runs ``PRAGMA data_version`` on the connection's
   thread every ``mailbox_poll`` seconds (``probe_mailbox`` is one probe): the number
   changes only when another connection committed, and only then does the probe read the
   rows after the last seq it saw (a range of the primary key) and look again at the
   children it saw with rows. Those held here are named to the watchers, and so are
   orphans, whose lease is free (DUR-26); the rows held by another live owner are
   remembered, and named once that lease frees without a write (it expires, or its pid is
   gone on this host).
11. Group commit (DUR-3): ``create`` and ``append`` do not commit alone. A write joins the
   open batch; the first of a batch schedules it for the end of the loop tick, and while a
   batch is being committed the next one gathers. A batch runs on the connection's thread
   in one ``BEGIN IMMEDIATE`` transaction, each write's checks and fence before its first
   statement that writes: a refused write has written nothing and fails alone, the rest
   commit together, so many acceptances share one fsync. A write whose statement fails
   midway rolls the batch back; it runs again with a savepoint per write, so that write
   fails alone. An append reads what it checks in one statement. A failed commit fails
   every write of the batch. ``close`` waits for the pending batches.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final, TypeVar

import attrs

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
    corrupt,
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
    lease_of,
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
    LEASE_COLUMNS,
    LeaseHolder,
    LeaseSql,
    Renewal,
    grant_values,
    lease_key,
)
from dsh_subagent.adapters.signals import Unsubscribe
from dsh_subagent.core.errors import ErrorCode, SubagentError, invalid
from dsh_subagent.core.jsonvalue import require_str
from dsh_subagent.core.values import (
    JsonValue,
    MessageId,
    SessionEvent,
    SessionHeader,
    SessionId,
    UserMessage,
)

SCHEMA_VERSION: Final = 1
SYNCHRONOUS_LEVELS: Final = frozenset({"OFF", "NORMAL", "FULL", "EXTRA"})

_SCHEMA: Final = (
    """CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        header TEXT NOT NULL,
        created_seq INTEGER NOT NULL UNIQUE
    ) STRICT""",
    """CREATE TABLE events (
        session_id TEXT NOT NULL REFERENCES sessions(id),
        seq INTEGER NOT NULL,
        type TEXT NOT NULL,
        time REAL NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (session_id, seq)
    ) STRICT, WITHOUT ROWID""",
    """CREATE TABLE projection_cache (
        session_id TEXT PRIMARY KEY REFERENCES sessions(id),
        as_of_seq INTEGER NOT NULL,
        projection TEXT NOT NULL
    ) STRICT""",
)
_LEASES: Final = """CREATE TABLE IF NOT EXISTS leases (
    session_id TEXT PRIMARY KEY,
    owner TEXT,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    expires_at REAL NOT NULL
) STRICT"""

_MAILBOX_TABLE: Final = """CREATE TABLE IF NOT EXISTS {name} (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    message_id TEXT NOT NULL,
    sender TEXT NOT NULL,
    content TEXT NOT NULL,
    created_at REAL NOT NULL,
    UNIQUE (session_id, message_id)
) STRICT"""
_MAIL_AFTER: Final = "SELECT seq, session_id FROM mailbox WHERE seq > ? ORDER BY seq"
"""A probe's new rows: a range of the primary key (a ``GROUP BY`` here would scan the
whole ``mailbox_by_session`` index instead)."""
_MAILBOX_INDEX: Final = "CREATE INDEX IF NOT EXISTS mailbox_by_session ON mailbox (session_id, seq)"
_APPEND_STATE: Final = """SELECT
    (SELECT COALESCE(MAX(seq), -1) + 1 FROM events WHERE session_id = s.id),
    l.owner, l.host, l.pid, l.epoch, l.expires_at, s.header
    FROM sessions AS s LEFT JOIN leases AS l ON l.session_id = s.id WHERE s.id = ?"""
"""What an append checks, in one statement: the session exists (its header is read, so
undecodable text is found, rule 7), its revision and its lease row (``host`` is never NULL
in a stored lease), so a job costs one read (rule 11)."""
_LEASE_SQL: Final = LeaseSql.written("?")
_HAS_MAIL: Final = "SELECT EXISTS (SELECT 1 FROM mailbox WHERE session_id = ?)"
_GRANT_STATE: Final = f"""SELECT
    EXISTS (SELECT 1 FROM sessions WHERE id = k.id),
    (SELECT COALESCE(MAX(seq), -1) + 1 FROM events WHERE session_id = k.id),
    EXISTS (SELECT 1 FROM mailbox WHERE session_id = k.id),
    {", ".join(f"l.{column}" for column in LEASE_COLUMNS.split(", "))}
    FROM (SELECT ? AS id) AS k LEFT JOIN leases AS l ON l.session_id = k.id"""
"""What a grant reads, in one statement (rule 9): whether the session is stored and its
revision, whether it has mailbox rows (nobody else writes inside the ``BEGIN IMMEDIATE``,
so before or after the grant's own write is the same), and its lease row (``host`` is
never NULL in a stored lease)."""
_REVISION: Final = """SELECT (SELECT COALESCE(MAX(seq), -1) + 1 FROM events WHERE session_id = ?)
    FROM sessions WHERE id = ?"""
"""A session's revision, and whether it exists (no row: none stored)."""
DEFAULT_MAILBOX_POLL: Final = 0.05
"""Seconds between two ``PRAGMA data_version`` probes of a holder watching its mailbox."""

_T = TypeVar("_T")
_Job = Callable[[sqlite3.Connection], None]
"""A write's statements, run inside a group commit's transaction (rule 10)."""
_Mail = tuple[str, LeaseRow | None]
"""A child with mailbox rows and its lease row, as a probe reads them (rule 10)."""
_Text = tuple[str, str, bytes]
"""Stored text for the undecodable-text scan: ``(session id, field, raw bytes)``."""


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection, begin: str) -> Iterator[None]:
    """Run the body in one transaction: commit on success, roll back on any exception."""
    conn.execute(begin)
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


@contextlib.contextmanager
def _lease_transaction(
    conn: sqlite3.Connection, level: str, *, lowered: bool = True
) -> Iterator[None]:
    """A lease's own write (a grant, a release) in one ``BEGIN IMMEDIATE``, committed at
    most at ``NORMAL``, so without an fsync of its own (rule 9); ``lowered=False`` keeps
    ``level``."""
    lowered = lowered and level in ("FULL", "EXTRA")
    if lowered:
        conn.execute("PRAGMA synchronous=NORMAL")
    try:
        with _transaction(conn, "BEGIN IMMEDIATE"):
            yield
    finally:
        if lowered:
            conn.execute(f"PRAGMA synchronous={level}")


def _not_a_store(path: str) -> SubagentError:
    return SubagentError(
        ErrorCode.PERSISTENCE_UNAVAILABLE, f"{path} is not a dsh-subagent store", field="path"
    )


def _schema_version(conn: sqlite3.Connection, path: str) -> int:
    """The store's schema version, 0 for an empty database; refuses any other file (rule 8)."""
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    if version == 0 and conn.execute("SELECT 1 FROM sqlite_master").fetchone() is not None:
        raise _not_a_store(path)
    if version not in (0, SCHEMA_VERSION):
        raise SubagentError(
            ErrorCode.PERSISTENCE_UNAVAILABLE,
            f"{path}: schema version {version} is not {SCHEMA_VERSION}",
            field="path",
        )
    return int(version)


def _prove_writable(conn: sqlite3.Connection) -> None:
    """Write and roll back: SQLite opens a write-protected file read-only without a word.

    (The whole transaction is rolled back: a savepoint's rollback would still commit a page.)
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    finally:
        conn.execute("ROLLBACK")


def _upgrade_mailbox(conn: sqlite3.Connection) -> None:
    """Create the mailbox (additive, like ``leases``), or rebuild one whose ``seq`` is not
    ``AUTOINCREMENT`` yet: a probe reads only the rows after the last seq it saw, so the seq
    of a removed last row must never be given again (rule 10)."""
    query = "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'mailbox'"
    with _transaction(conn, "BEGIN IMMEDIATE"):
        found = conn.execute(query).fetchone()
        if found is None:
            conn.execute(_MAILBOX_TABLE.format(name="mailbox"))
        elif "AUTOINCREMENT" not in found[0].upper():
            conn.execute(_MAILBOX_TABLE.format(name="mailbox_upgrade"))
            conn.execute("INSERT INTO mailbox_upgrade SELECT * FROM mailbox")
            conn.execute("DROP TABLE mailbox")
            conn.execute("ALTER TABLE mailbox_upgrade RENAME TO mailbox")
        conn.execute(_MAILBOX_INDEX)


def _delete_mail(conn: sqlite3.Connection, session_id: str, message_ids: Sequence[str]) -> None:
    conn.executemany(
        "DELETE FROM mailbox WHERE session_id = ? AND message_id = ?",
        [(session_id, each) for each in message_ids],
    )


def _connect(path: str, synchronous: str, readonly: bool) -> sqlite3.Connection:
    """Open the connection (in the executor's thread) and check, or create, the schema."""
    if readonly:
        uri = f"{Path(path).absolute().as_uri()}?mode=ro"
        conn = sqlite3.connect(uri, uri=True, isolation_level=None)
    else:
        conn = sqlite3.connect(path, isolation_level=None)  # transactions are explicit
    try:
        conn.execute("PRAGMA busy_timeout=10000")
        with _transaction(conn, "BEGIN" if readonly else "BEGIN IMMEDIATE"):
            version = _schema_version(conn, path)
            if readonly and version == 0:
                raise _not_a_store(path)
            if version == 0:
                for statement in _SCHEMA:
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        if not readonly:
            if version != 0:
                _prove_writable(conn)
            conn.execute(_LEASES)  # additive: a store of the first schema gains it here
            _upgrade_mailbox(conn)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={synchronous}")
    except BaseException:
        conn.close()
        raise
    return conn


def _header_text(conn: sqlite3.Connection, session_id: SessionId) -> str:
    row = conn.execute("SELECT header FROM sessions WHERE id = ?", (session_id,)).fetchone()
    if row is None:
        raise unknown_session(session_id)
    text: str = row[0]
    return text


def _revision(conn: sqlite3.Connection, session_id: SessionId) -> int:
    """The log length: last seq + 1, read from the primary key in O(log n).

    (``COUNT(*)`` would scan the log on every append; a gap is damage that reads report.)
    """
    query = "SELECT COALESCE(MAX(seq), -1) + 1 FROM events WHERE session_id = ?"
    revision: int = conn.execute(query, (session_id,)).fetchone()[0]
    return revision


def _read_record(conn: sqlite3.Connection, session_id: SessionId) -> SessionRecord:
    header = decode_header(session_id, _header_text(conn, session_id))
    query = "SELECT seq, type, time, data FROM events WHERE session_id = ? ORDER BY seq"
    rows: list[EventRow] = conn.execute(query, (session_id,)).fetchall()
    return SessionRecord(header, decode_events(session_id, rows))


def _insert_events(conn: sqlite3.Connection, session_id: str, rows: Sequence[EventRow]) -> None:
    conn.executemany(
        "INSERT INTO events (session_id, seq, type, time, data) VALUES (?, ?, ?, ?, ?)",
        [(session_id, *row) for row in rows],
    )


def _lease_row(conn: sqlite3.Connection, session_id: SessionId) -> LeaseRow | None:
    row = conn.execute(_LEASE_SQL.row, (session_id,)).fetchone()
    return None if row is None else LeaseRow(*row)


def _mail_after(
    conn: sqlite3.Connection, after: int, tracked: Iterable[str]
) -> tuple[int, builtins.list[_Mail]]:
    """The last mailbox seq, and each child with rows (with its lease row) among those with
    a row after ``after`` and ``tracked`` (rule 10): a range of the primary key and one
    index probe per tracked child, however long the mailbox's history."""
    fresh: dict[str, int] = {}
    for seq, sid in conn.execute(_MAIL_AFTER, (after,)):
        fresh[sid] = seq  # in seq order: the child's last
    has_mail = "SELECT 1 FROM mailbox WHERE session_id = ? LIMIT 1"
    still = [
        sid for sid in tracked if sid not in fresh and conn.execute(has_mail, (sid,)).fetchone()
    ]
    last = max([after, *fresh.values()])
    return last, [(sid, _lease_row(conn, SessionId(sid))) for sid in sorted({*fresh, *still})]


def _raw_text(conn: sqlite3.Connection, session_id: SessionId | None) -> Iterable[_Text]:
    """The stored text a call on ``session_id`` reads (``None``: the listing), as bytes."""
    if session_id is None:
        query = "SELECT CAST(id AS BLOB), CAST(header AS BLOB) FROM sessions ORDER BY created_seq"
        for raw_id, header in conn.execute(query):
            name = raw_id.decode(errors="backslashreplace")
            yield from ((name, "id", raw_id), (name, "header", header))
        return
    ask = (session_id,)
    for (header,) in conn.execute("SELECT CAST(header AS BLOB) FROM sessions WHERE id = ?", ask):
        yield session_id, "header", header
    query = """SELECT seq, CAST(type AS BLOB), CAST(data AS BLOB) FROM events
        WHERE session_id = ? ORDER BY seq"""
    for seq, kind, data in conn.execute(query, ask):
        yield from (
            (session_id, f"events[{seq}].type", kind),
            (session_id, f"events[{seq}].data", data),
        )
    query = "SELECT CAST(projection AS BLOB) FROM projection_cache WHERE session_id = ?"
    for (values,) in conn.execute(query, ask):
        yield session_id, "projection.values", values


def _undecodable(conn: sqlite3.Connection, session_id: SessionId | None) -> SubagentError | None:
    """``CORRUPT_SESSION`` for the first stored text of the call that is not UTF-8, if any."""
    try:
        for name, field, raw in _raw_text(conn, session_id):
            try:
                raw.decode()
            except UnicodeDecodeError as error:
                return corrupt(name, field, f"stored text is not UTF-8 ({error})")
    except sqlite3.Error:
        return None  # the store itself is unusable: reported as such by the caller
    return None


def _typed_failure(
    conn: sqlite3.Connection, error: sqlite3.Error, session_id: SessionId | None
) -> SubagentError:
    """The typed error a caller sees for a failed statement (rule 7)."""
    damage = _undecodable(conn, session_id)
    if damage is not None:
        return damage
    where = "" if session_id is None else f" on session {session_id!r}"
    return SubagentError(
        ErrorCode.PERSISTENCE_UNAVAILABLE,
        f"the SQLite session store failed{where}: {error}",
        cause=error,
    )


class SqlitePersistence(LeaseHolder):
    """Durable session storage in one SQLite file; create it with ``await open(path)``."""

    def __init__(
        self,
        executor: ThreadPoolExecutor,
        conn: sqlite3.Connection,
        clock: Clock,
        lease_ttl: float = DEFAULT_LEASE_TTL,
        mailbox_poll: float = DEFAULT_MAILBOX_POLL,
        *,
        synchronous: str = "FULL",
    ) -> None:
        """Internal: use ``SqlitePersistence.open``."""
        super().__init__(clock, lease_ttl, LeaseOwner.here())
        self._level = synchronous
        self._executor = executor
        self._conn = conn
        self._poll_every = mailbox_poll
        self._poll: asyncio.Task[None] | None = None
        self._seen_version: int | None = None
        self._mail_seq = 0  # the last mailbox seq a probe read
        #: Children with mail at the last look: the lease row another live holder had, or
        #: None when the child was named (held here, or free).
        self._tracked: dict[SessionId, LeaseRow | None] = {}
        self._read = ReadMail()  # releasing a lease removes the rows logged here
        self._batch: builtins.list[tuple[_Job, SessionId, asyncio.Future[None]]] = []
        self._committing: asyncio.Future[builtins.list[BaseException | None]] | None = None

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "FULL",
        clock: Clock = epoch_ms,
        readonly: bool = False,
        lease_ttl: float = DEFAULT_LEASE_TTL,
        mailbox_poll: float = DEFAULT_MAILBOX_POLL,
    ) -> SqlitePersistence:
        """Open the store at ``path``: a writer (default) creates it if missing or empty.

        ``synchronous`` is SQLite's durability level: ``FULL`` (default, survives power loss),
        ``NORMAL`` (survives a process crash), ``OFF`` or ``EXTRA``. ``clock`` stamps repairs
        and lease expiries. ``readonly`` opens an existing store for reading only (rule 8);
        ``lease_ttl`` (seconds) is how long a held lease outlives its holder's last heartbeat
        (rule 9); ``mailbox_poll`` (seconds) is how often a holder probes for new mailbox
        rows (rule 10).
        """
        ttl = require_ttl(lease_ttl)
        poll = require_ttl(mailbox_poll, "mailbox_poll")
        level = require_str(synchronous, "synchronous").upper()
        if level not in SYNCHRONOUS_LEVELS:
            raise invalid("synchronous", f"expected one of {sorted(SYNCHRONOUS_LEVELS)}")
        if not isinstance(readonly, bool):
            raise invalid("readonly", "expected a bool")
        where = os.fspath(path)
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dsh-sqlite")
        loop = asyncio.get_running_loop()
        try:
            conn = await loop.run_in_executor(executor, _connect, where, level, readonly)
        except sqlite3.Error as error:
            executor.shutdown(wait=False)
            problem = (
                "is read-only; a writer needs a writable session store"
                if error.sqlite_errorcode & 0xFF == sqlite3.SQLITE_READONLY
                else f"is not a usable SQLite session store: {error}"
            )
            raise SubagentError(
                ErrorCode.PERSISTENCE_UNAVAILABLE, f"{where} {problem}", field="path", cause=error
            ) from error
        except BaseException:
            executor.shutdown(wait=False)
            raise
        return cls(executor, conn, clock, ttl, poll, synchronous=level)

    async def _run(
        self, job: Callable[[sqlite3.Connection], _T], session_id: SessionId | None = None
    ) -> _T:
        """Run ``job`` on the connection's own thread; a SQLite error comes out typed."""
        if self._closed:
            raise closed_error()

        def guarded(conn: sqlite3.Connection) -> _T:
            try:
                return job(conn)
            except sqlite3.Error as error:
                raise _typed_failure(conn, error, session_id) from error

        return await asyncio.get_running_loop().run_in_executor(self._executor, guarded, self._conn)

    async def list_snapshots(self) -> builtins.list[SessionSnapshot]:
        """Every stored header with its revision, in creation order."""

        def job(conn: sqlite3.Connection) -> builtins.list[SessionSnapshot]:
            query = """SELECT id, header,
                (SELECT COALESCE(MAX(seq), -1) + 1 FROM events WHERE session_id = sessions.id)
                FROM sessions ORDER BY created_seq"""
            with _transaction(conn, "BEGIN"):
                rows: builtins.list[tuple[str, str, int]] = conn.execute(query).fetchall()
            return [SessionSnapshot(decode_header(sid, text), count) for sid, text, count in rows]

        return await self._run(job)

    async def revision(self, session_id: SessionId) -> int | None:
        """How many events are stored for ``session_id``; None when no row exists."""
        sid = require_session_id(session_id)

        def job(conn: sqlite3.Connection) -> int | None:
            with _transaction(conn, "BEGIN"):
                row: tuple[int] | None = conn.execute(_REVISION, (sid, sid)).fetchone()
            return None if row is None else row[0]

        return await self._run(job, sid)

    async def inspect(self, session_id: SessionId) -> SessionRecord:
        """The stored session as it is; never mutates storage."""
        sid = require_session_id(session_id)

        def job(conn: sqlite3.Connection) -> SessionRecord:
            with _transaction(conn, "BEGIN"):
                return _read_record(conn, sid)

        return await self._run(job, sid)

    async def load(self, session_id: SessionId) -> SessionRecord:
        """The stored session, after durably closing an interrupted tail turn."""
        sid = require_session_id(session_id)

        def job(conn: sqlite3.Connection) -> SessionRecord:
            with _transaction(conn, "BEGIN IMMEDIATE"):
                record = _read_record(conn, sid)
                repair = repair_event(sid, record.events, self._clock)
                if repair is None:
                    return record
                self._fence(conn, sid)
                _insert_events(conn, sid, encode_events([repair]))
            return SessionRecord(record.header, (*record.events, repair))

        return await self._run(job, sid)

    async def create(self, header: SessionHeader, events: Sequence[SessionEvent]) -> None:
        """Store a new session whose log starts at seq 0."""
        if self._closed:
            raise closed_error()
        text, rows = encode_new_log(header, events)
        sid = header.id

        def job(conn: sqlite3.Connection) -> None:
            exists = conn.execute("SELECT 1 FROM sessions WHERE id = ?", (sid,)).fetchone()
            if exists is not None:
                raise session_exists(sid)
            self._fence(conn, sid)
            conn.execute(
                """INSERT INTO sessions (id, header, created_seq) VALUES
                (?, ?, (SELECT COALESCE(MAX(created_seq), -1) + 1 FROM sessions))""",
                (sid, text),
            )
            _insert_events(conn, sid, rows)

        await self._write(job, sid)
        self._read.wrote(sid, events)

    async def append(self, session_id: SessionId, events: Sequence[SessionEvent]) -> None:
        """Append events that continue the stored log exactly."""
        sid = self._checked(session_id)
        rows = encode_events(events)

        def job(conn: sqlite3.Connection) -> None:
            found = conn.execute(_APPEND_STATE, (sid,)).fetchone()
            if found is None:
                raise unknown_session(sid)
            require_continues(rows, found[0])
            self._fenced(conn, sid, None if found[2] is None else LeaseRow(*found[1:6]))
            _insert_events(conn, sid, rows)

        await self._write(job, sid)
        self._read.wrote(sid, events)

    # ------------------------------------------------------------------ group commit (rule 10)

    async def _write(self, job: _Job, session_id: SessionId) -> None:
        """Run ``job`` in the next group commit; its own failure is its caller's alone."""
        if self._closed:
            raise closed_error()
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._batch.append((job, session_id, done))
        if len(self._batch) == 1 and self._committing is None:
            loop.call_soon(self._commit_batch)  # the rest of this tick joins the batch
        await done

    def _commit_batch(self) -> None:
        if self._committing is not None or not self._batch:
            return  # the commit in flight starts this batch when it ends
        batch, self._batch = self._batch, []
        jobs = [(job, session_id) for job, session_id, _ in batch]
        committing = asyncio.wrap_future(self._executor.submit(self._run_batch, jobs))
        self._committing = committing

        def committed(_: object) -> None:
            self._committing = None
            if committing.cancelled() or committing.exception() is not None:
                error = committing.exception() if not committing.cancelled() else None
                outcomes: builtins.list[BaseException | None] = [
                    error or closed_error() for _ in batch
                ]
            else:
                outcomes = committing.result()
            for (_job, _sid, done), outcome in zip(batch, outcomes, strict=True):
                if done.done():
                    continue
                if outcome is None:
                    done.set_result(None)
                else:
                    done.set_exception(outcome)
            self._commit_batch()

        committing.add_done_callback(committed)

    def _run_batch(
        self, jobs: Sequence[tuple[_Job, SessionId]]
    ) -> builtins.list[BaseException | None]:
        """On the connection's thread: every job in one transaction (rule 11). A job refuses
        (a ``SubagentError``: a stale epoch, a gap) only before its first write, so a
        refusal needs no rollback and the jobs run without savepoints; a statement failing
        midway rolls the transaction back and the batch runs again, a savepoint per job."""
        conn = self._conn
        unopened = self._begin_batch(len(jobs))
        if unopened is not None:
            return unopened
        outcomes: builtins.list[BaseException | None] = []
        for job, _session_id in jobs:
            try:
                job(conn)
            except SubagentError as refusal:
                outcomes.append(refusal)
            except Exception:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                return self._run_saved(jobs)
            else:
                outcomes.append(None)
        return self._commit_outcomes(outcomes)

    def _run_saved(
        self, jobs: Sequence[tuple[_Job, SessionId]]
    ) -> builtins.list[BaseException | None]:
        """``_run_batch`` with each job in a savepoint, so a job whose statement fails
        midway writes nothing and the others still commit."""
        conn = self._conn
        unopened = self._begin_batch(len(jobs))
        if unopened is not None:
            return unopened
        outcomes: builtins.list[BaseException | None] = []
        for job, session_id in jobs:
            conn.execute("SAVEPOINT job")
            try:
                job(conn)
            except Exception as error:
                outcome: BaseException = error
                if isinstance(error, sqlite3.Error):
                    outcome = _typed_failure(conn, error, session_id)
                try:
                    conn.execute("ROLLBACK TO job")
                    conn.execute("RELEASE job")
                except sqlite3.Error:  # SQLite rolled the whole transaction back itself
                    return [outcome for _ in jobs]
                outcomes.append(outcome)
            else:
                conn.execute("RELEASE job")
                outcomes.append(None)
        return self._commit_outcomes(outcomes)

    def _begin_batch(self, count: int) -> builtins.list[BaseException | None] | None:
        """Open a batch's transaction; if it cannot open, the failure of each of ``count``
        jobs (None: open)."""
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as error:
            return [_typed_failure(self._conn, error, None) for _ in range(count)]
        return None

    def _commit_outcomes(
        self, outcomes: builtins.list[BaseException | None]
    ) -> builtins.list[BaseException | None]:
        """Commit the batch's transaction; a failed commit fails every job it would store."""
        conn = self._conn
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as error:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            failure = _typed_failure(conn, error, None)
            return [failure if each is None else each for each in outcomes]
        return outcomes

    async def _settle_writes(self) -> None:
        """Wait until no group commit is pending or in flight (before closing)."""
        while self._batch or self._committing is not None:
            pending = [done for _job, _sid, done in self._batch]
            if self._committing is not None:
                pending.append(self._committing)  # type: ignore[arg-type]
            await asyncio.wait(pending)

    async def cached_snapshot(self, header: SessionHeader) -> CachedProjection | None:
        """The cached values for this exact session lifecycle, or ``None``."""
        if self._closed:
            raise closed_error()
        normal = check_header(header)
        sid = normal.id

        def job(conn: sqlite3.Connection) -> CachedProjection | None:
            with _transaction(conn, "BEGIN"):
                query = "SELECT as_of_seq, projection FROM projection_cache WHERE session_id = ?"
                row = conn.execute(query, (sid,)).fetchone()
                if row is None or decode_header(sid, _header_text(conn, sid)) != normal:
                    return None
                return decode_projection(sid, row[0], row[1], _revision(conn, sid))

        return await self._run(job, sid)

    async def store_projection(
        self, session_id: SessionId, as_of_seq: int, values: Mapping[str, JsonValue]
    ) -> None:
        """Record values folded from the first ``as_of_seq`` events of the session."""
        sid = self._checked(session_id)
        seq, text = encode_projection(as_of_seq, values)

        def job(conn: sqlite3.Connection) -> None:
            with _transaction(conn, "BEGIN IMMEDIATE"):
                _header_text(conn, sid)
                revision = _revision(conn, sid)
                require_folded(seq, revision)
                conn.execute(
                    """INSERT INTO projection_cache (session_id, as_of_seq, projection)
                    VALUES (?, ?, ?) ON CONFLICT (session_id) DO UPDATE
                    SET as_of_seq = excluded.as_of_seq, projection = excluded.projection
                    WHERE excluded.as_of_seq >= projection_cache.as_of_seq""",
                    (sid, seq, text),
                )

        await self._run(job, sid)

    # ------------------------------------------------------------------ leases (rule 9)

    def _fence(self, conn: sqlite3.Connection, session_id: SessionId) -> None:
        """Inside a write transaction: refuse a write its lease no longer covers; renew."""
        self._fenced(conn, session_id, _lease_row(conn, session_id))

    def _fenced(
        self, conn: sqlite3.Connection, session_id: SessionId, row: LeaseRow | None
    ) -> None:
        """``_fence`` with the lease row already read in this transaction."""
        renewal = self._check_fence(session_id, row)
        if renewal is not None:
            conn.execute(_LEASE_SQL.renew_one, (renewal[1], session_id))

    async def _grant(self, session_id: SessionId, *, reserve: bool) -> Lease:
        sid = self._checked(session_id)

        def job(conn: sqlite3.Connection) -> Lease:
            # A reservation keeps the store's level: it is durable at once (LEASE-4).
            with _lease_transaction(conn, self._level, lowered=not reserve):
                # The revision too: a resume needs no read of its own to trust its inspect.
                stored, revision, pending, *lease = conn.execute(_GRANT_STATE, (sid,)).fetchone()
                row = None if lease[1] is None else LeaseRow(*lease)
                new = grant(
                    sid,
                    row,
                    self._me,
                    self._clock(),
                    self._ttl,
                    reserve=reserve,
                    stored=bool(stored),
                )
                written = conn.execute(_LEASE_SQL.grant, grant_values(sid, new)).rowcount
                assert written == 1, "the compare-and-set is decided under the write lock"
            return attrs.evolve(
                lease_of(sid, new), mail=bool(pending), revision=revision if stored else None
            )

        return self._hold(await self._run(job, sid))

    async def release(self, lease: Lease) -> bool:
        """Give the lease up; a lease another holder took meanwhile is left alone. True when
        the child has mailbox rows, read in the same transaction (rule 10)."""
        lease = self._let_go(lease)
        logged = self._read.logged(lease.session_id)

        def job(conn: sqlite3.Connection) -> bool:
            with _lease_transaction(conn, self._level):
                cur = conn.execute(_LEASE_SQL.release, lease_key(lease))
                if cur.rowcount == 1:  # still the holder: its logged mail is done
                    _delete_mail(conn, lease.session_id, logged)
                (pending,) = conn.execute(_HAS_MAIL, (lease.session_id,)).fetchone()
            return bool(pending)

        pending = await self._run(job, lease.session_id)
        self._read.removed(lease.session_id, logged)
        return pending

    async def _renew(self, renewals: Sequence[Renewal]) -> None:
        def job(conn: sqlite3.Connection) -> None:
            with _transaction(conn, "BEGIN IMMEDIATE"):
                conn.executemany(_LEASE_SQL.renew, renewals)

        await self._run(job)

    # ------------------------------------------------------------------ mailbox (rule 10)

    async def post(self, session_id: SessionId, message: UserMessage) -> bool:
        """Accept ``message`` into the mailbox iff another live holder has the lease; the
        insert is committed when this returns True (rule 10)."""
        sid = self._checked(session_id)
        message_id, sender, content = encode_mail(message)

        def job(conn: sqlite3.Connection) -> bool:
            with _transaction(conn, "BEGIN IMMEDIATE"):
                if not held_elsewhere(_lease_row(conn, sid), self._me, self._clock()):
                    return False
                conn.execute(
                    """INSERT INTO mailbox (session_id, message_id, sender, content, created_at)
                    VALUES (?, ?, ?, ?, ?)""",
                    (sid, message_id, sender, content, self._clock()),
                )
            return True

        return await self._run(job, sid)

    async def mailbox(self, session_id: SessionId) -> builtins.list[UserMessage]:
        """The child's mailbox messages, in acceptance order (rule 10)."""
        sid = require_session_id(session_id)

        def job(conn: sqlite3.Connection) -> builtins.list[MailRow]:
            query = """SELECT seq, message_id, sender, content FROM mailbox
                WHERE session_id = ? ORDER BY seq"""
            with _transaction(conn, "BEGIN"):
                rows: builtins.list[MailRow] = conn.execute(query, (sid,)).fetchall()
            return rows

        messages = decode_mail(sid, await self._run(job, sid))
        self._read.saw(sid, messages)
        return messages

    async def prune(self, session_id: SessionId, message_ids: Sequence[MessageId]) -> None:
        """Remove these mailbox rows (their messages are in the log); a fenced write."""
        sid = self._checked(session_id)
        ids = require_ids(message_ids)
        if not ids:
            return

        def job(conn: sqlite3.Connection) -> None:
            with _transaction(conn, "BEGIN IMMEDIATE"):
                self._fence(conn, sid)
                _delete_mail(conn, sid, ids)

        await self._run(job, sid)
        self._read.removed(sid, ids)

    def watch_mailbox(self, listener: MailboxListener) -> Unsubscribe:
        """Call ``listener(child_id)`` when another connection may have posted for a child
        held here; polls ``PRAGMA data_version`` every ``mailbox_poll`` seconds (rule 10)."""
        stop = self._watch(listener)
        if self._poll is None and not self._closed:
            self._poll = asyncio.get_running_loop().create_task(self._probe())
        return stop

    async def probe_mailbox(self) -> builtins.list[SessionId]:
        """One probe (rule 10): name, to every watcher, the held children with rows when
        another connection committed, and the orphans: children with rows whose lease is free
        (released, expired, or its process gone on this host), for a watcher to take over.
        Returns the children named, in order.

        Bounded by the mail still pending, never by all mail past: a probe reads the rows
        after the last seq it saw and looks again only at the children it saw with rows.
        """
        if self._closed or not self._watchers:
            return []
        me = self._me
        # A lease seen held elsewhere frees without any write: it expires, or its pid dies.
        now = self._clock()
        freed = {
            sid
            for sid, row in self._tracked.items()
            if row is not None and not held_elsewhere(row, me, now)
        }
        seen, after, tracked = self._seen_version, self._mail_seq, tuple(self._tracked)

        def job(conn: sqlite3.Connection) -> tuple[int, int, builtins.list[_Mail]]:
            (version,) = conn.execute("PRAGMA data_version").fetchone()
            if version == seen:
                return version, after, []
            return (version, *_mail_after(conn, after, tracked))

        version, last, rows = await self._run(job)
        found = set(freed)
        if version != self._seen_version:
            self._seen_version, self._mail_seq, self._tracked = version, last, {}
            now = self._clock()
            for sid, lease in rows:
                child = SessionId(sid)
                if child in self._held or not held_elsewhere(lease, me, now):
                    found.add(child)
                else:
                    self._tracked[child] = lease
        named = sorted(found)
        for sid in named:
            self._tracked[sid] = None  # looked at again while it has rows
            self._tell([sid])
        return named

    async def _probe(self) -> None:
        """Probe every ``mailbox_poll`` seconds until closed (rule 10)."""
        while not self._closed:
            await asyncio.sleep(self._poll_every)
            with contextlib.suppress(SubagentError):
                await self.probe_mailbox()

    async def close(self) -> None:
        """Release every held lease, then close the connection and its thread; later calls
        raise ``PERSISTENCE_UNAVAILABLE``."""
        if self._closed:
            return
        await self._settle_writes()
        await self._stop(self._poll)
        await asyncio.get_running_loop().run_in_executor(self._executor, self._conn.close)
        self._executor.shutdown(wait=True)
