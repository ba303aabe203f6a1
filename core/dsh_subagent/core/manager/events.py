"""The continuation manager's vocabulary: phases and events (past-tense facts).

Theory of operation
-------------------
1. Events are past-tense facts the adapter observed or was asked; each carries an
   ``event_id``. The effects they produce live in ``manager.effects``.
2. Per-child events name a ``child_id`` and move that child's Activation through ``Phase``;
   manager-wide events (interrupt, report, drain, agent disposed) do not change a phase
   directly. Ids, run ids, message ids and identity tokens are all supplied by events.
3. ``Phase.ABSENT`` stands for "no Activation record", so the transition table is total
   over one enum. A start moves RESERVED -> SNAPSHOTTED -> PREPARED -> MATERIALIZED
   (published) -> RESIDENT (first accepted delivery); a cold resume enters at RESUMING and
   materializes only after ``LeaseAcquired`` (the store's per-child lease, its epoch fencing
   every append); ``LeaseRefused`` (held by another live harness) drops it, and the
   follow-up that asked for it goes to the child's durable mailbox. ``MailboxArrived`` is a
   message another harness accepted into that mailbox, now pending for this one (DUR-22).
   Teardown moves DISPOSING (cutoff) -> FLUSHING (children released) -> RELEASING (flush
   reported) -> ABSENT (handle disposed).
4. ``Trigger`` names the derivations that move a phase inside another event (settlement,
   disposal opened, children released); ``manager.state.STATE_TRIGGERED`` maps them.
"""

from __future__ import annotations

import enum
from collections.abc import Set as AbstractSet
from typing import Final, TypeAlias

import attrs

from dsh_subagent.core.authority import (
    AgentRef,
    FollowupAuthority,
    InterruptAuthority,
    Presented,
)
from dsh_subagent.core.notices import EpochOutcome
from dsh_subagent.core.residency import AgentStatus
from dsh_subagent.core.teardown import Boundary, FlushOutcome
from dsh_subagent.core.values import (
    EventId,
    MessageId,
    RunId,
    SessionId,
)


class Phase(enum.Enum):
    """The lifecycle phase of one child's Activation record."""

    ABSENT = "absent"
    RESERVED = "reserved"
    SNAPSHOTTED = "snapshotted"
    PREPARED = "prepared"
    RESUMING = "resuming"
    MATERIALIZED = "materialized"
    RESIDENT = "resident"
    DISPOSING = "disposing"
    FLUSHING = "flushing"
    RELEASING = "releasing"

    # Members are singletons compared by identity, so the identity hash agrees with ``==``;
    # Enum's own hash is a Python-level call on the name, paid on every table lookup.
    __hash__ = object.__hash__


UNPUBLISHED: Final = frozenset({Phase.RESERVED, Phase.SNAPSHOTTED, Phase.PREPARED, Phase.RESUMING})
DISPOSAL_OPEN: Final = frozenset({Phase.DISPOSING, Phase.FLUSHING, Phase.RELEASING})
LIVE: Final = frozenset({Phase.MATERIALIZED, Phase.RESIDENT}) | DISPOSAL_OPEN


class Trigger(enum.Enum):
    """A state-triggered edge: a derivation that moves a phase inside another event."""

    SETTLED = "settled"
    DISPOSAL_OPENED = "disposal_opened"
    CHILDREN_RELEASED = "children_released"

    __hash__ = object.__hash__  # as ``Phase``: identity, agreeing with ``==``


class ReportDelivery(enum.Enum):
    """How a child's report reaches its parent (CONT-31)."""

    NEXT_STEP = "next-step"
    QUIET = "quiet"


# --------------------------------------------------------------------------- per-child events


@attrs.frozen
class ChildIdReserved:
    """A fresh continuable start reserved ``child_id`` for ``parent`` (CONT-3)."""

    event_id: EventId
    child_id: SessionId
    parent: AgentRef


@attrs.frozen
class DescriptorSnapshotted:
    """The start's continuable descriptor was snapshotted (CONT-3 step 7)."""

    event_id: EventId
    child_id: SessionId


@attrs.frozen
class ChildPrepared:
    """The provider prepared the child's creation spec (CONT-5)."""

    event_id: EventId
    child_id: SessionId


@attrs.frozen
class ColdResumeStarted:
    """An authorized cold resume of a persisted child began (CONT-17)."""

    event_id: EventId
    child_id: SessionId
    parent_session: SessionId | None


@attrs.frozen
class LeaseAcquired:
    """The store granted this harness the child's lease at ``epoch`` (LEASE-1)."""

    event_id: EventId
    child_id: SessionId
    epoch: int


@attrs.frozen
class LeaseRefused:
    """The child's lease is held by another live harness; ``reason`` names it (LEASE-2).

    ``message_id`` is the follow-up that asked for the resume, if one did: it is posted to
    the child's durable mailbox for the holder to deliver (DUR-20).
    """

    event_id: EventId
    child_id: SessionId
    reason: str
    message_id: MessageId | None = None


