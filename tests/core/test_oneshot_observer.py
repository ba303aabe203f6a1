"""The service's observer: publication, start/end pairing and the stream invariants (EVT-*)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh_subagent.core import lifecycle, oneshot_observer
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.lifecycle import (
    ProviderAddedInfo,
    ProviderRemovedInfo,
    RunEndInfo,
    RunStartInfo,
)
from dsh_subagent.core.oneshot_observer import (
    TRANSITIONS,
    EmitRunEnd,
    EmitRunStart,
    Observation,
    ObserverEffect,
    ObserveResult,
    ObserverEvent,
    ProviderAdded,
    ProviderRemoved,
    RunEnded,
    RunFaulted,
    RunObservation,
    RunPublished,
    RunSettled,
    RunStarted,
)
from dsh_subagent.core.values import EventId, KnownStop, Mode, RunId, SessionId, SubagentResult

E = EventId("e")
RUN = RunId("run-1")
PUBLISH = RunPublished(
    EventId("pub"), RUN, "spawn", "child-1", True, SessionId("parent"), "write tests"
)
DONE = RunSettled(EventId("done"), RUN, SubagentResult(("answer",), KnownStop.COMPLETED))
ABORTED = RunSettled(EventId("aborted"), RUN, SubagentResult((), KnownStop.ABORTED))
FAULT = RunFaulted(EventId("fault"), RUN, "transport lost")


def start_info(run: str = "r1", provider: str = "spawn", child: str = "c1") -> RunStartInfo:
    return RunStartInfo(RunId(run), provider, child, True, SessionId("p"))


def fold(
    events: Sequence[ObserverEvent], state: Observation | None = None
) -> tuple[Observation, tuple[ObserverEffect, ...]]:
    state = Observation() if state is None else state
    effects: list[ObserverEffect] = []
    for event in events:
        state, produced = oneshot_observer.apply(state, event)
        effects.extend(produced)
    return state, tuple(effects)


def started(state: Observation, info: RunStartInfo) -> Observation:
    return fold([RunStarted(E, info)], state)[0]


def kinds(effects: Sequence[ObserverEffect]) -> list[type]:
    return [type(e) for e in effects]


# --------------------------------------------------------------------------- one-shot runs


def test_one_4_publication_observes_result_before_emitting_start() -> None:
    state, effects = fold([PUBLISH])
    assert oneshot_observer.run_phase(state, RUN) is RunObservation.OPEN
    assert effects[0] == ObserveResult(PUBLISH.event_id, RUN)
    start = effects[1]
    assert isinstance(start, EmitRunStart)
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
    state = Observation()
    bad = RunPublished(E, RunId("run"), "spawn", "", False, SessionId("p"))
    with pytest.raises(SubagentError) as caught:
        oneshot_observer.apply(state, bad)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert caught.value.field == "child_id"
    assert state == Observation()


def test_one_8_child_failure_ends_with_its_stop_reason() -> None:
    refused = RunSettled(E, RUN, SubagentResult(("partial",), KnownStop.REFUSAL))
    _, effects = fold([PUBLISH, refused])
    end = effects[2]
    assert isinstance(end, EmitRunEnd)
    assert end.info.stop_reason is KnownStop.REFUSAL
    assert end.info.last_assistant_message == ("partial",)


def test_one_8_infrastructure_fault_ends_as_error() -> None:
    _, effects = fold([PUBLISH, FAULT])
    end = effects[2]
    assert isinstance(end, EmitRunEnd)
    assert end.info.stop_reason is KnownStop.ERROR
    assert end.info.last_assistant_message is None


def test_evt_6_end_carries_start_identity_and_output() -> None:
    _, effects = fold([PUBLISH, DONE])
    start, end = effects[1], effects[2]
    assert isinstance(start, EmitRunStart)
    assert isinstance(end, EmitRunEnd)
    assert end.info.start == start.info
    assert end.info.last_assistant_message == ("answer",)
    _, effects = fold([PUBLISH, ABORTED])
    end = effects[2]
    assert isinstance(end, EmitRunEnd)
    assert end.info.last_assistant_message is None


def test_evt_6_run_settled_at_publication_still_starts_first() -> None:
    """A result that settled before the caller saw it still follows the start."""
    _, effects = fold([PUBLISH, DONE])
    assert kinds(effects) == [ObserveResult, EmitRunStart, EmitRunEnd]


def test_one_16_every_published_run_has_exactly_one_start_and_end() -> None:
    state, effects = fold([PUBLISH, FAULT])
    assert kinds(effects).count(EmitRunStart) == kinds(effects).count(EmitRunEnd) == 1
    with pytest.raises(SubagentError) as caught:
        oneshot_observer.apply(state, DONE)
    assert caught.value.code is ErrorCode.ILLEGAL_TRANSITION
    assert oneshot_observer.is_paired(state)


_RUN_EVENTS: tuple[ObserverEvent, ...] = (
    PUBLISH,
    DONE,
    FAULT,
    RunStarted(E, start_info(run=RUN, child="child-1")),
    RunEnded(E, lifecycle.faulted_end_info(start_info(run=RUN, child="child-1"))),
)
_PATHS: dict[RunObservation, tuple[ObserverEvent, ...]] = {
    RunObservation.UNSEEN: (),
    RunObservation.OPEN: (PUBLISH,),
    RunObservation.ENDED: (PUBLISH, DONE),
}


@pytest.mark.parametrize("phase", list(RunObservation))
@pytest.mark.parametrize("event", _RUN_EVENTS, ids=lambda e: type(e).__name__)
def test_evt_16_transition_table_is_total_legal_target_or_illegal(
    phase: RunObservation, event: ObserverEvent
) -> None:
    state, _ = fold(_PATHS[phase])
    assert oneshot_observer.run_phase(state, RUN) is phase
    target = TRANSITIONS.get((phase, type(event)))
    if target is None:
        with pytest.raises(SubagentError) as caught:
            oneshot_observer.apply(state, event)
        assert caught.value.code is ErrorCode.ILLEGAL_TRANSITION
    else:
        after, _ = oneshot_observer.apply(state, event)
        assert oneshot_observer.run_phase(after, RUN) is target


@given(st.lists(st.sampled_from((PUBLISH, DONE, ABORTED, FAULT)), max_size=12))
def test_evt_6_start_always_precedes_end_and_pairs_once(
    events: list[RunPublished | RunSettled | RunFaulted],
) -> None:
    """Over any event sequence: no end without a prior start, and at most one of each."""
    state = Observation()
    emitted: list[type] = []
    for event in events:
        if (oneshot_observer.run_phase(state, event.run_id), type(event)) not in TRANSITIONS:
            with pytest.raises(SubagentError, match="ILLEGAL_TRANSITION"):
                oneshot_observer.apply(state, event)
            continue
        state, effects = oneshot_observer.apply(state, event)
        emitted.extend(type(e) for e in effects if isinstance(e, EmitRunStart | EmitRunEnd))
        assert all(e.cause == event.event_id for e in effects)
    assert emitted in ([], [EmitRunStart], [EmitRunStart, EmitRunEnd])
    assert oneshot_observer.is_paired(state) == (emitted != [EmitRunStart])


# --------------------------------------------------------------------------- observed streams


def test_evt_16_paired_start_and_end_close_the_run() -> None:
    info = start_info()
    state = started(Observation(), info)
    assert not oneshot_observer.is_paired(state)
    end = RunEnded(E, lifecycle.end_info_for(info, KnownStop.COMPLETED))
    state, effects = fold([end], state)
    assert effects == ()
    assert oneshot_observer.is_paired(state)


def test_evt_16_end_without_start_is_a_violation() -> None:
    end = lifecycle.faulted_end_info(start_info())
    with pytest.raises(SubagentError) as caught:
        fold([RunEnded(E, end)])
    assert caught.value.code is ErrorCode.ILLEGAL_TRANSITION


def test_evt_16_second_end_of_one_start_is_a_violation() -> None:
    info = start_info()
    end = RunEnded(E, lifecycle.faulted_end_info(info))
    state, _ = fold([end], started(Observation(), info))
    with pytest.raises(SubagentError):
        fold([end], state)


@pytest.mark.parametrize(
    "other",
    [
        start_info(provider="fork"),
        start_info(child="c2"),
        RunStartInfo(RunId("r1"), "spawn", "c1", False, SessionId("p")),
    ],
)
def test_evt_16_end_identity_must_match_start(other: RunStartInfo) -> None:
    state = started(Observation(), start_info())
    with pytest.raises(SubagentError) as caught:
        fold([RunEnded(E, RunEndInfo(other, KnownStop.COMPLETED))], state)
    assert caught.value.code is ErrorCode.ILLEGAL_TRANSITION
    assert not lifecycle.end_matches_start(start_info(), RunEndInfo(other, KnownStop.ERROR))


def test_evt_3_run_id_never_repeats_even_after_its_end() -> None:
    info = start_info()
    state, _ = fold([RunEnded(E, lifecycle.faulted_end_info(info))], started(Observation(), info))
    with pytest.raises(SubagentError) as caught:
        started(state, start_info(child="c9"))
    assert caught.value.field == "run_id"


@pytest.mark.parametrize(
    ("info", "field"),
    [
        (start_info(provider=""), "provider"),
        (start_info(run=""), "run_id"),
        (start_info(child=""), "child_id"),
    ],
)
def test_evt_16_start_fields_must_be_non_empty(info: RunStartInfo, field: str) -> None:
    with pytest.raises(SubagentError) as caught:
        started(Observation(), info)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert caught.value.field == field


@pytest.mark.parametrize("run", ["spawn", "c1"])
def test_evt_3_run_id_is_never_a_reusable_name(run: str) -> None:
    with pytest.raises(SubagentError) as caught:
        started(Observation(), start_info(run=run))
    assert caught.value.field == "run_id"


def test_evt_16_provider_registry_invariants() -> None:
    state, effects = fold([ProviderAdded(E, ProviderAddedInfo("spawn"))])
    assert effects == ()
    with pytest.raises(SubagentError):
        fold([ProviderAdded(E, ProviderAddedInfo("spawn"))], state)
    with pytest.raises(SubagentError) as empty:
        fold([ProviderAdded(E, ProviderAddedInfo(""))], state)
    assert empty.value.code is ErrorCode.INVALID_ARGUMENT
    state, _ = fold([ProviderRemoved(E, ProviderRemovedInfo("spawn"))], state)
    assert state.providers == frozenset()
    with pytest.raises(SubagentError):
        fold([ProviderRemoved(E, ProviderRemovedInfo("spawn"))], state)


def test_evt_5_start_of_a_removed_provider_is_allowed() -> None:
    state, _ = fold(
        [
            ProviderAdded(E, ProviderAddedInfo("spawn")),
            ProviderRemoved(E, ProviderRemovedInfo("spawn")),
        ]
    )
    assert not oneshot_observer.is_paired(started(state, start_info(provider="spawn")))


@given(st.lists(st.integers(min_value=0, max_value=5), max_size=30))
def test_evt_16_interleaved_runs_pair_exactly_once(order: list[int]) -> None:
    """Any interleaving of distinct runs, each ended once after its start, pairs cleanly."""
    state = Observation()
    open_infos: dict[int, RunStartInfo] = {}
    for step, slot in enumerate(order):
        if slot in open_infos:
            info = open_infos.pop(slot)
            state, _ = fold([RunEnded(E, lifecycle.faulted_end_info(info))], state)
        else:
            open_infos[slot] = start_info(run=f"r{step}", child=f"c{slot}")
            state = started(state, open_infos[slot])
        assert set(state.open_runs) == {i.run_id for i in open_infos.values()}
    assert oneshot_observer.is_paired(state) == (not open_infos)
