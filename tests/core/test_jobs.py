"""The background task registry machine (BG-4, BG-8, BG-30..37, BG-39) and its routing."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.jobs import (
    ABSENT,
    CANCEL_THREW,
    DEFAULT_CANCEL_REASON,
    LIVE,
    OWNER_DISPOSED,
    SETTLEMENT_OF,
    TERMINAL,
    TRANSITIONS,
    AttachOwner,
    AwaitJobs,
    CancelProducer,
    CancelRaised,
    CancelReturned,
    DropJob,
    JobCompleted,
    JobEffect,
    JobEvent,
    JobFailed,
    JobKilled,
    JobOutcome,
    JobsConfig,
    JobsState,
    JobStarted,
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
    in_order,
    live_count,
    visible,
)
from dsh_subagent.core.notices import CompletionDelivery, NoticeRoute, route_job_notice
from dsh_subagent.core.values import EventId, SessionId

E = EventId("e")
ALICE = Owner(1, SessionId("alice"))
BOB = Owner(2, SessionId("bob"))
_ids = itertools.count()


def eid() -> EventId:
    return EventId(f"e{next(_ids)}")


def started(
    state: JobsState, owner: Owner = ALICE, kind: str = "work", at: float = 1.0
) -> tuple[JobsState, str]:
    """Admit and register one job; return the state and the new id."""
    state, effects = apply(state, StartRequested(eid(), owner, owner_live=True))
    assert isinstance(effects[-1], RunStarter)
    state, effects = apply(state, JobStarted(eid(), owner, kind, "label", at))
    (watch,) = effects
    assert isinstance(watch, WatchProducer)
    return state, watch.job_id


def kinds(effects: tuple[JobEffect, ...]) -> list[type[JobEffect]]:
    return [type(effect) for effect in effects]


# ----------------------------------------------------------------------------- admission and ids


def test_bg_30_admission_refuses_a_dead_owner_then_a_full_one() -> None:
    state = JobsState(JobsConfig(max_per_owner=1))
    dead = apply(state, StartRequested(E, ALICE, owner_live=False))
    assert dead == (state, (RefuseStart(E, StartRefusal.OWNER_NOT_LIVE, 1),))
    state, _ = started(state)
    full = apply(state, StartRequested(E, ALICE, owner_live=True))
    assert full == (state, (RefuseStart(E, StartRefusal.LIMIT_REACHED, 1),))
    assert kinds(apply(state, StartRequested(E, BOB, owner_live=True))[1]) == [
        AttachOwner,
        RunStarter,
    ]


def test_bg_30_the_owner_is_attached_once_with_a_full_budget() -> None:
    state = JobsState(JobsConfig(max_consecutive_wakes=2))
    first, effects = apply(state, StartRequested(E, ALICE, owner_live=True))
    assert effects == (AttachOwner(E, ALICE), RunStarter(E))
    assert first.wakes[ALICE.key] == 2
    assert apply(first, StartRequested(E, ALICE, owner_live=True))[1] == (RunStarter(E),)


def test_bg_30_config_is_validated() -> None:
    for bad in (0, -1, True, 1.5):
        with pytest.raises(SubagentError) as caught:
            JobsConfig(max_per_owner=bad)  # type: ignore[arg-type]
        assert caught.value.field == "max_per_owner"
    for bad in (-1, False, 0.5):
        with pytest.raises(SubagentError) as caught:
            JobsConfig(max_consecutive_wakes=bad)  # type: ignore[arg-type]
        assert caught.value.field == "max_consecutive_wakes"
    assert JobsConfig(max_consecutive_wakes=0).max_consecutive_wakes == 0


def test_bg_4_ids_count_per_kind_from_one() -> None:
    state = JobsState()
    state, a = started(state, kind="subagent")
    state, b = started(state, kind="other")
    state, c = started(state, kind="subagent")
    assert (a, b, c) == ("subagent-1", "other-1", "subagent-2")
    assert [job.id for job in in_order(state)] == [a, b, c]
    assert state.jobs[a].status is JobStatus.RUNNING
    assert state.jobs[a].started_at == 1.0


def test_bg_31_an_outcome_must_be_terminal() -> None:
    for status in LIVE:
        with pytest.raises(SubagentError) as caught:
            JobOutcome(status)
        assert caught.value.field == "status"
    assert {SETTLEMENT_OF[JobOutcome(s).status] for s in TERMINAL} == {
        JobCompleted,
        JobKilled,
        JobFailed,
    }


# ----------------------------------------------------------------------------- status


def test_bg_31_first_settlement_wins() -> None:
    state, job = started(JobsState())
    state, effects = apply(state, JobFailed(E, job, 2.0, detail="broke", observed=True))
    assert effects == (ReleaseWaiters(E, job),)
    record = state.jobs[job]
    assert (record.status, record.detail, record.finished_at) == (JobStatus.FAILED, "broke", 2.0)
    for late in (JobCompleted(E, job, 3.0, "x"), CancelRaised(E, job, "e", 3.0)):
        assert apply(state, late) == (state, ())
    assert apply(state, CancelReturned(E, job)) == (state, ())


def test_bg_31_a_producer_settled_job_refuses_a_second_settlement() -> None:
    """A producer settles once: only a force-failed job still takes its producer's settlement."""
    for status in (JobStatus.COMPLETED, JobStatus.KILLED):
        state = in_phase(status)
        for again in SETTLEMENT_OF.values():
            with pytest.raises(SubagentError) as caught:
                apply(state, again(E, "work-1", 3.0, "late"))
            assert caught.value.code is ErrorCode.ILLEGAL_TRANSITION
        assert apply(state, CancelRaised(E, "work-1", "e", 3.0)) == (state, ())
    state, job = started(JobsState())
    state, _ = apply(state, CancelRaised(E, job, "boom", 2.0))  # force-failed, producer owed
    for late in SETTLEMENT_OF.values():
        assert apply(state, late(E, job, 3.0, "late")) == (state, ())


