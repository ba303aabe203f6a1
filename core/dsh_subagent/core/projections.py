"""The two session projection folds: ``subagentTiming`` and the ``subagent`` identity.

Theory of operation
-------------------
1. Each unit is a pure fold ``init() -> state`` and ``apply(state, event) -> state`` over
   ``SessionEvent`` values, plus a ``*_view`` giving its JSON value. A fold never raises:
   the projection registry has no failure channel (PROJ-2). Registration with a registry is
   the adapter's concern (PROJ-1).
2. Timing (PROJ-6..8): ``turn/start`` opens an active span once a descriptor was seen, and is
   remembered as ``pending_turn_start`` before it. Every ``subagent/descriptor`` (valid or not)
   resets the total to 0, keeping an already-open turn open from its start, so seed-inherited
   ancestor work never counts. ``turn/end`` after a descriptor adds ``max(0, end - since)``
   (a reversed boundary adds 0) and closes the span; before a descriptor it drops the pending
   start. Any other event moves ``active.through`` to its time (a conservative crash bound).
3. Identity (PROJ-2..5): only ``subagent/descriptor`` events change it; every other event
   returns the very same state. The fold is last-wins: a valid descriptor sets
   ``Identity(mode, label, seq)``, a malformed or unsupported one resets to no identity. Its
   view is the identity object or JSON ``null`` — never an absent key (PROJ-3).
4. The descriptor is classified by ``descriptor.parse_descriptor_payload`` (the one DESC-6
   parser); this module parses nothing itself and treats any parse failure as no identity.
5. ``identity_from_view`` reads an identity back from its JSON view (a cache row's value) and
   raises ``CORRUPT_SESSION`` on a malformed one; callers treat that as a cache miss (LIST-8).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

import attrs

from dsh_subagent.core.descriptor import parse_descriptor_payload
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import (
    DESCRIPTOR_EVENT,
    TURN_END,
    TURN_START,
    ContinuableDescriptor,
    JsonObject,
    JsonValue,
    Mode,
    OneShotDescriptor,
    SessionEvent,
)

TIMING_KEY: Final = "subagentTiming"
IDENTITY_KEY: Final = "subagent"
STATE_VERSION: Final = 2
"""Both units' state version (bumped when the identity gained ``seq``, PROJ-5)."""


# --------------------------------------------------------------------------- timing


@attrs.frozen
class ActiveSpan:
    """An open turn: when it started and the latest event folded while it is open."""

    since: float
    through: float


@attrs.frozen
class TimingState:
    """``subagentTiming`` fold state."""

    settled_ms: float = 0.0
    active: ActiveSpan | None = None
    pending_turn_start: float | None = None
    descriptor_seen: bool = False


def timing_init() -> TimingState:
    """The timing state of an empty log."""
    return TimingState()


def timing_apply(state: TimingState, event: SessionEvent) -> TimingState:
    """Fold one event into the timing state (PROJ-6).

    pre: state.settled_ms >= 0
    post: __return__.settled_ms >= 0
    post: __return__.settled_ms >= state.settled_ms or event.type == DESCRIPTOR_EVENT
    post: event.type != DESCRIPTOR_EVENT or __return__.settled_ms == 0
    """
    now = event.time
    if event.type == TURN_START:
        if state.descriptor_seen:
            return attrs.evolve(state, active=ActiveSpan(now, now))
        return attrs.evolve(state, pending_turn_start=now)
    if event.type == DESCRIPTOR_EVENT:
        since = state.active.since if state.active is not None else state.pending_turn_start
        active = None if since is None else ActiveSpan(since, now)
        return TimingState(settled_ms=0.0, active=active, descriptor_seen=True)
    if event.type == TURN_END:
        if not state.descriptor_seen:
            return attrs.evolve(state, pending_turn_start=None)
        if state.active is None:
            return state
        added = max(0.0, now - state.active.since)
        return attrs.evolve(state, settled_ms=state.settled_ms + added, active=None)
    if state.active is None:
        return state
    return attrs.evolve(state, active=ActiveSpan(state.active.since, now))


def timing_view(state: TimingState) -> JsonObject:
    """The unit's JSON value: ``{"settledMs": n, "active"?: {"since", "through"}}`` (PROJ-8)."""
    if state.active is None:
        return {"settledMs": state.settled_ms}
    span = state.active
    return {"settledMs": state.settled_ms, "active": {"since": span.since, "through": span.through}}


def fold_timing(events: Iterable[SessionEvent]) -> TimingState:
    """Fold a whole log from the initial timing state."""
    state = timing_init()
    for event in events:
        state = timing_apply(state, event)
    return state


# --------------------------------------------------------------------------- identity


@attrs.frozen
class Identity:
    """A child's durable identity: mode, creation label and the descriptor's seq."""

    mode: Mode
    label: str | None
    seq: int


@attrs.frozen
class IdentityState:
    """``subagent`` fold state: the identity of the last valid descriptor, if any."""

    identity: Identity | None = None


def identity_init() -> IdentityState:
    """The identity state of an empty log."""
    return IdentityState()


def descriptor_identity(event: SessionEvent) -> Identity | None:
    """The identity a ``subagent/descriptor`` event establishes, or None if it cannot be used."""
    parsed = parse_descriptor_payload(event.data)
    if isinstance(parsed, OneShotDescriptor | ContinuableDescriptor):
        return Identity(parsed.mode, parsed.label, event.seq)
    return None


def identity_apply(state: IdentityState, event: SessionEvent) -> IdentityState:
    """Fold one event into the identity state (PROJ-2, PROJ-4); other events keep ``state``."""
    if event.type != DESCRIPTOR_EVENT:
        return state
    return IdentityState(descriptor_identity(event))


def identity_view(state: IdentityState) -> JsonValue:
    """The unit's JSON value: ``{"mode", "label"?, "seq"}`` or ``None`` (JSON ``null``)."""
    identity = state.identity
    if identity is None:
        return None
    view: dict[str, JsonValue] = {"mode": identity.mode.value, "seq": identity.seq}
    if identity.label is not None:
        view["label"] = identity.label
    return view


def identity_from_view(value: JsonValue) -> Identity | None:
    """Read an identity back from its view; ``None`` (or absence) means no identity.

    raises: SubagentError
    """
    if value is None:
        return None
    if isinstance(value, Mapping) and set(value) <= {"mode", "label", "seq"}:
        mode = next((m for m in Mode if m.value == value.get("mode")), None)
        label = value.get("label")
        seq = value.get("seq")
        label_ok = isinstance(label, str) or (label is None and mode is Mode.ONE_SHOT)
        seq_ok = isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0
        if mode is not None and label_ok and seq_ok and isinstance(seq, int):
            return Identity(mode, label if isinstance(label, str) else None, seq)
    raise SubagentError(
        ErrorCode.CORRUPT_SESSION, f"malformed subagent identity {value!r}", field="subagent"
    )


def fold_identity(events: Iterable[SessionEvent]) -> IdentityState:
    """Fold a whole log from the initial identity state."""
    state = identity_init()
    for event in events:
        state = identity_apply(state, event)
    return state


__all__ = [
    "IDENTITY_KEY",
    "STATE_VERSION",
    "TIMING_KEY",
    "ActiveSpan",
    "Identity",
    "IdentityState",
    "TimingState",
    "descriptor_identity",
    "fold_identity",
    "fold_timing",
    "identity_apply",
    "identity_from_view",
    "identity_init",
    "identity_view",
    "timing_apply",
    "timing_init",
    "timing_view",
]
