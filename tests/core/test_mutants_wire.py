"""Wire-shape rules the mutation check found unpinned (docs/mutation.md lists each mutant).

Each decoder's refusal is pinned by its exact field and message; each encoder by its exact
JSON object, so a renamed key or a changed default fails here.
"""

from __future__ import annotations

import pytest

from dsh_subagent.core import wire
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import (
    TURN_END,
    TURN_START,
    CoordinatorSource,
    DataBlock,
    JsonValue,
    SessionEvent,
    SessionId,
    SubagentReportSource,
    SubagentSettledSource,
    TextBlock,
    TurnEndReason,
)


def _corrupt(call: object, *args: object) -> SubagentError:
    assert callable(call)
    with pytest.raises(SubagentError) as info:
        call(*args)
    assert info.value.code is ErrorCode.CORRUPT_SESSION
    return info.value


def _refused(field: str, message: str, call: object, *args: object) -> None:
    error = _corrupt(call, *args)
    assert error.field == field
    assert error.message == message


def test_harness_22_a_block_that_is_not_an_object_is_refused_by_name() -> None:
    _refused("b", "b: content block is not an object", wire.decode_block, 3, "b")


def test_harness_22_a_data_block_with_a_text_key_stays_data() -> None:
    assert wire.decode_block({"type": "data", "value": 1, "text": "t"}, "b") == DataBlock(1)
    assert wire.decode_block({"type": "text", "text": "t"}, "b") == TextBlock("t")


def test_harness_22_a_value_key_does_not_make_an_unknown_block_data() -> None:
    _refused(
        "b",
        "b: unknown content block 'other'",
        wire.decode_block,
        {"type": "other", "value": 1},
        "b",
    )


def test_harness_22_content_that_is_not_a_list_is_refused_by_name() -> None:
    _refused("c", "c: content is not a list", wire.decode_content, {"a": 1}, "c")


def test_harness_22_sources_encode_with_their_exact_keys() -> None:
    sender = SessionId("s1")
    assert wire.encode_source(CoordinatorSource(sender)) == {
        "kind": "coordinator",
        "form": "relay",
        "senderSessionId": "s1",
    }
    assert wire.encode_source(SubagentReportSource(sender)) == {
        "kind": "subagent-report",
        "form": "relay",
        "senderSessionId": "s1",
    }
    assert wire.encode_source(SubagentSettledSource(sender, "done")) == {
        "kind": "subagent-settled",
        "form": "notice",
        "summary": "done",
        "senderSessionId": "s1",
    }


def test_harness_22_malformed_sources_are_refused_by_name() -> None:
    _refused("s", "s: source is not an object", wire.decode_source, [], "s")
    _refused(
        "s.senderSessionId",
        "s.senderSessionId: missing sender session id",
        wire.decode_source,
        {"kind": "coordinator"},
        "s",
    )
    _refused(
        "s",
        "s: unknown source kind 'martian'",
        wire.decode_source,
        {"kind": "martian", "senderSessionId": "x"},
        "s",
    )


def test_harness_22_a_message_without_a_string_id_is_refused_by_name() -> None:
    _refused(
        "m", "m: message is not an object with a string id", wire.decode_message, {"id": 1}, "m"
    )


def test_harness_22_only_a_budget_exhausted_turn_end_carries_a_limit() -> None:
    assert wire.turn_end_data(1, TurnEndReason.COMPLETED, limit="tokens") == {
        "turn": 1,
        "reason": "completed",
    }
    assert wire.turn_end_data(1, TurnEndReason.BUDGET_EXHAUSTED, limit="tokens") == {
        "turn": 1,
        "reason": "budget-exhausted",
        "limit": "tokens",
    }


def test_harness_22_an_unknown_turn_end_reason_is_refused_by_name() -> None:
    data: JsonValue = {"reason": "nope"}
    _refused(
        "turn/end.reason",
        "turn/end.reason: unknown turn end reason in {'reason': 'nope'}",
        wire.turn_end_reason,
        data,
    )


def test_harness_22_an_assistant_message_is_not_a_refusal_by_default() -> None:
    assert wire.assistant_message_data((TextBlock("hi"),)) == {
        "message": {"content": [{"type": "text", "text": "hi"}]},
        "refusal": False,
    }


def test_harness_22_a_tool_result_encodes_with_its_exact_keys() -> None:
    assert wire.tool_result_data("grep", "c1", (), is_error=True) == {
        "tool": "grep",
        "callId": "c1",
        "content": [],
        "isError": True,
    }


def test_cap_8_a_fork_seed_keeps_a_final_turn_end() -> None:
    events = (
        SessionEvent(TURN_START, 1, 0.0, {"turn": 1}),
        SessionEvent(TURN_END, 2, 0.0, {"turn": 1, "reason": "completed"}),
    )
    assert wire.completed_turn_prefix(events) == events
