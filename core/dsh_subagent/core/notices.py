"""Settlement notices: their exact text, provenance, outcome and route to the parent.

Theory of operation
-------------------
1. A notice is owed only by an Activation that accepted a delivery (``announced``,
   NOTICE-2); apart from that it is unconditional (NOTICE-3).
2. Text (NOTICE-5, NOTICE-6, NOTICE-7): one summary line per stop reason, verbatim, followed
   by either "It left no closing message." or "Its closing message:" and the output blocks.
   An extension reason ``r`` reads "ended abnormally (r)": never reported as success. A
   ``budget-exhausted`` line names the limit reached (BUDGET-13).
3. Outcome (NOTICE-8): a teardown that failed at any boundary yields ``error`` with no
   output. A failed or unconfirmed flush (DESIGN decision 1) does not change the outcome.
4. Provenance (NOTICE-9): ``SubagentSettledSource`` with the summary bounded to 120 chars.
5. Route (NOTICE-4, NOTICE-10, NOTICE-12): DROP when no parent is registered; INJECT (no
   wake, no accounting) when the parent's lineage is closing or the parent is itself being
   released; otherwise FOLLOWUP to an idle parent or STEER into a busy one, through the
   waking-admission accounting when the parent is a resident Activation.
6. A background job's completion notice (BG-37) has its own, smaller router,
   ``route_job_notice``: ``wakeup`` delivery follows up an idle owner while it has wakes left,
   otherwise (busy, out of wakes, or ``quiet`` delivery) it injects.
7. Sending never fails teardown (NOTICE-14): that is the adapter's duty; the core only
   decides what to send and in which order (see ``manager``).
"""

from __future__ import annotations

import enum
from typing import Final

import attrs

from dsh_subagent.core.residency import AgentStatus
from dsh_subagent.core.values import (
    Content,
    KnownStop,
    SessionId,
    StopReason,
    SubagentSettledSource,
    TextBlock,
    stop_reason_text,
)

CLOSING_MESSAGE_LABEL: Final = "Its closing message:"
NO_CLOSING_MESSAGE_LABEL: Final = "It left no closing message."

_ENDINGS: Final = {
    KnownStop.COMPLETED: "finished and will do no further work unless you send it more.",
    KnownStop.ABORTED: "was stopped before it finished.",
    KnownStop.MAX_TOKENS: "ran out of room before it finished.",
    KnownStop.REFUSAL: "declined the task.",
    KnownStop.ERROR: "failed before it finished.",
    KnownStop.BUDGET_EXHAUSTED: "ran out of budget before it finished.",
}


@attrs.frozen
class EpochOutcome:
    """The stop reason and closing output captured for one Activation epoch."""

    stop_reason: StopReason
    output: Content = ()
    limit: str | None = None
    """The budget dimension reached, for ``budget-exhausted`` (BUDGET-13)."""


class NoticeRoute(enum.Enum):
    """How a settlement notice reaches the parent (NOTICE-4, NOTICE-10)."""

    INJECT = "inject"
    FOLLOWUP = "followup"
    STEER = "steer"
    DROP = "drop"


class CompletionDelivery(enum.Enum):
    """How a background job's completion notice reaches its owner (BG-37)."""

    WAKEUP = "wakeup"
    QUIET = "quiet"


@attrs.frozen
class ParentFacts:
    """The parent as seen when the notice is sent."""

    registered: bool
    status: AgentStatus = AgentStatus.IDLE
    closing: bool = False
    resident: bool = False


@attrs.frozen
class NoticeDecision:
    """Where the notice goes and whether it is accounted as waking admission (RES-2)."""

    route: NoticeRoute
    accounted: bool = False


def summary_line(child_id: SessionId, stop_reason: StopReason, limit: str | None = None) -> str:
    """The exact summary line for ``stop_reason`` (NOTICE-6); a ``budget-exhausted`` line
    names the ``limit`` reached when known (BUDGET-13).

    post: __return__.startswith("Background subagent ")
    post: stop_reason is KnownStop.COMPLETED or not __return__.endswith("send it more.")
    """
    if stop_reason is KnownStop.BUDGET_EXHAUSTED and limit is not None:
        ending = f"ran out of budget ({limit}) before it finished."
    elif isinstance(stop_reason, KnownStop):
        ending = _ENDINGS[stop_reason]
    else:
        ending = f"ended abnormally ({stop_reason_text(stop_reason)}) before it finished."
    return f"Background subagent {child_id} {ending}"


def notice_outcome(captured: EpochOutcome, teardown_failed: bool) -> EpochOutcome:
    """The outcome a notice reports: ``error`` without output if teardown failed (NOTICE-8).

    post: not teardown_failed or __return__ == EpochOutcome(KnownStop.ERROR)
    post: teardown_failed or __return__ == captured
    """
    return EpochOutcome(KnownStop.ERROR) if teardown_failed else captured


def notice_content(child_id: SessionId, outcome: EpochOutcome) -> Content:
    """The notice's text blocks: summary, then the closing label and output (NOTICE-5)."""
    summary = TextBlock(summary_line(child_id, outcome.stop_reason, outcome.limit))
    if not outcome.output:
        return (summary, TextBlock(NO_CLOSING_MESSAGE_LABEL))
    return (summary, TextBlock(CLOSING_MESSAGE_LABEL), *outcome.output)


def notice_source(child_id: SessionId, outcome: EpochOutcome) -> SubagentSettledSource:
    """The notice's provenance, distinct from a child's own report (NOTICE-9)."""
    return SubagentSettledSource(
        child_id, summary_line(child_id, outcome.stop_reason, outcome.limit)
    )


def route_notice(parent: ParentFacts) -> NoticeDecision:
    """Route a notice by the parent's state, in the catalog's order (NOTICE-4, NOTICE-10).

    post: parent.registered or __return__.route is NoticeRoute.DROP
    post: not (parent.registered and parent.closing) or __return__.route is NoticeRoute.INJECT
    post: not __return__.accounted or parent.resident
    post: not __return__.accounted or __return__.route is not NoticeRoute.INJECT
    """
    if not parent.registered:
        return NoticeDecision(NoticeRoute.DROP)
    if parent.closing:
        return NoticeDecision(NoticeRoute.INJECT)
    route = NoticeRoute.FOLLOWUP if parent.status is AgentStatus.IDLE else NoticeRoute.STEER
    return NoticeDecision(route, accounted=parent.resident)


def route_job_notice(
    delivery: CompletionDelivery, owner_idle: bool, wakes_left: int
) -> NoticeRoute:
    """Route a job's completion notice to its owner (BG-37): follow up or inject.

    post: __return__ in (NoticeRoute.FOLLOWUP, NoticeRoute.INJECT)
    post: __return__ is NoticeRoute.INJECT or (owner_idle and wakes_left > 0)
    post: delivery is CompletionDelivery.WAKEUP or __return__ is NoticeRoute.INJECT
    """
    if delivery is CompletionDelivery.WAKEUP and owner_idle and wakes_left > 0:
        return NoticeRoute.FOLLOWUP
    return NoticeRoute.INJECT
