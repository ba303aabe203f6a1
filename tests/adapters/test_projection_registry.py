"""The reference projection registry and the subagent units (HARNESS-25, PROJ-1, PROJ-9)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh_subagent.adapters.projections import (
    IDENTITY_DEFINITION,
    TIMING_DEFINITION,
    ProjectionDefinition,
    SessionProjectionRegistry,
    decode_identity_state,
    decode_timing_state,
    encode_identity_state,
    encode_timing_state,
    register_subagent_projections,
)
from dsh_subagent.adapters.reference.session import LiveSession
from dsh_subagent.core.descriptor import descriptor_to_payload
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.projections import (
    IDENTITY_KEY,
    TIMING_KEY,
    ActiveSpan,
    Identity,
    IdentityState,
    TimingState,
)
from dsh_subagent.core.values import (
    DESCRIPTOR_EVENT,
    TURN_END,
    TURN_START,
    ContinuableDescriptor,
    JsonValue,
    Mode,
    SessionEvent,
    SessionHeader,
    SessionId,
    TurnEndReason,
)
from dsh_subagent.core.wire import turn_end_data, turn_start_data

DESCRIPTOR = descriptor_to_payload(ContinuableDescriptor(provider="fork", label="tests"))


def ticking() -> Callable[[], float]:
    now = [0.0]

    def clock() -> float:
        now[0] += 10
        return now[0]

    return clock


def session(name: str = "child") -> LiveSession:
    return LiveSession(SessionHeader(SessionId(name)), clock=ticking())


def counting(key: str = "count", version: int = 1) -> tuple[ProjectionDefinition[int], list[int]]:
    """A unit counting events; the list records the seq of every event it folded."""
    folded: list[int] = []

    def apply(state: int, event: SessionEvent) -> int:
        folded.append(event.seq)
        if event.type == "boom":
            raise ValueError("boom")
        return state + 1

    def decode(value: JsonValue) -> int:
        if not isinstance(value, int):
            raise TypeError("not a count")
        return value

    definition: ProjectionDefinition[int] = ProjectionDefinition(
        key=key,
        state_version=version,
        init=lambda: 0,
        apply=apply,
        view=lambda state: state,
        encode_state=lambda state: state,
        decode_state=decode,
    )
    return definition, folded


# --------------------------------------------------------------------------- HARNESS-25


def test_harness_25_register_disposer_is_single_shot_and_keys_are_counted() -> None:
    registry = SessionProjectionRegistry()
    definition, _ = counting()
    first = registry.register(definition)
    second = registry.register(definition)
    first()
    first()  # single-shot: the second registrant still holds the key
    assert list(registry.keys) == ["count"]
    second()
    assert list(registry.keys) == []
    assert registry.snapshot(session()) == {}


def test_harness_25_conflicting_or_bad_definitions_are_refused() -> None:
    registry = SessionProjectionRegistry()
    definition, _ = counting()
    registry.register(definition)
    other, _ = counting(version=2)
    with pytest.raises(SubagentError) as conflict:
        registry.register(other)
    assert conflict.value.field == "definition.state_version"
    bad_key, _ = counting(key="")
    bad_version, _ = counting(key="other", version=-1)
    for bad, field in [
        (bad_key, "definition.key"),
        (bad_version, "definition.state_version"),
        ("nope", "definition"),
    ]:
        with pytest.raises(SubagentError) as error:
            registry.register(bad)  # type: ignore[arg-type]
        assert (error.value.code, error.value.field) == (ErrorCode.INVALID_ARGUMENT, field)
    assert list(registry.keys) == ["count"]


def test_harness_25_snapshot_folds_only_new_events_per_session() -> None:
    registry = SessionProjectionRegistry()
    definition, folded = counting()
    registry.register(definition)
    log, other = session("a"), session("b")
    log.append("x", None)
    log.append("x", None)
    assert registry.snapshot(log) == {"count": 2}
    assert registry.snapshot(log) == {"count": 2}
    log.append("x", None)
    other.append("x", None)
    assert registry.snapshot(log) == {"count": 3}
    assert registry.snapshot(other) == {"count": 1}
    assert folded == [0, 1, 2, 0]  # each event folded once, per session


@given(st.lists(st.sampled_from(["x", "read"]), max_size=30))
def test_harness_25_watermark_snapshot_equals_a_whole_log_fold(steps: list[str]) -> None:
    registry = SessionProjectionRegistry()
    register_subagent_projections(registry)
    log = session()
    for index, step in enumerate(steps):
        if step == "read":
            registry.snapshot(log)
        elif index % 3 == 0:
            log.append(DESCRIPTOR_EVENT, DESCRIPTOR)
        else:
            log.append(TURN_START if index % 2 else TURN_END, turn_start_data(index))
    assert registry.snapshot(log) == registry.restore({}, log.events, 0)


def test_harness_25_a_raising_unit_makes_snapshot_and_restore_raise() -> None:
    registry = SessionProjectionRegistry()
    register_subagent_projections(registry)
    definition, _ = counting()
    registry.register(definition)
    log = session()
    log.append(DESCRIPTOR_EVENT, DESCRIPTOR)
    assert registry.snapshot(log)["count"] == 1
    log.append("boom", None)
    for _ in range(2):  # the failed fold is not committed: it fails again
        with pytest.raises(ValueError, match="boom"):
            registry.snapshot(log)
    with pytest.raises(ValueError, match="boom"):
        registry.restore({}, log.events, 0)


def test_harness_25_checkpoint_seeds_restore_of_the_tail_only() -> None:
    registry = SessionProjectionRegistry()
    definition, folded = counting()
    registry.register(definition)
    log = session()
    for _ in range(3):
        log.append("x", None)
    checkpoint = registry.checkpoint(log)
    assert checkpoint == {"count": {"ver": 1, "seq": 2, "val": 3}}
    log.append("x", None)
    log.append("x", None)
    folded.clear()
    assert registry.restore(checkpoint, log.events[2:], 2) == {"count": 5}
    assert registry.restore(checkpoint, log.events[3:], 3) == {"count": 5}
    assert folded == [3, 4, 3, 4]
    assert registry.checkpoint(session("empty")) == {"count": {"ver": 1, "seq": -1, "val": 0}}


@pytest.mark.parametrize(
    "row",
    [
        None,
        "not a row",
        {"ver": 9, "seq": 2, "val": 3},
        {"ver": 1, "seq": True, "val": 3},
        {"ver": 1, "seq": 7, "val": 3},
        {"ver": 1, "seq": 2, "val": "three"},
    ],
)
def test_harness_25_an_unusable_row_refolds_from_zero_or_raises(row: JsonValue) -> None:
    registry = SessionProjectionRegistry()
    definition, _ = counting()
    registry.register(definition)
    log = session()
    for _ in range(4):
        log.append("x", None)
    assert registry.restore({"count": row}, log.events, 0) == {"count": 4}
    with pytest.raises(SubagentError) as error:
        registry.restore({"count": row}, log.events[2:], 2)
    assert (error.value.code, error.value.field) == (ErrorCode.CORRUPT_SESSION, "checkpoint.count")


def test_harness_25_restore_arguments_are_validated() -> None:
    registry = SessionProjectionRegistry()
    log = session()
    log.append("x", None)
    log.append("x", None)
    cases: list[tuple[object, object, object, str]] = [
        ([], log.events, 0, "checkpoint"),
        ({}, log.events, -1, "base_seq"),
        ({}, "events", 0, "events"),
        ({}, [None], 0, "events[0]"),
        ({}, log.events[1:], 0, "events[0].seq"),
    ]
    for checkpoint, events, base, field in cases:
        with pytest.raises(SubagentError) as error:
            registry.restore(checkpoint, events, base)  # type: ignore[arg-type]
        assert error.value.field == field


# --------------------------------------------------------------------------- PROJ-1


def test_proj_1_register_subagent_projections_registers_both_units_together() -> None:
    registry = SessionProjectionRegistry()
    dispose = register_subagent_projections(registry)
    assert list(registry.keys) == [TIMING_KEY, IDENTITY_KEY]
    log = session()
    assert registry.snapshot(log) == {TIMING_KEY: {"settledMs": 0.0}, IDENTITY_KEY: None}
    log.append(TURN_START, turn_start_data(1))  # time 10
    log.append(DESCRIPTOR_EVENT, DESCRIPTOR)  # time 20
    log.append(TURN_END, turn_end_data(1, TurnEndReason.COMPLETED))  # time 30
    assert registry.snapshot(log) == {
        TIMING_KEY: {"settledMs": 20.0},
        IDENTITY_KEY: {"mode": "continuable", "label": "tests", "seq": 1},
    }
    dispose()
    dispose()
    assert list(registry.keys) == []


def test_proj_1_units_survive_their_checkpoint_codecs() -> None:
    registry = SessionProjectionRegistry()
    register_subagent_projections(registry)
    log = session()
    log.append(TURN_START, turn_start_data(1))
    checkpoint = registry.checkpoint(log)
    log.append(DESCRIPTOR_EVENT, DESCRIPTOR)
    log.append("x", None)
    assert registry.restore(checkpoint, log.events[1:], 1) == registry.snapshot(log)


timing_states = st.builds(
    TimingState,
    settled_ms=st.floats(0, 1e9),
    active=st.none() | st.builds(ActiveSpan, st.floats(0, 1e9), st.floats(0, 1e9)),
    pending_turn_start=st.none() | st.floats(0, 1e9),
    descriptor_seen=st.booleans(),
)
identity_states = st.builds(
    IdentityState,
    st.none()
    | st.builds(Identity, st.just(Mode.CONTINUABLE), st.text(min_size=1), st.integers(0, 99)),
)


@given(timing_states, identity_states)
def test_proj_1_state_codecs_round_trip(timing: TimingState, identity: IdentityState) -> None:
    assert decode_timing_state(encode_timing_state(timing)) == timing
    assert decode_identity_state(encode_identity_state(identity)) == identity
    assert TIMING_DEFINITION.decode_state(TIMING_DEFINITION.encode_state(timing)) == timing
    assert IDENTITY_DEFINITION.init() == IdentityState()


@pytest.mark.parametrize(
    "value",
    [
        None,
        {"settledMs": -1, "descriptorSeen": False},
        {"settledMs": True, "descriptorSeen": False},
        {"settledMs": 0, "descriptorSeen": "yes"},
        {"settledMs": 0, "descriptorSeen": False, "pendingTurnStart": "x"},
        {"settledMs": 0, "descriptorSeen": False, "active": {"since": 1}},
        {"settledMs": 0, "descriptorSeen": False, "active": 3},
    ],
)
def test_proj_1_malformed_timing_state_is_corrupt(value: JsonValue) -> None:
    with pytest.raises(SubagentError) as error:
        decode_timing_state(value)
    assert (error.value.code, error.value.field) == (
        ErrorCode.CORRUPT_SESSION,
        f"checkpoint.{TIMING_KEY}",
    )


# --------------------------------------------------------------------------- PROJ-9


def test_proj_9_projection_values_import_without_adapters_or_io() -> None:
    probe = (
        "import sys; import dsh_subagent.core.projections as p; "
        "bad = [m for m in sys.modules if m.startswith('dsh_subagent.adapters') "
        "or m in ('asyncio', 'sqlite3', 'socket')]; "
        "assert not bad, bad; "
        "print(sorted(set(p.__all__) & {'Identity', 'TimingState', 'IDENTITY_KEY'}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "['IDENTITY_KEY', 'Identity', 'TimingState']"
