"""The service's observer of the lifecycle stream: one-shot publication, result, and pairing.

Theory of operation
-------------------
1. One observer per service, over every run it sees; ``apply(state, event)`` is the only
   transition and returns ``(state, effects)``. It is the one pairing of ``subagent/start``
   and ``subagent/end`` (EVT-16): the service drives it for its one-shot runs, and a test or
   a host folds any recorded lifecycle stream through the same ``apply``.
2. Each run id is ``UNSEEN``, ``OPEN`` or ``ENDED`` (``run_phase``, derived from the state, so
   nothing is stored twice). Legal ``(run phase, event type)`` pairs are the module-level
   ``TRANSITIONS`` table. A start of a seen id is refused as a repeat (EVT-3 "fresh": ids are
   remembered after their end, memory growing with the runs seen), an end of a run that is
   not open as having no open start; both raise ``SubagentError(ILLEGAL_TRANSITION)`` and
   change nothing.
3. A one-shot run: ``RunPublished`` (``provider.start`` fulfilled, ONE-4) checks the identity
   (EVT-16: non-empty provider, run id and child id; a run id that is none of the reusable
   names, EVT-3), then asks, in this order, to ``ObserveResult`` (attach the end observer
   first) and to ``EmitRunStart`` (EVT-6). ``RunSettled`` / ``RunFaulted`` close the run with
   ``EmitRunEnd``: the end is built from the stored start, so it carries the same identity
   by construction (EVT-2), a fault as ``error`` with no message (ONE-16). A failed start
   never reaches the observer, so it has no event pair (EVT-7).
4. An observed stream: ``RunStarted`` / ``RunEnded`` are events some other emitter already
   published (a continuable epoch, a recorded log); they follow the same table and produce no
   effect. An observed end must match its start's provider, id and local (EVT-16).
   ``ProviderAdded`` / ``ProviderRemoved`` keep the registry invariants: a non-empty name,
   never added twice, never removed unknown. A start naming a provider that is no longer
   registered is allowed (EVT-5).
5. Runs live in persistent maps, so one event costs O(log n), never a copy of every open run.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final, TypeAlias, assert_never

import attrs

from dsh_subagent.core.errors import ErrorCode, SubagentError, invalid
from dsh_subagent.core.lifecycle import (
    ProviderAddedInfo,
    ProviderRemovedInfo,
    RunEndInfo,
    RunStartInfo,
    check_start_info,
    end_info_for,
    end_matches_start,
    faulted_end_info,
)
from dsh_subagent.core.pmap import PMap
from dsh_subagent.core.values import EventId, Mode, RunId, SessionId, SubagentResult


class RunObservation(enum.Enum):
    """Where one run id is in the observed stream."""

    UNSEEN = "unseen"
    OPEN = "open"
    ENDED = "ended"


@attrs.frozen
class Observation:
    """What the observer knows: registered providers, open runs, every run id ever started."""

    providers: frozenset[str] = frozenset()
    open_runs: PMap[RunId, RunStartInfo] = attrs.field(factory=PMap)
    seen_run_ids: PMap[RunId, bool] = attrs.field(factory=PMap)


def run_phase(state: Observation, run_id: RunId) -> RunObservation:
    """The phase of ``run_id``: open while started and not ended, ended once seen and closed."""
    if run_id in state.open_runs:
        return RunObservation.OPEN
    return RunObservation.ENDED if run_id in state.seen_run_ids else RunObservation.UNSEEN


def is_paired(state: Observation) -> bool:
    """Whether every observed start has had its end (no run left open)."""
    return not state.open_runs


# --------------------------------------------------------------------------- events


@attrs.frozen
class RunPublished:
    """A one-shot ``provider.start`` fulfilled: the child exists and the caller owns the run."""

    event_id: EventId
    run_id: RunId
    provider: str
    child_id: str
    local: bool
    parent_session: SessionId
    label: str | None = None


@attrs.frozen
class RunSettled:
    """A one-shot run's result is known (any stop reason, child-level failures included)."""

    event_id: EventId
    run_id: RunId
    result: SubagentResult


@attrs.frozen
class RunFaulted:
    """A one-shot run's result rejected: an infrastructure fault no stop reason represents."""

    event_id: EventId
    run_id: RunId
    message: str


@attrs.frozen
class RunStarted:
    """A ``subagent/start`` event another emitter published was observed."""

    event_id: EventId
    info: RunStartInfo


@attrs.frozen
class RunEnded:
    """A ``subagent/end`` event another emitter published was observed."""

    event_id: EventId
    info: RunEndInfo


@attrs.frozen
class ProviderAdded:
    """A ``subagent/provider-added`` event was observed."""

    event_id: EventId
    info: ProviderAddedInfo


@attrs.frozen
class ProviderRemoved:
    """A ``subagent/provider-removed`` event was observed."""

    event_id: EventId
    info: ProviderRemovedInfo


RunStartEvent: TypeAlias = RunPublished | RunStarted
RunEndEvent: TypeAlias = RunSettled | RunFaulted | RunEnded
ObserverEvent: TypeAlias = RunStartEvent | RunEndEvent | ProviderAdded | ProviderRemoved


# --------------------------------------------------------------------------- effects


@attrs.frozen
class ObserveResult:
    """Attach the end observer to the run's result (before ``EmitRunStart``)."""

    cause: EventId
    run_id: RunId


@attrs.frozen
class EmitRunStart:
    """Emit ``subagent/start`` scoped to the delegating parent."""

    cause: EventId
    info: RunStartInfo


