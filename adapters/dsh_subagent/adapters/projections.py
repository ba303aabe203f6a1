"""A reference session projection registry and the subagent projection units.

Theory of operation
-------------------
1. A ``ProjectionDefinition`` is a pure synchronous fold (``init``, ``apply``), a JSON
   ``view`` of its state, a ``state_version`` and a state codec (``encode_state`` /
   ``decode_state``) for checkpoints. The registry drives folds; it owns no domain logic.
2. ``register(definition)`` returns a single-shot disposer. Registrants of one key share one
   unit and are counted; the key disappears when the last one is disposed. A second
   registrant with another ``state_version`` is refused (HARNESS-25).
3. ``snapshot(session)`` returns ``{key: view}`` for every registered unit from a
   per-session watermark cache: each unit keeps ``(events folded, state)`` per session object
   and folds only the events appended since. A cell is committed only after its fold
   succeeded, so a raising unit makes every snapshot of that session raise, unchanged.
4. ``checkpoint(session)`` is the write side: per key ``{"ver", "seq", "val"}`` where
   ``seq`` is the last folded event's seq (-1 for an empty log) and ``val`` the encoded
   state. ``restore(checkpoint, events, base_seq)`` folds a detached log suffix, seeding each
   unit from its row when the row is usable (same ``ver``, ``base_seq - 1 <= seq <= end``,
   decodable); an unusable row refolds from ``init``, which is only sound from seq 0, so
   with ``base_seq > 0`` it raises ``CORRUPT_SESSION`` (re-read from 0). Any unit raising
   makes ``restore`` raise.
5. ``register_subagent_projections(registry)`` registers the core's ``subagentTiming`` and
   ``subagent`` (identity) folds and returns one disposer for both (PROJ-1). The folds and
   their value types live in the IO-free ``dsh_subagent.core.projections`` (PROJ-9).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Generic, Protocol, TypeVar

import attrs

from dsh_subagent.adapters.protocols import Session
from dsh_subagent.core.errors import ErrorCode, SubagentError, invalid
from dsh_subagent.core.jsonvalue import require_int, require_str
from dsh_subagent.core.projections import (
    IDENTITY_KEY,
    STATE_VERSION,
    TIMING_KEY,
    ActiveSpan,
    IdentityState,
    TimingState,
    identity_apply,
    identity_from_view,
    identity_init,
    identity_view,
    timing_apply,
    timing_init,
    timing_view,
)
from dsh_subagent.core.values import JsonValue, SessionEvent

S = TypeVar("S")

Disposer = Callable[[], None]


@attrs.frozen
class ProjectionDefinition(Generic[S]):
    """One projection unit: a pure fold, its view, its version and its state codec."""

    key: str
    state_version: int
    init: Callable[[], S]
    apply: Callable[[S, SessionEvent], S]
    view: Callable[[S], JsonValue]
    encode_state: Callable[[S], JsonValue]
    decode_state: Callable[[JsonValue], S]


class _Unit(Protocol):
    """A registered unit with its state type erased."""

    definition_version: int
    refs: int

    def value_of(self, session: Session) -> JsonValue: ...

    def checkpoint_row(self, session: Session) -> JsonValue: ...

    def restore(
        self, row: JsonValue, events: Sequence[SessionEvent], base_seq: int
    ) -> JsonValue: ...


@attrs.frozen
class _Cell(Generic[S]):
    folded: int
    state: S


class _Cells(Generic[S]):
    """A unit's per-session watermark cache."""

    def __init__(self, definition: ProjectionDefinition[S]) -> None:
        self.definition = definition
        self.definition_version = definition.state_version
        self.refs = 1
        self._cells: weakref.WeakKeyDictionary[Session, _Cell[S]] = weakref.WeakKeyDictionary()

    def _current(self, session: Session) -> _Cell[S]:
        cell = self._cells.get(session)
        folded, state = (0, self.definition.init()) if cell is None else (cell.folded, cell.state)
        events = session.events
        if cell is not None and folded == len(events):
            return cell
        for event in events[folded:]:
            state = self.definition.apply(state, event)
        cell = _Cell(len(events), state)
        self._cells[session] = cell
        return cell

    def value_of(self, session: Session) -> JsonValue:
        return self.definition.view(self._current(session).state)

    def checkpoint_row(self, session: Session) -> JsonValue:
        cell = self._current(session)
        state = self.definition.encode_state(cell.state)
        return {"ver": self.definition_version, "seq": cell.folded - 1, "val": state}

    def _usable(self, row: JsonValue, base_seq: int, end_seq: int) -> _Cell[S] | None:
        if not isinstance(row, Mapping) or row.get("ver") != self.definition_version:
            return None
        seq = row.get("seq")
        if isinstance(seq, bool) or not isinstance(seq, int) or not base_seq - 1 <= seq <= end_seq:
            return None
        try:
            return _Cell(seq + 1, self.definition.decode_state(row.get("val")))
        except Exception:
            return None

    def restore(self, row: JsonValue, events: Sequence[SessionEvent], base_seq: int) -> JsonValue:
        end_seq = events[-1].seq if events else base_seq - 1
        seeded = self._usable(row, base_seq, end_seq)
        if seeded is None and base_seq > 0:
            raise SubagentError(
                ErrorCode.CORRUPT_SESSION,
                f"projection {self.definition.key!r} has no usable checkpoint row for seq "
                f"{base_seq}; re-read the log from seq 0",
                field=f"checkpoint.{self.definition.key}",
            )
        cell = seeded or _Cell(base_seq, self.definition.init())
        state = cell.state
        for event in events:
            if event.seq >= cell.folded:
                state = self.definition.apply(state, event)
        return self.definition.view(state)