@attrs.frozen
class MailboxArrived:
    """A message of the child's durable mailbox, accepted by another harness, is pending for
    this one: delivered into a live Activation, or the reason to resume an absent child
    (DUR-22, DUR-23)."""

    event_id: EventId
    child_id: SessionId
    message_id: MessageId


@attrs.frozen
class ChildMaterialized:
    """The registry created or resumed the child agent; ready to publish (CONT-10)."""

    event_id: EventId
    child_id: SessionId
    run_id: RunId
    agent: AgentRef
    lineage: AbstractSet[AgentRef]
    status: AgentStatus = AgentStatus.IDLE


@attrs.frozen
class StartRolledBack:
    """The start or cold resume failed before its first acceptance (CONT-9, TEAR-7)."""

    event_id: EventId
    child_id: SessionId
    handle_created: bool = False


@attrs.frozen
class FollowupRequested:
    """A delivery to ``child_id`` was requested (CONT-14, CONT-15, CONT-16)."""

    event_id: EventId
    child_id: SessionId
    message_id: MessageId
    authority: FollowupAuthority


@attrs.frozen
class MessageAccepted:
    """The child's synchronous ``followup`` returned: the message is in its inbox (CONT-8)."""

    event_id: EventId
    child_id: SessionId
    message_id: MessageId


@attrs.frozen
class MessageSendFailed:
    """A waking send to ``child_id`` raised; the accounted id is withdrawn (RES-2)."""

    event_id: EventId
    child_id: SessionId
    message_id: MessageId


@attrs.frozen
class MessageClaimed:
    """The child's inbox claimed ``message_id`` into a turn (HARNESS-11)."""

    event_id: EventId
    child_id: SessionId
    message_id: MessageId


@attrs.frozen
class MessageDiscarded:
    """The child's inbox discarded ``message_id`` (HARNESS-11)."""

    event_id: EventId
    child_id: SessionId
    message_id: MessageId


@attrs.frozen
class AgentBecameIdle:
    """The child agent's status became idle (HARNESS-2)."""

    event_id: EventId
    child_id: SessionId


@attrs.frozen
class AgentBecameBusy:
    """The child agent's status became running (HARNESS-2)."""

    event_id: EventId
    child_id: SessionId


@attrs.frozen
class FlushReported:
    """The final flush of the child's session finished (TEAR-2 step 7)."""

    event_id: EventId
    child_id: SessionId
    outcome: FlushOutcome


@attrs.frozen
class DisposalFinished:
    """The child's handle was disposed and its epoch captured (TEAR-2 steps 8-9).

    ``failures`` are this Activation's own failed boundaries; ``parent_registered`` and
    ``parent_status`` describe a parent that is not itself a resident Activation, and
    ``notice_id`` is the id for the settlement notice, should one be owed.
    """

    event_id: EventId
    child_id: SessionId
    outcome: EpochOutcome
    notice_id: MessageId
    failures: frozenset[Boundary] = frozenset()
    parent_registered: bool = True
    parent_status: AgentStatus = AgentStatus.IDLE


ChildEvent: TypeAlias = (
    ChildIdReserved
    | DescriptorSnapshotted
    | ChildPrepared
    | ColdResumeStarted
    | LeaseAcquired
    | LeaseRefused
    | MailboxArrived
    | ChildMaterialized
    | StartRolledBack
    | FollowupRequested
    | MessageAccepted
    | MessageSendFailed
    | MessageClaimed
    | MessageDiscarded
    | AgentBecameIdle
    | AgentBecameBusy
    | FlushReported
    | DisposalFinished
)

# --------------------------------------------------------------------------- manager events


@attrs.frozen
class InterruptRequested:
    """An interrupt of ``target_id`` was requested (CONT-23)."""

    event_id: EventId
    target_id: SessionId
    authority: InterruptAuthority


@attrs.frozen
class ReportRequested:
    """A child asked to report to its parent (CONT-30, CONT-31)."""

    event_id: EventId
    sender: AgentRef
    message_id: MessageId
    delivery: ReportDelivery
    parent_registered: bool = True
    parent_status: AgentStatus = AgentStatus.IDLE


@attrs.frozen
class WholeManager:
    """Drain everything and close admission for good (TEAR-13)."""


@attrs.frozen
class DescendantsOf:
    """Drain the descendants of these roots (TEAR-8)."""

    roots: tuple[Presented, ...]


@attrs.frozen
class SelectedChildren:
    """Drain these children of one parent (TEAR-11)."""

    parent: Presented
    child_ids: tuple[SessionId, ...]


DrainScope: TypeAlias = WholeManager | DescendantsOf | SelectedChildren


@attrs.frozen
class DrainRequested:
    """A drain of ``scope`` was requested (TEAR-8, TEAR-11, TEAR-13)."""

    event_id: EventId
    scope: DrainScope


@attrs.frozen
class AgentDisposed:
    """An agent object left the registry (``agent/disposed``, TEAR-9)."""

    event_id: EventId
    agent: AgentRef


ManagerEvent: TypeAlias = InterruptRequested | ReportRequested | DrainRequested | AgentDisposed
Event: TypeAlias = ChildEvent | ManagerEvent
