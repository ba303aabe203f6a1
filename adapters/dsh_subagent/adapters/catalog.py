"""Listing children and descendants: the reads around ``dsh_subagent.core.listing``.

Theory of operation
-------------------
1. Every decision is the core's (``core.listing``); this module only reads the session
   store, the optional persistence and projection cache, and the projection registry, and
   feeds what it read to the core's ladder. It never needs an agent registry, a manager or a
   provider (LIST-2, LIST-17), and it never loads, resumes, repairs or writes: the store is
   typed as ``ListingSessions`` (``list`` only), persistence as ``ListingPersistence``
   (``list`` and ``inspect`` only) and the cache is only read (LIST-16).
2. Preconditions come first, before any read: the services (LIST-1 via
   ``require_listing_services``), the id argument, then an already-aborted signal.
3. The corpus is the persisted listing (if persistence exists) merged with the store's live
   sessions, live preferred (LIST-3). A failed persisted listing fails the whole listing
   (LIST-4): ``CANCELLED`` if the signal is aborted, else the backend's ``SubagentError``
   unchanged, and any other failure as ``PERSISTENCE_UNAVAILABLE`` with it as the cause
   (issue 18: upstream lets it out raw).
4. Live candidates are resolved from the registry snapshot with no log read (LIST-7). Cold
   candidates run in a pool of ``min(COLD_READ_CONCURRENCY, n)`` workers, results kept in
   candidate order (LIST-10): a cache row first (a raising read is a silent miss, LIST-8),
   else one ``inspect`` folded through ``registry.restore`` from seq 0 (LIST-9). A candidate
   the core marked as a parent cycle is its diagnostic row, with nothing read. An inspected
   child row carries the remaining budget its stored log records (``stored_remaining``,
   BUDGET-16); a budget node open in the service overrides it there.
5. Cancellation is checked before and after the persisted listing, before and after each
   inspection (success and failure) and after all rows; every persistence read races the
   signal. Every abort observed anywhere becomes ``SubagentError(CANCELLED)`` (LIST-14).
"""

from __future__ import annotations

import asyncio
import builtins
from collections import deque
from collections.abc import Sequence
from typing import Protocol

import attrs

from dsh_subagent.adapters.protocols import (
    ProjectionCache,
    ProjectionRegistry,
    Session,
    SessionRecord,
)
from dsh_subagent.adapters.signals import AbortSignal, race_abort
from dsh_subagent.core.budget_log import stored_remaining
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.jsonvalue import require_str
from dsh_subagent.core.listing import (
    COLD_READ_CONCURRENCY,
    CacheRow,
    ChildRow,
    Corpus,
    DescendantRow,
    Inspected,
    InspectionFailed,
    ListingRow,
    PositionedCandidate,
    SnapshotFailed,
    child_candidates,
    descendant_candidates,
    descendant_rows,
    has_children,
    listed_rows,
    merge_corpus,
    require_listing_services,
    resolve_cached,
    resolve_inspection,
    resolve_live,
    same_lifecycle,
)
from dsh_subagent.core.projections import IDENTITY_KEY, Identity, identity_from_view
from dsh_subagent.core.values import SessionEvent, SessionHeader, SessionId


class ListingSessions(Protocol):
    """The only session-store read a listing makes: the live sessions (HARNESS-19)."""

    def list(self) -> Sequence[Session]: ...


class ListingPersistence(Protocol):
    """The only persistence reads a listing makes (no ``load``: LIST-16)."""

    async def list(self) -> Sequence[SessionHeader]: ...

    async def inspect(self, session_id: SessionId) -> SessionRecord: ...


def _check_cancelled(signal: AbortSignal | None) -> None:
    if signal is not None and signal.aborted:
        reason = signal.reason
        raise SubagentError(
            ErrorCode.CANCELLED,
            "listing subagents was cancelled",
            cause=reason if isinstance(reason, BaseException) else None,
        )