def _check_suffix(events: object, base_seq: int) -> Sequence[SessionEvent]:
    if not isinstance(events, Sequence) or isinstance(events, str | bytes):
        raise invalid("events", "expected a sequence of SessionEvent")
    for index, event in enumerate(events):
        if not isinstance(event, SessionEvent):
            raise invalid(f"events[{index}]", "expected a SessionEvent")
        if event.seq != base_seq + index:
            raise invalid(f"events[{index}].seq", f"expected {base_seq + index}, got {event.seq}")
    return events


class SessionProjectionRegistry:
    """The reference ``ProjectionRegistry`` (HARNESS-25)."""

    def __init__(self) -> None:
        self._units: dict[str, _Unit] = {}

    def register(self, definition: ProjectionDefinition[S]) -> Disposer:
        """Register a unit; the disposer (single-shot) unregisters it (HARNESS-25)."""
        if not isinstance(definition, ProjectionDefinition):
            raise invalid("definition", "expected a ProjectionDefinition")
        key = require_str(definition.key, "definition.key", non_empty=True)
        version = require_int(definition.state_version, "definition.state_version", minimum=0)
        existing = self._units.get(key)
        if existing is not None and existing.definition_version != version:
            raise invalid(
                "definition.state_version",
                f"{key!r} is registered at version {existing.definition_version}, not {version}",
            )
        if existing is None:
            self._units[key] = _Cells(definition)
        else:
            existing.refs += 1
        disposed = False

        def dispose() -> None:
            nonlocal disposed
            if disposed:
                return
            disposed = True
            unit = self._units[key]
            unit.refs -= 1
            if unit.refs == 0:
                del self._units[key]

        return dispose

    @property
    def keys(self) -> tuple[str, ...]:
        """The registered keys, in registration order."""
        return tuple(self._units)

    def snapshot(self, session: Session) -> dict[str, JsonValue]:
        """``{key: value}`` of every unit for ``session``; raises if any unit raises."""
        return {key: unit.value_of(session) for key, unit in self._units.items()}

    def checkpoint(self, session: Session) -> dict[str, JsonValue]:
        """``{key: {"ver", "seq", "val"}}`` for every unit: the checkpoint write side."""
        return {key: unit.checkpoint_row(session) for key, unit in self._units.items()}

    def restore(
        self, checkpoint: Mapping[str, JsonValue], events: Sequence[SessionEvent], base_seq: int
    ) -> dict[str, JsonValue]:
        """A detached fold of ``events`` (seqs from ``base_seq``) seeded by ``checkpoint``."""
        if not isinstance(checkpoint, Mapping):
            raise invalid("checkpoint", "expected a mapping of checkpoint rows")
        base = require_int(base_seq, "base_seq", minimum=0)
        suffix = _check_suffix(events, base)
        return {
            key: unit.restore(checkpoint.get(key), suffix, base)
            for key, unit in self._units.items()
        }


