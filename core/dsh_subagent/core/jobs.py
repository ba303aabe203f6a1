"""The background task registry: admission, each job's status, reporting and the wake budget.

Theory of operation
-------------------
1. One ``JobsState`` per registry; ``apply(state, event)`` is the only transition. Each job's
   phase is its ``JobStatus``, or ``ABSENT`` before ``JobStarted`` and after ``OwnerReleased``.
   Legal ``(phase, event type)`` pairs are the module-level ``TRANSITIONS`` table, which also
   gives every target; a job event in any other phase raises
   ``SubagentError(ILLEGAL_TRANSITION)`` and changes nothing. An event for an owner fans out
   to each of the owner's jobs through the same table.
2. Admission (BG-30) is ``StartRequested``: a dead owner or one whose ``running`` +
   ``stopping`` jobs reach the limit gets ``RefuseStart``; else ``AttachOwner`` the first time
   (the wake budget starts full), then ``RunStarter``. Only once the starter returned does
   ``JobStarted`` allocate ``<kind>-<n>`` (a per-kind counter from 1, never reused, BG-4) and
   ask the performer to ``WatchProducer`` (BG-2, BG-3).
3. Status (BG-31): ``running`` -> optional ``stopping`` -> one of ``completed`` | ``killed`` |
   ``failed``. The first settlement wins. A producer settles once, so a second settlement of a
   ``completed`` or ``killed`` job (settled by its producer) is refused; only a ``failed`` job,
   which a raising teardown cancel may have force-failed (rule 6), still takes its producer's
   settlement, as a no-op. A late ``CancelRaised`` or ``CancelReturned`` is a no-op too.
4. A kill (BG-35) asks for ``CancelProducer`` and changes nothing else until the producer's
   cancel returned (``CancelReturned``: ``stopping``, reported); a raising cancel leaves the
   job as it was. A finished job is only marked reported.
5. Reported (BG-36): set by a kill, a terminal read (``OutputRead``), a settlement a wait
   observed, and owner disposal. An unreported settlement sends the owner one notice (BG-37)
   routed by ``notices.route_job_notice``; a ``FOLLOWUP`` spends one of the owner's wakes,
   and a claimed user message refills them (``UserMessageClaimed``).
6. ``OwnerDisposed`` (BG-8, BG-39) marks the owner's jobs reported, cancels the live ones
   (``owner disposed``; a raising cancel is ``CancelRaised``, which force-fails the job) and
   asks the performer to ``AwaitJobs``; ``OwnerReleased``, legal only once all of them are
   terminal, drops them (``DropJob``) and forgets the owner's budget.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final, Literal, TypeAlias, assert_never

import attrs

from dsh_subagent.core.errors import (
    SubagentError,  # noqa: F401 (the CrossHair "raises:" names it)
    invalid,
    not_accepted,
)
from dsh_subagent.core.notices import CompletionDelivery, NoticeRoute, route_job_notice
from dsh_subagent.core.pmap import PMap
from dsh_subagent.core.values import EventId, SessionId

DEFAULT_CANCEL_REASON: Final = "background subagent task killed"
OWNER_DISPOSED: Final = "owner disposed"
CANCEL_THREW: Final = "cancel threw during teardown; work may be orphaned: "


class JobStatus(enum.Enum):
    """A job's public status (BG-31)."""

    RUNNING = "running"
    STOPPING = "stopping"
    COMPLETED = "completed"
    KILLED = "killed"
    FAILED = "failed"


ABSENT: Final = "absent"
"""The phase of a job that has no record: before ``JobStarted``, after ``OwnerReleased``."""

JobPhase: TypeAlias = JobStatus | Literal["absent"]

LIVE: Final = frozenset({JobStatus.RUNNING, JobStatus.STOPPING})
TERMINAL: Final = frozenset(JobStatus) - LIVE


def _terminal(_instance: object, _attribute: attrs.Attribute[JobStatus], value: JobStatus) -> None:
    if value not in TERMINAL:
        raise invalid("status", "a job outcome must be completed, killed or failed")


