"""Exhaustive models of the one-shot run, observer, jobs and activity machines (``spec.bfs``).

Theory of operation
-------------------
1. One ``Model`` per machine, each a small scope: a finite alphabet, the core's ``apply``, and a
   ledger of what the core asked for (the harness's memory the checks need). A node is
   ``(core state, ledger)``; its key is ``bfs.image`` of it (run ids of the observer are
   interchangeable, so its key is the least over their renamings).
2. Every model offers its whole alphabet in every node: an event the core refuses must be
   one its chart has no edge for (``CHART-REFUSAL``), and changes nothing. Events that only
   the harness answers (a starter that returned, a cancel that raised) are offered only
   while the core has asked for them.
3. On every edge: each addressed subject (the run, the run id, each addressed job, the agent)
   moved along its chart's edge for the event's name, every other one stayed; the invariants
   of the machine's lockstep checks (named after their rules) hold on the edge, and its state
   invariants on every new node. INV-MC-3 (no stuck state): a quiescent node is reachable from
   every node by progress events (``bfs.search``).
4. The activity model performs effects as ``spec.activity_machine.ActivityMachine`` does:
   ``Wake``, ``FinishCancel`` and ``ReplayWake`` apply their events within the same step, so
   one edge is a stimulus plus its follow-ups, each follow-up checked against the chart.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Final, TypeAlias

import attrs

from dsh_subagent.core import activity, jobs, oneshot, oneshot_observer
from dsh_subagent.core.activity import ActivityPhase, ActivityState
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.jobs import JobsConfig, JobsState, Owner
from dsh_subagent.core.lifecycle import (
    ProviderAddedInfo,
    ProviderRemovedInfo,
    RunEndInfo,
    RunStartInfo,
)
from dsh_subagent.core.notices import CompletionDelivery, NoticeRoute
from dsh_subagent.core.oneshot import OneShotRun, RunPhase
from dsh_subagent.core.oneshot_observer import Observation
from dsh_subagent.core.residency import AgentStatus
from dsh_subagent.core.values import (
    CancelCause,
    CancelKind,
    EventId,
    InboxTarget,
    KnownStop,
    RunId,
    SessionId,
    SubagentResult,
)
from dsh_subagent.spec.bfs import Findings, Model, freeze, image
from dsh_subagent.spec.charts import (
    AgentActivityChart,
    Edge,
    JobChart,
    OneShotRunChart,
    RunObservationChart,
    edges,
)

_EID: Final = EventId("e")
REFUSAL: Final = "CHART-REFUSAL"
RESULT: Final = SubagentResult((), KnownStop.COMPLETED)


def _targets(chart_edges: frozenset[Edge], source: object, name: str) -> set[object]:
    return {t for s, e, t in chart_edges if s == source and e == name}


def _move(
    chart_edges: frozenset[Edge], subject: str, old: object, name: str, new: object
) -> tuple[Edge | None, list[str]]:
    """The chart edge ``old --name--> new``, or the problem that it is not one."""
    if new in _targets(chart_edges, old, name):
        return (old, name, new), []
    return None, [f"{subject}: {old} -> {new} on {name} is not in the chart"]


def _refusal(
    chart_edges: frozenset[Edge], sources: Iterable[object], event: object, error: Exception
) -> Findings:
    """A refusal is sound when the core says illegal and the chart has no edge either."""
    name = type(event).__name__
    if not isinstance(error, SubagentError):
        return {"RAISES": [f"{type(error).__name__}: {error}"]}
    found = [
        f"{name} refused in {s}, the chart accepts it"
        for s in sources
        if _targets(chart_edges, s, name)
    ]
    return {REFUSAL: found}


def _once(count: int, what: str) -> list[str]:
    return [f"{what} {count} times"] if count > 1 else []


# --------------------------------------------------------------------------- one-shot run


@attrs.frozen
class RunLedger:
    """How often the core asked for each one-shot effect so far."""

    rollbacks: int = 0
    rejects: int = 0
    cancels: int = 0
    results: int = 0
    quiesce: int = 0
    completions: int = 0
    release_failure: str | None = None


RunNode: TypeAlias = tuple[OneShotRun, RunLedger]
RunRecord: TypeAlias = tuple[oneshot.RunEffect, ...]
_RUN_EDGES: Final = edges(OneShotRunChart)
_PUBLISHED: Final = frozenset(RunPhase) - {
    RunPhase.STARTING,
    RunPhase.ROLLING_BACK,
    RunPhase.ROLLED_BACK,
}


@attrs.frozen
class RunScope:
    """The one-shot alphabet: whether a release may fail."""

    release_failure: bool = True


class OneShotModel(Model[RunNode, oneshot.RunEvent, RunRecord]):
    """``core.oneshot.apply``: publication, rollback, one result, one dispose completion."""

    name = "one-shot"
    chart_edges = _RUN_EDGES

    def __init__(self, scope: RunScope) -> None:
        self.scope = scope
        self.alphabet: tuple[oneshot.RunEvent, ...] = (
            oneshot.ChildPublished(_EID),
            oneshot.StartAborted(_EID),
            oneshot.StartFailed(_EID, "setup failed"),
            oneshot.ResultSettled(_EID, RESULT),
            oneshot.ResultFaulted(_EID, "fault"),
            oneshot.DisposeRequested(_EID),
            oneshot.ChildQuiesced(_EID),
            *([oneshot.ChildQuiesced(_EID, "leak")] if scope.release_failure else []),
        )

    def describe(self) -> str:
        return f"one run, {len(self.alphabet)} events"

    def initial(self) -> Sequence[RunNode]:
        return [(oneshot.begin_run(), RunLedger())]

    def enabled(self, node: RunNode) -> Iterable[oneshot.RunEvent]:
        return self.alphabet

    def step(self, node: RunNode, event: oneshot.RunEvent) -> tuple[RunNode, RunRecord]:
        state, effects = oneshot.apply(node[0], event)
        ledger = node[1]
        for effect in effects:
            match effect:
                case oneshot.RollBack():
                    ledger = attrs.evolve(ledger, rollbacks=ledger.rollbacks + 1)
                case oneshot.RejectStart():
                    ledger = attrs.evolve(ledger, rejects=ledger.rejects + 1)
                case oneshot.CancelRemainingWork():
                    ledger = attrs.evolve(ledger, cancels=ledger.cancels + 1)
                case oneshot.ResolveResult() | oneshot.RejectResult():
                    ledger = attrs.evolve(ledger, results=ledger.results + 1)
                case oneshot.AwaitQuiescence():
                    ledger = attrs.evolve(ledger, quiesce=ledger.quiesce + 1)
                case oneshot.CompleteDispose():
                    ledger = attrs.evolve(ledger, completions=ledger.completions + 1)
        if isinstance(event, oneshot.ChildQuiesced):
            ledger = attrs.evolve(ledger, release_failure=event.release_failure)
        return (state, ledger), effects

    def key(self, node: RunNode) -> Hashable:
        return freeze(node)

    def refused(self, node: RunNode, event: oneshot.RunEvent, error: Exception) -> Findings:
        return _refusal(self.chart_edges, [node[0].phase], event, error)

    def check_edge(
        self,
        before: RunNode,
        event: oneshot.RunEvent,
        after: RunNode,
        record: RunRecord,
        taken: set[Edge],
    ) -> Findings:
        (s0, _), (s1, ledger) = before, after
        edge, chart = _move(self.chart_edges, "run", s0.phase, type(event).__name__, s1.phase)
        taken.update([edge] if edge else [])
        kinds = [type(e) for e in record]
        one7 = _once(ledger.rollbacks, "RollBack") + _once(ledger.cancels, "CancelRemainingWork")
        if oneshot.RollBack in kinds and s0.phase is not RunPhase.STARTING:
            one7.append(f"RollBack in {s0.phase.value}")
        one8 = _once(ledger.results, "the result settled")
        if (
            oneshot.ResolveResult in kinds or oneshot.RejectResult in kinds
        ) and s0.phase not in _PUBLISHED:
            one8.append(f"a result settled in {s0.phase.value}")
        one9 = _once(ledger.completions, "CompleteDispose")
        for effect in record:
            if isinstance(effect, oneshot.CompleteDispose) and (
                s1.phase is not RunPhase.DISPOSED
                or effect.release_failure != ledger.release_failure
            ):
                one9.append(f"CompleteDispose({effect.release_failure!r}) into {s1.phase.value}")
            if isinstance(effect, oneshot.RejectStart) and (
                s0.phase in _PUBLISHED or effect.cancelled is not s0.abort_observed
            ):
                one7.append(f"RejectStart(cancelled={effect.cancelled}) in {s0.phase.value}")
        return {"CHART": chart, "INV-ONE-7": one7, "INV-ONE-8": one8, "INV-ONE-9": one9}

    def check_node(self, node: RunNode) -> Findings:
        state, ledger = node
        found = []
        if state.phase is RunPhase.ROLLED_BACK and (ledger.results or ledger.rejects != 1):
            found.append("a rolled-back run settled a result or was not rejected once")
        if state.phase in (RunPhase.SETTLED, RunPhase.AWAITING_QUIESCENCE) and ledger.results != 1:
            found.append(f"{state.phase.value} with {ledger.results} results")
        if state.phase is RunPhase.DISPOSED and (ledger.results, ledger.completions) != (1, 1):
            found.append("disposed without one result and one completion")
        if state.work_cancelled != (ledger.cancels == 1):
            found.append("work_cancelled disagrees with the cancels asked for")
        return {"INV-ONE-STATE": found}

    def quiescent(self, node: RunNode) -> bool:
        return node[0].phase in (RunPhase.ROLLED_BACK, RunPhase.DISPOSED)

    def progress(self, event: oneshot.RunEvent) -> bool:
        return not isinstance(event, oneshot.StartAborted)  # the holder disposes; no abort needed


# --------------------------------------------------------------------------- observer


@attrs.frozen
class ObsLedger:
    """Per run id, what the observer asked for: result observers, starts and ends emitted."""

    observed: frozenset[RunId] = frozenset()
    started: frozenset[RunId] = frozenset()
    ended: frozenset[RunId] = frozenset()
    own: frozenset[RunId] = frozenset()
    """Runs this service published (closed by its result); the others were observed."""


ObsNode: TypeAlias = tuple[Observation, ObsLedger]
ObsRecord: TypeAlias = tuple[oneshot_observer.ObserverEffect, ...]
_OBS_EDGES: Final = edges(RunObservationChart)
_PROVIDER: Final = "p"


@attrs.frozen
class ObsScope:
    """The observer's alphabet: run ids, and whether to offer malformed identities."""

    runs: tuple[str, ...] = ("r1", "r2")
    malformed: bool = True


