"""The one-shot run lifecycle: setup, publication, result settlement and disposal.

Theory of operation
-------------------
1. One machine per one-shot run, driven by the provider's run handle. ``begin_run`` makes the
   state once the request has passed validation and ``provider.start`` is awaited (ONE-2);
   ``apply(state, event)`` is the only transition. Legal ``(phase, event type)`` pairs are the
   module-level ``TRANSITIONS`` table; any other pair raises
   ``SubagentError(ILLEGAL_TRANSITION)`` and changes nothing.
2. Publication is the fulfilment of ``provider.start`` (``ChildPublished``, ONE-4): before it
   the provider owns setup, after it the caller owns the run. The run's identity and its
   ``subagent/start`` / ``subagent/end`` pair belong to the service's observer
   (``core.oneshot_observer``), which sees the same publication and result; this machine
   only carries the run.
3. Before publication, an abort (``StartAborted``) tells the provider's setup to ``RollBack``;
   the start rejects (``RejectStart``) when the provider's rejection arrives
   (``StartFailed``), after rollback, with no event pair (ONE-7, EVT-7). If the provider
   fulfilled first, publication won the race: the run is published and its remaining work
   is cancelled at once, the id staying valid.
4. After publication, an abort cancels remaining work once (``CancelRemainingWork``) and keeps
   the id; the result still settles (ONE-7). ``ResultSettled`` resolves the result with its stop
   reason, child-level failures included; only ``ResultFaulted`` (an infrastructure fault)
   rejects it (ONE-8). A result is only ever accepted in a published phase.
5. ``DisposeRequested`` cancels remaining work and awaits both result settlement and child
   quiescence (ONE-9). The phases ``DISPOSING`` / ``AWAITING_QUIESCENCE`` / ``AWAITING_RESULT``
   record which of the two is still outstanding, so the table stays deterministic. When both
   have arrived, ``CompleteDispose`` carries only an independent release failure: a result
   rejection stays on the result. A repeated dispose is a legal no-op; the adapter returns
   the memoized completion (``dispose_outcome``).
6. A one-shot run has no steer, resume or follow-up event (ONE-17).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final, TypeAlias, assert_never

import attrs

from dsh_subagent.core.errors import (
    SubagentError,  # noqa: F401 (the CrossHair "raises:" names it)
    not_accepted,
)
from dsh_subagent.core.values import EventId, SubagentResult


class RunPhase(enum.Enum):
    """Where a one-shot run is in its lifecycle."""

    STARTING = "starting"
    ROLLING_BACK = "rolling-back"
    ROLLED_BACK = "rolled-back"
    PUBLISHED = "published"
    SETTLED = "settled"
    DISPOSING = "disposing"
    AWAITING_QUIESCENCE = "awaiting-quiescence"
    AWAITING_RESULT = "awaiting-result"
    DISPOSED = "disposed"


_RESULT_PENDING: Final = frozenset(
    {RunPhase.PUBLISHED, RunPhase.DISPOSING, RunPhase.AWAITING_RESULT}
)


@attrs.frozen
class OneShotRun:
    """The state of one one-shot run."""

    phase: RunPhase
    abort_observed: bool = False
    work_cancelled: bool = False
    release_failure: str | None = None


def begin_run() -> OneShotRun:
    """A run whose ``provider.start`` is being awaited (the request passed validation).

    post: __return__.phase is RunPhase.STARTING
    """
    return OneShotRun(RunPhase.STARTING)


# --------------------------------------------------------------------------- events


@attrs.frozen
class ChildPublished:
    """``provider.start`` fulfilled: the child exists and the caller owns the run."""

    event_id: EventId


@attrs.frozen
class StartAborted:
    """The request's signal aborted (before or after publication)."""

    event_id: EventId


@attrs.frozen
class StartFailed:
    """``provider.start`` rejected, after the provider rolled its setup back."""

    event_id: EventId
    message: str


@attrs.frozen
class ResultSettled:
    """The run's result is known (any stop reason, child-level failures included)."""

    event_id: EventId
    result: SubagentResult


@attrs.frozen
class ResultFaulted:
    """An infrastructure fault that no stop reason can represent."""

    event_id: EventId
    message: str


@attrs.frozen
class DisposeRequested:
    """The run's holder called ``dispose``."""

    event_id: EventId


