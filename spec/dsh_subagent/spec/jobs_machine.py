"""The job registry's lockstep machine: ``core.jobs.apply`` against one ``JobChart`` per job.

A sibling of ``machines.CoreMachine`` (same habits, its own module so the two stay small). It
needs Hypothesis (a development / ``verify`` extra dependency).

Hypothesis draws event sequences (rules are named after the events) and plays the performer:
a drawn cancel may raise, reported back as the core asks (``CancelReturned`` for a kill,
``CancelRaised`` in teardown). After every step:
- every job the event addressed (one job, or each job of an owner) must have moved along the
  chart's edge for that event name, landing where the core did; every other job must not have
  moved; an event the core refuses must have no edge from the addressed job's chart state;
- the registry invariants below must hold (checked per step, named after their rules).
"""

from __future__ import annotations

import collections
import itertools

from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule

from dsh_subagent.core import jobs
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.notices import CompletionDelivery, NoticeRoute
from dsh_subagent.core.values import EventId, SessionId
from dsh_subagent.spec.charts import JobChart, edges

CHART_EDGES = edges(JobChart)
OWNERS = [jobs.Owner(key, SessionId(f"owner-{key}")) for key in (1, 2, 3)]
KINDS = st.sampled_from(["subagent", "other"])


def _phase(state: jobs.JobsState, job_id: str) -> jobs.JobPhase:
    job = state.jobs.get(job_id)
    return jobs.ABSENT if job is None else job.status


