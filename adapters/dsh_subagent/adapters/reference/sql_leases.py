"""Leases in SQL: what the SQLite and PostgreSQL backends share around ``persistence``'s rules.

Theory of operation
-------------------
1. The decisions (``grant``, ``fence``, ``held_elsewhere``) are ``persistence``'s (its rules
   8 and 9). This module holds, once, what both SQL backends build around them: the lease
   statements (``LeaseSql``) and the holder's book (``LeaseHolder``). A backend keeps only
   how it runs a statement (sqlite3 on its own thread, psycopg on a pooled connection) and
   what its atomic step reads besides the lease row.
2. The dialect is a parameter: ``LeaseSql.written(mark, cas_tail)`` writes every statement
   with the driver's placeholder (``?`` for sqlite3, ``%s`` for psycopg). A grant's
   compare-and-set updates the row only if its epoch is still the one read; ``cas_tail``
   adds what a dialect also compares or returns (PostgreSQL reads the row without a lock, so
   it compares the expiry and owner read too and returns the row it wrote).
3. ``LeaseHolder`` is the base of both backends: the leases held here (``_held``, set by
   ``_hold`` after a grant and cleared by ``_let_go`` before a release), the heartbeat task
   the first grant starts, which renews them (``heartbeat``) every third of the lease
   lifetime until the backend closes, ``reserve`` and ``acquire`` over the backend's
   ``_grant``, the fence's decision inside a write's transaction (``_check_fence``: the held
   lease and the expiry the write renews it to), the mailbox watchers (``_watch``, ``_tell``),
   and the first steps of ``close`` (``_stop``: end the tasks, release what is held).
4. Every call that writes first refuses a closed backend, then validates the id
   (``_checked``), before any statement runs.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
from collections.abc import Sequence
from typing import Final, TypeAlias

import attrs

from dsh_subagent.adapters.protocols import Lease
from dsh_subagent.adapters.reference.persistence import (
    Clock,
    LeaseOwner,
    LeaseRow,
    ListsHeaders,
    MailboxListener,
    closed_error,
    fence,
    require_lease,
    require_session_id,
)
from dsh_subagent.adapters.signals import Unsubscribe
from dsh_subagent.core.errors import SubagentError
from dsh_subagent.core.values import SessionId

LEASE_COLUMNS: Final = "owner, host, pid, epoch, expires_at"
"""The stored lease's columns, in ``LeaseRow``'s order."""

Renewal: TypeAlias = tuple[float, SessionId, str, int]
"""One held lease's heartbeat row: ``(new expiry, session id, owner, epoch)``."""


@attrs.frozen
class LeaseSql:
    """The lease statements in one dialect (rule 2)."""

    row: str
    """The child's lease row (``LEASE_COLUMNS``): one parameter, the session id."""
    grant: str
    """The compare-and-set upsert: ``grant_values``, then the dialect's ``cas_tail`` ones."""
    release: str
    """Free the row still held under the lease: ``lease_key``."""
    renew: str
    """One heartbeat row (``Renewal``): still held under the lease, its expiry moved."""
    renew_one: str
    """The fenced write's renewal of the child's row: ``(new expiry, session id)``."""

    @classmethod
    def written(cls, mark: str, cas_tail: str = "") -> LeaseSql:
        """Every statement with ``mark`` as the placeholder (rule 2)."""
        held = f"session_id = {mark} AND owner = {mark} AND epoch = {mark}"
        return cls(
            row=f"SELECT {LEASE_COLUMNS} FROM leases WHERE session_id = {mark}",
            grant=f"""INSERT INTO leases (session_id, {LEASE_COLUMNS})
                VALUES ({", ".join([mark] * 6)}) ON CONFLICT (session_id) DO UPDATE SET
                owner = excluded.owner, host = excluded.host, pid = excluded.pid,
                epoch = excluded.epoch, expires_at = excluded.expires_at
                WHERE leases.epoch = {mark}{cas_tail}""",
            release=f"UPDATE leases SET owner = NULL WHERE {held}",
            renew=f"UPDATE leases SET expires_at = {mark} WHERE {held}",
            renew_one=f"UPDATE leases SET expires_at = {mark} WHERE session_id = {mark}",
        )


def grant_values(session_id: SessionId, new: LeaseRow) -> tuple[object, ...]:
    """The parameters of ``LeaseSql.grant`` before the dialect's own: the new row, and the
    epoch it must replace."""
    return (session_id, new.owner, new.host, new.pid, new.epoch, new.expires_at, new.epoch - 1)


