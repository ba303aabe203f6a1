"""The background task surface: the performer of ``core.jobs`` and ``settle_run``.

Theory of operation
-------------------
1. The model sees background jobs as *tasks* (``task_kill``, ``started background subagent
   task``); their tools live in ``task_tools``. Every rule (admission, ids, status, first
   settlement, the reported bit, the owner limit, notice routing and the wake budget) is
   ``core.jobs``; the registry feeds it events and performs its effects, in order, after
   storing the new state. It decides nothing: it validates argument types, reads facts (the
   agent registry's instance, the owner's idleness, whether a wait is pending) and renders
   texts.
2. ``start(kind, label, owner, starter)`` checks kind and label, then ``StartRequested``;
   ``RunStarter`` calls the synchronous starter, whose return is ``JobStarted``; the id is
   allocated and the record stored with no await in between (BG-2, BG-3, BG-30).
3. ``WatchProducer`` awaits ``done``; a raising ``done`` is contained as ``failed`` (BG-31).
   ``ReleaseWaiters`` sets the job's ``settled`` event, which is what waits and teardown await.
4. ``CancelProducer`` calls the producer's cancel: a kill reports ``CancelReturned`` or lets
   the raise propagate (BG-35); teardown reports a raise as ``CancelRaised`` (BG-39).
5. Owner disposal is ``OwnerDisposed``; ``AwaitJobs`` waits for the listed jobs' settlement
   and reports ``OwnerReleased``, whose ``DropJob`` effects forget the producers (BG-8): a
   dropped producer's ``done`` is still awaited (contained), its settlement never reported
   (a force-failed job's producer may settle after its owner's release, BG-39).
6. ``settle_run(run)`` adapts a one-shot run to an outcome by ``core.output.job_outcome``
   (ONE-19, BG-6); a rejected result -> failed with the rendered error; the run is always
   disposed, and a disposal failure turns the outcome failed (``core.output.dispose_failed``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import assert_never

import attrs

from dsh_subagent.adapters.protocols import (
    Agent,
    AgentRegistry,
    AgentStatus,
    InboxNotification,
    create_user_message,
)
from dsh_subagent.adapters.providers.base import SubagentRun
from dsh_subagent.adapters.signals import AbortSignal, race_abort
from dsh_subagent.adapters.tools.schemas import (
    ToolFailure,
    render_exception,
)
from dsh_subagent.core.jobs import (
    DEFAULT_CANCEL_REASON,
    SETTLEMENT_OF,
    AttachOwner,
    AwaitJobs,
    CancelProducer,
    CancelRaised,
    CancelReturned,
    DropJob,
    JobEffect,
    JobEvent,
    JobOutcome,
    JobsConfig,
    JobsState,
    JobStarted,
    JobState,
    JobStatus,
    KillRequested,
    NotifyOwner,
    OutputRead,
    Owner,
    OwnerDisposed,
    OwnerReleased,
    RefuseStart,
    ReleaseWaiters,
    RunStarter,
    StartRefusal,
    StartRequested,
    UserMessageClaimed,
    WatchProducer,
    accessible,
    apply,
    visible,
)
from dsh_subagent.core.notices import CompletionDelivery as Delivery
from dsh_subagent.core.notices import NoticeRoute
from dsh_subagent.core.output import dispose_failed, job_outcome, output_text
from dsh_subagent.core.values import (
    USER_SOURCE,
    BaseSource,
    BaseSourceKind,
    EventId,
    TextBlock,
)


@attrs.frozen
class JobHooks:
    """What a starter returns: how to cancel the work and when it is done (BG-3)."""

    cancel: Callable[[str], None]
    done: Awaitable[JobOutcome]


JobStarter = Callable[[], JobHooks]


@attrs.frozen
class JobSnapshot:
    """The public view of a job (BG-34)."""

    id: str
    kind: str
    label: str
    status: JobStatus
    detail: str | None
    started_at: float
    finished_at: float | None


def _snapshot(job: JobState) -> JobSnapshot:
    return JobSnapshot(
        job.id, job.kind, job.label, job.status, job.detail, job.started_at, job.finished_at
    )


def status_line(job: JobSnapshot) -> str:
    """``[status: <status>]`` or ``[status: <status>, <detail>]``."""
    detail = f", {job.detail}" if job.detail else ""
    return f"[status: {job.status.value}{detail}]"


@attrs.define(eq=False)
class _Producer:
    """The IO side of one job: its hooks, its owner instance and its settlement signal."""

    id: str
    hooks: JobHooks
    owner: Agent
    settled: asyncio.Event = attrs.field(factory=asyncio.Event)
    waiters: int = 0
    final: JobState | None = None  # the record as it was dropped (a wait may still hold it)


@attrs.define
class _Start:
    """The context of one ``start`` call while its effects are performed."""

    owner: Agent
    kind: str
    label: str
    starter: JobStarter
    hooks: JobHooks | None = None
    job_id: str | None = None


class JobRegistry:
    """Background jobs owned by parent agents: the performer of ``core.jobs`` (rules 1-5)."""

    def __init__(
        self,
        agents: AgentRegistry,
        *,
        max_per_owner: int = 10,
        delivery: Delivery = Delivery.WAKEUP,
        max_consecutive_wakes: int = 3,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._state = JobsState(JobsConfig(max_per_owner, delivery, max_consecutive_wakes))
        self._agents = agents
        self._clock = clock
        self._jobs: dict[str, _Producer] = {}
        self._event_ids = itertools.count()
        self._releases: dict[int, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ the driver

    def _eid(self) -> EventId:
        return EventId(f"job-ev-{next(self._event_ids)}")

    def _run(self, event: JobEvent, call: _Start | None = None) -> tuple[JobEffect, ...]:
        """Apply ``event``, store the state, then perform each effect in order."""
        self._state, effects = apply(self._state, event)
        for effect in effects:
            self._perform(effect, call)
        return effects

    def _perform(self, effect: JobEffect, call: _Start | None) -> None:
        match effect:
            case RefuseStart():
                raise self._refusal(effect, call)
            case AttachOwner(owner=owner):
                assert call is not None  # only a start attaches its owner
                self._attach_owner(owner, call.owner)
            case RunStarter(cause=cause):
                assert call is not None  # only a start runs a starter
                call.hooks = call.starter()
                ref = Owner(id(call.owner), call.owner.id)
                self._run(JobStarted(cause, ref, call.kind, call.label, self._clock()), call)
            case WatchProducer(job_id=job_id):
                assert call is not None  # only a start registers a job
                assert call.hooks is not None  # ... once its starter returned
                producer = _Producer(job_id, call.hooks, call.owner)
                self._jobs[job_id] = producer
                call.job_id = job_id
                self._spawn(self._await_done(producer))
            case ReleaseWaiters(job_id=job_id):
                self._jobs[job_id].settled.set()
            case NotifyOwner():
                self._notify(effect)
            case CancelProducer():
                self._cancel(effect)
            case AwaitJobs():
                self._releases[effect.owner_key] = self._spawn(self._release(effect))
            case DropJob(job=job):
                self._jobs.pop(job.id).final = job
            case _:  # pragma: no cover - every effect type has an arm
                assert_never(effect)

    def _spawn(self, work: Coroutine[object, object, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ------------------------------------------------------------------ producing

    def start(self, kind: str, label: str, owner: Agent, starter: JobStarter) -> str:
        """Preflight, run the starter once, then register the job (rule 2)."""
        if not isinstance(kind, str) or not kind:
            raise ToolFailure("invalid job kind: expected a non-empty string")
        if not isinstance(label, str) or not label:
            raise ToolFailure("invalid job label: expected a non-empty string")
        call = _Start(owner, kind, label, starter)
        live = self._agents.get(owner.id) is owner
        self._run(StartRequested(self._eid(), Owner(id(owner), owner.id), live), call)
        assert call.job_id is not None  # an unrefused start registers its job
        return call.job_id

    @staticmethod
    def _refusal(effect: RefuseStart, call: _Start | None) -> ToolFailure:
        match effect.refusal:
            case StartRefusal.OWNER_NOT_LIVE:
                owner_id = "" if call is None else call.owner.id
                return ToolFailure(
                    f'agent "{owner_id}" is not the registered agent instance '
                    "(background task owner must be live)"
                )
            case StartRefusal.LIMIT_REACHED:
                return ToolFailure(
                    f"background task limit reached for this owner (limit: {effect.limit}); "
                    "use task_kill to stop an unneeded task, wait for it to finish, then retry"
                )
            case _:  # pragma: no cover - every refusal has an arm
                assert_never(effect.refusal)

    async def _await_done(self, producer: _Producer) -> None:
        try:
            outcome = await producer.hooks.done
        except Exception as error:
            outcome = JobOutcome(JobStatus.FAILED, detail=render_exception(error))
        if producer.final is None:  # a dropped job is no longer watched (rule 5)
            self._settle(producer, outcome)

    def _settle(self, producer: _Producer, outcome: JobOutcome) -> None:
        settlement = SETTLEMENT_OF[outcome.status]
        self._run(
            settlement(
                self._eid(),
                producer.id,
                self._clock(),
                outcome.output,
                outcome.detail,
                observed=producer.waiters > 0,
                owner_idle=producer.owner.status is AgentStatus.IDLE,
            )
        )

    def _cancel(self, effect: CancelProducer) -> None:
        try:
            self._jobs[effect.job_id].hooks.cancel(effect.reason)
        except Exception as error:
            if effect.kill:
                raise  # a kill whose cancel raised leaves the job as it was (BG-35)
            self._run(
                CancelRaised(self._eid(), effect.job_id, render_exception(error), self._clock())
            )
            return
        if effect.kill:
            self._run(CancelReturned(self._eid(), effect.job_id))

    # ------------------------------------------------------------------ owners and notices

    def _attach_owner(self, ref: Owner, owner: Agent) -> None:
        def refill(note: InboxNotification) -> None:
            if note.message.source == USER_SOURCE:
                self._run(UserMessageClaimed(self._eid(), ref.key))

        owner.ctx.defer(owner.claimed.subscribe(refill))
        owner.ctx.defer(lambda: self._teardown(ref.key))

    def _notify(self, effect: NotifyOwner) -> None:
        job = self._state.jobs[effect.job_id]
        text = (
            f"background task {job.id} ({job.kind}: {job.label}) finished "
            f"{status_line(_snapshot(job))}. Read its output with task_output."
        )
        message = create_user_message((TextBlock(text),), BaseSource(BaseSourceKind.PLUGIN))
        owner = self._jobs[effect.job_id].owner
        if effect.route is NoticeRoute.FOLLOWUP:
            owner.followup(message)
        else:
            owner.inject(message)

    async def _teardown(self, owner_key: int) -> None:
        self._run(OwnerDisposed(self._eid(), owner_key))
        await self._releases.pop(owner_key)

    async def _release(self, effect: AwaitJobs) -> None:
        await asyncio.gather(*(self._jobs[job_id].settled.wait() for job_id in effect.job_ids))
        self._run(OwnerReleased(self._eid(), effect.owner_key))

    # ------------------------------------------------------------------ consuming

    def _access(self, job_id: object, caller: Agent) -> _Producer:
        if not isinstance(job_id, str) or not job_id:
            raise ToolFailure(
                f"invalid task_id: expected a non-empty string, got {json.dumps(job_id)}"
            )
        job = self._state.jobs.get(job_id)
        if job is None:
            raise ToolFailure(f"unknown task {job_id}")
        if not accessible(job, caller.id):
            raise ToolFailure(f"task {job_id} belongs to another session")
        return self._jobs[job_id]

    def status(self, job_id: object, caller: Agent) -> JobSnapshot:
        """The job's snapshot, without collecting it."""
        return _snapshot(self._state.jobs[self._access(job_id, caller).id])

    async def read(
        self,
        job_id: object,
        caller: Agent,
        *,
        wait: bool = False,
        timeout: float | None = None,
        signal: AbortSignal | None = None,
    ) -> tuple[str, JobSnapshot]:
        """The final output once terminal (empty while live); optionally wait (BG-33)."""
        producer = self._access(job_id, caller)
        if wait and not producer.settled.is_set():
            producer.waiters += 1
            try:
                await race_abort(asyncio.wait_for(producer.settled.wait(), timeout), signal)
            except TimeoutError:
                pass  # a timed-out wait is not an error: the job keeps running
            except Exception as error:
                raise ToolFailure("wait aborted") from error
            finally:
                producer.waiters -= 1
        if producer.final is not None:  # its owner was released while this wait ran
            return producer.final.output, _snapshot(producer.final)
        self._run(OutputRead(self._eid(), producer.id))
        job = self._state.jobs[producer.id]
        return job.output, _snapshot(job)

    def list(self, caller: Agent) -> list[JobSnapshot]:
        """The caller's jobs, in registration order (BG-32, BG-34)."""
        return [_snapshot(job) for job in visible(self._state, caller.id)]

    def kill(
        self, job_id: object, caller: Agent, reason: str | None = None
    ) -> tuple[bool, JobSnapshot]:
        """Request cancellation; ``(requested, snapshot)`` (rule 4, BG-35)."""
        producer = self._access(job_id, caller)
        effects = self._run(KillRequested(self._eid(), producer.id, reason))
        requested = any(isinstance(effect, CancelProducer) for effect in effects)
        return requested, _snapshot(self._state.jobs[producer.id])

    async def settled(self) -> None:
        """Wait until every settlement task has run (for hosts and tests)."""
        while self._tasks:
            await asyncio.gather(*tuple(self._tasks))


# --------------------------------------------------------------------------- ONE-19


async def settle_run(run: SubagentRun) -> JobOutcome:
    """A one-shot run as a job outcome; the run is always disposed first (rule 6, ONE-19)."""
    try:
        result = await run.result
    except Exception as error:
        outcome = JobOutcome(JobStatus.FAILED, detail=render_exception(error))
    else:
        outcome = job_outcome(result)
    try:
        await run.dispose()
    except Exception as error:
        outcome = dispose_failed(outcome, render_exception(error))
    return outcome


__all__ = [
    "DEFAULT_CANCEL_REASON",
    "Delivery",
    "JobHooks",
    "JobOutcome",
    "JobRegistry",
    "JobSnapshot",
    "JobStarter",
    "JobStatus",
    "output_text",
    "settle_run",
    "status_line",
]
