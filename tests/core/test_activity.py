"""The agent activity machine and wake latch (HARNESS-2, -3, -5, -8, -9)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh_subagent.core import activity
from dsh_subagent.core.activity import (
    TRANSITIONS,
    AbortActivity,
    ActivityEffect,
    ActivityEvent,
    ActivityPhase,
    ActivityState,
    CancelRequested,
    ClearInbox,
    DriverFinished,
    EmitStatus,
    FinishCancel,
    InboxCleared,
    InsertMessage,
    MaintenanceFinished,
    MaintenanceRequested,
    MessageSent,
    NextTurn,
    PrepareDriver,
    ReplayWake,
    StartDriver,
    StartMaintenance,
    TurnEnded,
    Wake,
    WakeRequested,
)
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.residency import AgentStatus
from dsh_subagent.core.values import CancelCause, CancelKind, InboxTarget

USER = CancelCause(CancelKind.USER)
PARENT = CancelCause(CancelKind.PARENT)
DISPOSED = CancelCause(CancelKind.DISPOSED)
STEP, TURN = InboxTarget.NEXT_STEP, InboxTarget.NEXT_TURN
IDLE = ActivityState()
RUNNING = ActivityState(ActivityPhase.RUNNING)
MAINTENANCE = ActivityState(ActivityPhase.MAINTENANCE)

CAUSES = st.sampled_from([USER, PARENT, DISPOSED, CancelCause(CancelKind.HOOK, "stop")])
STATES = st.builds(
    ActivityState,
    st.sampled_from([ActivityPhase.MAINTENANCE, ActivityPhase.RUNNING]),
    st.none() | CAUSES,
    st.booleans(),
) | st.just(IDLE)
EVENTS: st.SearchStrategy[ActivityEvent] = st.one_of(
    st.builds(MessageSent, st.sampled_from(list(InboxTarget)), st.booleans()),
    st.builds(WakeRequested, st.booleans()),
    st.builds(CancelRequested, CAUSES, st.booleans()),
    st.builds(InboxCleared, CAUSES),
    st.just(MaintenanceRequested()),
    st.just(MaintenanceFinished()),
    st.builds(TurnEnded, st.booleans()),
    st.just(DriverFinished()),
)


def run(state: ActivityState, *events: ActivityEvent) -> tuple[ActivityState, list[ActivityEffect]]:
    """Apply ``events`` in order, collecting every effect."""
    effects: list[ActivityEffect] = []
    for event in events:
        state, step = activity.apply(state, event)
        effects += step
    return state, effects


def aborted(phase: ActivityPhase, cause: CancelCause) -> ActivityState:
    return ActivityState(phase, cause)


# ------------------------------------------------------------------ HARNESS-2 status


def test_harness_2_status_is_running_only_while_a_driver_runs() -> None:
    assert IDLE.status is AgentStatus.IDLE
    assert MAINTENANCE.status is AgentStatus.IDLE
    assert RUNNING.status is AgentStatus.RUNNING


def test_harness_2_start_and_end_of_a_driver_emit_status_maintenance_none() -> None:
    assert activity.apply(IDLE, WakeRequested()) == (
        RUNNING,
        (StartDriver(), EmitStatus(AgentStatus.RUNNING)),
    )
    assert activity.apply(RUNNING, DriverFinished()) == (IDLE, (EmitStatus(AgentStatus.IDLE),))
    assert activity.apply(IDLE, MaintenanceRequested()) == (MAINTENANCE, (StartMaintenance(),))
    assert activity.apply(MAINTENANCE, MaintenanceFinished()) == (IDLE, ())


def test_harness_2_an_idle_state_has_no_cause_and_no_latch() -> None:
    for cause, latched in ((USER, False), (None, True)):
        with pytest.raises(SubagentError) as error:
            ActivityState(ActivityPhase.IDLE, cause, latched)
        assert error.value.code is ErrorCode.ILLEGAL_TRANSITION


# ------------------------------------------------------------------ HARNESS-3 send and wake


def test_harness_3_send_without_wake_only_inserts_where_asked() -> None:
    for state in (IDLE, RUNNING, aborted(ActivityPhase.RUNNING, USER)):
        for target in InboxTarget:
            assert activity.apply(state, MessageSent(target, False)) == (
                state,
                (InsertMessage(target),),
            )


def test_harness_3_waking_send_from_idle_prepares_inserts_then_wakes() -> None:
    state, effects = activity.apply(IDLE, MessageSent(STEP, True))
    assert state is IDLE
    assert effects == (PrepareDriver(), InsertMessage(STEP), Wake(False))


def test_harness_3_waking_send_into_a_live_activity_keeps_its_target() -> None:
    for state in (RUNNING, MAINTENANCE):
        assert activity.apply(state, MessageSent(STEP, True)) == (
            state,
            (InsertMessage(STEP), Wake(False)),
        )


def test_harness_3_waking_send_into_an_aborted_activity_is_redirected_to_next_turn() -> None:
    for phase in (ActivityPhase.RUNNING, ActivityPhase.MAINTENANCE):
        state = aborted(phase, USER)
        assert activity.apply(state, MessageSent(STEP, True)) == (
            state,
            (InsertMessage(TURN), Wake(True)),
        )


def test_harness_3_live_driver_claims_the_work_itself() -> None:
    assert activity.apply(RUNNING, WakeRequested()) == (RUNNING, ())


def test_harness_3_aborted_driver_latches_a_redirected_wake_once() -> None:
    state = aborted(ActivityPhase.RUNNING, USER)
    latched, effects = activity.apply(state, WakeRequested(after_abort=True))
    assert (latched.latched, latched.cause, effects) == (True, USER, ())
    assert activity.apply(latched, WakeRequested(after_abort=True)) == (latched, ())
    # a wake that was not redirected (the abort came during the splice) does not latch
    assert activity.apply(state, WakeRequested()) == (state, ())


def test_harness_3_maintenance_latches_every_wake() -> None:
    state, _ = activity.apply(MAINTENANCE, WakeRequested())
    assert state.latched
    state, _ = activity.apply(aborted(ActivityPhase.MAINTENANCE, PARENT), WakeRequested())
    assert state.latched


def test_harness_3_disposed_cancel_never_latches() -> None:
    for phase in (ActivityPhase.RUNNING, ActivityPhase.MAINTENANCE):
        state = aborted(phase, DISPOSED)
        assert activity.apply(state, WakeRequested(after_abort=True)) == (state, ())


def test_harness_3_latched_wake_replays_when_the_activity_ends() -> None:
    latched = ActivityState(ActivityPhase.RUNNING, USER, latched=True)
    assert activity.apply(latched, DriverFinished()) == (
        IDLE,
        (EmitStatus(AgentStatus.IDLE), ReplayWake()),
    )
    in_maintenance = ActivityState(ActivityPhase.MAINTENANCE, latched=True)
    assert activity.apply(in_maintenance, MaintenanceFinished()) == (IDLE, (ReplayWake(),))


def test_harness_3_redirect_latch_and_replay_start_a_new_driver() -> None:
    """The peers' most common bug: a follow-up into an aborted turn is lost."""
    state, effects = run(
        IDLE, WakeRequested(), CancelRequested(USER, keep_inbox=True), MessageSent(STEP, True)
    )
    assert effects[-2:] == [InsertMessage(TURN), Wake(True)]
    state, effects = run(state, WakeRequested(after_abort=True), DriverFinished())
    assert effects == [EmitStatus(AgentStatus.IDLE), ReplayWake()]
    assert activity.apply(state, WakeRequested()) == (
        RUNNING,
        (StartDriver(), EmitStatus(AgentStatus.RUNNING)),
    )


