"""One agent's activity and wake latch: idle, maintenance or a running driver (HARNESS-2/3/5/8).

Theory of operation
-------------------
1. One machine per agent; ``ActivityState()`` is an idle agent and ``apply(state, event)`` the
   only transition. Legal ``(phase, event type)`` pairs are the ``TRANSITIONS`` table, which
   also names each target phase; any other pair raises ``ILLEGAL_TRANSITION`` and changes
   nothing. The inbox lists stay with the performer: the machine only needs what it is told.
2. An activity is maintenance or a driver. ``cause`` is its abort reason, the first cancel's
   (HARNESS-5); ``latched`` is a deferred wake (HARNESS-3). Idle has neither, and status is
   ``running`` only in ``RUNNING``: maintenance reports idle (HARNESS-2). ``EmitStatus`` is
   produced exactly when the status changes.
3. A send (``MessageSent``) is classified before insertion: a waking send into an aborted
   activity goes to ``next-turn``. Its effects are ``InsertMessage`` then ``Wake``; a waking
   send from idle first asks ``PrepareDriver`` so that it fails before any side effect.
4. Some effects are performed by applying an event when the performer reaches them: ``Wake``
   applies ``WakeRequested``, ``FinishCancel`` applies ``InboxCleared``, and ``ReplayWake``
   applies ``WakeRequested()`` if the inbox still has pending work. The effects before them
   notify listeners synchronously (inserted, discarded, status), and a listener may act on
   the agent; the decision must see the state those listeners leave.
5. ``WakeRequested``: idle starts a driver (``StartDriver``, status ``running``); maintenance,
   or an aborted activity the send was redirected for, latches unless the cause is
   ``disposed``; a live driver claims the work itself (HARNESS-3).
6. ``CancelRequested``: without ``keep_inbox`` the inbox is cleared first (``ClearInbox``),
   then ``InboxCleared`` drops the latch and aborts; with it, the activity is aborted at once.
   Only the first cause aborts (``AbortActivity``); with no activity nothing is armed.
7. ``TurnEnded(pending)``: pending work starts another turn with a fresh signal and no latch
   (``NextTurn``, HARNESS-9). ``DriverFinished`` and ``MaintenanceFinished`` return to idle
   and replay a latched wake (HARNESS-8).
8. Effects are module-level values wherever their fields allow, so a step allocates nothing
   beyond a new state when the state changes; unchanged states are returned as they are.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final, TypeAlias, assert_never

import attrs

from dsh_subagent.core.errors import ErrorCode, SubagentError, not_accepted
from dsh_subagent.core.residency import AgentStatus
from dsh_subagent.core.values import CancelCause, CancelKind, InboxTarget


class ActivityPhase(enum.Enum):
    """What the agent is doing."""

    IDLE = "idle"
    MAINTENANCE = "maintenance"
    RUNNING = "running"


def _idle_has_no_activity(
    instance: ActivityState, _attribute: attrs.Attribute[bool], value: bool
) -> None:
    if instance.phase is ActivityPhase.IDLE and (value or instance.cause is not None):
        raise SubagentError(
            ErrorCode.ILLEGAL_TRANSITION, "an idle agent has no abort cause and no latched wake"
        )


@attrs.frozen
class ActivityState:
    """The agent's phase, the current activity's abort cause and its latched wake."""

    phase: ActivityPhase = ActivityPhase.IDLE
    cause: CancelCause | None = None
    latched: bool = attrs.field(default=False, validator=_idle_has_no_activity)

    @property
    def status(self) -> AgentStatus:
        """``running`` only while a driver runs; maintenance is idle (HARNESS-2)."""
        return AgentStatus.RUNNING if self.phase is ActivityPhase.RUNNING else AgentStatus.IDLE


# --------------------------------------------------------------------------- events


@attrs.frozen
class MessageSent:
    """``send(message, target, wakeup)`` was called; the message is not inserted yet."""

    target: InboxTarget
    wakeup: bool


@attrs.frozen
class WakeRequested:
    """A waking send's message is in (``after_abort``: it was redirected), or a replay."""

    after_abort: bool = False


@attrs.frozen
class CancelRequested:
    """``cancel(cause, keep_inbox=...)`` was called."""

    cause: CancelCause
    keep_inbox: bool = False


@attrs.frozen
class InboxCleared:
    """A cancel's clear is done and its discards are notified."""

    cause: CancelCause


@attrs.frozen
class MaintenanceRequested:
    """``run_maintenance(task)`` was called."""


@attrs.frozen
class MaintenanceFinished:
    """The maintenance task ended (any way)."""


@attrs.frozen
class TurnEnded:
    """The driver closed a turn; ``pending`` is whether the inbox still has work."""

    pending: bool


@attrs.frozen
class DriverFinished:
    """The driver stopped: no work left, an abort, or an error."""


ActivityEvent: TypeAlias = (
    MessageSent
    | WakeRequested
    | CancelRequested
    | InboxCleared
    | MaintenanceRequested
    | MaintenanceFinished
    | TurnEnded
    | DriverFinished
)


