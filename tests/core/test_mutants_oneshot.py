"""One-shot run rules the mutation check found unpinned (docs/mutation.md lists each mutant).

The dispose completion is pinned with its cause and release failure, a refused event by its
exact message, and the cancel-once bookkeeping by the cancel it does not repeat.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from dsh_subagent.core import oneshot
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.oneshot import (
    AwaitQuiescence,
    CancelRemainingWork,
    ChildPublished,
    ChildQuiesced,
    CompleteDispose,
    DisposeRequested,
    OneShotRun,
    ResolveResult,
    ResultSettled,
    RunEffect,
    RunEvent,
    RunPhase,
    StartAborted,
    begin_run,
)
from dsh_subagent.core.values import EventId, KnownStop, SubagentResult

RESULT = SubagentResult(("answer",), KnownStop.COMPLETED)


def _run(events: Sequence[RunEvent]) -> tuple[OneShotRun, tuple[RunEffect, ...]]:
    state = begin_run()
    effects: tuple[RunEffect, ...] = ()
    for event in events:
        state, effects = oneshot.apply(state, event)
    return state, effects


def test_one_9_quiescence_last_completes_the_dispose_with_its_release_failure() -> None:
    quiesced = ChildQuiesced(EventId("q"), "leak")
    state, effects = _run(
        [
            ChildPublished(EventId("p")),
            ResultSettled(EventId("r"), RESULT),
            DisposeRequested(EventId("d")),
            quiesced,
        ]
    )
    assert state.phase is RunPhase.DISPOSED
    assert effects == (CompleteDispose(EventId("q"), "leak"),)


def test_one_9_the_result_last_completes_the_dispose_with_the_release_failure() -> None:
    _, effects = _run(
        [
            ChildPublished(EventId("p")),
            DisposeRequested(EventId("d")),
            ChildQuiesced(EventId("q"), "leak"),
            ResultSettled(EventId("r"), RESULT),
        ]
    )
    assert effects == (ResolveResult(EventId("r"), RESULT), CompleteDispose(EventId("r"), "leak"))


def test_one_7_an_abort_that_lost_the_race_cancels_once_at_publication() -> None:
    state, effects = _run([StartAborted(EventId("a")), ChildPublished(EventId("p"))])
    assert effects == (CancelRemainingWork(EventId("p")),)
    _, effects = oneshot.apply(state, DisposeRequested(EventId("d")))
    assert effects == (AwaitQuiescence(EventId("d")),)


def test_one_7_an_abort_after_publication_is_recorded_and_cancels_once() -> None:
    state, effects = _run([ChildPublished(EventId("p")), StartAborted(EventId("a"))])
    assert effects == (CancelRemainingWork(EventId("a")),)
    assert state == OneShotRun(RunPhase.PUBLISHED, abort_observed=True, work_cancelled=True)


def test_one_9_an_abort_during_dispose_does_not_cancel_again() -> None:
    state, effects = _run([ChildPublished(EventId("p")), DisposeRequested(EventId("d"))])
    assert effects == (CancelRemainingWork(EventId("d")), AwaitQuiescence(EventId("d")))
    _, effects = oneshot.apply(state, StartAborted(EventId("a")))
    assert effects == ()


def test_one_8_a_result_before_publication_is_refused_naming_event_and_phase() -> None:
    with pytest.raises(SubagentError) as info:
        oneshot.apply(begin_run(), ResultSettled(EventId("r"), RESULT))
    assert info.value.code is ErrorCode.ILLEGAL_TRANSITION
    assert info.value.message == "ResultSettled is not accepted in phase starting"