class _Listing:
    """One listing's services, signal and corpus."""

    def __init__(
        self,
        projections: ProjectionRegistry,
        sessions: ListingSessions,
        persistence: ListingPersistence | None,
        cache: ProjectionCache | None,
        signal: AbortSignal | None,
    ) -> None:
        self.projections = projections
        self.sessions = sessions
        self.persistence = persistence
        self.cache = cache
        self.signal = signal
        self.corpus = Corpus({}, frozenset())
        self.live: dict[SessionId, Session] = {}

    async def build_corpus(self) -> None:
        persisted: Sequence[SessionHeader] = ()
        if self.persistence is not None:
            _check_cancelled(self.signal)
            try:
                persisted = await race_abort(self.persistence.list(), self.signal)
            except Exception as error:
                _check_cancelled(self.signal)
                if isinstance(error, SubagentError):
                    raise
                raise SubagentError(
                    ErrorCode.PERSISTENCE_UNAVAILABLE,
                    f"listing the persisted sessions failed: {error!r}",
                    cause=error,
                ) from error
            _check_cancelled(self.signal)
        self.live = {session.id: session for session in self.sessions.list()}
        self.corpus = merge_corpus(persisted, (session.header for session in self.live.values()))

    async def rows(
        self, candidates: Sequence[PositionedCandidate]
    ) -> builtins.list[ListingRow | None]:
        rows: builtins.list[ListingRow | None] = [None] * len(candidates)
        cold: deque[int] = deque()
        for index, position in enumerate(candidates):
            if position.cycle is not None:
                rows[index] = position.cycle
            elif position.record.live:
                rows[index] = self._live_row(position.record.header)
            else:
                cold.append(index)
        persistence = self.persistence
        if persistence is not None and cold:

            async def worker() -> None:
                while cold:
                    index = cold.popleft()
                    header = candidates[index].record.header
                    rows[index] = await self._cold_row(persistence, header)

            pool = [
                asyncio.ensure_future(worker())
                for _ in range(min(COLD_READ_CONCURRENCY, len(cold)))
            ]
            try:
                await asyncio.gather(*pool)
            finally:  # the first failure (CANCELLED) rejects the listing: stop the others
                for task in pool:
                    task.cancel()
                await asyncio.gather(*pool, return_exceptions=True)
        _check_cancelled(self.signal)
        return rows

    def _children(self, header: SessionHeader) -> bool:
        return has_children(self.corpus, header.id)

    def _live_row(self, header: SessionHeader) -> ListingRow | None:
        snapshot: Identity | SnapshotFailed | None
        try:
            values = self.projections.snapshot(self.live[header.id])
            snapshot = identity_from_view(values.get(IDENTITY_KEY))
        except Exception as error:
            snapshot = SnapshotFailed(f"projection snapshot failed: {error}")
        return resolve_live(header, self._children(header), snapshot)

    async def _cached_row(self, header: SessionHeader) -> ListingRow | None:
        if self.cache is None:
            return None
        try:
            cached = await race_abort(self.cache.cached_snapshot(header), self.signal)
            row = None
            if cached is not None:
                identity = identity_from_view(cached.values.get(IDENTITY_KEY))
                row = CacheRow(cached.as_of_seq, identity)
        except Exception:
            _check_cancelled(self.signal)
            return None  # derived data: a failed read renders no verdict
        return resolve_cached(header, self._children(header), row)

    async def _cold_row(self, persistence: ListingPersistence, header: SessionHeader) -> ListingRow:
        cached = await self._cached_row(header)
        if cached is not None:
            return cached
        children = self._children(header)
        _check_cancelled(self.signal)
        try:
            record = await race_abort(persistence.inspect(header.id), self.signal)
        except Exception as error:
            _check_cancelled(self.signal)
            return resolve_inspection(header, children, InspectionFailed(str(error)))
        _check_cancelled(self.signal)
        if not same_lifecycle(header, record.header):
            return resolve_inspection(header, children, Inspected(record.header, None))
        try:
            values = self.projections.restore({}, record.events, 0)
            outcome = Inspected(record.header, identity_from_view(values.get(IDENTITY_KEY)))
        except Exception as error:
            outcome = Inspected(record.header, None, fold_error=f"projection fold failed: {error}")
        return _with_stored_budget(resolve_inspection(header, children, outcome), record.events)


def _with_stored_budget(row: ListingRow, events: Sequence[SessionEvent]) -> ListingRow:
    """``row`` with the remaining budget its stored log records (BUDGET-16), if any."""
    if not isinstance(row, ChildRow):
        return row
    try:
        left = stored_remaining(events)
    except SubagentError:
        return row  # derived data: a damaged budget record renders no budget
    return row if left is None else attrs.evolve(row, budget=left)


async def _prepare(
    session_id: object,
    field: str,
    *,
    projections: ProjectionRegistry | None,
    sessions: ListingSessions | None,
    persistence: ListingPersistence | None,
    cache: ProjectionCache | None,
    signal: AbortSignal | None,
) -> tuple[SessionId, _Listing]:
    require_listing_services(
        projections_available=projections is not None, store_available=sessions is not None
    )
    checked = SessionId(require_str(session_id, field, non_empty=True))
    _check_cancelled(signal)
    assert projections is not None  # checked by require_listing_services
    assert sessions is not None
    listing = _Listing(projections, sessions, persistence, cache, signal)
    await listing.build_corpus()
    return checked, listing


async def list_children(
    parent_id: SessionId,
    *,
    projections: ProjectionRegistry | None,
    sessions: ListingSessions | None,
    persistence: ListingPersistence | None = None,
    cache: ProjectionCache | None = None,
    signal: AbortSignal | None = None,
) -> list[ListingRow]:
    """The subagent children of ``parent_id``: child rows and diagnostics (LIST-1..14)."""
    parent, listing = await _prepare(
        parent_id,
        "parent_id",
        projections=projections,
        sessions=sessions,
        persistence=persistence,
        cache=cache,
        signal=signal,
    )
    rows = await listing.rows(child_candidates(listing.corpus, parent))
    return list(listed_rows(rows))


async def list_descendants(
    root_id: SessionId,
    *,
    projections: ProjectionRegistry | None,
    sessions: ListingSessions | None,
    persistence: ListingPersistence | None = None,
    cache: ProjectionCache | None = None,
    signal: AbortSignal | None = None,
) -> list[DescendantRow]:
    """Every subagent descendant of ``root_id``, pre-order, with parent and depth (LIST-15)."""
    root, listing = await _prepare(
        root_id,
        "root_id",
        projections=projections,
        sessions=sessions,
        persistence=persistence,
        cache=cache,
        signal=signal,
    )
    positioned = descendant_candidates(listing.corpus, root)
    rows = await listing.rows(positioned)
    return list(descendant_rows(positioned, rows))


__all__ = ["ListingPersistence", "ListingSessions", "list_children", "list_descendants"]
