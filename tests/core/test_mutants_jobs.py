"""Job-registry rules the mutation check found unpinned (docs/mutation.md lists each mutant).

Refusals are pinned by their exact field and message; a read, a raising cancel and a
settlement for an owner the registry never attached are pinned by the state they leave.
"""

from __future__ import annotations

import pytest

from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.jobs import (
    CANCEL_THREW,
    CancelRaised,
    CancelReturned,
    JobCompleted,
    JobOutcome,
    JobsConfig,
    JobsState,
    JobStarted,
    JobStatus,
    KillRequested,
    NotifyOwner,
    OutputRead,
    OwnerDisposed,
    ReleaseWaiters,
    StartRequested,
    WatchProducer,
    apply,
    in_order,
)
from dsh_subagent.core.notices import NoticeRoute
from dsh_subagent.core.values import EventId
from tests.core.test_jobs import ALICE, E, started


def test_bg_31_an_outcome_that_is_not_terminal_is_refused_by_name() -> None:
    with pytest.raises(SubagentError) as info:
        JobOutcome(JobStatus.RUNNING)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    assert info.value.field == "status"
    assert info.value.message == "status: a job outcome must be completed, killed or failed"


def test_bg_31_a_second_settlement_is_refused_naming_the_event_and_phase() -> None:
    state, job = started(JobsState())
    state, _ = apply(state, JobCompleted(E, job, 2.0, observed=True))
    with pytest.raises(SubagentError) as info:
        apply(state, JobCompleted(E, job, 3.0))
    assert info.value.code is ErrorCode.ILLEGAL_TRANSITION
    assert info.value.field == "event"
    assert info.value.message == "JobCompleted is not accepted in phase completed"


def test_bg_31_an_unknown_job_is_refused_by_name() -> None:
    with pytest.raises(SubagentError) as info:
        apply(JobsState(), OutputRead(E, "work-9"))
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    assert info.value.field == "job_id"
    assert info.value.message == "job_id: unknown job work-9"


def test_bg_39_a_raising_teardown_cancel_fails_the_job_with_no_output() -> None:
    state, job = started(JobsState())
    state, _ = apply(state, OwnerDisposed(E, ALICE.key))
    state, effects = apply(state, CancelRaised(E, job, "boom", 2.0))
    failed = state.jobs[job]
    assert (failed.status, failed.output, failed.detail) == (
        JobStatus.FAILED,
        "",
        CANCEL_THREW + "boom",
    )
    assert effects == (ReleaseWaiters(E, job),)


def test_bg_37_a_job_of_an_unattached_owner_has_no_wakes_to_spend() -> None:
    # JobStarted without an admission: the owner has no wake budget, so an idle owner's
    # notice is injected and no budget appears.
    state, _ = apply(JobsState(), JobStarted(E, ALICE, "work", "label", 1.0))
    state, effects = apply(state, JobCompleted(E, "work-1", 2.0, owner_idle=True))
    assert effects == (ReleaseWaiters(E, "work-1"), NotifyOwner(E, "work-1", NoticeRoute.INJECT))
    assert ALICE.key not in state.wakes


def test_bg_36_reading_an_unreported_finished_job_marks_it_reported() -> None:
    state, job = started(JobsState())
    state, _ = apply(state, JobCompleted(E, job, 2.0, "answer"))
    assert not state.jobs[job].reported
    state, _ = apply(state, OutputRead(E, job))
    assert state.jobs[job].reported


def test_bg_36_reading_a_reported_stopping_job_keeps_it_reported() -> None:
    state, job = started(JobsState())
    state, _ = apply(state, KillRequested(E, job))
    state, _ = apply(state, CancelReturned(E, job))
    assert state.jobs[job].status is JobStatus.STOPPING
    assert state.jobs[job].reported
    state, _ = apply(state, OutputRead(E, job))
    assert state.jobs[job].reported


# The whole-core run at 7d8972a (docs/mutation.md).


def test_bg_30_a_bad_registry_limit_is_refused_by_name() -> None:
    with pytest.raises(SubagentError) as info:
        JobsConfig(max_per_owner=0)
    assert (info.value.code, info.value.message) == (
        ErrorCode.INVALID_ARGUMENT,
        "max_per_owner: must be a positive integer",
    )
    with pytest.raises(SubagentError) as info:
        JobsConfig(max_consecutive_wakes=-1)
    assert (info.value.code, info.value.message) == (
        ErrorCode.INVALID_ARGUMENT,
        "max_consecutive_wakes: must be a whole number of turns",
    )


def test_bg_2_a_started_job_keeps_its_kind_and_label_and_is_watched_by_its_event() -> None:
    state, effects = apply(JobsState(), StartRequested(EventId("ask"), ALICE, owner_live=True))
    state, effects = apply(state, JobStarted(EventId("went"), ALICE, "build", "make all", 2.0))
    assert effects == (WatchProducer(EventId("went"), "build-1"),)
    job = state.jobs["build-1"]
    assert (job.kind, job.label, job.owner, job.started_at) == ("build", "make all", ALICE, 2.0)


def test_bg_32_jobs_list_in_registration_order_past_the_small_map() -> None:
    state = JobsState(config=JobsConfig(max_per_owner=100))
    registered = []
    for _ in range(40):
        state, job_id = started(state)
        registered.append(job_id)
    assert [job.id for job in in_order(state)] == registered