def _renamed(perm: Mapping[str, str], text: str) -> str:
    return perm.get(text) or text


def _info(run: RunId, provider: str = _PROVIDER) -> RunStartInfo:
    return RunStartInfo(run, provider, "c", False, SessionId("parent"))


class ObserverModel(Model[ObsNode, oneshot_observer.ObserverEvent, ObsRecord]):
    """``core.oneshot_observer.apply``: fresh run ids, one end per start, the registry."""

    name = "observer"
    chart_edges = _OBS_EDGES

    def __init__(self, scope: ObsScope) -> None:
        self.scope = scope
        self.runs = tuple(RunId(r) for r in scope.runs)

    def describe(self) -> str:
        return f"{len(self.runs)} run ids, one provider"

    def initial(self) -> Sequence[ObsNode]:
        return [(Observation(), ObsLedger())]

    def enabled(self, node: ObsNode) -> Iterator[oneshot_observer.ObserverEvent]:
        ob, ledger = oneshot_observer, node[1]
        yield ob.ProviderAdded(_EID, ProviderAddedInfo(_PROVIDER))
        yield ob.ProviderRemoved(_EID, ProviderRemovedInfo(_PROVIDER))
        if self.scope.malformed:
            yield ob.ProviderAdded(_EID, ProviderAddedInfo(""))
            yield ob.RunPublished(
                _EID, RunId(_PROVIDER), _PROVIDER, "c", False, SessionId("parent")
            )
        for run in self.runs:
            yield ob.RunPublished(_EID, run, _PROVIDER, "c", False, SessionId("parent"))
            yield ob.RunStarted(_EID, _info(run))
            if self.scope.malformed:
                yield ob.RunPublished(_EID, run, "", "c", False, SessionId("parent"))
            if run in ledger.own:  # the service's own result closes its run
                yield ob.RunSettled(_EID, run, RESULT)
                yield ob.RunFaulted(_EID, run, "fault")
            else:
                yield ob.RunEnded(_EID, RunEndInfo(_info(run), KnownStop.COMPLETED))
                if self.scope.malformed:
                    yield ob.RunEnded(_EID, RunEndInfo(_info(run, "q"), KnownStop.COMPLETED))

    def step(
        self, node: ObsNode, event: oneshot_observer.ObserverEvent
    ) -> tuple[ObsNode, ObsRecord]:
        state, effects = oneshot_observer.apply(node[0], event)
        ledger = node[1]
        for effect in effects:
            match effect:
                case oneshot_observer.ObserveResult(run_id=run):
                    ledger = attrs.evolve(
                        ledger, observed=ledger.observed | {run}, own=ledger.own | {run}
                    )
                case oneshot_observer.EmitRunStart(info=info):
                    ledger = attrs.evolve(ledger, started=ledger.started | {info.run_id})
                case oneshot_observer.EmitRunEnd(info=info):
                    ledger = attrs.evolve(ledger, ended=ledger.ended | {info.start.run_id})
        return (state, ledger), effects

    def key(self, node: ObsNode) -> Hashable:
        names = self.scope.runs
        perms = [dict(zip(names, p, strict=True)) for p in itertools.permutations(names)]
        return min(image(node, functools.partial(_renamed, perm)) for perm in perms)  # type: ignore[type-var]

    def _run(self, event: oneshot_observer.ObserverEvent) -> RunId | None:
        match event:
            case (
                oneshot_observer.RunPublished(run_id=run) | oneshot_observer.RunSettled(run_id=run)
            ):
                return run
            case oneshot_observer.RunFaulted(run_id=run):
                return run
            case oneshot_observer.RunStarted(info=info):
                return info.run_id
            case oneshot_observer.RunEnded(info=info):
                return info.start.run_id
        return None

    def refused(
        self, node: ObsNode, event: oneshot_observer.ObserverEvent, error: Exception
    ) -> Findings:
        state = node[0]
        if isinstance(error, SubagentError) and error.code is ErrorCode.INVALID_ARGUMENT:
            return {REFUSAL: []}  # a malformed identity (EVT-3, EVT-16), refused before the table
        run = self._run(event)
        if run is None:  # the registry: a repeated add or an unknown removal
            name = event.info.name  # type: ignore[union-attr]
            known = name in state.providers
            ok = isinstance(event, oneshot_observer.ProviderAdded) == known
            return {REFUSAL: [] if ok else [f"{type(event).__name__}({name!r}) refused"]}
        if isinstance(event, oneshot_observer.RunEnded) and run in state.open_runs:
            diverges = event.info.start != state.open_runs[run]
            return {REFUSAL: [] if diverges else ["a matching end refused"]}
        return _refusal(self.chart_edges, [oneshot_observer.run_phase(state, run)], event, error)

    def check_edge(
        self,
        before: ObsNode,
        event: oneshot_observer.ObserverEvent,
        after: ObsNode,
        record: ObsRecord,
        taken: set[Edge],
    ) -> Findings:
        (s0, l0), (s1, _l1) = before, after
        chart: list[str] = []
        subject = self._run(event)
        for run in {*self.runs, *([subject] if subject else [])}:
            old = oneshot_observer.run_phase(s0, run)
            new = oneshot_observer.run_phase(s1, run)
            if run == subject:
                edge, problems = _move(self.chart_edges, run, old, type(event).__name__, new)
                taken.update([edge] if edge else [])
                chart += problems
            elif old != new:
                chart.append(f"{type(event).__name__} moved run {run}, which it did not name")
        evt6 = []
        kinds = [type(e) for e in record]
        if oneshot_observer.EmitRunStart in kinds:
            run = next(
                e.info.run_id for e in record if isinstance(e, oneshot_observer.EmitRunStart)
            )
            if kinds != [oneshot_observer.ObserveResult, oneshot_observer.EmitRunStart]:
                evt6.append(f"publication of {run} asked {[k.__name__ for k in kinds]}")
            if run in l0.started:
                evt6.append(f"a second start of {run}")
        evt2 = []
        for effect in record:
            if isinstance(effect, oneshot_observer.EmitRunEnd):
                run = effect.info.start.run_id
                if run in l0.ended or run not in l0.started:
                    evt2.append(f"an end of {run} without one open start")
                if effect.info.start != s0.open_runs.get(run):
                    evt2.append(f"the end of {run} carries another identity")
                faulted = isinstance(event, oneshot_observer.RunFaulted)
                if faulted and (
                    effect.info.stop_reason is not KnownStop.ERROR
                    or effect.info.last_assistant_message
                ):
                    evt2.append(f"the fault of {run} did not end as error without a message")
        return {"CHART": chart, "INV-EVT-6": evt6, "INV-EVT-2": evt2}

    def check_node(self, node: ObsNode) -> Findings:
        state, ledger = node
        found = [
            f"open run {r} was never seen" for r in state.open_runs if r not in state.seen_run_ids
        ]
        found += ["an empty provider is registered"] if "" in state.providers else []
        if oneshot_observer.is_paired(state) and ledger.started != ledger.ended:
            found.append(
                f"paired, but starts {sorted(ledger.started)} ended {sorted(ledger.ended)}"
            )
        return {"INV-EVT-16": found}

    def quiescent(self, node: ObsNode) -> bool:
        return oneshot_observer.is_paired(node[0])

    def progress(self, event: oneshot_observer.ObserverEvent) -> bool:
        return isinstance(
            event,
            oneshot_observer.RunSettled | oneshot_observer.RunFaulted | oneshot_observer.RunEnded,
        )


