"""Listing children and descendants: the pure decisions (the adapter does the reads).

Theory of operation
-------------------
1. ``require_listing_services`` is the first step of every listing, even for a parent with
   no children: no projection registry or no session store is a loud error (LIST-1).
   Cancellation checks, the persisted listing's IO and bounded concurrency
   (``COLD_READ_CONCURRENCY``) belong to the adapter (LIST-4, LIST-10, LIST-14).
2. ``merge_corpus`` builds the live-preferred corpus: persisted headers first, then live ones
   overwriting by id, wholesale and unreconciled (LIST-3). It also records which ids are the
   ``parent_session`` of some ``origin == subagent`` record: the ``has_children`` hint
   (LIST-11), computed from headers only.
3. Candidates of ``list_children(P)`` are records with ``parent_session == P`` and subagent
   origin (and ``P`` itself if it names itself, rule 6), ordered by ``(created_at, id)``
   (LIST-5). Ids compare by code point, not by a locale-aware compare, so the order is the
   same on every machine (A15). An unknown parent simply has no candidates (LIST-6).
4. Each candidate walks a ladder; every rung is a function of what the adapter read:
   ``resolve_live`` (live: a failed snapshot is ``corrupt``, no identity is omitted — the
   creation window, LIST-7, A17), ``resolve_cached`` (cold: a cache identity serves only when
   ``identity.seq >= seed_length``, LIST-8 — not the row's ``as_of_seq``: a row folded past
   the seed can still hold an ancestor identity replayed from the seed) and
   ``resolve_inspection`` (cold: a failed read is ``unavailable``; another lifecycle, a
   failed fold or no identity is ``corrupt``, LIST-9).
5. ``descendant_candidates`` walks the parent→children map of *all* records depth-first in
   pre-order with an explicit stack, so no recursion limit applies; only subagent-origin
   nodes become candidates, but every node is traversed (LIST-15). ``descendant_rows``
   annotates rows with parent and depth and drops omitted ones.
6. Parent cycles (issue 18). Each header names one parent, so a walk down from a root meets
   a cycle only by reaching the root again: a header that is its own parent, or a loop of
   headers back to the root. A cycle elsewhere has no way in and is reported by its members'
   listings. The root named again is not skipped silently: whatever its origin, that
   position carries a ``corrupt`` diagnostic (``cycle``), which the adapter passes through
   without reading anything, and the walk does not descend into the root twice (so it needs
   no visited set). Every other row of the subtree is listed as usual.
7. Nothing here loads, resumes, repairs or writes anything (LIST-16); provider availability
   plays no part (LIST-17).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from typing import Final, TypeAlias

import attrs

from dsh_subagent.core.budget import Budget
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.projections import Identity
from dsh_subagent.core.values import Mode, Origin, SessionHeader, SessionId

COLD_READ_CONCURRENCY: Final = 4
"""At most this many cold inspections run at once (LIST-10, carried out by the adapter)."""


class Activity(enum.Enum):
    """Whether the child's session is live in the store or only persisted (LIST-13)."""

    RUNNING = "running"
    INACTIVE = "inactive"


class DiagnosticKind(enum.Enum):
    """Why a candidate has no child row; ``unsupported`` is never produced (LIST-12)."""

    CORRUPT = "corrupt"
    UNSUPPORTED = "unsupported"
    UNAVAILABLE = "unavailable"


@attrs.frozen
class ChildRow:
    """A child whose identity was served (``label`` always set for continuable children)."""

    id: SessionId
    activity: Activity
    has_children: bool
    mode: Mode
    label: str | None = None
    budget: Budget | None = None
    """What the child may still spend per dimension, when its budget node is open in this
    service (BUDGET-16); None otherwise."""


@attrs.frozen
class ListingDiagnostic:
    """A candidate that could not be classified, and why."""

    kind: DiagnosticKind
    child_id: SessionId
    reason: str


ListingRow: TypeAlias = ChildRow | ListingDiagnostic


@attrs.frozen
class DescendantRow:
    """A descendant listing row with its durable parent and depth (direct children are 1)."""

    row: ListingRow
    parent_id: SessionId
    depth: int


# --------------------------------------------------------------------------- corpus


@attrs.frozen
class CorpusRecord:
    """One session of the merged corpus: its header and whether it is live in the store."""

    header: SessionHeader
    live: bool


@attrs.frozen
class Corpus:
    """The live-preferred merge of persisted and live headers."""

    records: Mapping[SessionId, CorpusRecord]
    subagent_parents: frozenset[SessionId]