# ------------------------------------------------------------------ HARNESS-5 cancel


def test_harness_5_cancel_without_activity_clears_and_arms_nothing() -> None:
    assert activity.apply(IDLE, CancelRequested(USER)) == (IDLE, (ClearInbox(),))
    assert activity.apply(IDLE, CancelRequested(USER, keep_inbox=True)) == (IDLE, ())


def test_harness_5_cancel_clears_first_then_drops_the_latch_and_aborts() -> None:
    latched = ActivityState(ActivityPhase.RUNNING, latched=True)
    state, effects = activity.apply(latched, CancelRequested(USER))
    assert (state, effects) == (latched, (ClearInbox(), FinishCancel(USER)))
    state, effects = activity.apply(state, InboxCleared(USER))
    assert (state.cause, state.latched, effects) == (USER, False, (AbortActivity(USER),))


def test_harness_5_keep_inbox_aborts_at_once_and_keeps_the_latch() -> None:
    latched = ActivityState(ActivityPhase.MAINTENANCE, latched=True)
    state, effects = activity.apply(latched, CancelRequested(PARENT, keep_inbox=True))
    assert (state.cause, state.latched, effects) == (PARENT, True, (AbortActivity(PARENT),))


def test_harness_5_first_cause_wins() -> None:
    first = aborted(ActivityPhase.RUNNING, USER)
    assert activity.apply(first, CancelRequested(DISPOSED, keep_inbox=True)) == (first, ())
    latched = ActivityState(ActivityPhase.RUNNING, USER, latched=True)
    assert activity.apply(latched, InboxCleared(DISPOSED)) == (first, ())