# --------------------------------------------------------------------------- jobs


@attrs.frozen
class HarnessAnswer:
    """A performer's answer the core has no event for (a starter or a cancel that raised)."""

    what: str
    subject: object


@attrs.frozen
class JobsLedger:
    """What the performer owes and remembers: outstanding asks, allocated ids, notices."""

    starting: tuple[int, ...] = ()
    watched: frozenset[str] = frozenset()
    kills: frozenset[str] = frozenset()
    teardown: frozenset[str] = frozenset()
    awaiting: frozenset[int] = frozenset()
    disposed: frozenset[int] = frozenset()
    allocated: frozenset[str] = frozenset()
    noticed: frozenset[str] = frozenset()


JobsNode: TypeAlias = tuple[JobsState, JobsLedger]
JobsStep: TypeAlias = jobs.JobEvent | HarnessAnswer
JobsRecord: TypeAlias = tuple[jobs.JobEffect, ...]
_JOB_EDGES: Final = edges(JobChart)


@attrs.frozen
class JobsScope:
    """The registry's scope: owners, jobs ever started, the limit and the wake budget."""

    owners: tuple[int, ...] = (1,)
    jobs: int = 2
    limit: int = 1
    wakes: int = 1


def _phase(state: JobsState, job_id: str) -> jobs.JobPhase:
    job = state.jobs.get(job_id)
    return jobs.ABSENT if job is None else job.status