def require_listing_services(*, projections_available: bool, store_available: bool) -> None:
    """Refuse to list without a projection registry or a session store (LIST-1).

    post: projections_available and store_available
    raises: SubagentError
    """
    if not projections_available:
        raise SubagentError(
            ErrorCode.SUBAGENT_CONTROL_PROJECTIONS_UNAVAILABLE,
            "listing subagents requires the session projection registry",
        )
    if not store_available:
        raise SubagentError(
            ErrorCode.SUBAGENT_CONTROL_SESSION_STORE_UNAVAILABLE,
            "listing subagents requires the session store",
        )


def _is_subagent(header: SessionHeader) -> bool:
    return header.origin is Origin.SUBAGENT


def merge_corpus(persisted: Iterable[SessionHeader], live: Iterable[SessionHeader]) -> Corpus:
    """Merge persisted and live headers; a live header replaces a persisted one (LIST-3).

    post: all(r.header.id == i for i, r in __return__.records.items())
    """
    records: dict[SessionId, CorpusRecord] = {h.id: CorpusRecord(h, live=False) for h in persisted}
    records.update((h.id, CorpusRecord(h, live=True)) for h in live)
    parents = frozenset(
        r.header.parent_session
        for r in records.values()
        if _is_subagent(r.header) and r.header.parent_session is not None
    )
    return Corpus(records, parents)


def has_children(corpus: Corpus, session_id: SessionId) -> bool:
    """Whether any subagent-origin record names ``session_id`` as its parent (LIST-11)."""
    return session_id in corpus.subagent_parents


def _order(record: CorpusRecord) -> tuple[float, str]:
    return (record.header.created_at, record.header.id)


@attrs.frozen
class PositionedCandidate:
    """A candidate with its traversal parent and depth (direct children are 1).

    ``cycle`` is set when the candidate is the listing's root named again below itself: its
    row is that diagnostic, decided here with nothing to read (rule 6).
    """

    record: CorpusRecord
    parent_id: SessionId
    depth: int
    cycle: ListingDiagnostic | None = None


def _cycle(root: SessionId, parent: SessionId, depth: int) -> ListingDiagnostic:
    reason = (
        "the session names itself as its parent (a parent cycle)"
        if depth == 1
        else f"parent cycle: the session is its own ancestor {depth} levels up, through {parent}"
    )
    return ListingDiagnostic(DiagnosticKind.CORRUPT, root, reason)


def _position(
    record: CorpusRecord, root: SessionId, parent: SessionId, depth: int
) -> PositionedCandidate:
    """A candidate below ``parent``; the root reached again carries its cycle diagnostic."""
    cycle = _cycle(root, parent, depth) if record.header.id == root else None
    return PositionedCandidate(record, parent, depth, cycle)


def child_candidates(corpus: Corpus, parent: SessionId) -> tuple[PositionedCandidate, ...]:
    """The subagent-origin records whose durable parent is ``parent``, in listing order."""
    found = (
        r
        for r in corpus.records.values()
        if r.header.parent_session == parent and (_is_subagent(r.header) or r.header.id == parent)
    )
    return tuple(_position(r, parent, parent, 1) for r in sorted(found, key=_order))


def descendant_candidates(corpus: Corpus, root: SessionId) -> tuple[PositionedCandidate, ...]:
    """Subagent-origin descendants of ``root`` in depth-first pre-order (LIST-15).

    The root named again below itself is listed once, as its cycle diagnostic (rule 6).
    """
    children: dict[SessionId, list[CorpusRecord]] = {}
    for record in corpus.records.values():
        if record.header.parent_session is not None:
            children.setdefault(record.header.parent_session, []).append(record)
    for siblings in children.values():
        siblings.sort(key=_order)
    stack = [_position(r, root, root, 1) for r in reversed(children.get(root, []))]
    found: list[PositionedCandidate] = []
    while stack:  # each header has one parent: only the root can be reached twice
        position = stack.pop()
        if position.cycle is not None or _is_subagent(position.record.header):
            found.append(position)
        if position.cycle is not None:
            continue
        node = position.record.header.id
        below = children.get(node, [])
        stack.extend(_position(r, root, node, position.depth + 1) for r in reversed(below))
    return tuple(found)


# --------------------------------------------------------------------------- the ladder


def _child_row(
    session_id: SessionId, identity: Identity, activity: Activity, children: bool
) -> ChildRow:
    return ChildRow(session_id, activity, children, identity.mode, identity.label)


@attrs.frozen
class SnapshotFailed:
    """Reading the live projection snapshot raised (some unit failed on this log)."""

    reason: str


