"""The one-shot run lifecycle machine (ONE-*, EVT-6, EVT-7)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh_subagent.core import oneshot
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.oneshot import (
    TRANSITIONS,
    AwaitQuiescence,
    CancelRemainingWork,
    ChildPublished,
    ChildQuiesced,
    CompleteDispose,
    DisposeRequested,
    EmitEnd,
    EmitStart,
    ObserveResult,
    OneShotRun,
    RejectResult,
    RejectStart,
    ResolveResult,
    ResultFaulted,
    ResultSettled,
    RollBack,
    RunEffect,
    RunEvent,
    RunPhase,
    StartAborted,
    StartFailed,
)
from dsh_subagent.core.values import (
    EventId,
    KnownStop,
    Mode,
    RunId,
    SessionId,
    SubagentResult,
)

E = EventId("e")
PUBLISH = ChildPublished(EventId("pub"), RunId("run-1"), "child-1", local=True)
ABORT = StartAborted(EventId("abort"))
FAIL = StartFailed(EventId("fail"), "boom")
DONE = ResultSettled(EventId("done"), SubagentResult(("answer",), KnownStop.COMPLETED))
ABORTED = ResultSettled(EventId("aborted"), SubagentResult((), KnownStop.ABORTED))
FAULT = ResultFaulted(EventId("fault"), "transport lost")
DISPOSE = DisposeRequested(EventId("dispose"))
QUIESCED = ChildQuiesced(EventId("quiet"))

ALL_EVENTS: tuple[RunEvent, ...] = (PUBLISH, ABORT, FAIL, DONE, FAULT, DISPOSE, QUIESCED)


def fresh() -> OneShotRun:
    return oneshot.begin_run("spawn", SessionId("parent"), label="write tests")


def run(events: Sequence[RunEvent]) -> tuple[OneShotRun, tuple[RunEffect, ...]]:
    state = fresh()
    effects: list[RunEffect] = []
    for event in events:
        state, produced = oneshot.apply(state, event)
        effects.extend(produced)
    return state, tuple(effects)


def kinds(effects: Sequence[RunEffect]) -> list[type]:
    return [type(e) for e in effects]


# A path reaching every phase, used by the product test.
PATHS: dict[RunPhase, tuple[RunEvent, ...]] = {
    RunPhase.STARTING: (),
    RunPhase.ROLLING_BACK: (ABORT,),
    RunPhase.ROLLED_BACK: (FAIL,),
    RunPhase.PUBLISHED: (PUBLISH,),
    RunPhase.SETTLED: (PUBLISH, DONE),
    RunPhase.DISPOSING: (PUBLISH, DISPOSE),
    RunPhase.AWAITING_QUIESCENCE: (PUBLISH, DONE, DISPOSE),
    RunPhase.AWAITING_RESULT: (PUBLISH, DISPOSE, QUIESCED),
    RunPhase.DISPOSED: (PUBLISH, DONE, DISPOSE, QUIESCED),
}


def test_one_2_begin_run_validates_before_anything() -> None:
    with pytest.raises(SubagentError) as caught:
        oneshot.begin_run("", SessionId("p"))
    assert caught.value.field == "provider"
    with pytest.raises(SubagentError) as caught:
        oneshot.begin_run("spawn", SessionId(""))
    assert caught.value.field == "parent_session"
    assert fresh().phase is RunPhase.STARTING


def test_one_4_publication_observes_result_before_emitting_start() -> None:
    state, effects = run([PUBLISH])
    assert state.phase is RunPhase.PUBLISHED
    assert kinds(effects) == [ObserveResult, EmitStart]
    start = effects[1]
    assert isinstance(start, EmitStart)
    assert start.cause == PUBLISH.event_id
    info = start.info
    assert (info.run_id, info.provider, info.child_id, info.local) == (
        "run-1",
        "spawn",
        "child-1",
        True,
    )
    assert (info.parent_session, info.mode, info.label) == ("parent", Mode.ONE_SHOT, "write tests")


def test_one_5_publication_with_empty_ids_is_refused_and_changes_nothing() -> None:
    state = fresh()
    with pytest.raises(SubagentError) as caught:
        oneshot.apply(state, ChildPublished(E, RunId("run"), "", local=False))
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert caught.value.field == "child_id"
    assert state == fresh()


def test_one_7_abort_before_publication_rolls_back_without_events() -> None:
    state, effects = run([ABORT, ABORT, FAIL])
    assert state.phase is RunPhase.ROLLED_BACK
    assert kinds(effects) == [RollBack, RejectStart]
    reject = effects[-1]
    assert isinstance(reject, RejectStart)
    assert reject.cancelled


def test_evt_7_failed_start_emits_no_events() -> None:
    state, effects = run([FAIL, ABORT])
    assert state.phase is RunPhase.ROLLED_BACK
    assert kinds(effects) == [RejectStart]
    reject = effects[0]
    assert isinstance(reject, RejectStart)
    assert not reject.cancelled
    assert reject.message == "boom"


def test_one_7_publication_winning_an_abort_race_cancels_remaining_work() -> None:
    state, effects = run([ABORT, PUBLISH])
    assert state.phase is RunPhase.PUBLISHED
    assert kinds(effects) == [RollBack, ObserveResult, EmitStart, CancelRemainingWork]
    assert state.identity is not None


def test_one_7_abort_after_publication_cancels_once_and_keeps_the_id() -> None:
    state, effects = run([PUBLISH, ABORT, ABORT])
    assert kinds(effects) == [ObserveResult, EmitStart, CancelRemainingWork]
    assert state.identity is not None
    assert state.identity.run_id == "run-1"
    state, effects = oneshot.apply(state, ABORTED)
    assert kinds(effects) == [ResolveResult, EmitEnd]


def test_one_8_child_failure_resolves_with_its_stop_reason() -> None:
    refused = ResultSettled(E, SubagentResult(("partial",), KnownStop.REFUSAL))
    _, effects = run([PUBLISH, refused])
    resolve, end = effects[2], effects[3]
    assert isinstance(resolve, ResolveResult)
    assert resolve.result.stop_reason is KnownStop.REFUSAL
    assert isinstance(end, EmitEnd)
    assert end.info.stop_reason is KnownStop.REFUSAL
    assert end.info.last_assistant_message == ("partial",)


def test_one_8_infrastructure_fault_rejects_and_ends_as_error() -> None:
    _, effects = run([PUBLISH, FAULT])
    assert kinds(effects)[2:] == [RejectResult, EmitEnd]
    end = effects[3]
    assert isinstance(end, EmitEnd)
    assert end.info.stop_reason is KnownStop.ERROR
    assert end.info.last_assistant_message is None


def test_evt_6_end_carries_start_identity_and_output() -> None:
    _, effects = run([PUBLISH, DONE])
    start, end = effects[1], effects[3]
    assert isinstance(start, EmitStart)
    assert isinstance(end, EmitEnd)
    assert end.info.start == start.info
    assert end.info.last_assistant_message == ("answer",)
    _, effects = run([PUBLISH, ABORTED])
    end = effects[3]
    assert isinstance(end, EmitEnd)
    assert end.info.last_assistant_message is None


def test_one_9_dispose_waits_for_result_and_quiescence_in_either_order() -> None:
    state, effects = run([PUBLISH, DISPOSE])
    assert kinds(effects)[2:] == [CancelRemainingWork, AwaitQuiescence]
    after_result, effects = oneshot.apply(state, DONE)
    assert kinds(effects) == [ResolveResult, EmitEnd]
    assert oneshot.dispose_outcome(after_result) == (False, None)
    done, effects = oneshot.apply(after_result, QUIESCED)
    assert kinds(effects) == [CompleteDispose]
    assert oneshot.dispose_outcome(done) == (True, None)
    after_quiet, effects = oneshot.apply(state, QUIESCED)
    assert effects == ()
    done, effects = oneshot.apply(after_quiet, FAULT)
    assert kinds(effects) == [RejectResult, EmitEnd, CompleteDispose]


def test_one_9_dispose_of_a_settled_run_only_awaits_quiescence() -> None:
    _, effects = run([PUBLISH, DONE, DISPOSE])
    assert kinds(effects)[4:] == [AwaitQuiescence]


def test_one_9_dispose_is_idempotent_and_returns_the_same_completion() -> None:
    state, effects = run([PUBLISH, DONE, DISPOSE, DISPOSE])
    assert kinds(effects)[4:] == [AwaitQuiescence]
    state, _ = oneshot.apply(state, ChildQuiesced(E, release_failure="handle leak"))
    again, effects = oneshot.apply(state, DISPOSE)
    assert effects == ()
    assert oneshot.dispose_outcome(again) == oneshot.dispose_outcome(state) == (True, "handle leak")


def test_one_9_result_rejection_is_not_repeated_by_dispose() -> None:
    state, effects = run([PUBLISH, FAULT, DISPOSE, QUIESCED])
    completion = effects[-1]
    assert isinstance(completion, CompleteDispose)
    assert completion.release_failure is None
    assert state.phase is RunPhase.DISPOSED


def test_one_16_every_published_run_has_exactly_one_start_and_end() -> None:
    _, effects = run([PUBLISH, ABORT, DISPOSE, FAULT, QUIESCED, DISPOSE, ABORT])
    assert kinds(effects).count(EmitStart) == 1
    assert kinds(effects).count(EmitEnd) == 1


def test_one_17_a_one_shot_run_has_no_steer_resume_or_followup() -> None:
    names = {t.__name__.lower() for (_, t) in TRANSITIONS}
    assert not any(word in name for name in names for word in ("steer", "resume", "follow"))


def test_one_state_invariant_identity_iff_published() -> None:
    with pytest.raises(SubagentError):
        OneShotRun(RunPhase.PUBLISHED, "spawn", SessionId("p"))


@pytest.mark.parametrize("phase", list(RunPhase))
@pytest.mark.parametrize("event", ALL_EVENTS, ids=lambda e: type(e).__name__)
def test_one_transition_table_is_total_legal_target_or_illegal(
    phase: RunPhase, event: RunEvent
) -> None:
    state, _ = run(PATHS[phase])
    assert state.phase is phase
    target = TRANSITIONS.get((phase, type(event)))
    if target is None:
        with pytest.raises(SubagentError) as caught:
            oneshot.apply(state, event)
        assert caught.value.code is ErrorCode.ILLEGAL_TRANSITION
    else:
        assert oneshot.apply(state, event)[0].phase is target


@given(st.lists(st.sampled_from(ALL_EVENTS), max_size=25))
def test_evt_6_start_always_precedes_end_and_pairs_once(events: list[RunEvent]) -> None:
    """Over any legal event sequence: no end without a prior start, and at most one of each."""
    state = fresh()
    emitted: list[type] = []
    for event in events:
        if (state.phase, type(event)) not in TRANSITIONS:
            with pytest.raises(SubagentError, match="ILLEGAL_TRANSITION"):
                oneshot.apply(state, event)
            continue
        state, effects = oneshot.apply(state, event)
        emitted.extend(type(e) for e in effects if isinstance(e, EmitStart | EmitEnd))
        assert all(e.cause == event.event_id for e in effects)
    assert emitted in ([], [EmitStart], [EmitStart, EmitEnd])
    if state.phase is RunPhase.ROLLED_BACK:
        assert emitted == []
    assert oneshot.dispose_outcome(state)[0] == (state.phase is RunPhase.DISPOSED)


def test_evt_6_run_settled_at_publication_still_starts_first() -> None:
    """A result that settled before the caller saw it still follows the start."""
    _, effects = run([PUBLISH, DONE])
    assert kinds(effects) == [ObserveResult, EmitStart, ResolveResult, EmitEnd]