@attrs.frozen
class JobOutcome:
    """A terminal status with the final output text and an optional detail."""

    status: JobStatus = attrs.field(validator=_terminal)
    output: str = ""
    detail: str | None = None


@attrs.frozen
class Owner:
    """The exact owner instance (``key``, the performer's identity for it) and its session."""

    key: int
    session: SessionId


@attrs.frozen
class JobState:
    """One job's record (the public snapshot's fields plus the reported bit)."""

    id: str
    kind: str
    label: str
    owner: Owner
    started_at: float
    seq: int
    status: JobStatus = JobStatus.RUNNING
    output: str = ""
    detail: str | None = None
    finished_at: float | None = None
    reported: bool = False


def _positive(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise invalid(attribute.name, "must be a positive integer")


def _whole(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise invalid(attribute.name, "must be a whole number of turns")


@attrs.frozen
class JobsConfig:
    """The registry's limits: jobs per owner, notice delivery, wakes between user messages."""

    max_per_owner: int = attrs.field(default=10, validator=_positive)
    delivery: CompletionDelivery = CompletionDelivery.WAKEUP
    max_consecutive_wakes: int = attrs.field(default=3, validator=_whole)


@attrs.frozen
class JobsState:
    """Every job of one registry, the per-kind counters and each attached owner's wakes."""

    config: JobsConfig = attrs.field(factory=JobsConfig)
    jobs: PMap[str, JobState] = attrs.field(factory=PMap)
    counters: PMap[str, int] = attrs.field(factory=PMap)
    wakes: PMap[int, int] = attrs.field(factory=PMap)
    started: int = 0


def live_count(state: JobsState, owner_key: int) -> int:
    """The owner's ``running`` + ``stopping`` jobs (terminal ones stop occupying capacity).

    post: __return__ >= 0
    """
    return sum(1 for j in state.jobs.values() if j.owner.key == owner_key and j.status in LIVE)


def in_order(state: JobsState) -> list[JobState]:
    """Every job in registration order (BG-32)."""
    return sorted(state.jobs.values(), key=lambda job: job.seq)


def accessible(job: JobState, session: SessionId) -> bool:
    """The access fence (BG-32): a job is reachable only from its owner's session.

    post: __return__ == (job.owner.session == session)
    """
    return job.owner.session == session


def visible(state: JobsState, session: SessionId) -> list[JobState]:
    """The jobs ``session`` may see, in registration order (BG-32, BG-34)."""
    return [job for job in in_order(state) if accessible(job, session)]


# --------------------------------------------------------------------------- events


@attrs.frozen
class StartRequested:
    """A producer asked to start a job for ``owner``; ``owner_live``: the registry's instance."""

    event_id: EventId
    owner: Owner
    owner_live: bool


@attrs.frozen
class JobStarted:
    """The starter returned: register the job."""

    event_id: EventId
    owner: Owner
    kind: str
    label: str
    at: float


@attrs.frozen
class Settlement:
    """The producer's ``done`` settled; ``observed``: a wait saw it; ``owner_idle`` at that time."""

    event_id: EventId
    job_id: str
    at: float
    output: str = ""
    detail: str | None = None
    observed: bool = False
    owner_idle: bool = False


@attrs.frozen
class JobCompleted(Settlement):
    """The producer settled ``completed``."""


@attrs.frozen
class JobKilled(Settlement):
    """The producer settled ``killed``."""


@attrs.frozen
class JobFailed(Settlement):
    """The producer settled ``failed`` (or its ``done`` raised)."""


@attrs.frozen
class KillRequested:
    """A holder asked to kill the job, with an optional reason."""

    event_id: EventId
    job_id: str
    reason: str | None = None


@attrs.frozen
class CancelReturned:
    """The producer's cancel for a kill returned."""

    event_id: EventId
    job_id: str


@attrs.frozen
class CancelRaised:
    """The producer's teardown cancel raised ``error`` (rendered)."""

    event_id: EventId
    job_id: str
    error: str
    at: float


@attrs.frozen
class OutputRead:
    """A holder read the job's output (after any wait)."""

    event_id: EventId
    job_id: str


@attrs.frozen
class OwnerDisposed:
    """The owner instance is being disposed."""

    event_id: EventId
    owner_key: int


@attrs.frozen
class OwnerReleased:
    """Every job the owner had at disposal has settled."""

    event_id: EventId
    owner_key: int


@attrs.frozen
class UserMessageClaimed:
    """The owner claimed a user-sourced message."""

    event_id: EventId
    owner_key: int


SettlementEvent: TypeAlias = JobCompleted | JobKilled | JobFailed

JobEvent: TypeAlias = (
    StartRequested
    | JobStarted
    | JobCompleted
    | JobKilled
    | JobFailed
    | KillRequested
    | CancelReturned
    | CancelRaised
    | OutputRead
    | OwnerDisposed
    | OwnerReleased
    | UserMessageClaimed
)


# --------------------------------------------------------------------------- effects


class StartRefusal(enum.Enum):
    """Why ``StartRequested`` was refused (BG-30)."""

    OWNER_NOT_LIVE = "owner-not-live"
    LIMIT_REACHED = "limit-reached"


@attrs.frozen
class RefuseStart:
    """Fail the start before the starter runs; ``limit`` is the owner limit."""

    cause: EventId
    refusal: StartRefusal
    limit: int


@attrs.frozen
class AttachOwner:
    """Subscribe to the owner's user-message claims and dispose hook, once per owner."""

    cause: EventId
    owner: Owner


@attrs.frozen
class RunStarter:
    """Call the producer's starter once, then report ``JobStarted``."""

    cause: EventId


@attrs.frozen
class WatchProducer:
    """Await the new job's ``done`` and report its settlement."""

    cause: EventId
    job_id: str


@attrs.frozen
class ReleaseWaiters:
    """The job is terminal: wake every wait on it."""

    cause: EventId
    job_id: str


@attrs.frozen
class NotifyOwner:
    """Send the owner the completion notice of ``job_id`` by ``route``."""

    cause: EventId
    job_id: str
    route: NoticeRoute


@attrs.frozen
class CancelProducer:
    """Call the producer's cancel with ``reason``.

    For a kill (``kill``) report ``CancelReturned`` once it returned and let a raise propagate;
    in teardown report a raise as ``CancelRaised``.
    """

    cause: EventId
    job_id: str
    reason: str
    kill: bool


@attrs.frozen
class AwaitJobs:
    """Wait until every listed job of the owner is terminal, then report ``OwnerReleased``."""

    cause: EventId
    owner_key: int
    job_ids: tuple[str, ...]


@attrs.frozen
class DropJob:
    """Forget the job's producer and stop watching it: the job is ABSENT, so its producer's
    later settlement is never reported; ``job`` is its record as it was dropped."""

    cause: EventId
    job: JobState


JobEffect: TypeAlias = (
    RefuseStart
    | AttachOwner
    | RunStarter
    | WatchProducer
    | ReleaseWaiters
    | NotifyOwner
    | CancelProducer
    | AwaitJobs
    | DropJob
)
Result: TypeAlias = tuple[JobsState, tuple[JobEffect, ...]]


# --------------------------------------------------------------------------- transitions

_S = JobStatus
_SETTLEMENTS: Final[Mapping[type[SettlementEvent], JobStatus]] = {
    JobCompleted: _S.COMPLETED,
    JobKilled: _S.KILLED,
    JobFailed: _S.FAILED,
}
SETTLEMENT_OF: Final[Mapping[JobStatus, type[SettlementEvent]]] = {
    status: event for event, status in _SETTLEMENTS.items()
}
"""The settlement event for each terminal outcome status."""

TRANSITIONS: Final[Mapping[tuple[JobPhase, type[JobEvent]], JobPhase]] = {
    (ABSENT, JobStarted): _S.RUNNING,
    **{(live, event): status for live in LIVE for event, status in _SETTLEMENTS.items()},
    **{(live, CancelRaised): _S.FAILED for live in LIVE},
    **{(live, CancelReturned): _S.STOPPING for live in LIVE},
    **{(_S.FAILED, event): _S.FAILED for event in _SETTLEMENTS},  # force-failed (rule 3)
    **{(done, CancelRaised): done for done in TERMINAL},
    **{(done, CancelReturned): done for done in TERMINAL},
    **{(phase, KillRequested): phase for phase in JobStatus},
    **{(phase, OutputRead): phase for phase in JobStatus},
    **{(phase, OwnerDisposed): phase for phase in JobStatus},
    **{(done, OwnerReleased): ABSENT for done in TERMINAL},
}
"""Every legal ``(phase, event type) -> phase`` of one job; a missing pair is illegal."""


def _target(job: JobState, event: JobEvent) -> JobPhase:
    target = TRANSITIONS.get((job.status, type(event)))
    if target is None:
        raise not_accepted(event, job.status.value)
    return target


def _job(state: JobsState, job_id: str) -> JobState:
    job = state.jobs.get(job_id)
    if job is None:
        raise invalid("job_id", f"unknown job {job_id}")
    return job


def _put(state: JobsState, job: JobState) -> JobsState:
    return attrs.evolve(state, jobs=state.jobs.set(job.id, job))


def _start_requested(state: JobsState, event: StartRequested) -> Result:
    cause, owner, limit = event.event_id, event.owner, state.config.max_per_owner
    if not event.owner_live:
        return state, (RefuseStart(cause, StartRefusal.OWNER_NOT_LIVE, limit),)
    if live_count(state, owner.key) >= limit:
        return state, (RefuseStart(cause, StartRefusal.LIMIT_REACHED, limit),)
    if owner.key in state.wakes:
        return state, (RunStarter(cause),)
    wakes = state.wakes.set(owner.key, state.config.max_consecutive_wakes)
    return attrs.evolve(state, wakes=wakes), (AttachOwner(cause, owner), RunStarter(cause))


def _job_started(state: JobsState, event: JobStarted) -> Result:
    target = TRANSITIONS[(ABSENT, JobStarted)]
    assert isinstance(target, JobStatus)  # the table's only entry from ABSENT is RUNNING
    number = state.counters.get(event.kind, 0) + 1
    job_id = f"{event.kind}-{number}"
    job = JobState(job_id, event.kind, event.label, event.owner, event.at, state.started, target)
    after = attrs.evolve(
        _put(state, job), counters=state.counters.set(event.kind, number), started=job.seq + 1
    )
    return after, (WatchProducer(event.event_id, job_id),)


def _settled(
    state: JobsState, job: JobState, event: SettlementEvent | CancelRaised, target: JobStatus
) -> Result:
    if job.status in TERMINAL:
        return state, ()  # the first settlement wins (the table admits only the no-ops)
    cause = event.event_id
    detail: str | None
    if isinstance(event, CancelRaised):
        output, detail, reported, idle = "", CANCEL_THREW + event.error, True, False
    else:
        output, detail = event.output, event.detail
        reported, idle = job.reported or event.observed, event.owner_idle
    done = attrs.evolve(
        job, status=target, output=output, detail=detail, finished_at=event.at, reported=reported
    )
    after = _put(state, done)
    if reported:
        return after, (ReleaseWaiters(cause, job.id),)
    key = job.owner.key
    wakes = state.wakes.get(key, 0)
    route = route_job_notice(state.config.delivery, idle, wakes)
    if route is NoticeRoute.FOLLOWUP:
        after = attrs.evolve(after, wakes=after.wakes.set(key, wakes - 1))
    return after, (ReleaseWaiters(cause, job.id), NotifyOwner(cause, job.id, route))


def _job_event(
    state: JobsState,
    event: SettlementEvent | KillRequested | CancelReturned | CancelRaised | OutputRead,
) -> Result:
    job = _job(state, event.job_id)
    target = _target(job, event)
    assert isinstance(target, JobStatus)  # only OwnerReleased drops a job
    match event:
        case JobCompleted() | JobKilled() | JobFailed() | CancelRaised():
            return _settled(state, job, event, target)
        case KillRequested(event_id=cause, reason=reason):
            if job.status in LIVE:
                why = reason or DEFAULT_CANCEL_REASON
                return state, (CancelProducer(cause, job.id, why, kill=True),)
            return _put(state, attrs.evolve(job, reported=True)), ()
        case CancelReturned():
            return _put(state, attrs.evolve(job, status=target, reported=True)), ()
        case OutputRead():
            return _put(state, attrs.evolve(job, reported=job.reported or target in TERMINAL)), ()
        case _:  # pragma: no cover - every job event type has an arm
            assert_never(event)


def _owned(state: JobsState, owner_key: int) -> list[JobState]:
    return [job for job in in_order(state) if job.owner.key == owner_key]


def _owner_disposed(state: JobsState, event: OwnerDisposed) -> Result:
    owned = _owned(state, event.owner_key)
    effects: list[JobEffect] = []
    for job in owned:
        _target(job, event)  # every phase accepts it and keeps its phase
        state = _put(state, attrs.evolve(job, reported=True))
        if job.status in LIVE:
            effects.append(CancelProducer(event.event_id, job.id, OWNER_DISPOSED, kill=False))
    ids = tuple(job.id for job in owned)
    return state, (*effects, AwaitJobs(event.event_id, event.owner_key, ids))


def _owner_released(state: JobsState, event: OwnerReleased) -> Result:
    owned = _owned(state, event.owner_key)
    for job in owned:
        _target(job, event)  # legal only once every owned job is terminal
    jobs = state.jobs
    for job in owned:
        jobs = jobs.remove(job.id)
    wakes = state.wakes.remove(event.owner_key) if event.owner_key in state.wakes else state.wakes
    after = attrs.evolve(state, jobs=jobs, wakes=wakes)
    return after, tuple(DropJob(event.event_id, job) for job in owned)


def _claimed(state: JobsState, event: UserMessageClaimed) -> Result:
    if event.owner_key not in state.wakes:
        return state, ()  # a claim after release: the owner has no budget any more
    full = state.wakes.set(event.owner_key, state.config.max_consecutive_wakes)
    return attrs.evolve(state, wakes=full), ()


def apply(state: JobsState, event: JobEvent) -> Result:
    """Apply one event to a job registry.

    post: __return__[0].config == state.config
    post: all(0 <= w <= state.config.max_consecutive_wakes for w in __return__[0].wakes.values())
    raises: SubagentError
    """
    match event:
        case StartRequested():
            return _start_requested(state, event)
        case JobStarted():
            return _job_started(state, event)
        case OwnerDisposed():
            return _owner_disposed(state, event)
        case OwnerReleased():
            return _owner_released(state, event)
        case UserMessageClaimed():
            return _claimed(state, event)
        case (
            JobCompleted()
            | JobKilled()
            | JobFailed()
            | KillRequested()
            | CancelReturned()
            | CancelRaised()
            | OutputRead()
        ):
            return _job_event(state, event)
        case _:  # pragma: no cover - every event type has an arm
            assert_never(event)


__all__ = [
    "ABSENT",
    "CANCEL_THREW",
    "DEFAULT_CANCEL_REASON",
    "LIVE",
    "OWNER_DISPOSED",
    "SETTLEMENT_OF",
    "TERMINAL",
    "TRANSITIONS",
    "AttachOwner",
    "AwaitJobs",
    "CancelProducer",
    "CancelRaised",
    "CancelReturned",
    "DropJob",
    "JobCompleted",
    "JobEffect",
    "JobEvent",
    "JobFailed",
    "JobKilled",
    "JobOutcome",
    "JobPhase",
    "JobStarted",
    "JobState",
    "JobStatus",
    "JobsConfig",
    "JobsState",
    "KillRequested",
    "NotifyOwner",
    "OutputRead",
    "Owner",
    "OwnerDisposed",
    "OwnerReleased",
    "RefuseStart",
    "ReleaseWaiters",
    "RunStarter",
    "Settlement",
    "SettlementEvent",
    "StartRefusal",
    "StartRequested",
    "UserMessageClaimed",
    "WatchProducer",
    "accessible",
    "apply",
    "in_order",
    "live_count",
    "visible",
]
