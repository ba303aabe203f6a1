"""The service machine's PostgreSQL store: ``FaultyPostgres`` and ``PostgresStore``.

Theory of operation
-------------------
1. ``FaultyPostgres`` is ``PostgresPersistence`` with the machine's hooks (``StoreFaults``):
   ``before_io`` before every transaction (``_transaction``, which every store operation
   opens once), and a planned failure at every n-th append while armed. A module of its own,
   so that importing the machine never imports psycopg.
2. Deterministic I/O, as on SQLite: one pooled connection (transactions run in the order
   they were asked for, none grows the pool in the background), a lease lifetime no run
   outlives (no heartbeat, no orphan claim fires), and no ``LISTEN`` connection: one process
   never posts to itself (it delivers to its own children directly), so a notice could only
   come from the server at a time the machine does not decide.
3. ``PostgresStore(address)`` opens it on one database; ``fresh`` (each run's start) first
   empties the database's ``public`` schema, so every run starts with no sessions.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import attrs
import psycopg

from dsh_subagent.adapters.reference.postgres_persistence import Conn, PostgresPersistence
from dsh_subagent.core.values import SessionEvent, SessionId
from dsh_subagent.testing.service_faults import QUIET, StoreFaults


class FaultyPostgres(StoreFaults, PostgresPersistence):
    """PostgreSQL persistence that reports each operation and fails every n-th append."""

    @contextlib.asynccontextmanager
    async def _transaction(self, session_id: SessionId | None = None) -> AsyncIterator[Conn]:
        self.before_io()  # the await points a caller's abort is placed at
        async with super()._transaction(session_id) as conn:
            yield conn

    async def append(self, session_id: SessionId, events: Sequence[SessionEvent]) -> None:
        self.count_append()
        await super().append(session_id, events)

    async def _listen(self) -> None:
        """No ``LISTEN`` connection (rule 2)."""


@attrs.frozen
class PostgresStore:
    """``FaultyPostgres`` on the database at ``address`` (rule 3)."""

    address: str

    async def open(self, scratch: Path, *, fresh: bool) -> FaultyPostgres:
        """Open the store (after emptying the database when ``fresh``), one connection."""
        if fresh:
            async with await psycopg.AsyncConnection.connect(self.address, autocommit=True) as conn:
                await conn.execute("DROP SCHEMA public CASCADE")
                await conn.execute("CREATE SCHEMA public")
        opened = await FaultyPostgres.open(self.address, lease_ttl=QUIET, pool_size=1)
        assert isinstance(opened, FaultyPostgres)
        return opened