class JobsModel(Model[JobsNode, JobsStep, JobsRecord]):
    """``core.jobs.apply``: admission, first settlement wins, one notice, owner teardown."""

    name = "jobs"
    chart_edges = _JOB_EDGES

    def __init__(self, scope: JobsScope) -> None:
        self.scope = scope
        self.owners = {key: Owner(key, SessionId(f"owner-{key}")) for key in scope.owners}

    def describe(self) -> str:
        s = self.scope
        return f"{len(s.owners)} owner(s), {s.jobs} jobs, limit {s.limit}, {s.wakes} wake(s)"

    def initial(self) -> Sequence[JobsNode]:
        return [
            (JobsState(JobsConfig(self.scope.limit, delivery, self.scope.wakes)), JobsLedger())
            for delivery in CompletionDelivery
        ]

    def enabled(self, node: JobsNode) -> Iterator[JobsStep]:
        state, ledger = node
        for key in ledger.starting:  # the starter is synchronous: it answers before anything
            yield jobs.JobStarted(_EID, self.owners[key], "subagent", "label", 1.0)
            yield HarnessAnswer("starter raised", key)
            return
        for key, owner in self.owners.items():
            if state.started < self.scope.jobs:
                yield jobs.StartRequested(_EID, owner, key not in ledger.disposed)
            if key not in ledger.disposed:
                yield jobs.OwnerDisposed(_EID, key)
                yield jobs.UserMessageClaimed(_EID, key)
            owned = [j for j in state.jobs.values() if j.owner.key == key]
            if key in ledger.awaiting and all(j.status in jobs.TERMINAL for j in owned):
                yield jobs.OwnerReleased(_EID, key)
        for job in sorted(state.jobs):
            yield jobs.KillRequested(_EID, job)
            yield jobs.OutputRead(_EID, job)
            if job in ledger.watched:
                for status in sorted(jobs.TERMINAL, key=lambda s: s.value):
                    for observed, idle in ((False, False), (False, True), (True, False)):
                        settle = jobs.SETTLEMENT_OF[status]
                        yield settle(
                            _EID, job, 2.0, "out", None, observed=observed, owner_idle=idle
                        )
        for job in sorted(ledger.kills):
            yield jobs.CancelReturned(_EID, job)
            yield HarnessAnswer("kill cancel raised", job)
        for job in sorted(ledger.teardown):
            yield HarnessAnswer("teardown cancel returned", job)
            yield jobs.CancelRaised(_EID, job, "boom", 3.0)

    def step(self, node: JobsNode, event: JobsStep) -> tuple[JobsNode, JobsRecord]:
        state, ledger = node
        if isinstance(event, HarnessAnswer):
            subject = event.subject
            if isinstance(subject, int):
                starting = list(ledger.starting)
                starting.remove(subject)
                return (state, attrs.evolve(ledger, starting=tuple(starting))), ()
            assert isinstance(subject, str)
            field = "kills" if event.what.startswith("kill") else "teardown"
            return (state, attrs.evolve(ledger, **{field: getattr(ledger, field) - {subject}})), ()
        after, effects = jobs.apply(state, event)
        ledger = self._answered(ledger, event)
        for effect in effects:
            match effect:
                case jobs.RunStarter():
                    assert isinstance(event, jobs.StartRequested)
                    ledger = attrs.evolve(
                        ledger, starting=tuple(sorted((*ledger.starting, event.owner.key)))
                    )
                case jobs.WatchProducer(job_id=job):
                    ledger = attrs.evolve(
                        ledger, watched=ledger.watched | {job}, allocated=ledger.allocated | {job}
                    )
                case jobs.CancelProducer(job_id=job, kill=kill):
                    field = "kills" if kill else "teardown"
                    ledger = attrs.evolve(ledger, **{field: getattr(ledger, field) | {job}})
                case jobs.AwaitJobs(owner_key=key):
                    ledger = attrs.evolve(ledger, awaiting=ledger.awaiting | {key})
                case jobs.NotifyOwner(job_id=job):
                    ledger = attrs.evolve(ledger, noticed=ledger.noticed | {job})
                case jobs.DropJob(job=job):  # the performer forgets the producer
                    ledger = attrs.evolve(ledger, watched=ledger.watched - {job.id})
        return (after, ledger), effects

    def _answered(self, ledger: JobsLedger, event: jobs.JobEvent) -> JobsLedger:
        match event:
            case jobs.JobStarted(owner=owner):
                starting = list(ledger.starting)
                starting.remove(owner.key)
                return attrs.evolve(ledger, starting=tuple(starting))
            case (
                jobs.JobCompleted(job_id=job)
                | jobs.JobKilled(job_id=job)
                | jobs.JobFailed(job_id=job)
            ):
                return attrs.evolve(ledger, watched=ledger.watched - {job})
            case jobs.CancelReturned(job_id=job):
                return attrs.evolve(ledger, kills=ledger.kills - {job})
            case jobs.CancelRaised(job_id=job):
                return attrs.evolve(ledger, teardown=ledger.teardown - {job})
            case jobs.OwnerDisposed(owner_key=key):
                return attrs.evolve(ledger, disposed=ledger.disposed | {key})
            case jobs.OwnerReleased(owner_key=key):
                return attrs.evolve(ledger, awaiting=ledger.awaiting - {key})
        return ledger

    def key(self, node: JobsNode) -> Hashable:
        return freeze(node)

    def _subjects(self, state: JobsState, event: JobsStep) -> list[str]:
        match event:
            case jobs.OwnerDisposed(owner_key=key) | jobs.OwnerReleased(owner_key=key):
                return [j.id for j in state.jobs.values() if j.owner.key == key]
            case (
                jobs.StartRequested()
                | jobs.JobStarted()
                | jobs.UserMessageClaimed()
                | HarnessAnswer()
            ):
                return []
            case _:
                return [event.job_id]

    def refused(self, node: JobsNode, event: JobsStep, error: Exception) -> Findings:
        sources = [_phase(node[0], job) for job in self._subjects(node[0], event)]
        if not sources:
            return {"RAISES": [f"{type(event).__name__} refused with no job addressed: {error}"]}
        found = _refusal(self.chart_edges, sources, event, error)
        if found.get(REFUSAL) and not all(
            _targets(self.chart_edges, s, type(event).__name__) for s in sources
        ):
            return {REFUSAL: []}  # the owner-wide event is refused because one job has no edge
        return found

    def check_edge(
        self,
        before: JobsNode,
        event: JobsStep,
        after: JobsNode,
        record: JobsRecord,
        taken: set[Edge],
    ) -> Findings:
        (s0, l0), (s1, _l1) = before, after
        name = type(event).__name__
        subjects = self._subjects(s0, event)
        subjects += [e.job_id for e in record if isinstance(e, jobs.WatchProducer)]
        chart: list[str] = []
        for job in sorted({*s0.jobs, *s1.jobs}):
            old, new = _phase(s0, job), _phase(s1, job)
            if job in subjects:
                edge, problems = _move(self.chart_edges, job, old, name, new)
                taken.update([edge] if edge else [])
                chart += problems
            elif old != new:
                chart.append(f"{name} moved {job}, which it did not address")
        bg31, bg36, bg4, bg37 = [], [], [], []
        for job, done in s0.jobs.items():
            now = s1.jobs.get(job)
            settled = (done.status, done.output, done.detail, done.finished_at)
            kept = now is None or (now.status, now.output, now.detail, now.finished_at) == settled
            if done.status in jobs.TERMINAL and not kept:
                bg31.append(f"{job}'s settlement changed after it was terminal")
        for effect in record:
            if isinstance(effect, jobs.NotifyOwner):
                if effect.job_id in l0.noticed:
                    bg36.append(f"a second notice for {effect.job_id}")
                if (
                    s0.config.delivery is CompletionDelivery.QUIET
                    and effect.route is NoticeRoute.FOLLOWUP
                ):
                    bg37.append(f"a quiet registry woke the owner for {effect.job_id}")
            if isinstance(effect, jobs.WatchProducer) and effect.job_id in l0.allocated:
                bg4.append(f"id {effect.job_id} reused")
        return {
            "CHART": chart,
            "INV-BG-31": bg31,
            "INV-BG-36": bg36,
            "INV-BG-4": bg4,
            "INV-BG-37": bg37,
        }

    def check_node(self, node: JobsNode) -> Findings:
        state = node[0]
        limit, wakes = state.config.max_per_owner, state.config.max_consecutive_wakes
        return {
            "INV-BG-30": [
                f"owner {key} runs {n} jobs"
                for key in self.owners
                if (
                    n := sum(
                        j.owner.key == key and j.status in jobs.LIVE for j in state.jobs.values()
                    )
                )
                > limit
            ],
            "INV-BG-37-BUDGET": [
                f"owner {k} has {w} wakes" for k, w in state.wakes.items() if not 0 <= w <= wakes
            ],
            "INV-BG-31-FINISHED": [
                f"{j.id} finished_at disagrees with {j.status.value}"
                for j in state.jobs.values()
                if (j.finished_at is None) != (j.status in jobs.LIVE)
            ],
        }

    def quiescent(self, node: JobsNode) -> bool:
        state, ledger = node
        return not state.jobs and not (
            ledger.starting or ledger.kills or ledger.teardown or ledger.awaiting
        )

    def progress(self, event: JobsStep) -> bool:
        asks = jobs.StartRequested | jobs.KillRequested | jobs.OutputRead | jobs.UserMessageClaimed
        return not isinstance(event, asks)


