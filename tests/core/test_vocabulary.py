"""The shared vocabulary: values, errors, lossless JSON, and the event wire shapes."""

from __future__ import annotations

import json
import math

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh_subagent.core import wire
from dsh_subagent.core.errors import ErrorCode, SubagentError, invalid
from dsh_subagent.core.jsonvalue import check_json, require_int, require_str
from dsh_subagent.core.values import (
    END_SEED,
    TURN_END,
    TURN_START,
    BaseSource,
    BaseSourceKind,
    CancelKind,
    ContinuableDescriptor,
    CoordinatorSource,
    DataBlock,
    KnownStop,
    MessageId,
    Mode,
    OneShotDescriptor,
    Origin,
    OtherStop,
    SessionEvent,
    SessionHeader,
    SessionId,
    SessionMeta,
    SubagentReportSource,
    SubagentSettledSource,
    TextBlock,
    TurnEndReason,
    UserMessage,
    bound_summary,
    is_success,
    new_header,
    stop_reason_text,
    text_of,
)

CHILD = SessionId("child-1")

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(exclude_categories=["Cs"])),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=12,
)


# --------------------------------------------------------------------------- errors


def test_err_0_one_error_type_carries_code_field_and_cause() -> None:
    cause = ValueError("boom")
    err = SubagentError(ErrorCode.NO_PROVIDER, "no provider 'x'", field="provider", cause=cause)
    assert err.code is ErrorCode.NO_PROVIDER
    assert err.field == "provider"
    assert err.__cause__ is cause
    assert err.message == "no provider 'x'"
    assert str(err) == "NO_PROVIDER [provider]: no provider 'x'"
    assert "NO_PROVIDER" in repr(err)
    assert str(SubagentError(ErrorCode.DRAINING, "closing")) == "DRAINING: closing"


def test_err_codes_keep_catalog_spelling_and_design_durability_code() -> None:
    for code in ErrorCode:
        assert code.value == code.name
    assert ErrorCode.DURABILITY_FAILED.value == "DURABILITY_FAILED"


def test_invalid_names_the_field() -> None:
    err = invalid("request.persona", "must not be empty")
    assert err.code is ErrorCode.INVALID_ARGUMENT
    assert err.field == "request.persona"


# --------------------------------------------------------------------------- values


def test_notice_9_summary_is_bounded_to_120_characters() -> None:
    assert bound_summary("short") == "short"
    long = "x" * 121
    bounded = bound_summary(long)
    assert len(bounded) == 120
    assert bounded.endswith("\u2026")
    assert bounded[:119] == long[:119]
    assert SubagentSettledSource(CHILD, long).summary == bounded


@given(st.text())
def test_harness_13_bound_summary_never_exceeds_limit(text: str) -> None:
    out = bound_summary(text)
    assert len(out) <= 120
    assert out == text or len(text) > 120


def test_stop_reasons_only_completed_is_success() -> None:
    assert is_success(KnownStop.COMPLETED)
    assert not any(is_success(r) for r in KnownStop if r is not KnownStop.COMPLETED)
    assert not is_success(OtherStop("content-filter"))
    assert stop_reason_text(KnownStop.MAX_TOKENS) == "max-tokens"
    assert stop_reason_text(OtherStop("content-filter")) == "content-filter"


def test_descriptor_modes_and_text_of() -> None:
    assert OneShotDescriptor("spawn").mode is Mode.ONE_SHOT
    assert ContinuableDescriptor("spawn", "label").mode is Mode.CONTINUABLE
    assert text_of((TextBlock("a"), DataBlock({"k": 1}), TextBlock("b"))) == "ab"


def test_harness_21_new_header_takes_the_creators_fields_and_stamps_the_time() -> None:
    meta = SessionMeta(cwd="/w", parent_session=SessionId("p"), seed_length=1, delegation_depth=2)
    header = new_header(CHILD, meta, 42.0)
    assert header == SessionHeader(
        CHILD, 42.0, cwd="/w", parent_session=SessionId("p"), seed_length=1, delegation_depth=2
    )
    chosen = SessionMeta(origin=Origin.SUBAGENT, agent_preset="coder", created_at=7.0)
    assert new_header(CHILD, chosen, 42.0) == SessionHeader(
        CHILD, 7.0, origin=Origin.SUBAGENT, agent_preset="coder"
    )
    # A header is a creator's choice plus the id: re-issuing one keeps every chosen field.
    other = SessionId("other")
    assert new_header(other, header, 1.0) == attrs.evolve(header, id=other)


