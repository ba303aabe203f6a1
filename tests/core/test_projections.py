"""The subagentTiming and subagent identity projection folds (PROJ-*)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh_subagent.core import projections as proj
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.projections import ActiveSpan, Identity, IdentityState, TimingState
from dsh_subagent.core.values import (
    DESCRIPTOR_EVENT,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
    JsonObject,
    JsonValue,
    Mode,
    SessionEvent,
)

ONE_SHOT: JsonObject = {"version": 2, "mode": "one-shot", "provider": "spawn"}
CONTINUABLE: JsonObject = {
    "version": 2,
    "mode": "continuable",
    "provider": "fork",
    "label": "tests",
}


def ev(kind: str, time: float, data: JsonValue = None, seq: int = 0) -> SessionEvent:
    return SessionEvent(kind, seq, time, data)


def desc(time: float, data: JsonValue = None, seq: int = 0) -> SessionEvent:
    return ev(DESCRIPTOR_EVENT, time, ONE_SHOT if data is None else data, seq)


# --------------------------------------------------------------------------- timing


def test_proj_6_initial_timing_state() -> None:
    assert proj.timing_init() == TimingState(0.0, None, None, descriptor_seen=False)
    assert proj.timing_view(proj.timing_init()) == {"settledMs": 0.0}


def test_proj_6_turns_after_descriptor_accumulate_active_time() -> None:
    state = proj.fold_timing([desc(0), ev(TURN_START, 10), ev(TURN_END, 25), ev(TURN_START, 30)])
    assert state.settled_ms == 15
    assert state.active == ActiveSpan(30, 30)
    state = proj.timing_apply(state, ev(TURN_END, 40))
    assert (state.settled_ms, state.active) == (25, None)


def test_proj_6_open_turn_through_follows_latest_event() -> None:
    state = proj.fold_timing([desc(0), ev(TURN_START, 10), ev(USER_MESSAGE, 12), ev("x", 17)])
    assert state.active == ActiveSpan(10, 17)
    assert proj.timing_view(state) == {"settledMs": 0.0, "active": {"since": 10, "through": 17}}


def test_proj_6_events_outside_a_turn_change_nothing() -> None:
    state = proj.fold_timing([desc(0)])
    assert proj.timing_apply(state, ev(USER_MESSAGE, 5)) is state
    assert proj.timing_apply(state, ev(TURN_END, 5)) is state


def test_proj_6_turn_before_descriptor_is_pending_then_dropped() -> None:
    state = proj.fold_timing([ev(TURN_START, 3)])
    assert state.pending_turn_start == 3
    assert state.active is None
    assert proj.timing_apply(state, ev(USER_MESSAGE, 4)) is state
    state = proj.timing_apply(state, ev(TURN_END, 9))
    assert state == proj.timing_init()


def test_proj_7_descriptor_resets_inherited_time_and_keeps_open_turn() -> None:
    seed = [desc(0), ev(TURN_START, 1), ev(TURN_END, 100)]
    state = proj.fold_timing([*seed, ev(TURN_START, 200), desc(205, CONTINUABLE)])
    assert state.settled_ms == 0
    assert state.active == ActiveSpan(200, 205)
    state = proj.timing_apply(state, ev(TURN_END, 210))
    assert state.settled_ms == 10


def test_proj_7_pending_turn_start_is_promoted_by_descriptor() -> None:
    state = proj.fold_timing([ev(TURN_START, 50), desc(52), ev(TURN_END, 60)])
    assert state.settled_ms == 10
    assert state.pending_turn_start is None


def test_proj_7_even_a_malformed_descriptor_resets_timing() -> None:
    state = proj.fold_timing([desc(0), ev(TURN_START, 0), ev(TURN_END, 9), desc(10, {"v": 1})])
    assert state == TimingState(0.0, None, None, descriptor_seen=True)


def test_proj_8_reversed_boundary_adds_zero() -> None:
    state = proj.fold_timing([desc(0), ev(TURN_START, 50), ev(TURN_END, 20)])
    assert state.settled_ms == 0


times = st.integers(min_value=0, max_value=10_000)
kinds = st.sampled_from([TURN_START, TURN_END, DESCRIPTOR_EVENT, USER_MESSAGE])


@given(st.lists(st.tuples(kinds, times), max_size=40))
def test_proj_8_timing_total_is_monotone_between_descriptors(steps: list[tuple[str, int]]) -> None:
    """The total never decreases except at a descriptor, where it resets to zero."""
    state = proj.timing_init()
    for kind, time in steps:
        nxt = proj.timing_apply(state, ev(kind, time, ONE_SHOT))
        assert nxt.settled_ms >= 0
        if kind == DESCRIPTOR_EVENT:
            assert nxt.settled_ms == 0
        else:
            assert nxt.settled_ms >= state.settled_ms
        if nxt.active is not None:
            assert nxt.descriptor_seen
        state = nxt
    assert json.loads(json.dumps(proj.timing_view(state))) == proj.timing_view(state)


# --------------------------------------------------------------------------- identity


def test_proj_2_identity_starts_empty_and_views_as_null() -> None:
    assert proj.identity_init() == IdentityState(None)
    assert proj.identity_view(proj.identity_init()) is None


def test_proj_2_only_descriptor_events_change_identity() -> None:
    state = proj.identity_apply(proj.identity_init(), desc(0, seq=4))
    assert state.identity == Identity(Mode.ONE_SHOT, None, 4)
    assert proj.identity_apply(state, ev(TURN_START, 1)) is state


def test_proj_2_continuable_identity_always_has_label() -> None:
    state = proj.fold_identity([desc(0, CONTINUABLE, seq=7)])
    assert proj.identity_view(state) == {"mode": "continuable", "label": "tests", "seq": 7}
    labelled: JsonObject = {**ONE_SHOT, "label": "lbl"}
    assert proj.identity_view(proj.fold_identity([desc(0, labelled)])) == {
        "mode": "one-shot",
        "label": "lbl",
        "seq": 0,
    }


@pytest.mark.parametrize(
    "payload",
    [
        None,
        "text",
        {"version": 3, "mode": "one-shot", "provider": "spawn"},
        {"version": 2, "mode": "continuable", "provider": "fork"},
        {**ONE_SHOT, "extra": 1},
    ],
)
def test_proj_3_malformed_or_unsupported_descriptor_folds_to_null(payload: JsonValue) -> None:
    event = SessionEvent(DESCRIPTOR_EVENT, 0, 0.0, payload)
    assert proj.identity_view(proj.fold_identity([event])) is None


def test_proj_4_identity_is_last_wins_and_resets_on_invalid() -> None:
    ancestor = desc(0, CONTINUABLE, seq=0)
    own = desc(1, ONE_SHOT, seq=5)
    assert proj.fold_identity([ancestor, own]).identity == Identity(Mode.ONE_SHOT, None, 5)
    assert proj.fold_identity([ancestor, desc(1, {"version": 2}, seq=5)]).identity is None


def test_proj_5_identity_seq_round_trips_through_its_view() -> None:
    for payload in (ONE_SHOT, CONTINUABLE):
        state = proj.fold_identity([desc(0, payload, seq=9)])
        view = json.loads(json.dumps(proj.identity_view(state)))
        assert proj.identity_from_view(view) == state.identity
    assert proj.identity_from_view(None) is None
    assert (proj.IDENTITY_KEY, proj.TIMING_KEY, proj.STATE_VERSION) == (
        "subagent",
        "subagentTiming",
        2,
    )


@pytest.mark.parametrize(
    "view",
    [
        "x",
        {"mode": "one-shot", "seq": -1},
        {"mode": "one-shot", "seq": True},
        {"mode": "continuable", "seq": 1},
        {"mode": "forked", "seq": 1},
        {"mode": "one-shot", "seq": 1, "extra": 0},
    ],
)
def test_proj_5_malformed_identity_view_is_corrupt(view: JsonValue) -> None:
    with pytest.raises(SubagentError) as caught:
        proj.identity_from_view(view)
    assert caught.value.code is ErrorCode.CORRUPT_SESSION


EXTRA: JsonObject = {**ONE_SHOT, "x": 1}
payloads = st.sampled_from([ONE_SHOT, CONTINUABLE, {"version": 1}, None, EXTRA])


@given(st.lists(st.tuples(st.booleans(), payloads), max_size=20))
def test_proj_2_identity_fold_never_raises_and_matches_last_descriptor(
    steps: list[tuple[bool, JsonValue]],
) -> None:
    events = [
        SessionEvent(DESCRIPTOR_EVENT if is_desc else USER_MESSAGE, seq, 0.0, data)
        for seq, (is_desc, data) in enumerate(steps)
    ]
    state = proj.fold_identity(events)
    descriptors = [e for e in events if e.type == DESCRIPTOR_EVENT]
    expected = proj.descriptor_identity(descriptors[-1]) if descriptors else None
    assert state.identity == expected
    view = proj.identity_view(state)
    assert json.loads(json.dumps(view)) == view