# --------------------------------------------------------------------------- activity


@attrs.frozen
class Stimulus:
    """A performer move with no core event: ``remove`` one pending message, or a step's claim."""

    what: str
    target: InboxTarget | None = None


@attrs.frozen
class Performer:
    """The performer's model (``ActivityMachine``): inbox counts, signal, status, owed wake."""

    pending: tuple[int, int] = (0, 0)
    signal: CancelCause | None = None
    status: AgentStatus = AgentStatus.IDLE
    owed: bool = False


ActNode: TypeAlias = tuple[ActivityState, Performer]
ActStep: TypeAlias = activity.ActivityEvent | Stimulus
_ACT_EDGES: Final = edges(AgentActivityChart)
_TARGETS: Final = tuple(InboxTarget)
CAUSES: Final = (
    CancelCause(CancelKind.USER),
    CancelCause(CancelKind.PARENT),
    CancelCause(CancelKind.HOOK, "stop"),
    CancelCause(CancelKind.DISPOSED),
)


@attrs.frozen
class ActScope:
    """The activity alphabet: how many messages may be pending at once."""

    inbox: int = 2


@attrs.frozen
class _Micro:
    """One applied event inside a step (a stimulus or one of its follow-ups)."""

    before: ActivityState
    event: activity.ActivityEvent
    after: ActivityState
    effects: tuple[activity.ActivityEffect, ...]