def test_bg_31_the_status_table_covers_every_phase() -> None:
    phases = [ABSENT, *JobStatus]
    assert {phase for phase, _ in TRANSITIONS} == set(phases)
    assert all(
        TRANSITIONS[(JobStatus.FAILED, s)] is JobStatus.FAILED for s in SETTLEMENT_OF.values()
    )
    assert {TRANSITIONS[(done, OwnerReleased)] for done in TERMINAL} == {ABSENT}
    assert not any((live, OwnerReleased) in TRANSITIONS for live in LIVE)


def test_bg_31_terminal_jobs_stop_occupying_capacity() -> None:
    state = JobsState(JobsConfig(max_per_owner=2))
    state, one = started(state)
    state, two = started(state)
    state, _ = apply(state, KillRequested(E, two))
    state, _ = apply(state, CancelReturned(E, two))
    assert state.jobs[two].status is JobStatus.STOPPING
    assert live_count(state, ALICE.key) == 2  # stopping keeps occupying
    state, _ = apply(state, JobCompleted(E, one, 2.0, observed=True))
    assert live_count(state, ALICE.key) == 1
    assert live_count(state, BOB.key) == 0


def test_bg_31_a_job_event_for_an_unknown_or_dropped_job_is_refused() -> None:
    with pytest.raises(SubagentError) as caught:
        apply(JobsState(), OutputRead(E, "work-9"))
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT


# ----------------------------------------------------------------------------- kill and read


def test_bg_35_kill_asks_for_cancel_and_counts_once_it_returned() -> None:
    state, job = started(JobsState())
    asked, effects = apply(state, KillRequested(E, job))
    assert effects == (CancelProducer(E, job, DEFAULT_CANCEL_REASON, kill=True),)
    assert asked == state  # a raising cancel leaves the job as it was
    assert apply(state, KillRequested(E, job, "not needed"))[1] == (
        CancelProducer(E, job, "not needed", kill=True),
    )
    stopping, effects = apply(asked, CancelReturned(E, job))
    assert effects == ()
    assert (stopping.jobs[job].status, stopping.jobs[job].reported) == (JobStatus.STOPPING, True)
    again, effects = apply(stopping, KillRequested(E, job))
    assert kinds(effects) == [CancelProducer]
    assert apply(again, CancelReturned(E, job))[0].jobs[job].status is JobStatus.STOPPING