def lease_key(lease: Lease) -> tuple[SessionId, str, int]:
    """The parameters of ``LeaseSql.release``: the row as this lease holds it."""
    return lease.session_id, lease.owner, lease.epoch


class LeaseHolder(ListsHeaders):
    """The leases and mailbox watchers of one SQL backend (rule 3)."""

    def __init__(self, clock: Clock, lease_ttl: float, me: LeaseOwner) -> None:
        self._clock = clock
        self._ttl = lease_ttl
        self._me = me
        self._held: dict[SessionId, Lease] = {}
        self._heartbeat: asyncio.Task[None] | None = None
        self._watchers: builtins.list[MailboxListener] = []
        self._closed = False

    def _checked(self, session_id: object) -> SessionId:
        """The id of a call that writes, once the backend is known open (rule 4)."""
        if self._closed:
            raise closed_error()
        return require_session_id(session_id)

    # ------------------------------------------------------------------ grant and release

    async def _grant(self, session_id: SessionId, *, reserve: bool) -> Lease:
        raise NotImplementedError

    async def reserve(self, session_id: SessionId) -> Lease:
        """Durably reserve a new id and hold its lease (LEASE-4)."""
        return await self._grant(session_id, reserve=True)

    async def acquire(self, session_id: SessionId) -> Lease:
        """Take the child's lease at a new epoch, or ``ACTIVATION_HELD`` (LEASE-1, LEASE-2)."""
        return await self._grant(session_id, reserve=False)

    def _hold(self, lease: Lease) -> Lease:
        """Book a granted lease; the first one starts the heartbeat."""
        self._held[lease.session_id] = lease
        self._start_heartbeat()
        return lease

    def _start_heartbeat(self) -> None:
        if self._heartbeat is None:
            self._heartbeat = asyncio.get_running_loop().create_task(self._beat())

    def _let_go(self, lease: object) -> Lease:
        """A release's first step: the validated lease, no longer renewed here."""
        if self._closed:
            raise closed_error()
        checked = require_lease(lease)
        if self._held.get(checked.session_id) == checked:
            del self._held[checked.session_id]
        return checked

    async def release(self, lease: Lease) -> bool | None:
        raise NotImplementedError

    def _check_fence(
        self, session_id: SessionId, row: LeaseRow | None
    ) -> tuple[Lease, float] | None:
        """Inside a write's transaction: refuse a write its lease no longer covers
        (``fence``, on the row read there); for a lease held here, it and the expiry the
        write renews it to."""
        now = self._clock()
        held = self._held.get(session_id)
        fence(session_id, row, held, self._me, now)
        return None if held is None else (held, now + self._ttl * 1000)

    # ------------------------------------------------------------------ heartbeat

    async def heartbeat(self) -> None:
        """Renew every lease this backend holds (LEASE-5); a lost one stays lost."""
        held = list(self._held.values())
        if not held:
            return
        expires = self._clock() + self._ttl * 1000
        await self._renew([(expires, *lease_key(lease)) for lease in held])

    async def _renew(self, renewals: Sequence[Renewal]) -> None:
        """Run ``LeaseSql.renew`` for each row, in one transaction."""
        raise NotImplementedError

    async def _beat(self) -> None:
        """Renew held leases every third of their lifetime until closed (LEASE-5); then
        whatever else the backend does at that pace (``_after_beat``)."""
        while not self._closed:
            await asyncio.sleep(self._ttl / 3)
            with contextlib.suppress(SubagentError):
                await self.heartbeat()
            await self._after_beat()

    async def _after_beat(self) -> None:
        return

    # ------------------------------------------------------------------ watchers and close

    def _watch(self, listener: MailboxListener) -> Unsubscribe:
        """Add a mailbox watcher; the returned call removes it."""
        self._watchers.append(listener)

        def stop() -> None:
            if listener in self._watchers:
                self._watchers.remove(listener)

        return stop

    def _tell(self, children: Sequence[SessionId]) -> None:
        """Name each child to every watcher."""
        for sid in children:
            for listener in tuple(self._watchers):
                listener(sid)

    async def _stop(self, *tasks: asyncio.Task[None] | None) -> None:
        """Close's first steps: end the heartbeat and ``tasks``, release every held lease,
        and refuse later calls."""
        for task in (self._heartbeat, *tasks):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        for lease in list(self._held.values()):
            with contextlib.suppress(SubagentError):
                await self.release(lease)
        self._closed = True
