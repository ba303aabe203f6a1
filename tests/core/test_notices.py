"""Settlement notice text, outcome, provenance and routing (NOTICE-*)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dsh_subagent.core.notices import (
    CLOSING_MESSAGE_LABEL,
    NO_CLOSING_MESSAGE_LABEL,
    EpochOutcome,
    NoticeDecision,
    NoticeRoute,
    ParentFacts,
    notice_content,
    notice_outcome,
    notice_source,
    route_notice,
    summary_line,
)
from dsh_subagent.core.residency import AgentStatus
from dsh_subagent.core.values import (
    DataBlock,
    KnownStop,
    OtherStop,
    SessionId,
    SubagentSettledSource,
    TextBlock,
)

C = SessionId("c-1")


def test_notice_6_exact_summary_lines() -> None:
    assert summary_line(C, KnownStop.COMPLETED) == (
        "Background subagent c-1 finished and will do no further work unless you send it more."
    )
    assert summary_line(C, KnownStop.ABORTED) == (
        "Background subagent c-1 was stopped before it finished."
    )
    assert summary_line(C, KnownStop.MAX_TOKENS) == (
        "Background subagent c-1 ran out of room before it finished."
    )
    assert summary_line(C, KnownStop.REFUSAL) == "Background subagent c-1 declined the task."
    assert summary_line(C, KnownStop.ERROR) == (
        "Background subagent c-1 failed before it finished."
    )
    assert summary_line(C, OtherStop("blocked")) == (
        "Background subagent c-1 ended abnormally (blocked) before it finished."
    )


def test_notice_7_closing_labels_are_exact() -> None:
    assert CLOSING_MESSAGE_LABEL == "Its closing message:"
    assert NO_CLOSING_MESSAGE_LABEL == "It left no closing message."


def test_notice_5_content_is_summary_then_label_then_output() -> None:
    output = (TextBlock("done"), DataBlock({"k": 1}))
    with_output = notice_content(C, EpochOutcome(KnownStop.COMPLETED, output))
    assert with_output == (
        TextBlock(summary_line(C, KnownStop.COMPLETED)),
        TextBlock("Its closing message:"),
        *output,
    )
    assert notice_content(C, EpochOutcome(KnownStop.ABORTED)) == (
        TextBlock(summary_line(C, KnownStop.ABORTED)),
        TextBlock("It left no closing message."),
    )


def test_notice_8_failed_teardown_reports_error_without_output() -> None:
    captured = EpochOutcome(KnownStop.COMPLETED, (TextBlock("answer"),))
    assert notice_outcome(captured, teardown_failed=True) == EpochOutcome(KnownStop.ERROR)
    assert notice_outcome(captured, teardown_failed=False) == captured


def test_notice_9_provenance_is_settled_source_with_bounded_summary() -> None:
    long_id = SessionId("x" * 200)
    source = notice_source(long_id, EpochOutcome(KnownStop.COMPLETED))
    assert isinstance(source, SubagentSettledSource)
    assert source.form == "notice"
    assert source.sender_session_id == long_id
    assert len(source.summary) == 120
    assert source.summary.endswith("\u2026")
    short = notice_source(C, EpochOutcome(KnownStop.ERROR))
    assert short.summary == summary_line(C, KnownStop.ERROR)


def test_notice_4_unregistered_parent_drops() -> None:
    assert route_notice(ParentFacts(registered=False)) == NoticeDecision(NoticeRoute.DROP)


def test_notice_10_routing_order() -> None:
    closing = ParentFacts(True, AgentStatus.IDLE, closing=True, resident=True)
    assert route_notice(closing) == NoticeDecision(NoticeRoute.INJECT, accounted=False)
    idle = ParentFacts(True, AgentStatus.IDLE)
    assert route_notice(idle) == NoticeDecision(NoticeRoute.FOLLOWUP)
    busy = ParentFacts(True, AgentStatus.RUNNING)
    assert route_notice(busy) == NoticeDecision(NoticeRoute.STEER)


def test_notice_12_resident_parent_is_accounted() -> None:
    resident = ParentFacts(True, AgentStatus.IDLE, resident=True)
    assert route_notice(resident) == NoticeDecision(NoticeRoute.FOLLOWUP, accounted=True)
    busy = ParentFacts(True, AgentStatus.RUNNING, resident=True)
    assert route_notice(busy) == NoticeDecision(NoticeRoute.STEER, accounted=True)


@given(st.text(min_size=1, max_size=12))
def test_notice_6_unknown_reason_never_reads_as_success(reason: str) -> None:
    line = summary_line(C, OtherStop(reason))
    assert "ended abnormally" in line
    assert "finished and will do no further work" not in line


def test_budget_13_a_budget_exhausted_notice_names_the_limit() -> None:
    assert summary_line(C, KnownStop.BUDGET_EXHAUSTED) == (
        "Background subagent c-1 ran out of budget before it finished."
    )
    outcome = EpochOutcome(KnownStop.BUDGET_EXHAUSTED, limit="output_tokens")
    line = "Background subagent c-1 ran out of budget (output_tokens) before it finished."
    assert notice_content(C, outcome)[0] == TextBlock(line)
    assert notice_source(C, outcome).summary == line
