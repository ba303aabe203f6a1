"""The background task surface: a parent-owned job registry and ``settle_run``.

Theory of operation
-------------------
1. Seed 003 names this surface *tasks* (``task_kill``, ``started background subagent task``);
   its tools live in ``task_tools``. Ids are ``<kind>-<n>`` with a per-kind counter local to
   the registry, from 1, never reused (BG-4).
2. ``start(kind, label, owner, starter)`` runs every preflight before the producer (BG-30):
   non-empty kind and label; the owner is the agent registry's current instance for its id;
   the owner's ``running`` + ``stopping`` jobs are under the limit. Only then is the
   synchronous ``starter`` called, and only after it returns are the id allocated and the
   record stored, with no await in between (BG-2, BG-3). Owner cleanup is attached once.
3. Status: ``running`` -> optional ``stopping`` -> one of ``completed`` | ``killed`` |
   ``failed``; the first settlement wins and a failing ``done`` is contained as ``failed``
   (BG-31). An owned job is reachable only from its owner's session (BG-32).
4. ``kill`` calls the producer's cancel first (a raise leaves the job unchanged), then marks
   it ``stopping`` and reported; a finished job is only marked reported (BG-35). A terminal
   read, a wait that sees settlement, a kill and teardown mark a job reported (BG-36); an
   unreported owned settlement sends the owner one notice (BG-37): ``wakeup`` delivery follows
   up an idle owner while it has wakes left (a claimed user message refills them), otherwise
   injects; ``quiet`` always injects.
5. Owner disposal marks its jobs reported, cancels them (``owner disposed``), awaits their
   settlement, then drops them (BG-8, BG-39); a raising cancel force-fails the record.
6. ``settle_run(run)`` adapts a one-shot run to an outcome (ONE-19, BG-6): completed -> the
   concatenated text, aborted -> killed, any other stop reason -> failed with
   ``<reason>[; diagnostic: <d>]``; a rejected result -> failed with the rendered error; the
   run is always disposed, and a disposal failure turns the outcome failed.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Final

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
from dsh_subagent.core.errors import invalid
from dsh_subagent.core.values import (
    USER_SOURCE,
    BaseSource,
    BaseSourceKind,
    JsonValue,
    KnownStop,
    SessionId,
    TextBlock,
    stop_reason_text,
)

DEFAULT_CANCEL_REASON: Final = "background subagent task killed"
OWNER_DISPOSED: Final = "owner disposed"


class JobStatus(enum.Enum):
    RUNNING = "running"
    STOPPING = "stopping"
    COMPLETED = "completed"
    KILLED = "killed"
    FAILED = "failed"


_LIVE: Final = (JobStatus.RUNNING, JobStatus.STOPPING)


class Delivery(enum.Enum):
    """How a completion notice reaches the owner (BG-37)."""

    WAKEUP = "wakeup"
    QUIET = "quiet"


@attrs.frozen
class JobOutcome:
    """A terminal status with the final output text and an optional detail."""

    status: JobStatus
    output: str = ""
    detail: str | None = None


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


def status_line(job: JobSnapshot) -> str:
    """``[status: <status>]`` or ``[status: <status>, <detail>]``."""
    detail = f", {job.detail}" if job.detail else ""
    return f"[status: {job.status.value}{detail}]"


@attrs.define(eq=False)
class _Job:
    id: str
    kind: str
    label: str
    owner: Agent | None
    hooks: JobHooks
    started_at: float
    settled: asyncio.Event = attrs.field(factory=asyncio.Event)
    status: JobStatus = JobStatus.RUNNING
    output: str = ""
    detail: str | None = None
    finished_at: float | None = None
    reported: bool = False
    waiters: int = 0

    def snapshot(self) -> JobSnapshot:
        return JobSnapshot(
            self.id,
            self.kind,
            self.label,
            self.status,
            self.detail,
            self.started_at,
            self.finished_at,
        )


def _owner_session(owner: Agent | None) -> SessionId | None:
    return None if owner is None else owner.id


class JobRegistry:
    """Background jobs owned by parent agents (rules 2-5)."""

    def __init__(
        self,
        agents: AgentRegistry,
        *,
        max_per_owner: int = 10,
        delivery: Delivery = Delivery.WAKEUP,
        max_consecutive_wakes: int = 3,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not isinstance(max_per_owner, int) or max_per_owner < 1:
            raise invalid("max_per_owner", "must be a positive integer")
        if not isinstance(max_consecutive_wakes, int) or max_consecutive_wakes < 0:
            raise invalid("max_consecutive_wakes", "must be a whole number of turns")
        self._agents = agents
        self._max = max_per_owner
        self._delivery = delivery
        self._max_wakes = max_consecutive_wakes
        self._clock = clock
        self._jobs: dict[str, _Job] = {}
        self._counters: dict[str, itertools.count[int]] = {}
        self._wakes: dict[int, int] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ producing

    def start(self, kind: str, label: str, owner: Agent, starter: JobStarter) -> str:
        """Preflight, run the starter once, then register the job (rule 2)."""
        if not isinstance(kind, str) or not kind:
            raise ToolFailure("invalid job kind: expected a non-empty string")
        if not isinstance(label, str) or not label:
            raise ToolFailure("invalid job label: expected a non-empty string")
        if self._agents.get(owner.id) is not owner:
            raise ToolFailure(
                f'agent "{owner.id}" is not the registered agent instance '
                "(background task owner must be live)"
            )
        busy = sum(1 for job in self._jobs.values() if job.owner is owner and job.status in _LIVE)
        if busy >= self._max:
            raise ToolFailure(
                f"background task limit reached for this owner (limit: {self._max}); use "
                "task_kill to stop an unneeded task, wait for it to finish, then retry"
            )
        self._attach_owner(owner)
        hooks = starter()
        counter = self._counters.setdefault(kind, itertools.count(1))
        job = _Job(f"{kind}-{next(counter)}", kind, label, owner, hooks, self._clock())
        self._jobs[job.id] = job
        task = asyncio.get_running_loop().create_task(self._await_done(job))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return job.id

    async def _await_done(self, job: _Job) -> None:
        try:
            outcome = await job.hooks.done
        except Exception as error:
            outcome = JobOutcome(JobStatus.FAILED, detail=render_exception(error))
        self._settle(job, outcome)

    def _settle(self, job: _Job, outcome: JobOutcome) -> None:
        if job.status not in _LIVE:
            return
        job.status, job.output, job.detail = outcome.status, outcome.output, outcome.detail
        job.finished_at = self._clock()
        job.settled.set()
        job.reported = job.reported or job.waiters > 0  # a wait observes this settlement
        if not job.reported and job.owner is not None:
            self._notify(job.owner, job.snapshot())

    # ------------------------------------------------------------------ notices

    def _attach_owner(self, owner: Agent) -> None:
        key = id(owner)
        if key in self._wakes:
            return
        self._wakes[key] = self._max_wakes

        def refill(note: InboxNotification) -> None:
            if note.message.source == USER_SOURCE:
                self._wakes[key] = self._max_wakes

        owner.ctx.defer(owner.claimed.subscribe(refill))
        owner.ctx.defer(lambda: self._teardown(owner))

    def _notify(self, owner: Agent, job: JobSnapshot) -> None:
        text = (
            f"background task {job.id} ({job.kind}: {job.label}) finished {status_line(job)}. "
            "Read its output with task_output."
        )
        message = create_user_message((TextBlock(text),), BaseSource(BaseSourceKind.PLUGIN))
        key = id(owner)
        wakes = self._wakes.get(key, 0)
        idle = owner.status is AgentStatus.IDLE
        if self._delivery is Delivery.WAKEUP and idle and wakes > 0:
            self._wakes[key] = wakes - 1
            owner.followup(message)
        else:
            owner.inject(message)

    async def _teardown(self, owner: Agent) -> None:
        owned = [job for job in self._jobs.values() if job.owner is owner]
        for job in owned:
            job.reported = True
            if job.status in _LIVE:
                try:
                    job.hooks.cancel(OWNER_DISPOSED)
                except Exception as error:
                    self._settle(
                        job,
                        JobOutcome(
                            JobStatus.FAILED,
                            detail="cancel threw during teardown; work may be orphaned: "
                            + render_exception(error),
                        ),
                    )
        await asyncio.gather(*(job.settled.wait() for job in owned))
        for job in owned:
            self._jobs.pop(job.id, None)
        self._wakes.pop(id(owner), None)

    # ------------------------------------------------------------------ consuming

    def _access(self, job_id: object, caller: Agent) -> _Job:
        if not isinstance(job_id, str) or not job_id:
            raise ToolFailure(
                f"invalid task_id: expected a non-empty string, got {json.dumps(job_id)}"
            )
        job = self._jobs.get(job_id)
        if job is None:
            raise ToolFailure(f"unknown task {job_id}")
        if job.owner is not None and _owner_session(job.owner) != caller.id:
            raise ToolFailure(f"task {job_id} belongs to another session")
        return job

    def status(self, job_id: object, caller: Agent) -> JobSnapshot:
        """The job's snapshot, without collecting it."""
        return self._access(job_id, caller).snapshot()

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
        job = self._access(job_id, caller)
        if wait and job.status in _LIVE:
            job.waiters += 1
            try:
                await race_abort(asyncio.wait_for(job.settled.wait(), timeout), signal)
            except TimeoutError:
                pass  # a timed-out wait is not an error: the job keeps running
            except Exception as error:
                raise ToolFailure("wait aborted") from error
            finally:
                job.waiters -= 1
        if job.status not in _LIVE:
            job.reported = True
        return job.output, job.snapshot()

    def list(self, caller: Agent) -> list[JobSnapshot]:
        """The caller's and unowned jobs, in registration order (BG-32, BG-34)."""
        return [
            job.snapshot()
            for job in self._jobs.values()
            if job.owner is None or _owner_session(job.owner) == caller.id
        ]

    def kill(
        self, job_id: object, caller: Agent, reason: str | None = None
    ) -> tuple[bool, JobSnapshot]:
        """Request cancellation; ``(requested, snapshot)`` (rule 4, BG-35)."""
        job = self._access(job_id, caller)
        if job.status in _LIVE:
            job.hooks.cancel(reason or DEFAULT_CANCEL_REASON)
            job.status = JobStatus.STOPPING
            job.reported = True
            return True, job.snapshot()
        job.reported = True
        return False, job.snapshot()

    async def settled(self) -> None:
        """Wait until every settlement task has run (for hosts and tests)."""
        while self._tasks:
            await asyncio.gather(*tuple(self._tasks))