# --------------------------------------------------------------------------- lossless JSON


@given(json_values)
def test_check_json_accepts_lossless_values(value: object) -> None:
    check_json(value, "data")
    assert json.loads(json.dumps(value)) == value or isinstance(value, float)


@pytest.mark.parametrize(
    ("value", "path"),
    [
        (math.nan, "data"),
        ({"a": [1, math.inf]}, "data.a[1]"),
        ("\ud800", "data"),
        ({1: "x"}, "data"),
        ({"\udc00": 1}, "data"),
        ({"a": object()}, "data.a"),
        (b"bytes", "data"),
    ],
)
def test_check_json_rejects_and_names_the_path(value: object, path: str) -> None:
    with pytest.raises(SubagentError) as info:
        check_json(value, "data")
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    assert info.value.field == path


def test_check_json_handles_deep_nesting_without_recursion() -> None:
    deep: object = 0
    for _ in range(50_000):
        deep = [deep]
    check_json(deep, "data")


def test_require_int_refuses_bool_and_below_minimum() -> None:
    assert require_int(3, "n", minimum=0) == 3
    assert require_int(-3, "n") == -3
    for bad in (True, "1", 1.0):
        with pytest.raises(SubagentError) as info:
            require_int(bad, "n")
        assert info.value.field == "n"
    with pytest.raises(SubagentError, match="must be >= 0"):
        require_int(-1, "n", minimum=0)


def test_require_str_refuses_non_strings_empty_and_surrogates() -> None:
    assert require_str("x", "s", non_empty=True) == "x"
    assert require_str("", "s") == ""
    for bad, non_empty in ((1, False), ("  ", True), ("\ud800", False)):
        with pytest.raises(SubagentError) as info:
            require_str(bad, "s", non_empty=non_empty)
        assert info.value.field == "s"


# --------------------------------------------------------------------------- wire shapes

SOURCES = [
    BaseSource(BaseSourceKind.USER),
    BaseSource(BaseSourceKind.TOOL),
    CoordinatorSource(CHILD),
    SubagentReportSource(CHILD),
    SubagentSettledSource(CHILD, "Background subagent child-1 finished"),
]


@pytest.mark.parametrize("source", SOURCES)
def test_harness_13_sources_round_trip(source: object) -> None:
    message = UserMessage(MessageId("m1"), (TextBlock("hi"), DataBlock([1, 2])), source)  # type: ignore[arg-type]
    encoded = wire.encode_message(message)
    check_json(encoded, "message")
    assert wire.decode_message(encoded, "message") == message


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("nope", "m"),
        ({"id": 1}, "m"),
        ({"id": "x", "content": "text", "source": {"kind": "user"}}, "m.content"),
        ({"id": "x", "content": [1], "source": {"kind": "user"}}, "m.content[0]"),
        ({"id": "x", "content": [{"type": "img"}], "source": {"kind": "user"}}, "m.content[0]"),
        ({"id": "x", "content": [], "source": "user"}, "m.source"),
        ({"id": "x", "content": [], "source": {"kind": "coordinator"}}, "m.source.senderSessionId"),
        (
            {"id": "x", "content": [], "source": {"kind": "alien", "senderSessionId": "c"}},
            "m.source",
        ),
        (
            {
                "id": "x",
                "content": [],
                "source": {"kind": "subagent-settled", "senderSessionId": "c"},
            },
            "m.source",
        ),
    ],
)
def test_wire_decoders_reject_malformed_messages(value: object, field: str) -> None:
    with pytest.raises(SubagentError) as info:
        wire.decode_message(value, "m")  # type: ignore[arg-type]
    assert info.value.code is ErrorCode.CORRUPT_SESSION
    assert info.value.field == field