def resolve_live(
    header: SessionHeader, children: bool, snapshot: Identity | SnapshotFailed | None
) -> ListingRow | None:
    """A live candidate's row: running child, corrupt, or omitted (``None``) (LIST-7).

    post: __return__ is not None or snapshot is None
    """
    if isinstance(snapshot, SnapshotFailed):
        return ListingDiagnostic(DiagnosticKind.CORRUPT, header.id, snapshot.reason)
    if snapshot is None:
        return None
    return _child_row(header.id, snapshot, Activity.RUNNING, children)


@attrs.frozen
class CacheRow:
    """A projection-cache row: the seq it was folded to and its ``subagent`` identity."""

    as_of_seq: int
    identity: Identity | None


def cache_serves(header: SessionHeader, row: CacheRow | None) -> Identity | None:
    """The cached identity if it came from the child's own suffix (the LIST-8 seq gate).

    post: __return__ is None or __return__.seq >= (header.seed_length or 0)
    """
    if row is None or row.identity is None:
        return None
    if row.identity.seq < (header.seed_length or 0):
        return None
    return row.identity


def resolve_cached(header: SessionHeader, children: bool, row: CacheRow | None) -> ChildRow | None:
    """An inactive child row served by the cache, or ``None`` to fall through (LIST-8).

    An unreadable cache row is passed as ``None``: a miss, never a verdict.
    """
    identity = cache_serves(header, row)
    return (
        None if identity is None else _child_row(header.id, identity, Activity.INACTIVE, children)
    )


_LIFECYCLE_FIELDS: Final = (
    "version",
    "id",
    "created_at",
    "cwd",
    "parent_session",
    "seed_length",
    "delegation_depth",
)


def same_lifecycle(enumerated: SessionHeader, inspected: SessionHeader) -> bool:
    """Whether two headers name one lifecycle: equal on the seven witness fields (LIST-9).

    post: __return__ or enumerated != inspected
    """
    return all(getattr(enumerated, name) == getattr(inspected, name) for name in _LIFECYCLE_FIELDS)


@attrs.frozen
class InspectionFailed:
    """The persistence inspection of a cold candidate failed (not by cancellation)."""

    reason: str


@attrs.frozen
class Inspected:
    """A cold candidate's inspected header and the fold of its events (from seq 0).

    ``fold_error`` is set when folding raised; ``identity`` is the fold's value otherwise.
    """

    header: SessionHeader
    identity: Identity | None
    fold_error: str | None = None


def resolve_inspection(
    header: SessionHeader, children: bool, outcome: Inspected | InspectionFailed
) -> ListingRow:
    """A cold candidate's row after inspection (LIST-9)."""
    if isinstance(outcome, InspectionFailed):
        return ListingDiagnostic(DiagnosticKind.UNAVAILABLE, header.id, outcome.reason)
    if not same_lifecycle(header, outcome.header):
        return ListingDiagnostic(
            DiagnosticKind.CORRUPT, header.id, "the id names another lifecycle"
        )
    if outcome.fold_error is not None:
        return ListingDiagnostic(DiagnosticKind.CORRUPT, header.id, outcome.fold_error)
    if outcome.identity is None:
        return ListingDiagnostic(DiagnosticKind.CORRUPT, header.id, "no valid subagent descriptor")
    return _child_row(header.id, outcome.identity, Activity.INACTIVE, children)


# --------------------------------------------------------------------------- results


def listed_rows(rows: Iterable[ListingRow | None]) -> tuple[ListingRow, ...]:
    """The rows of a listing, in candidate order, without the omitted candidates."""
    return tuple(row for row in rows if row is not None)


def descendant_rows(
    positioned: Sequence[PositionedCandidate], rows: Sequence[ListingRow | None]
) -> tuple[DescendantRow, ...]:
    """Annotate aligned rows with parent and depth, dropping omitted ones (LIST-15).

    pre: len(positioned) == len(rows)
    """
    return tuple(
        DescendantRow(row, position.parent_id, position.depth)
        for position, row in zip(positioned, rows, strict=True)
        if row is not None
    )


__all__ = [
    "COLD_READ_CONCURRENCY",
    "Activity",
    "CacheRow",
    "ChildRow",
    "Corpus",
    "CorpusRecord",
    "DescendantRow",
    "DiagnosticKind",
    "InspectionFailed",
    "Inspected",
    "ListingDiagnostic",
    "ListingRow",
    "PositionedCandidate",
    "SnapshotFailed",
    "cache_serves",
    "child_candidates",
    "descendant_candidates",
    "descendant_rows",
    "has_children",
    "listed_rows",
    "merge_corpus",
    "require_listing_services",
    "resolve_cached",
    "resolve_inspection",
    "resolve_live",
    "same_lifecycle",
]
