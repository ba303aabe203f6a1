"""The one-shot run lifecycle machine (ONE-*, EVT-7); its event pair is the observer's."""

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
from dsh_subagent.core.values import EventId, KnownStop, SubagentResult

E = EventId("e")
PUBLISH = ChildPublished(EventId("pub"))
ABORT = StartAborted(EventId("abort"))
FAIL = StartFailed(EventId("fail"), "boom")
DONE = ResultSettled(EventId("done"), SubagentResult(("answer",), KnownStop.COMPLETED))
ABORTED = ResultSettled(EventId("aborted"), SubagentResult((), KnownStop.ABORTED))
FAULT = ResultFaulted(EventId("fault"), "transport lost")
DISPOSE = DisposeRequested(EventId("dispose"))
QUIESCED = ChildQuiesced(EventId("quiet"))

ALL_EVENTS: tuple[RunEvent, ...] = (PUBLISH, ABORT, FAIL, DONE, FAULT, DISPOSE, QUIESCED)


def fresh() -> OneShotRun:
    return oneshot.begin_run()


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


def test_one_4_publication_hands_the_run_to_the_caller_without_run_effects() -> None:
    assert fresh().phase is RunPhase.STARTING
    state, effects = run([PUBLISH])
    assert state.phase is RunPhase.PUBLISHED
    assert effects == ()


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
    assert kinds(effects) == [RollBack, CancelRemainingWork]


def test_one_7_abort_after_publication_cancels_once_and_keeps_the_id() -> None:
    state, effects = run([PUBLISH, ABORT, ABORT])
    assert kinds(effects) == [CancelRemainingWork]
    state, effects = oneshot.apply(state, ABORTED)
    assert kinds(effects) == [ResolveResult]


def test_one_8_child_failure_resolves_with_its_stop_reason() -> None:
    refused = ResultSettled(E, SubagentResult(("partial",), KnownStop.REFUSAL))
    _, effects = run([PUBLISH, refused])
    assert effects == (ResolveResult(E, refused.result),)


def test_one_8_infrastructure_fault_rejects_the_result() -> None:
    _, effects = run([PUBLISH, FAULT])
    assert effects == (RejectResult(FAULT.event_id, "transport lost"),)


def test_one_9_dispose_waits_for_result_and_quiescence_in_either_order() -> None:
    state, effects = run([PUBLISH, DISPOSE])
    assert kinds(effects) == [CancelRemainingWork, AwaitQuiescence]
    after_result, effects = oneshot.apply(state, DONE)
    assert kinds(effects) == [ResolveResult]
    assert oneshot.dispose_outcome(after_result) == (False, None)
    done, effects = oneshot.apply(after_result, QUIESCED)
    assert kinds(effects) == [CompleteDispose]
    assert oneshot.dispose_outcome(done) == (True, None)
    after_quiet, effects = oneshot.apply(state, QUIESCED)
    assert effects == ()
    done, effects = oneshot.apply(after_quiet, FAULT)
    assert kinds(effects) == [RejectResult, CompleteDispose]


def test_one_9_dispose_of_a_settled_run_only_awaits_quiescence() -> None:
    _, effects = run([PUBLISH, DONE, DISPOSE])
    assert kinds(effects) == [ResolveResult, AwaitQuiescence]


def test_one_9_dispose_is_idempotent_and_returns_the_same_completion() -> None:
    state, effects = run([PUBLISH, DONE, DISPOSE, DISPOSE])
    assert kinds(effects) == [ResolveResult, AwaitQuiescence]
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


def test_one_16_a_published_run_settles_its_result_exactly_once() -> None:
    _, effects = run([PUBLISH, ABORT, DISPOSE, FAULT, QUIESCED, DISPOSE, ABORT])
    assert kinds(effects) == [CancelRemainingWork, AwaitQuiescence, RejectResult, CompleteDispose]


def test_one_17_a_one_shot_run_has_no_steer_resume_or_followup() -> None:
    names = {t.__name__.lower() for (_, t) in TRANSITIONS}
    assert not any(word in name for name in names for word in ("steer", "resume", "follow"))


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
def test_one_9_any_event_sequence_settles_the_result_once_and_completes_dispose_once(
    events: list[RunEvent],
) -> None:
    """Over any event sequence: illegal pairs refused, each effect caused by its event, the
    result settled at most once, never before publication, and dispose completed only once."""
    state = fresh()
    settled: list[type] = []
    for event in events:
        if (state.phase, type(event)) not in TRANSITIONS:
            with pytest.raises(SubagentError, match="ILLEGAL_TRANSITION"):
                oneshot.apply(state, event)
            continue
        state, effects = oneshot.apply(state, event)
        settled.extend(type(e) for e in effects if isinstance(e, ResolveResult | RejectResult))
        assert all(e.cause == event.event_id for e in effects)
    assert len(settled) <= 1
    if state.phase in (RunPhase.STARTING, RunPhase.ROLLING_BACK, RunPhase.ROLLED_BACK):
        assert settled == []
    assert oneshot.dispose_outcome(state)[0] == (state.phase is RunPhase.DISPOSED)