class JobsMachine(RuleBasedStateMachine):
    """Drives ``core.jobs.apply`` and one ``JobChart`` per job in lockstep."""

    job_ids = Bundle("jobs")

    def __init__(self) -> None:
        super().__init__()
        self.state = jobs.JobsState()
        self.charts: dict[str, JobChart] = {}
        self.ids = itertools.count()
        self.allocated: set[str] = set()
        self.notices: collections.Counter[str] = collections.Counter()
        self.disposed: set[int] = set()
        self.settled: dict[str, tuple[object, ...]] = {}

    @initialize(
        limit=st.integers(1, 3),
        delivery=st.sampled_from(CompletionDelivery),
        wakes=st.integers(0, 2),
    )
    def configure(self, limit: int, delivery: CompletionDelivery, wakes: int) -> None:
        self.state = jobs.JobsState(jobs.JobsConfig(limit, delivery, wakes))

    # ------------------------------------------------------------------ plumbing

    def _eid(self) -> EventId:
        return EventId(f"e{next(self.ids)}")

    def _subjects(self, event: jobs.JobEvent) -> list[str]:
        match event:
            case jobs.OwnerDisposed(owner_key=key) | jobs.OwnerReleased(owner_key=key):
                return [j.id for j in self.state.jobs.values() if j.owner.key == key]
            case jobs.StartRequested() | jobs.JobStarted() | jobs.UserMessageClaimed():
                return []
            case _:
                return [event.job_id]

    def _apply(self, event: jobs.JobEvent) -> tuple[jobs.JobEffect, ...]:
        name = type(event).__name__
        subjects = self._subjects(event)
        try:
            after, effects = jobs.apply(self.state, event)
        except SubagentError as error:
            refused = (ErrorCode.ILLEGAL_TRANSITION, ErrorCode.INVALID_ARGUMENT)
            assert error.code in refused, error  # noqa: PT017
            sources = {self.charts[job].current_state_value for job in subjects}
            assert sources, f"core refused {name} with no job addressed"
            assert not all(
                any(s == src and e == name for s, e, _ in CHART_EDGES) for src in sources
            ), f"core refused {name} in {sources}, the chart accepts it"
            return ()
        for effect in effects:
            if isinstance(effect, jobs.WatchProducer):
                assert effect.job_id not in self.allocated, f"id {effect.job_id} reused (BG-4)"
                self.allocated.add(effect.job_id)
                self.charts[effect.job_id] = JobChart()
                subjects.append(effect.job_id)
            if isinstance(effect, jobs.NotifyOwner):
                self.notices[effect.job_id] += 1
                quiet = self.state.config.delivery is CompletionDelivery.QUIET
                assert not (quiet and effect.route is NoticeRoute.FOLLOWUP), "BG-37"
        for job, chart in self.charts.items():
            old, new = _phase(self.state, job), _phase(after, job)
            if job in subjects:
                assert chart.current_state_value == old
                chart.send(name)
                assert chart.current_state_value == new, f"{job}: {old} -{name}-> {new}"
            else:
                assert old == new, f"{name} moved {job}, which it did not address"
        self.state = after
        return effects

    def _cancels(self, effects: tuple[jobs.JobEffect, ...], raises: bool) -> None:
        """Perform the ``CancelProducer`` effects the way the adapter does."""
        for effect in effects:
            if not isinstance(effect, jobs.CancelProducer):
                continue
            if effect.kill and not raises:
                self._apply(jobs.CancelReturned(self._eid(), effect.job_id))
            elif not effect.kill and raises:
                self._apply(jobs.CancelRaised(self._eid(), effect.job_id, "boom", 9.0))

    # ------------------------------------------------------------------ rules

    @rule(target=job_ids, owner=st.sampled_from(OWNERS), kind=KINDS, dead=st.booleans())
    def StartRequested(self, owner: jobs.Owner, kind: str, dead: bool) -> str:
        live = not dead and owner.key not in self.disposed
        effects = self._apply(jobs.StartRequested(self._eid(), owner, live))
        if not any(isinstance(effect, jobs.RunStarter) for effect in effects):
            return "absent-job"
        effects = self._apply(jobs.JobStarted(self._eid(), owner, kind, "label", 1.0))
        (watch,) = effects
        assert isinstance(watch, jobs.WatchProducer)
        return watch.job_id

    @rule(
        job=job_ids,
        status=st.sampled_from(sorted(jobs.TERMINAL, key=lambda s: s.value)),
        observed=st.booleans(),
        idle=st.booleans(),
    )
    def Settled(self, job: str, status: jobs.JobStatus, observed: bool, idle: bool) -> None:
        if job in self.charts:
            eid = self._eid()
            event = jobs.SETTLEMENT_OF[status](
                eid, job, 2.0, f"out {eid}", None, observed=observed, owner_idle=idle
            )
            self._apply(event)

    @rule(job=job_ids, raises=st.booleans())
    def KillRequested(self, job: str, raises: bool) -> None:
        if job in self.charts:
            self._cancels(self._apply(jobs.KillRequested(self._eid(), job)), raises)

    @rule(job=job_ids)
    def CancelReturned(self, job: str) -> None:
        if job in self.charts:
            self._apply(jobs.CancelReturned(self._eid(), job))

    @rule(job=job_ids)
    def OutputRead(self, job: str) -> None:
        if job in self.charts:
            self._apply(jobs.OutputRead(self._eid(), job))

    @rule(owner=st.sampled_from(OWNERS), raises=st.booleans())
    def OwnerDisposed(self, owner: jobs.Owner, raises: bool) -> None:
        self.disposed.add(owner.key)
        self._cancels(self._apply(jobs.OwnerDisposed(self._eid(), owner.key)), raises)

    @rule(owner=st.sampled_from(OWNERS))
    def OwnerReleased(self, owner: jobs.Owner) -> None:
        if [j for j in self.state.jobs.values() if j.owner.key == owner.key]:
            self._apply(jobs.OwnerReleased(self._eid(), owner.key))

    @rule(owner=st.sampled_from(OWNERS))
    def UserMessageClaimed(self, owner: jobs.Owner) -> None:
        self._apply(jobs.UserMessageClaimed(self._eid(), owner.key))

    # ------------------------------------------------------------------ invariants

    @invariant()
    def bg_30_owners_stay_within_the_limit(self) -> None:
        for owner in OWNERS:
            assert jobs.live_count(self.state, owner.key) <= self.state.config.max_per_owner

    @invariant()
    def bg_37_wake_budgets_stay_in_range(self) -> None:
        limit = self.state.config.max_consecutive_wakes
        assert all(0 <= wakes <= limit for wakes in self.state.wakes.values())

    @invariant()
    def bg_31_finished_iff_terminal(self) -> None:
        for job in self.state.jobs.values():
            assert (job.finished_at is None) == (job.status in jobs.LIVE), job

    @invariant()
    def bg_31_first_settlement_wins(self) -> None:
        for job in self.state.jobs.values():
            if job.status in jobs.TERMINAL:
                record = (job.status, job.output, job.detail, job.finished_at)
                assert self.settled.setdefault(job.id, record) == record, job

    @invariant()
    def bg_36_one_notice_per_job_at_most(self) -> None:
        assert all(count == 1 for count in self.notices.values()), self.notices
