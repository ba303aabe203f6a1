"""Output and consumed-work rules the mutation check found unpinned (docs/mutation.md lists
each mutant).

A malformed payload is a ``CORRUPT_SESSION`` naming the exact field and why; a turn number
that recurs in a log starts from a clean account (HARNESS-24).
"""

from __future__ import annotations

import pytest

from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.output import AssistantOutputFold, ConsumedWork, fold_consumed_work
from dsh_subagent.core.values import (
    ASSISTANT_CHUNK,
    INBOX_SPLICED,
    STEP_START,
    TURN_END,
    TURN_START,
    JsonValue,
    SessionEvent,
    TurnEndReason,
)


def _event(kind: str, data: JsonValue = None) -> SessionEvent:
    return SessionEvent(kind, 1, 0.0, data)


def _corrupt(field: str, message: str, events: list[SessionEvent]) -> None:
    with pytest.raises(SubagentError) as info:
        fold_consumed_work(events)
    assert info.value.code is ErrorCode.CORRUPT_SESSION
    assert info.value.field == field
    assert info.value.message == message


def test_one_11_a_chunk_payload_that_is_not_an_object_is_refused_by_name() -> None:
    with pytest.raises(SubagentError) as info:
        AssistantOutputFold().apply(_event(ASSISTANT_CHUNK, []))
    assert info.value.code is ErrorCode.CORRUPT_SESSION
    assert info.value.field == "assistant/chunk"
    assert info.value.message == "assistant/chunk: payload is not an object"


def test_one_11_a_chunk_that_is_not_a_string_is_refused_by_name() -> None:
    with pytest.raises(SubagentError) as info:
        AssistantOutputFold().apply(_event(ASSISTANT_CHUNK, {"chunk": 3}))
    assert info.value.field == "assistant/chunk.chunk"
    assert info.value.message == "assistant/chunk.chunk: chunk is not a string"


def test_harness_24_a_turn_number_that_is_not_an_integer_is_refused_by_name() -> None:
    _corrupt(
        "turn/start.turn",
        "turn/start.turn: turn is not an integer",
        [_event(TURN_START, {"turn": "1"})],
    )


def test_harness_24_malformed_splices_are_refused_by_name() -> None:
    _corrupt(
        "agent/inbox/spliced",
        "agent/inbox/spliced: payload is not an object",
        [_event(INBOX_SPLICED, 1)],
    )
    _corrupt(
        "agent/inbox/spliced.removedCount",
        "agent/inbox/spliced.removedCount: removedCount is not an integer",
        [_event(INBOX_SPLICED, {"removedCount": "1", "inserted": []})],
    )
    _corrupt(
        "agent/inbox/spliced.inserted",
        "agent/inbox/spliced.inserted: inserted is not a list",
        [_event(INBOX_SPLICED, {"removedCount": 1, "inserted": "x"})],
    )


def _turn(number: int, reason: TurnEndReason, *middle: SessionEvent) -> list[SessionEvent]:
    return [
        _event(TURN_START, {"turn": number}),
        *middle,
        _event(TURN_END, {"turn": number, "reason": reason.value}),
    ]


def test_harness_24_a_recurring_turn_number_does_not_inherit_an_earlier_step() -> None:
    events = _turn(1, TurnEndReason.COMPLETED, _event(STEP_START, {}))
    events += _turn(1, TurnEndReason.ABORTED)
    assert fold_consumed_work(events) == ConsumedWork(end=TurnEndReason.COMPLETED)


def test_harness_24_a_recurring_turn_number_does_not_inherit_an_earlier_claim() -> None:
    claim = _event(
        INBOX_SPLICED, {"target": "next-turn", "start": 0, "removedCount": 1, "inserted": []}
    )
    events = _turn(1, TurnEndReason.COMPLETED, claim) + _turn(1, TurnEndReason.ERROR)
    assert fold_consumed_work(events) == ConsumedWork()