def test_bg_35_killing_a_finished_job_only_marks_it_reported() -> None:
    state, job = started(JobsState())
    state, _ = apply(state, JobKilled(E, job, 2.0, owner_idle=True))
    assert not state.jobs[job].reported
    after, effects = apply(state, KillRequested(E, job))
    assert effects == ()
    assert after.jobs[job].reported
    assert after.jobs[job].status is JobStatus.KILLED


def test_bg_36_a_terminal_read_marks_reported_a_live_read_does_not() -> None:
    state, job = started(JobsState())
    assert apply(state, OutputRead(E, job)) == (state, ())
    state, _ = apply(state, JobCompleted(E, job, 2.0, "answer", observed=True))
    state, _ = apply(state, OutputRead(E, job))
    assert state.jobs[job].reported
    assert state.jobs[job].output == "answer"


def test_bg_36_a_reported_or_observed_settlement_sends_no_notice() -> None:
    state, job = started(JobsState())
    _, effects = apply(state, JobCompleted(E, job, 2.0, observed=True, owner_idle=True))
    assert effects == (ReleaseWaiters(E, job),)
    state, _ = apply(state, KillRequested(E, job))
    state, _ = apply(state, CancelReturned(E, job))
    _, effects = apply(state, JobKilled(E, job, 2.0, owner_idle=True))
    assert effects == (ReleaseWaiters(E, job),)


# ----------------------------------------------------------------------------- notices


def test_bg_37_notices_follow_up_an_idle_owner_while_wakes_last() -> None:
    state = JobsState(JobsConfig(max_consecutive_wakes=1))
    state, one = started(state)
    state, two = started(state)
    state, three = started(state)
    state, effects = apply(state, JobCompleted(E, one, 2.0, owner_idle=True))
    assert effects == (ReleaseWaiters(E, one), NotifyOwner(E, one, NoticeRoute.FOLLOWUP))
    assert state.wakes[ALICE.key] == 0
    state, effects = apply(state, JobCompleted(E, two, 2.0, owner_idle=True))
    assert effects[-1] == NotifyOwner(E, two, NoticeRoute.INJECT)
    state, _ = apply(state, UserMessageClaimed(E, ALICE.key))
    assert state.wakes[ALICE.key] == 1
    _, effects = apply(state, JobCompleted(E, three, 2.0, owner_idle=False))
    assert effects[-1] == NotifyOwner(E, three, NoticeRoute.INJECT)  # busy owner


def test_bg_37_quiet_delivery_always_injects() -> None:
    state, job = started(JobsState(JobsConfig(delivery=CompletionDelivery.QUIET)))
    after, effects = apply(state, JobCompleted(E, job, 2.0, owner_idle=True))
    assert effects[-1] == NotifyOwner(E, job, NoticeRoute.INJECT)
    assert after.wakes == state.wakes


def test_bg_37_a_claim_for_an_unattached_owner_changes_nothing() -> None:
    state = JobsState()
    assert apply(state, UserMessageClaimed(E, ALICE.key)) == (state, ())


@given(st.sampled_from(CompletionDelivery), st.booleans(), st.integers(-1, 4))
def test_bg_37_job_notice_route(delivery: CompletionDelivery, idle: bool, wakes: int) -> None:
    route = route_job_notice(delivery, idle, wakes)
    wake = delivery is CompletionDelivery.WAKEUP and idle and wakes > 0
    assert route is (NoticeRoute.FOLLOWUP if wake else NoticeRoute.INJECT)


# ----------------------------------------------------------------------------- owners


def test_bg_32_access_fence_and_listing() -> None:
    state, mine = started(JobsState(), ALICE)
    state, theirs = started(state, BOB)
    assert accessible(state.jobs[mine], ALICE.session)
    assert not accessible(state.jobs[theirs], ALICE.session)
    assert [job.id for job in visible(state, ALICE.session)] == [mine]
    assert visible(state, SessionId("nobody")) == []