@attrs.frozen
class ChildQuiesced:
    """The child's resources are released; ``release_failure`` if releasing failed."""

    event_id: EventId
    release_failure: str | None = None


RunEvent: TypeAlias = (
    ChildPublished
    | StartAborted
    | StartFailed
    | ResultSettled
    | ResultFaulted
    | DisposeRequested
    | ChildQuiesced
)


# --------------------------------------------------------------------------- effects


@attrs.frozen
class RollBack:
    """Cancel, roll back and quiesce every unpublished resource of the provider's setup."""

    cause: EventId


@attrs.frozen
class RejectStart:
    """Reject ``start``: no run exists; ``cancelled`` when the signal caused it."""

    cause: EventId
    message: str
    cancelled: bool


@attrs.frozen
class CancelRemainingWork:
    """Cancel the run's remaining turn work; the run and its id stay valid."""

    cause: EventId


@attrs.frozen
class ResolveResult:
    """Resolve ``run.result`` with ``result``."""

    cause: EventId
    result: SubagentResult


@attrs.frozen
class RejectResult:
    """Reject ``run.result`` with an infrastructure fault."""

    cause: EventId
    message: str


@attrs.frozen
class AwaitQuiescence:
    """Release the child's resources and report ``ChildQuiesced`` when they are released."""

    cause: EventId


@attrs.frozen
class CompleteDispose:
    """Settle the (memoized) dispose completion; it fails only on a release failure."""

    cause: EventId
    release_failure: str | None


RunEffect: TypeAlias = (
    RollBack
    | RejectStart
    | CancelRemainingWork
    | ResolveResult
    | RejectResult
    | AwaitQuiescence
    | CompleteDispose
)


# --------------------------------------------------------------------------- transitions

_P = RunPhase
_AFTER_DISPOSE: Final = (_P.DISPOSING, _P.AWAITING_QUIESCENCE, _P.AWAITING_RESULT, _P.DISPOSED)

TRANSITIONS: Final[Mapping[tuple[RunPhase, type[RunEvent]], RunPhase]] = {
    (_P.STARTING, ChildPublished): _P.PUBLISHED,
    (_P.STARTING, StartAborted): _P.ROLLING_BACK,
    (_P.STARTING, StartFailed): _P.ROLLED_BACK,
    (_P.ROLLING_BACK, ChildPublished): _P.PUBLISHED,
    (_P.ROLLING_BACK, StartAborted): _P.ROLLING_BACK,
    (_P.ROLLING_BACK, StartFailed): _P.ROLLED_BACK,
    (_P.ROLLED_BACK, StartAborted): _P.ROLLED_BACK,
    (_P.PUBLISHED, StartAborted): _P.PUBLISHED,
    (_P.PUBLISHED, ResultSettled): _P.SETTLED,
    (_P.PUBLISHED, ResultFaulted): _P.SETTLED,
    (_P.PUBLISHED, DisposeRequested): _P.DISPOSING,
    (_P.SETTLED, StartAborted): _P.SETTLED,
    (_P.SETTLED, DisposeRequested): _P.AWAITING_QUIESCENCE,
    (_P.DISPOSING, ResultSettled): _P.AWAITING_QUIESCENCE,
    (_P.DISPOSING, ResultFaulted): _P.AWAITING_QUIESCENCE,
    (_P.DISPOSING, ChildQuiesced): _P.AWAITING_RESULT,
    (_P.AWAITING_QUIESCENCE, ChildQuiesced): _P.DISPOSED,
    (_P.AWAITING_RESULT, ResultSettled): _P.DISPOSED,
    (_P.AWAITING_RESULT, ResultFaulted): _P.DISPOSED,
    **{(phase, StartAborted): phase for phase in _AFTER_DISPOSE},
    **{(phase, DisposeRequested): phase for phase in _AFTER_DISPOSE},
}
"""Every legal ``(phase, event type) -> phase``; a missing pair is an illegal transition."""


def _cancel_once(state: OneShotRun, cause: EventId) -> tuple[bool, tuple[RunEffect, ...]]:
    """Cancel remaining work if a result is still pending and it was not cancelled yet."""
    if state.phase in _RESULT_PENDING and not state.work_cancelled:
        return True, (CancelRemainingWork(cause),)
    return state.work_cancelled, ()