ActRecord: TypeAlias = tuple[_Micro, ...]


class ActivityModel(Model[ActNode, ActStep, ActRecord]):
    """``core.activity.apply`` with a performer: redirects, first cause, latched wakes."""

    name = "activity"
    chart_edges = _ACT_EDGES

    def __init__(self, scope: ActScope) -> None:
        self.scope = scope

    def describe(self) -> str:
        return f"one agent, up to {self.scope.inbox} pending messages, {len(CAUSES)} causes"

    def initial(self) -> Sequence[ActNode]:
        return [(ActivityState(), Performer())]

    def enabled(self, node: ActNode) -> Iterator[ActStep]:
        state, perf = node
        if sum(perf.pending) < self.scope.inbox:
            for target, wakeup in itertools.product(_TARGETS, (False, True)):
                yield activity.MessageSent(target, wakeup)
        for cause, keep in itertools.product(CAUSES, (False, True)):
            yield activity.CancelRequested(cause, keep)
        for i, target in enumerate(_TARGETS):
            if perf.pending[i]:
                yield Stimulus("remove", target)
        if state.phase is ActivityPhase.RUNNING and any(perf.pending):
            yield Stimulus("claim")
        yield activity.MaintenanceRequested()
        yield activity.TurnEnded(any(perf.pending))
        yield activity.MaintenanceFinished()
        yield activity.DriverFinished()

    def step(self, node: ActNode, event: ActStep) -> tuple[ActNode, ActRecord]:
        state, perf = node
        if isinstance(event, Stimulus):
            pending = list(perf.pending)
            if event.target is not None:
                i = _TARGETS.index(event.target)
                pending[i] -= 1
            else:  # a step claims all next-step input and one next-turn item
                pending = [0, max(0, pending[1] - 1)]
            return (state, attrs.evolve(perf, pending=(pending[0], pending[1]))), ()
        run = _Performance(state, perf)
        run.apply(event)
        return (run.state, run.perf), tuple(run.micro)

    def key(self, node: ActNode) -> Hashable:
        return freeze(node)

    def refused(self, node: ActNode, event: ActStep, error: Exception) -> Findings:
        return _refusal(self.chart_edges, [node[0].phase], event, error)

    def check_edge(
        self, before: ActNode, event: ActStep, after: ActNode, record: ActRecord, taken: set[Edge]
    ) -> Findings:
        (s0, p0), (_s1, p1) = before, after
        chart: list[str] = []
        for micro in record:
            name = type(micro.event).__name__
            edge, problems = _move(
                self.chart_edges, "agent", micro.before.phase, name, micro.after.phase
            )
            taken.update([edge] if edge else [])
            chart += problems
        h3, h5, h2 = [], [], []
        if isinstance(event, activity.MessageSent):
            aborted = s0.phase is not ActivityPhase.IDLE and p0.signal is not None
            inserted = [
                e.target for m in record for e in m.effects if isinstance(e, activity.InsertMessage)
            ]
            expect = InboxTarget.NEXT_TURN if event.wakeup and aborted else event.target
            if inserted != [expect]:
                h3.append(f"{event} inserted {inserted}, not {[expect]}")
        if (
            isinstance(event, activity.CancelRequested)
            and event.keep_inbox
            and p1.pending != p0.pending
        ):
            h5.append("a keep_inbox cancel discarded messages")
        maintenance = isinstance(event, activity.MaintenanceRequested)
        if maintenance and s0.phase is ActivityPhase.IDLE and p1.status is not AgentStatus.IDLE:
            h2.append("maintenance reported a running status")
        if isinstance(event, activity.MaintenanceFinished | activity.DriverFinished) and record:
            restarted = any(isinstance(e, activity.StartDriver) for m in record for e in m.effects)
            if restarted != (p0.owed and any(p0.pending)):
                h3.append(
                    f"a latched wake: restarted {restarted}, owed {p0.owed}, pending {p0.pending}"
                )
        h2 += list(_statuses(record, p0.status))
        return {"CHART": chart, "INV-HARNESS-3": h3, "INV-HARNESS-5": h5, "INV-HARNESS-2": h2}

    def check_node(self, node: ActNode) -> Findings:
        state, perf = node
        found = []
        if perf.status is not state.status:
            found.append(f"emitted {perf.status.value}, the core is {state.status.value}")
        if state.phase is not ActivityPhase.IDLE and perf.signal != state.cause:
            found.append(f"signal {perf.signal}, the core's cause {state.cause}")
        if state.phase is ActivityPhase.IDLE and (state.latched or perf.owed):
            found.append("idle with a latched or owed wake")
        return {"INV-ACTIVITY": found}

    def quiescent(self, node: ActNode) -> bool:
        return node[0].phase is ActivityPhase.IDLE

    def progress(self, event: ActStep) -> bool:
        ends = activity.TurnEnded | activity.DriverFinished | activity.MaintenanceFinished
        return isinstance(event, ends) or (isinstance(event, Stimulus) and event.what == "claim")


