"""Final output selection, consumed work and stop reasons (ONE-10..14, ONE-20, HARNESS-24, A9)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.output import (
    DIAGNOSTIC_LIMIT,
    TRUNCATION_SUFFIX,
    AssistantOutputFold,
    Captured,
    ConsumedWork,
    OtherTurnEnd,
    TurnEnding,
    epoch_stop_reason,
    final_assistant_output,
    fold_consumed_work,
    last_assistant_message,
    limit_diagnostic,
    one_shot_result,
    one_shot_stop_reason,
    select_output,
)
from dsh_subagent.core.values import (
    ASSISTANT_CHUNK,
    ASSISTANT_MESSAGE,
    INBOX_SPLICED,
    STEP_END,
    STEP_START,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
    DataBlock,
    JsonValue,
    KnownStop,
    MessageId,
    SessionEvent,
    SubagentResult,
    TextBlock,
    TurnEndReason,
    UserMessage,
)
from dsh_subagent.core.wire import (
    assistant_chunk_data,
    assistant_message_data,
    splice_data,
    turn_end_data,
    turn_start_data,
    user_message_data,
)

Entry = tuple[str, JsonValue]
PROMPT = UserMessage(MessageId("m1"), (TextBlock("go"),))


def log(*entries: Entry) -> tuple[SessionEvent, ...]:
    return tuple(SessionEvent(t, seq, float(seq), data) for seq, (t, data) in enumerate(entries))


def message(*texts: str) -> Entry:
    return (ASSISTANT_MESSAGE, assistant_message_data(tuple(TextBlock(t) for t in texts)))


def chunk(text: str) -> Entry:
    return (ASSISTANT_CHUNK, assistant_chunk_data(text))


def text_output(text: str) -> tuple[JsonValue, ...]:
    return ({"type": "text", "text": text},)


def start(turn: int) -> Entry:
    return (TURN_START, turn_start_data(turn))


def end(turn: int, reason: TurnEndReason) -> Entry:
    return (TURN_END, turn_end_data(turn, reason))


STEP: Entry = (STEP_START, {})
CLAIM: Entry = (INBOX_SPLICED, splice_data("next-turn", 0, removed_count=1))
CANCEL: Entry = (INBOX_SPLICED, splice_data("next-turn", 0, removed_count=1, canceled=True))
REPLACE: Entry = (
    INBOX_SPLICED,
    splice_data("next-turn", 0, removed_count=1, inserted=(PROMPT,), canceled=True),
)
INSERT: Entry = (INBOX_SPLICED, splice_data("next-turn", 0, inserted=(PROMPT,)))


# --------------------------------------------------------------------------- selection


def test_one_11_last_non_empty_message_wins_over_earlier_ones_and_later_text() -> None:
    events = log(message("first"), chunk("stream"), message("final"), chunk(" more"))
    assert final_assistant_output(events) == text_output("final")


def test_one_11_empty_message_is_skipped() -> None:
    events = log(message("answer"), (ASSISTANT_MESSAGE, assistant_message_data(())))
    assert final_assistant_output(events) == text_output("answer")


def test_one_11_any_block_type_counts() -> None:
    data = assistant_message_data((DataBlock({"k": 1}),))
    assert final_assistant_output(log((ASSISTANT_MESSAGE, data))) == (
        {"type": "data", "value": {"k": 1}},
    )


def test_one_11_streamed_text_is_the_fallback_and_nothing_is_empty() -> None:
    assert final_assistant_output(log(chunk("par"), chunk(""), chunk("tial"))) == text_output(
        "partial"
    )
    assert final_assistant_output(log(start(1), end(1, TurnEndReason.ABORTED))) == ()
    assert last_assistant_message(()) is None
    assert last_assistant_message(text_output("x")) == text_output("x")


def test_one_11_selection_ignores_the_stop_reason() -> None:
    events = log(start(1), STEP, message("partial"), end(1, TurnEndReason.MAX_TOKENS))
    assert one_shot_result(events).output == text_output("partial")


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ((ASSISTANT_MESSAGE, None), ASSISTANT_MESSAGE),
        ((ASSISTANT_MESSAGE, {"message": []}), f"{ASSISTANT_MESSAGE}.message"),
        (
            (ASSISTANT_MESSAGE, {"message": {"content": "x"}}),
            f"{ASSISTANT_MESSAGE}.message.content",
        ),
        ((ASSISTANT_CHUNK, {"chunk": 3}), f"{ASSISTANT_CHUNK}.chunk"),
    ],
)
def test_one_11_malformed_assistant_payload_is_a_corrupt_session(entry: Entry, field: str) -> None:
    with pytest.raises(SubagentError) as caught:
        final_assistant_output(log(entry))
    assert (caught.value.code, caught.value.field) == (ErrorCode.CORRUPT_SESSION, field)


texts = st.text(alphabet="ab ", max_size=4)
entries = st.one_of(
    texts.map(chunk),
    st.lists(texts, max_size=2).map(lambda ts: message(*ts)),
    st.just(start(1)),
    st.just((USER_MESSAGE, user_message_data(PROMPT))),
)


@given(st.lists(entries, max_size=12))
def test_one_12_incremental_fold_agrees_with_the_batch_rule(items: list[Entry]) -> None:
    events = log(*items)
    fold = AssistantOutputFold()
    prefixes = []
    for event in events:
        fold = fold.apply(event)
        prefixes.append(fold.collect())
    assert fold.collect() == final_assistant_output(events)
    assert prefixes == [final_assistant_output(events[: i + 1]) for i in range(len(events))]


def test_one_12_push_text_feeds_the_fallback_and_ignores_empty_pieces() -> None:
    fold = AssistantOutputFold().push_text("a").push_text("").push_text("b")
    assert fold.collect() == text_output("ab")
    assert AssistantOutputFold().push_text("") == AssistantOutputFold()
    assert select_output(None, "") == ()


def test_one_13_selection_reads_only_the_suffix_it_is_given() -> None:
    events = log(message("parent answer"), (USER_MESSAGE, user_message_data(PROMPT)))
    assert final_assistant_output(events[1:]) == ()


# --------------------------------------------------------------------------- consumed work


def test_harness_24_a_stepped_turn_is_the_accounting_turn() -> None:
    events = log(start(1), CLAIM, STEP, (STEP_END, {}), end(1, TurnEndReason.MAX_TOKENS))
    assert fold_consumed_work(events) == ConsumedWork(TurnEndReason.MAX_TOKENS, False)


def test_harness_24_a_claim_that_completed_without_a_step_does_not_account() -> None:
    events = log(
        start(1),
        STEP,
        end(1, TurnEndReason.ERROR),
        start(2),
        CLAIM,
        end(2, TurnEndReason.COMPLETED),
    )
    assert fold_consumed_work(events).end is TurnEndReason.ERROR


@pytest.mark.parametrize(
    "reason",
    [TurnEndReason.BLOCKED, TurnEndReason.ABORTED, TurnEndReason.INTERRUPTED, TurnEndReason.ERROR],
)
def test_harness_24_a_claim_that_failed_accounts(reason: TurnEndReason) -> None:
    assert fold_consumed_work(log(start(1), CLAIM, end(1, reason))).end is reason


def test_harness_24_no_op_turns_and_claims_outside_turns_do_not_account() -> None:
    events = log(CLAIM, INSERT, start(1), INSERT, end(1, TurnEndReason.ABORTED))
    assert fold_consumed_work(events) == ConsumedWork()
    assert fold_consumed_work(log(STEP, end(3, TurnEndReason.ERROR))) == ConsumedWork()


def test_harness_24_cancellation_drops_work_unrun_but_replacement_does_not() -> None:
    assert fold_consumed_work(log(CANCEL)).dropped_unrun
    assert not fold_consumed_work(log(REPLACE)).dropped_unrun
    assert fold_consumed_work(log(CANCEL, REPLACE)).dropped_unrun


def test_harness_24_an_accounting_turn_clears_an_earlier_drop() -> None:
    events = log(CANCEL, start(1), STEP, end(1, TurnEndReason.COMPLETED))
    assert fold_consumed_work(events) == ConsumedWork(TurnEndReason.COMPLETED, False)
    assert fold_consumed_work((*events, *log(CANCEL))).dropped_unrun


def test_harness_24_an_extension_turn_ending_is_kept_as_other() -> None:
    events = log(start(1), STEP, (TURN_END, {"turn": 1, "reason": "vendor-stop"}))
    assert fold_consumed_work(events).end == OtherTurnEnd("vendor-stop")


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ((TURN_START, {"turn": "1"}), "turn/start.turn"),
        ((TURN_START, [1]), TURN_START),
        ((TURN_END, {"turn": True, "reason": "completed"}), "turn/end.turn"),
        ((TURN_END, {"turn": 1, "reason": 7}), "turn/end.reason"),
        (
            (INBOX_SPLICED, {"removedCount": "1", "inserted": []}),
            "agent/inbox/spliced.removedCount",
        ),
        ((INBOX_SPLICED, {"removedCount": 1, "inserted": "x"}), "agent/inbox/spliced.inserted"),
    ],
)
def test_harness_24_malformed_payload_is_a_corrupt_session(entry: Entry, field: str) -> None:
    with pytest.raises(SubagentError) as caught:
        fold_consumed_work(log(entry))
    assert (caught.value.code, caught.value.field) == (ErrorCode.CORRUPT_SESSION, field)


# --------------------------------------------------------------------------- stop reasons


@pytest.mark.parametrize(
    ("ending", "expected"),
    [
        (TurnEndReason.COMPLETED, KnownStop.COMPLETED),
        (TurnEndReason.MAX_TOKENS, KnownStop.MAX_TOKENS),
        (TurnEndReason.ABORTED, KnownStop.ABORTED),
        (TurnEndReason.BLOCKED, KnownStop.REFUSAL),
        (TurnEndReason.ERROR, KnownStop.ERROR),
        (TurnEndReason.INTERRUPTED, KnownStop.ERROR),
        (OtherTurnEnd("x"), KnownStop.ERROR),
        (None, KnownStop.ERROR),
    ],
)
def test_one_20_one_shot_turn_end_mapping(ending: TurnEnding | None, expected: KnownStop) -> None:
    assert one_shot_stop_reason(ending) is expected


@given(st.sampled_from([*TurnEndReason, None, OtherTurnEnd("x")]))
def test_one_20_cancellation_overrides_every_non_completed_reason(
    ending: TurnEnding | None,
) -> None:
    expected = KnownStop.COMPLETED if ending is TurnEndReason.COMPLETED else KnownStop.ABORTED
    assert one_shot_stop_reason(ending, cancelled=True) is expected


@pytest.mark.parametrize(
    ("work", "expected"),
    [
        (ConsumedWork(TurnEndReason.MAX_TOKENS), KnownStop.MAX_TOKENS),
        (ConsumedWork(TurnEndReason.ABORTED), KnownStop.ABORTED),
        (ConsumedWork(TurnEndReason.INTERRUPTED), KnownStop.ABORTED),
        (ConsumedWork(TurnEndReason.ERROR, dropped_unrun=True), KnownStop.ERROR),
        (ConsumedWork(TurnEndReason.BLOCKED), KnownStop.REFUSAL),
        (ConsumedWork(TurnEndReason.COMPLETED), KnownStop.COMPLETED),
        (ConsumedWork(TurnEndReason.COMPLETED, dropped_unrun=True), KnownStop.ABORTED),
        (ConsumedWork(None), KnownStop.COMPLETED),
        (ConsumedWork(None, dropped_unrun=True), KnownStop.ABORTED),
        (ConsumedWork(OtherTurnEnd("vendor")), KnownStop.ERROR),
    ],
)
def test_a9_epoch_mapping_from_consumed_work(work: ConsumedWork, expected: KnownStop) -> None:
    assert epoch_stop_reason(work) is expected


def test_a9_the_two_mappings_differ_for_interrupted_and_no_accounting_turn() -> None:
    interrupted = ConsumedWork(TurnEndReason.INTERRUPTED)
    assert one_shot_stop_reason(interrupted.end) is KnownStop.ERROR
    assert epoch_stop_reason(interrupted) is KnownStop.ABORTED
    assert one_shot_stop_reason(None) is KnownStop.ERROR
    assert epoch_stop_reason(ConsumedWork()) is KnownStop.COMPLETED


def test_one_10_only_completed_is_a_success_and_extensions_fail() -> None:
    events = log(start(1), STEP, (TURN_END, {"turn": 1, "reason": "vendor-stop"}))
    assert one_shot_result(events).stop_reason is KnownStop.ERROR
    assert epoch_stop_reason(fold_consumed_work(events)) is KnownStop.ERROR


COMPLETED_RUN = log(start(1), CLAIM, STEP, message("done"), end(1, TurnEndReason.COMPLETED))


def test_one_14_structured_value_is_present_only_when_captured() -> None:
    result = one_shot_result(COMPLETED_RUN, structured_requested=True, captured=Captured({"a": 1}))
    assert result == SubagentResult(
        text_output("done"), KnownStop.COMPLETED, structured={"a": 1}, has_structured=True
    )
    assert one_shot_result(COMPLETED_RUN) == SubagentResult(
        text_output("done"), KnownStop.COMPLETED
    )


def test_one_14_completed_without_a_capture_reports_error_or_aborted_when_cancelled() -> None:
    assert one_shot_result(COMPLETED_RUN, structured_requested=True).stop_reason is KnownStop.ERROR
    cancelled = one_shot_result(COMPLETED_RUN, cancelled=True, structured_requested=True)
    assert cancelled.stop_reason is KnownStop.ABORTED
    failed = log(start(1), STEP, end(1, TurnEndReason.MAX_TOKENS))
    assert one_shot_result(failed, structured_requested=True).stop_reason is KnownStop.MAX_TOKENS


def test_one_20_cancelled_run_without_an_accounting_turn_is_aborted() -> None:
    assert one_shot_result(log(CANCEL), cancelled=True).stop_reason is KnownStop.ABORTED
    assert one_shot_result(log(CANCEL)).stop_reason is KnownStop.ERROR


def test_one_19_job_outcome_maps_the_stop_reason() -> None:
    from dsh_subagent.core.jobs import JobOutcome, JobStatus
    from dsh_subagent.core.output import dispose_failed, job_outcome
    from dsh_subagent.core.values import OtherStop, SubagentResult

    blocks = ({"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"})
    assert job_outcome(SubagentResult(blocks, KnownStop.COMPLETED)) == JobOutcome(
        JobStatus.COMPLETED, "ab"
    )
    assert job_outcome(SubagentResult(blocks, KnownStop.ABORTED)) == JobOutcome(JobStatus.KILLED)
    assert job_outcome(SubagentResult(blocks, KnownStop.REFUSAL, diagnostic="no")) == JobOutcome(
        JobStatus.FAILED, detail="refusal; diagnostic: no"
    )
    failed = job_outcome(SubagentResult((), OtherStop("x-stop")))
    assert failed == JobOutcome(JobStatus.FAILED, detail="x-stop")
    assert dispose_failed(failed, "E: gone") == JobOutcome(
        JobStatus.FAILED, detail="x-stop; dispose failed: E: gone"
    )
    assert dispose_failed(JobOutcome(JobStatus.COMPLETED, "ab"), "E: gone") == JobOutcome(
        JobStatus.FAILED, detail="dispose failed: E: gone"
    )


# --------------------------------------------------------------------------- diagnostics


def test_one_15_diagnostic_is_bounded_on_a_character_boundary() -> None:
    fits = "a" * DIAGNOSTIC_LIMIT
    assert limit_diagnostic(fits) == fits
    cut = limit_diagnostic("€" * DIAGNOSTIC_LIMIT)
    assert cut.endswith(TRUNCATION_SUFFIX)
    assert len(cut.encode("utf-8")) <= DIAGNOSTIC_LIMIT
    assert set(cut.removesuffix(TRUNCATION_SUFFIX)) == {"€"}