# ------------------------------------------------------------------ HARNESS-8 maintenance


def test_harness_8_maintenance_starts_only_from_true_idle() -> None:
    for state in (MAINTENANCE, RUNNING):
        with pytest.raises(SubagentError) as error:
            activity.apply(state, MaintenanceRequested())
        assert error.value.code is ErrorCode.ILLEGAL_TRANSITION
        assert error.value.field == "event"


def test_harness_8_maintenance_latch_replays_only_as_asked() -> None:
    state, effects = run(IDLE, MaintenanceRequested(), WakeRequested(), MaintenanceFinished())
    assert (state, effects) == (IDLE, [StartMaintenance(), ReplayWake()])


# ------------------------------------------------------------------ HARNESS-9 turns


def test_harness_9_pending_work_starts_another_turn_with_a_fresh_signal_and_no_latch() -> None:
    spent = ActivityState(ActivityPhase.RUNNING, USER, latched=True)
    assert activity.apply(spent, TurnEnded(pending=True)) == (RUNNING, (NextTurn(),))
    assert activity.apply(spent, TurnEnded(pending=False)) == (spent, ())


# ------------------------------------------------------------------ the table


def test_harness_2_illegal_pairs_raise_and_change_nothing() -> None:
    for event in (InboxCleared(USER), MaintenanceFinished(), TurnEnded(True), DriverFinished()):
        if (ActivityPhase.IDLE, type(event)) in TRANSITIONS:
            continue
        with pytest.raises(SubagentError) as error:
            activity.apply(IDLE, event)
        assert error.value.code is ErrorCode.ILLEGAL_TRANSITION


@given(STATES, EVENTS)
def test_harness_3_apply_follows_the_table_and_emits_status_only_on_change(
    state: ActivityState, event: ActivityEvent
) -> None:
    target = TRANSITIONS.get((state.phase, type(event)))
    if target is None:
        with pytest.raises(SubagentError):
            activity.apply(state, event)
        return
    after, effects = activity.apply(state, event)
    assert after.phase is target
    statuses = [e.status for e in effects if isinstance(e, EmitStatus)]
    assert statuses == ([after.status] if after.status is not state.status else [])
    aborts = [e for e in effects if isinstance(e, AbortActivity)]
    assert len(aborts) == (state.cause is None and after.cause is not None)
    assert not any(isinstance(e, StartDriver) for e in effects) or state.phase is ActivityPhase.IDLE