def _statuses(record: ActRecord, status: AgentStatus) -> Iterator[str]:
    """HARNESS-2: a status is emitted only when it changes."""
    for micro in record:
        for effect in micro.effects:
            if isinstance(effect, activity.EmitStatus):
                if effect.status is status:
                    yield f"{effect.status.value} emitted again"
                status = effect.status


class _Performance:
    """One step of the performer: apply, perform each effect, apply the follow-ups (rule 4)."""

    def __init__(self, state: ActivityState, perf: Performer) -> None:
        self.state, self.perf = state, perf
        self.micro: list[_Micro] = []

    def apply(self, event: activity.ActivityEvent) -> None:
        perf, before = self.perf, self.state
        active = before.phase is not ActivityPhase.IDLE
        if isinstance(event, activity.MessageSent) and event.wakeup:
            aborted = active and perf.signal is not None
            disposed = perf.signal is not None and perf.signal.kind is CancelKind.DISPOSED
            if (before.phase is ActivityPhase.MAINTENANCE or aborted) and not disposed:
                self.perf = attrs.evolve(self.perf, owed=True)
        if isinstance(event, activity.CancelRequested) and not event.keep_inbox and active:
            self.perf = attrs.evolve(self.perf, owed=False)
        after, effects = activity.apply(before, event)
        self.micro.append(_Micro(before, event, after, effects))
        self.state = after
        started = False
        for effect in effects:
            started |= self._perform(effect)
        if (
            isinstance(event, activity.MaintenanceFinished | activity.DriverFinished)
            and not started
        ):
            self.perf = attrs.evolve(self.perf, owed=False)

    def _perform(self, effect: activity.ActivityEffect) -> bool:
        perf = self.perf
        match effect:
            case activity.InsertMessage(target=target):
                i = _TARGETS.index(target)
                pending = list(perf.pending)
                pending[i] += 1
                self.perf = attrs.evolve(perf, pending=(pending[0], pending[1]))
            case activity.Wake(after_abort=after_abort):
                self.apply(activity.WakeRequested(after_abort))
            case activity.StartDriver() | activity.StartMaintenance():
                self.perf = attrs.evolve(perf, signal=None, owed=False)
                return True
            case activity.EmitStatus(status=status):
                self.perf = attrs.evolve(perf, status=status)
            case activity.ClearInbox():
                self.perf = attrs.evolve(perf, pending=(0, 0))
            case activity.FinishCancel(cause=cause):
                self.apply(activity.InboxCleared(cause))
            case activity.AbortActivity(cause=cause):
                self.perf = attrs.evolve(perf, signal=perf.signal or cause)
            case activity.NextTurn():
                self.perf = attrs.evolve(perf, signal=None, owed=False)
            case activity.ReplayWake():
                if any(self.perf.pending):
                    before = len(self.micro)
                    self.apply(activity.WakeRequested())
                    return any(
                        isinstance(e, activity.StartDriver)
                        for m in self.micro[before:]
                        for e in m.effects
                    )
            case activity.PrepareDriver():
                pass
        return False