# --------------------------------------------------------------------------- ONE-19


def output_text(output: tuple[JsonValue, ...]) -> str:
    """The concatenated text of a result's text blocks, no separator (TOOL-23)."""
    return "".join(
        str(block["text"])
        for block in output
        if isinstance(block, Mapping)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
    )


async def settle_run(run: SubagentRun) -> JobOutcome:
    """A one-shot run as a job outcome; the run is always disposed first (rule 6, ONE-19)."""
    try:
        result = await run.result
    except Exception as error:
        outcome = JobOutcome(JobStatus.FAILED, detail=render_exception(error))
    else:
        if result.stop_reason is KnownStop.COMPLETED:
            outcome = JobOutcome(JobStatus.COMPLETED, output_text(result.output))
        elif result.stop_reason is KnownStop.ABORTED:
            outcome = JobOutcome(JobStatus.KILLED)
        else:
            detail = stop_reason_text(result.stop_reason)
            if result.diagnostic:
                detail += f"; diagnostic: {result.diagnostic}"
            outcome = JobOutcome(JobStatus.FAILED, detail=detail)
    try:
        await run.dispose()
    except Exception as error:
        failure = f"dispose failed: {render_exception(error)}"
        detail = f"{outcome.detail}; {failure}" if outcome.detail else failure
        outcome = JobOutcome(JobStatus.FAILED, detail=detail)
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