# --------------------------------------------------------------------------- effects


@attrs.frozen
class PrepareDriver:
    """This send may start a driver: fail now, before any side effect, if none can run."""


@attrs.frozen
class InsertMessage:
    """Append the message to ``target`` through a durable splice (notifying ``inserted``)."""

    target: InboxTarget


@attrs.frozen
class Wake:
    """Apply ``WakeRequested(after_abort)`` now that the message is in."""

    after_abort: bool


@attrs.frozen
class StartDriver:
    """Begin an activity with a fresh abort signal and start a driver task for it."""


@attrs.frozen
class StartMaintenance:
    """Begin an activity with a fresh abort signal and run the maintenance task under it."""


@attrs.frozen
class EmitStatus:
    """Emit ``agent/status`` with ``status`` (it changed)."""

    status: AgentStatus


@attrs.frozen
class ClearInbox:
    """Durably discard everything pending, next-step before next-turn (HARNESS-5)."""


@attrs.frozen
class FinishCancel:
    """Apply ``InboxCleared(cause)`` now that the inbox is cleared."""

    cause: CancelCause


@attrs.frozen
class AbortActivity:
    """Abort the current activity's signal with ``cause``."""

    cause: CancelCause


@attrs.frozen
class NextTurn:
    """Run another turn under a fresh abort signal."""


@attrs.frozen
class ReplayWake:
    """The latched wake is due: apply ``WakeRequested()`` if the inbox has pending work."""


ActivityEffect: TypeAlias = (
    PrepareDriver
    | InsertMessage
    | Wake
    | StartDriver
    | StartMaintenance
    | EmitStatus
    | ClearInbox
    | FinishCancel
    | AbortActivity
    | NextTurn
    | ReplayWake
)


# --------------------------------------------------------------------------- transitions

_I, _M, _R = ActivityPhase.IDLE, ActivityPhase.MAINTENANCE, ActivityPhase.RUNNING
_ANY: Final = (_I, _M, _R)

TRANSITIONS: Final[Mapping[tuple[ActivityPhase, type[ActivityEvent]], ActivityPhase]] = {
    **{(phase, MessageSent): phase for phase in _ANY},
    (_I, WakeRequested): _R,
    (_M, WakeRequested): _M,
    (_R, WakeRequested): _R,
    **{(phase, CancelRequested): phase for phase in _ANY},
    (_M, InboxCleared): _M,
    (_R, InboxCleared): _R,
    (_I, MaintenanceRequested): _M,
    (_M, MaintenanceFinished): _I,
    (_R, TurnEnded): _R,
    (_R, DriverFinished): _I,
}
"""Every legal ``(phase, event type) -> phase``; a missing pair is an illegal transition."""

_FRESH: Final = {phase: ActivityState(phase) for phase in ActivityPhase}
_NONE: Final[tuple[ActivityEffect, ...]] = ()
_INSERT: Final = {t: InsertMessage(t) for t in InboxTarget}
_INSERT_ONLY: Final[Mapping[InboxTarget, tuple[ActivityEffect, ...]]] = {
    t: (_INSERT[t],) for t in InboxTarget
}
_SEND_FROM_IDLE: Final[Mapping[InboxTarget, tuple[ActivityEffect, ...]]] = {
    t: (PrepareDriver(), _INSERT[t], Wake(False)) for t in InboxTarget
}
_SEND_LIVE: Final[Mapping[InboxTarget, tuple[ActivityEffect, ...]]] = {
    t: (_INSERT[t], Wake(False)) for t in InboxTarget
}
_SEND_AFTER_ABORT: Final[tuple[ActivityEffect, ...]] = (
    _INSERT[InboxTarget.NEXT_TURN],
    Wake(True),
)
_START_DRIVER: Final[tuple[ActivityEffect, ...]] = (
    StartDriver(),
    EmitStatus(AgentStatus.RUNNING),
)
_START_MAINTENANCE: Final[tuple[ActivityEffect, ...]] = (StartMaintenance(),)
_CLEAR: Final = ClearInbox()
_CLEAR_ONLY: Final[tuple[ActivityEffect, ...]] = (_CLEAR,)
_NEXT_TURN: Final[tuple[ActivityEffect, ...]] = (NextTurn(),)
_FINISHED: Final[Mapping[tuple[ActivityPhase, bool], tuple[ActivityEffect, ...]]] = {
    (_M, False): (),
    (_M, True): (ReplayWake(),),
    (_R, False): (EmitStatus(AgentStatus.IDLE),),
    (_R, True): (EmitStatus(AgentStatus.IDLE), ReplayWake()),
}
"""The effects of an activity's end, by its phase and whether a wake is latched."""

Step: TypeAlias = tuple[ActivityState, tuple[ActivityEffect, ...]]