@attrs.frozen
class EmitRunEnd:
    """Emit ``subagent/end`` scoped to the delegating parent."""

    cause: EventId
    info: RunEndInfo


ObserverEffect: TypeAlias = ObserveResult | EmitRunStart | EmitRunEnd


# --------------------------------------------------------------------------- transitions

_O = RunObservation

TRANSITIONS: Final[Mapping[tuple[RunObservation, type[ObserverEvent]], RunObservation]] = {
    (_O.UNSEEN, RunPublished): _O.OPEN,
    (_O.UNSEEN, RunStarted): _O.OPEN,
    (_O.OPEN, RunSettled): _O.ENDED,
    (_O.OPEN, RunFaulted): _O.ENDED,
    (_O.OPEN, RunEnded): _O.ENDED,
}
"""Every legal ``(run phase, event type) -> run phase``; a missing pair is illegal."""


def _violation(field: str, message: str) -> SubagentError:
    return SubagentError(ErrorCode.ILLEGAL_TRANSITION, message, field=field)


def _run_id_of(event: RunEndEvent) -> RunId:
    return event.info.start.run_id if isinstance(event, RunEnded) else event.run_id


def _start_info(event: RunStartEvent) -> RunStartInfo:
    """The identity a start event names; a one-shot publication is always ``one-shot`` mode.

    post: isinstance(event, RunStarted) or __return__.mode is Mode.ONE_SHOT
    post: isinstance(event, RunPublished) or __return__ is event.info
    """
    if isinstance(event, RunStarted):
        return event.info
    return RunStartInfo(
        event.run_id,
        event.provider,
        event.child_id,
        event.local,
        event.parent_session,
        Mode.ONE_SHOT,
        event.label,
    )


def _end_info(start: RunStartInfo, event: RunEndEvent) -> RunEndInfo:
    """The end that closes ``start``: built from it, or observed and matching it (EVT-2).

    post: end_matches_start(start, __return__)
    post: isinstance(event, RunEnded) or __return__.start == start
    raises: SubagentError
    """
    match event:
        case RunSettled(result=result):
            return end_info_for(start, result.stop_reason, result.output)
        case RunFaulted():
            return faulted_end_info(start)
        case RunEnded(info=info):
            if not end_matches_start(start, info):
                raise _violation("run_id", f"end of run {start.run_id!r} diverges from its start")
            return info
        case _:
            assert_never(event)


def _legal(state: Observation, event: RunStartEvent | RunEndEvent, run_id: RunId) -> None:
    """Refuse a pair missing from ``TRANSITIONS``: a repeated start or an end not open."""
    if (run_phase(state, run_id), type(event)) in TRANSITIONS:
        return
    if isinstance(event, RunPublished | RunStarted):
        raise _violation("run_id", f"run id {run_id!r} repeated")
    raise _violation("run_id", f"end of run {run_id!r} has no open start")


def _open(
    state: Observation, event: RunStartEvent
) -> tuple[Observation, tuple[ObserverEffect, ...]]:
    info = _start_info(event)
    check_start_info(info)
    _legal(state, event, info.run_id)
    opened = attrs.evolve(
        state,
        open_runs=state.open_runs.set(info.run_id, info),
        seen_run_ids=state.seen_run_ids.set(info.run_id, True),
    )
    if isinstance(event, RunStarted):
        return opened, ()
    return opened, (ObserveResult(event.event_id, info.run_id), EmitRunStart(event.event_id, info))


def _close(
    state: Observation, event: RunEndEvent
) -> tuple[Observation, tuple[ObserverEffect, ...]]:
    run_id = _run_id_of(event)
    _legal(state, event, run_id)
    end = _end_info(state.open_runs[run_id], event)
    closed = attrs.evolve(state, open_runs=state.open_runs.remove(run_id))
    return closed, () if isinstance(event, RunEnded) else (EmitRunEnd(event.event_id, end),)


def _registry(state: Observation, event: ProviderAdded | ProviderRemoved) -> Observation:
    name = event.info.name
    if isinstance(event, ProviderRemoved):
        if name not in state.providers:
            raise _violation("provider", f"removal names unknown provider {name!r}")
        return attrs.evolve(state, providers=state.providers - {name})
    if not name:
        raise invalid("provider", "must not be empty")
    if name in state.providers:
        raise _violation("provider", f"provider {name!r} added twice")
    return attrs.evolve(state, providers=state.providers | {name})


def apply(
    state: Observation, event: ObserverEvent
) -> tuple[Observation, tuple[ObserverEffect, ...]]:
    """Apply one event to the observer, raising on a broken pairing invariant (EVT-16).

    raises: SubagentError
    """
    match event:
        case ProviderAdded() | ProviderRemoved():
            return _registry(state, event), ()
        case RunPublished() | RunStarted():
            return _open(state, event)
        case RunSettled() | RunFaulted() | RunEnded():
            return _close(state, event)
        case _:
            assert_never(event)


__all__ = [
    "TRANSITIONS",
    "EmitRunEnd",
    "EmitRunStart",
    "ObserveResult",
    "Observation",
    "ObserverEffect",
    "ObserverEvent",
    "ProviderAdded",
    "ProviderRemoved",
    "RunEnded",
    "RunFaulted",
    "RunObservation",
    "RunPublished",
    "RunSettled",
    "RunStarted",
    "apply",
    "is_paired",
    "run_phase",
]
