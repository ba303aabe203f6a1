"""The continuation manager's effects: imperatives the adapter carries out, in order.

Theory of operation
-------------------
1. Each effect is a frozen value naming what to do, never how; ``cause`` is the id of the
   event that produced it, so every send, cancel and edge can be traced to its fact.
2. The order of effects returned by one ``apply`` call is the order the adapter performs
   them in, within one no-await span where the catalog requires one (HARNESS-32).
3. Expected refusals are the ``Reject`` effect; nothing else is emitted alongside a
   refusal except the rollback of an unpublished start (``DisposeHandle``).
"""

from __future__ import annotations

from typing import TypeAlias

import attrs

from dsh_subagent.core.errors import ErrorCode
from dsh_subagent.core.notices import NoticeRoute
from dsh_subagent.core.teardown import DurabilityReport
from dsh_subagent.core.values import (
    CancelKind,
    Content,
    EventId,
    MessageId,
    RunId,
    SessionId,
    StopReason,
    SubagentSettledSource,
)


@attrs.frozen
class Reject:
    """Refuse the request with ``code``; nothing was changed."""

    cause: EventId
    code: ErrorCode
    reason: str


@attrs.frozen
class SubmitFollowup:
    """Call the child's waking ``followup`` with the accounted message (CONT-15, RES-2).

    ``report_accepted``: once the send returned, report ``MessageAccepted`` (the child's
    first acceptance, which makes it resident and announced). False for a resident child:
    this very transition already holds everything an acceptance records, so a delivery to
    it is one core transition.
    """

    cause: EventId
    child_id: SessionId
    message_id: MessageId
    report_accepted: bool = False


@attrs.frozen
class ResumeAgent:
    """No Activation: cold-resume the child, then deliver the message (CONT-17)."""

    cause: EventId
    child_id: SessionId
    message_id: MessageId


@attrs.frozen
class PostToMailbox:
    """The child is held by another live harness: post the message to its durable mailbox,
    the acceptance itself (DUR-20)."""

    cause: EventId
    child_id: SessionId
    message_id: MessageId


@attrs.frozen
class AwaitRelease:
    """Disposal is open: wait for the release, then route the message again (CONT-14)."""

    cause: EventId
    child_id: SessionId
    message_id: MessageId


@attrs.frozen
class AwaitBranches:
    """A drain's targets: await these Activations' releases, then aggregate (TEAR-12).

    They are the top-most live Activations the drain covers; their releases include every
    covered one below them.
    """

    cause: EventId
    child_ids: tuple[SessionId, ...]


@attrs.frozen
class EmitStart:
    """Publish the epoch's ``subagent/start`` edge (CONT-10 step 8)."""

    cause: EventId
    child_id: SessionId
    run_id: RunId
    epoch: int


@attrs.frozen
class EmitEnd:
    """Publish the epoch's ``subagent/end`` edge (TEAR-2 step 14)."""

    cause: EventId
    child_id: SessionId
    run_id: RunId
    stop_reason: StopReason
    durability: DurabilityReport | None = None


@attrs.frozen
class CancelAgent:
    """Cancel the child agent; ``keep_inbox`` for interrupts only (TEAR-18)."""

    cause: EventId
    child_id: SessionId
    kind: CancelKind
    keep_inbox: bool


@attrs.frozen
class FlushSession:
    """Await the child's idle, clear its inbox as its disposal will (a ``disposed`` cancel),
    then flush its session: one commit carries the log tail and its discards (TEAR-2 steps
    6-7, DUR-4)."""

    cause: EventId
    child_id: SessionId


@attrs.frozen
class ReportDurabilityFailed:
    """Log and record a failed or unconfirmed final flush (DESIGN decision 1)."""

    cause: EventId
    report: DurabilityReport


@attrs.frozen
class DisposeHandle:
    """Capture the epoch facts, then dispose the child's handle (TEAR-2 steps 8-9)."""

    cause: EventId
    child_id: SessionId


@attrs.frozen
class SendNotice:
    """Send the settlement notice to the parent by ``route`` (NOTICE-1, NOTICE-10)."""

    cause: EventId
    parent_session: SessionId
    message_id: MessageId
    route: NoticeRoute
    accounted: bool
    content: Content
    source: SubagentSettledSource


@attrs.frozen
class ReleaseOwnership:
    """Remove ``child_id`` from its owner's set and poke the owner (TEAR-2 step 13)."""

    cause: EventId
    child_id: SessionId
    owner: SessionId | None


@attrs.frozen
class DeliverReport:
    """Frame and deliver a child's report to its parent (CONT-31, CONT-34)."""

    cause: EventId
    child_id: SessionId
    parent_session: SessionId
    message_id: MessageId
    route: NoticeRoute
    accounted: bool


Effect: TypeAlias = (
    Reject
    | SubmitFollowup
    | ResumeAgent
    | PostToMailbox
    | AwaitRelease
    | AwaitBranches
    | EmitStart
    | EmitEnd
    | CancelAgent
    | FlushSession
    | ReportDurabilityFailed
    | DisposeHandle
    | SendNotice
    | ReleaseOwnership
    | DeliverReport
)