def _with(state: ActivityState, cause: CancelCause | None, latched: bool) -> ActivityState:
    """``state`` with ``cause`` and ``latched``: the shared value when nothing is set."""
    if cause is None and not latched:
        return _FRESH[state.phase]
    if cause is state.cause and latched is state.latched:
        return state
    return ActivityState(state.phase, cause, latched)


def _send(state: ActivityState, event: MessageSent) -> Step:
    """Classify before insertion: a waking send into an aborted activity goes to next-turn.

    post: __return__[0] is state
    post: sum(isinstance(e, InsertMessage) for e in __return__[1]) == 1
    post: not (event.wakeup and state.cause is not None) or _INSERT[InboxTarget.NEXT_TURN] in __return__[1]
    post: event.wakeup == any(isinstance(e, Wake) for e in __return__[1])
    """  # noqa: E501
    if not event.wakeup:
        return state, _INSERT_ONLY[event.target]
    if state.phase is _I:
        return state, _SEND_FROM_IDLE[event.target]
    if state.cause is None:
        return state, _SEND_LIVE[event.target]
    return state, _SEND_AFTER_ABORT


def _wake(state: ActivityState, after_abort: bool) -> Step:
    """Start from idle; else latch in maintenance or for a redirected send, never if disposed.

    post: (__return__[0].phase is ActivityPhase.RUNNING) == (state.phase is not ActivityPhase.MAINTENANCE)
    post: (len(__return__[1]) == 2) == (state.phase is ActivityPhase.IDLE)
    post: not __return__[0].latched or state.latched or state.cause is None or state.cause.kind is not CancelKind.DISPOSED
    post: __return__[0].latched or state.phase is ActivityPhase.IDLE or not after_abort or (state.cause is not None and state.cause.kind is CancelKind.DISPOSED)
    """  # noqa: E501
    if state.phase is _I:
        return _FRESH[_R], _START_DRIVER
    disposed = state.cause is not None and state.cause.kind is CancelKind.DISPOSED
    latch = not disposed and (state.phase is _M or after_abort)
    return _with(state, state.cause, state.latched or latch), _NONE


def _abort(state: ActivityState, cause: CancelCause, latched: bool) -> Step:
    """Abort with ``cause`` unless an earlier cause won; the latch becomes ``latched``.

    pre: state.phase is not ActivityPhase.IDLE
    post: __return__[0].cause == (cause if state.cause is None else state.cause)
    post: __return__[0].latched == latched
    post: len(__return__[1]) == (state.cause is None)
    """
    if state.cause is not None:  # the first cause wins
        return _with(state, state.cause, latched), _NONE
    return _with(state, cause, latched), (AbortActivity(cause),)


def _cancel(state: ActivityState, event: CancelRequested) -> Step:
    if state.phase is _I:
        return state, _NONE if event.keep_inbox else _CLEAR_ONLY
    if event.keep_inbox:
        return _abort(state, event.cause, state.latched)
    return state, (_CLEAR, FinishCancel(event.cause))


def apply(state: ActivityState, event: ActivityEvent) -> Step:
    """Apply one event to an agent's activity.

    post: __return__[0].phase is TRANSITIONS[(state.phase, type(event))]
    post: any(isinstance(e, EmitStatus) for e in __return__[1]) == (__return__[0].status is not state.status)
    post: not any(isinstance(e, StartDriver) for e in __return__[1]) or state.phase is ActivityPhase.IDLE
    post: sum(isinstance(e, AbortActivity) for e in __return__[1]) == (state.cause is None and __return__[0].cause is not None)
    raises: SubagentError
    """  # noqa: E501
    target = TRANSITIONS.get((state.phase, type(event)))
    if target is None:
        raise not_accepted(event, state.phase.value)
    match event:
        case MessageSent():
            return _send(state, event)
        case WakeRequested(after_abort=after_abort):
            return _wake(state, after_abort)
        case CancelRequested():
            return _cancel(state, event)
        case InboxCleared(cause=cause):
            return _abort(state, cause, latched=False)
        case MaintenanceRequested():
            return _FRESH[target], _START_MAINTENANCE
        case MaintenanceFinished() | DriverFinished():
            return _FRESH[target], _FINISHED[(state.phase, state.latched)]
        case TurnEnded(pending=pending):
            return (_FRESH[target], _NEXT_TURN) if pending else (state, _NONE)
        case _:  # pragma: no cover (mypy proves the match exhaustive)
            assert_never(event)


__all__ = [
    "TRANSITIONS",
    "AbortActivity",
    "ActivityEffect",
    "ActivityEvent",
    "ActivityPhase",
    "ActivityState",
    "CancelRequested",
    "ClearInbox",
    "DriverFinished",
    "EmitStatus",
    "FinishCancel",
    "InboxCleared",
    "InsertMessage",
    "MaintenanceFinished",
    "MaintenanceRequested",
    "MessageSent",
    "NextTurn",
    "PrepareDriver",
    "ReplayWake",
    "StartDriver",
    "StartMaintenance",
    "TurnEnded",
    "Wake",
    "WakeRequested",
    "apply",
]