def test_bg_39_owner_disposal_marks_reported_cancels_the_live_and_awaits() -> None:
    state, done = started(JobsState(), ALICE)
    state, live = started(state, ALICE)
    state, other = started(state, BOB)
    state, _ = apply(state, JobCompleted(E, done, 2.0, observed=True))
    state, effects = apply(state, OwnerDisposed(E, ALICE.key))
    assert effects == (
        CancelProducer(E, live, OWNER_DISPOSED, kill=False),
        AwaitJobs(E, ALICE.key, (done, live)),
    )
    assert state.jobs[done].reported
    assert state.jobs[live].reported
    assert not state.jobs[other].reported
    assert state.jobs[live].status is JobStatus.RUNNING
    with pytest.raises(SubagentError) as caught:
        apply(state, OwnerReleased(E, ALICE.key))  # a live job is still owned
    assert caught.value.code is ErrorCode.ILLEGAL_TRANSITION
    failed, effects = apply(state, CancelRaised(E, live, "RuntimeError: stuck", 3.0))
    assert effects == (ReleaseWaiters(E, live),)  # reported: no notice
    assert failed.jobs[live].detail == CANCEL_THREW + "RuntimeError: stuck"
    assert failed.jobs[live].status is JobStatus.FAILED
    released, effects = apply(failed, OwnerReleased(E, ALICE.key))
    assert effects == (DropJob(E, failed.jobs[done]), DropJob(E, failed.jobs[live]))
    assert list(released.jobs) == [other]
    assert ALICE.key not in released.wakes
    assert BOB.key in released.wakes


def test_bg_8_an_owner_without_jobs_is_released_at_once() -> None:
    state, _ = apply(JobsState(), StartRequested(E, ALICE, owner_live=True))
    state, effects = apply(state, OwnerDisposed(E, ALICE.key))
    assert effects == (AwaitJobs(E, ALICE.key, ()),)
    released, effects = apply(state, OwnerReleased(E, ALICE.key))
    assert effects == ()
    assert released.wakes == JobsState().wakes
    assert apply(released, OwnerReleased(E, ALICE.key)) == (released, ())


def test_bg_39_a_cancel_raise_without_teardown_is_still_reported() -> None:
    state, job = started(JobsState())
    state, effects = apply(state, CancelRaised(E, job, "boom", 2.0))
    assert effects == (ReleaseWaiters(E, job),)


# ----------------------------------------------------------------------------- the table


EVENTS: dict[type[JobEvent], JobEvent] = {
    JobCompleted: JobCompleted(E, "work-1", 2.0),
    JobKilled: JobKilled(E, "work-1", 2.0),
    JobFailed: JobFailed(E, "work-1", 2.0),
    KillRequested: KillRequested(E, "work-1"),
    CancelReturned: CancelReturned(E, "work-1"),
    CancelRaised: CancelRaised(E, "work-1", "e", 2.0),
    OutputRead: OutputRead(E, "work-1"),
    OwnerDisposed: OwnerDisposed(E, ALICE.key),
    OwnerReleased: OwnerReleased(E, ALICE.key),
}


def in_phase(status: JobStatus) -> JobsState:
    state, job = started(JobsState())
    if status is JobStatus.STOPPING:
        state, _ = apply(state, KillRequested(E, job))
        state, _ = apply(state, CancelReturned(E, job))
    elif status in TERMINAL:
        state, _ = apply(state, SETTLEMENT_OF[status](E, job, 2.0, observed=True))
    return state


@pytest.mark.parametrize("status", list(JobStatus))
@pytest.mark.parametrize("event_type", list(EVENTS))
def test_bg_31_every_job_event_lands_on_its_table_target_or_is_refused(
    status: JobStatus, event_type: type[JobEvent]
) -> None:
    state = in_phase(status)
    target = TRANSITIONS.get((status, event_type))
    if target is None:
        with pytest.raises(SubagentError) as caught:
            apply(state, EVENTS[event_type])
        assert caught.value.code is ErrorCode.ILLEGAL_TRANSITION
        return
    after, _ = apply(state, EVENTS[event_type])
    record = after.jobs.get("work-1")
    assert (ABSENT if record is None else record.status) == target