def test_harness_22_turn_end_shapes() -> None:
    assert wire.turn_start_data(3) == {"turn": 3}
    assert wire.turn_end_data(3, TurnEndReason.COMPLETED) == {"turn": 3, "reason": "completed"}
    aborted = wire.turn_end_data(1, TurnEndReason.ABORTED, cause=CancelKind.PARENT)
    assert aborted == {"turn": 1, "reason": "aborted", "cause": {"kind": "parent"}}
    hooked = wire.turn_end_data(1, TurnEndReason.ABORTED, cause_reason="policy")
    assert hooked["cause"] == {"kind": "user", "reason": "policy"}
    errored = wire.turn_end_data(2, TurnEndReason.ERROR, error="model failed")
    assert errored["error"] == "model failed"
    assert wire.turn_end_data(2, TurnEndReason.ERROR)["error"] == "error"
    for reason in TurnEndReason:
        assert wire.turn_end_reason(wire.turn_end_data(1, reason)) is reason
    for bad in ({"reason": "weird"}, None, [1]):
        with pytest.raises(SubagentError):
            wire.turn_end_reason(bad)


def test_harness_20_desc_11_a_seed_is_closed_by_one_end_seed_marker() -> None:
    note = SessionEvent("note", 0, 0.0)
    assert not wire.needs_end_seed(None)
    assert wire.needs_end_seed(())
    assert wire.needs_end_seed([note])
    assert not wire.needs_end_seed([note, SessionEvent(END_SEED, 1, 0.0)])


def test_cap_8_seed_ends_at_the_last_completed_turn() -> None:
    def event(seq: int, kind: str) -> SessionEvent:
        return SessionEvent(kind, seq, 0.0, {"turn": 1})

    log = [event(0, TURN_START), event(1, TURN_END), event(2, TURN_START)]
    assert wire.completed_turn_prefix(log) == tuple(log[:2])
    assert wire.completed_turn_prefix(log[:1]) is None
    assert wire.completed_turn_prefix([]) is None


def test_harness_10_splice_and_message_event_shapes() -> None:
    msg = UserMessage(MessageId("m1"), (TextBlock("hi"),))
    assert wire.splice_data("next-turn", 0, inserted=[msg]) == {
        "target": "next-turn",
        "start": 0,
        "inserted": [wire.encode_message(msg)],
    }
    cancel = wire.splice_data("next-step", 0, removed_count=2, canceled=True)
    assert cancel["removedCount"] == 2
    assert cancel["outcome"] == "canceled"
    assert wire.user_message_data(msg) == {"message": wire.encode_message(msg)}
    logged = wire.splice_data("next-turn", 0, inserted=[msg])["inserted"][0]  # type: ignore[index]
    assert wire.user_message_data(msg, logged)["message"] is logged  # shared, not re-encoded
    assert wire.assistant_chunk_data("x") == {"chunk": "x"}
    assert wire.assistant_message_data((TextBlock("a"),), refusal=True) == {
        "message": {"content": [{"type": "text", "text": "a"}]},
        "refusal": True,
    }
    result = wire.tool_result_data("read", "c1", (TextBlock("ok"),), is_error=False)
    assert result["callId"] == "c1"
    assert wire.decode_content(result["content"], "content") == (TextBlock("ok"),)


def test_err_0_errors_survive_copy_and_pickle() -> None:
    import copy
    import pickle

    err = SubagentError(ErrorCode.UNAUTHORIZED, "not yours", field="parent")
    for clone in (copy.deepcopy(err), pickle.loads(pickle.dumps(err))):
        assert clone.code is ErrorCode.UNAUTHORIZED
        assert clone.field == "parent"
        assert str(clone) == str(err)


def test_err_20_retired_codes_stay_retired_except_the_design_restored_one() -> None:
    names = {code.name for code in ErrorCode}
    assert "SUBAGENT_CONTROL_SESSION_QUERY_UNAVAILABLE" not in names
    assert "DURABILITY_FAILED" in names  # DESIGN decision 1 restores it on purpose