# --------------------------------------------------------------------------- subagent units


def _corrupt_state(key: str, value: JsonValue) -> SubagentError:
    return SubagentError(
        ErrorCode.CORRUPT_SESSION, f"malformed {key} state {value!r}", field=f"checkpoint.{key}"
    )


def _number(value: JsonValue) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def encode_timing_state(state: TimingState) -> JsonValue:
    """``subagentTiming`` state as JSON (the checkpoint ``val``)."""
    encoded: dict[str, JsonValue] = {
        "settledMs": state.settled_ms,
        "descriptorSeen": state.descriptor_seen,
    }
    if state.active is not None:
        encoded["active"] = {"since": state.active.since, "through": state.active.through}
    if state.pending_turn_start is not None:
        encoded["pendingTurnStart"] = state.pending_turn_start
    return encoded


def decode_timing_state(value: JsonValue) -> TimingState:
    """Read ``encode_timing_state``'s JSON back; raises ``CORRUPT_SESSION`` when malformed."""
    if not isinstance(value, Mapping):
        raise _corrupt_state(TIMING_KEY, value)
    settled = _number(value.get("settledMs"))
    seen = value.get("descriptorSeen")
    pending = value.get("pendingTurnStart")
    active = value.get("active")
    span: ActiveSpan | None = None
    if isinstance(active, Mapping):
        since, through = _number(active.get("since")), _number(active.get("through"))
        if since is not None and through is not None:
            span = ActiveSpan(since, through)
    if (
        settled is None
        or settled < 0
        or not isinstance(seen, bool)
        or (pending is not None and _number(pending) is None)
        or (active is not None and span is None)
    ):
        raise _corrupt_state(TIMING_KEY, value)
    return TimingState(settled, span, _number(pending), seen)


def encode_identity_state(state: IdentityState) -> JsonValue:
    """``subagent`` state as JSON: the identity view (``None`` for no identity)."""
    return identity_view(state)


def decode_identity_state(value: JsonValue) -> IdentityState:
    """Read an identity state back; raises ``CORRUPT_SESSION`` when malformed."""
    return IdentityState(identity_from_view(value))


TIMING_DEFINITION: ProjectionDefinition[TimingState] = ProjectionDefinition(
    key=TIMING_KEY,
    state_version=STATE_VERSION,
    init=timing_init,
    apply=timing_apply,
    view=timing_view,
    encode_state=encode_timing_state,
    decode_state=decode_timing_state,
)
"""The ``subagentTiming`` unit (PROJ-6..8)."""

IDENTITY_DEFINITION: ProjectionDefinition[IdentityState] = ProjectionDefinition(
    key=IDENTITY_KEY,
    state_version=STATE_VERSION,
    init=identity_init,
    apply=identity_apply,
    view=identity_view,
    encode_state=encode_identity_state,
    decode_state=decode_identity_state,
)
"""The ``subagent`` identity unit (PROJ-2..5)."""


def register_subagent_projections(registry: SessionProjectionRegistry) -> Disposer:
    """Register both subagent units; the single-shot disposer unregisters both (PROJ-1)."""
    disposers = [registry.register(TIMING_DEFINITION), registry.register(IDENTITY_DEFINITION)]

    def dispose() -> None:
        while disposers:
            disposers.pop()()

    return dispose


__all__ = [
    "IDENTITY_DEFINITION",
    "TIMING_DEFINITION",
    "Disposer",
    "ProjectionDefinition",
    "SessionProjectionRegistry",
    "decode_identity_state",
    "decode_timing_state",
    "encode_identity_state",
    "encode_timing_state",
    "register_subagent_projections",
]