def _completion(target: RunPhase, state: OneShotRun, cause: EventId) -> tuple[RunEffect, ...]:
    return (CompleteDispose(cause, state.release_failure),) if target is _P.DISPOSED else ()


def _publish(state: OneShotRun, event: ChildPublished) -> tuple[OneShotRun, tuple[RunEffect, ...]]:
    published = attrs.evolve(state, phase=_P.PUBLISHED)
    if not state.abort_observed:
        return published, ()
    cancelled, cancel = _cancel_once(published, event.event_id)
    return attrs.evolve(published, work_cancelled=cancelled), cancel


def _abort(state: OneShotRun, event: StartAborted) -> tuple[OneShotRun, tuple[RunEffect, ...]]:
    target = TRANSITIONS[(state.phase, StartAborted)]
    if state.phase is _P.STARTING:
        return attrs.evolve(state, phase=target, abort_observed=True), (RollBack(event.event_id),)
    if state.abort_observed:
        return state, ()
    cancelled, effects = _cancel_once(state, event.event_id)
    return attrs.evolve(state, abort_observed=True, work_cancelled=cancelled), effects


def _settle(
    state: OneShotRun, event: ResultSettled | ResultFaulted
) -> tuple[OneShotRun, tuple[RunEffect, ...]]:
    target = TRANSITIONS[(state.phase, type(event))]
    outcome: RunEffect
    if isinstance(event, ResultSettled):
        outcome = ResolveResult(event.event_id, event.result)
    else:
        outcome = RejectResult(event.event_id, event.message)
    return attrs.evolve(state, phase=target), (outcome, *_completion(target, state, event.event_id))


def _dispose(
    state: OneShotRun, event: DisposeRequested
) -> tuple[OneShotRun, tuple[RunEffect, ...]]:
    if state.phase in _AFTER_DISPOSE:
        return state, ()
    cancelled, cancel = _cancel_once(state, event.event_id)
    target = TRANSITIONS[(state.phase, DisposeRequested)]
    effects = (*cancel, AwaitQuiescence(event.event_id))
    return attrs.evolve(state, phase=target, work_cancelled=cancelled), effects


def apply(state: OneShotRun, event: RunEvent) -> tuple[OneShotRun, tuple[RunEffect, ...]]:
    """Apply one event to a one-shot run.

    post: __return__[0].phase is TRANSITIONS[(state.phase, type(event))]
    post: __return__[0].phase is _P.DISPOSED or CompleteDispose not in map(type, __return__[1])
    post: state.phase is _P.STARTING or RollBack not in map(type, __return__[1])
    raises: SubagentError
    """
    if (state.phase, type(event)) not in TRANSITIONS:
        raise not_accepted(event, state.phase.value)
    match event:
        case ChildPublished():
            return _publish(state, event)
        case StartAborted():
            return _abort(state, event)
        case StartFailed(event_id=cause, message=message):
            rejected = attrs.evolve(state, phase=_P.ROLLED_BACK)
            return rejected, (RejectStart(cause, message, cancelled=state.abort_observed),)
        case ResultSettled() | ResultFaulted():
            return _settle(state, event)
        case DisposeRequested():
            return _dispose(state, event)
        case ChildQuiesced():
            target = TRANSITIONS[(state.phase, ChildQuiesced)]
            quiesced = attrs.evolve(state, phase=target, release_failure=event.release_failure)
            return quiesced, _completion(target, quiesced, event.event_id)
        case _:
            assert_never(event)


def dispose_outcome(state: OneShotRun) -> tuple[bool, str | None]:
    """``(done, release_failure)``: the memoized dispose completion every dispose call returns.

    post: __return__[0] == (state.phase is RunPhase.DISPOSED)
    """
    return state.phase is _P.DISPOSED, state.release_failure


__all__ = [
    "TRANSITIONS",
    "AwaitQuiescence",
    "CancelRemainingWork",
    "ChildPublished",
    "ChildQuiesced",
    "CompleteDispose",
    "DisposeRequested",
    "OneShotRun",
    "RejectResult",
    "RejectStart",
    "ResolveResult",
    "ResultFaulted",
    "ResultSettled",
    "RollBack",
    "RunEffect",
    "RunEvent",
    "RunPhase",
    "StartAborted",
    "StartFailed",
    "apply",
    "begin_run",
    "dispose_outcome",
]
