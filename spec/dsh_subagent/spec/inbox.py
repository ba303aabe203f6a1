"""The life of one accepted inbox message: accepted, then claimed or discarded, exactly once.

Theory of operation
-------------------
1. An accepted message leaves the inbox exactly once, by a claim into a turn or by a discard
   (HARNESS-11): ``ACCEPTED`` has two exits and both ends are final.
2. ``TRANSITIONS`` is the whole life; any other ``(state, event)`` pair is illegal and raises
   ``ILLEGAL_TRANSITION`` (a message claimed twice, or claimed after its discard).
3. ``MessageLedger`` folds a stream of inbox notifications for many messages; it is the
   pure oracle the invariants use to check "every accepted message leaves exactly once".
4. This is an oracle, not a machine the product runs (the reference agent keeps its own
   inbox), so it lives in the spec beside the charts built from it; it imports only the core.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Final

import attrs

from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import MessageId


class MessageState(enum.Enum):
    """Where one message is in its inbox life."""

    ACCEPTED = "accepted"
    CLAIMED = "claimed"
    DISCARDED = "discarded"


class InboxEvent(enum.Enum):
    """The inbox notifications that move a message (HARNESS-11)."""

    CLAIMED = "claimed"
    DISCARDED = "discarded"


TRANSITIONS: Final[Mapping[tuple[MessageState, InboxEvent], MessageState]] = {
    (MessageState.ACCEPTED, InboxEvent.CLAIMED): MessageState.CLAIMED,
    (MessageState.ACCEPTED, InboxEvent.DISCARDED): MessageState.DISCARDED,
}


def step(state: MessageState, event: InboxEvent) -> MessageState:
    """The message's next state.

    post: __return__ is not MessageState.ACCEPTED
    raises: SubagentError
    """
    target = TRANSITIONS.get((state, event))
    if target is None:
        raise SubagentError(
            ErrorCode.ILLEGAL_TRANSITION,
            f"a {state.value} message cannot be {event.value}",
            field="event",
        )
    return target


@attrs.frozen
class MessageLedger:
    """Every message seen so far and its state; ``pending`` are those still in the inbox."""

    states: Mapping[MessageId, MessageState] = attrs.field(factory=dict)

    def accepted(self, message_id: MessageId) -> MessageLedger:
        """Record an inserted message; an id may be accepted only once.

        raises: SubagentError
        """
        if message_id in self.states:
            raise SubagentError(
                ErrorCode.ILLEGAL_TRANSITION, f"message {message_id} accepted twice", field="id"
            )
        return MessageLedger({**self.states, message_id: MessageState.ACCEPTED})

    def left(self, message_id: MessageId, event: InboxEvent) -> MessageLedger:
        """Record a claim or discard of a known message.

        raises: SubagentError
        """
        current = self.states.get(message_id)
        if current is None:
            raise SubagentError(
                ErrorCode.ILLEGAL_TRANSITION, f"message {message_id} was never accepted", field="id"
            )
        return MessageLedger({**self.states, message_id: step(current, event)})

    def pending(self) -> frozenset[MessageId]:
        """Messages accepted and not yet claimed or discarded."""
        return frozenset(m for m, s in self.states.items() if s is MessageState.ACCEPTED)

    def count(self, state: MessageState) -> int:
        """How many messages are in ``state``."""
        return sum(1 for s in self.states.values() if s is state)


def ledger_of(events: Iterable[tuple[str, MessageId]]) -> MessageLedger:
    """Fold ``("inserted" | "claimed" | "discarded", id)`` notifications into a ledger.

    raises: SubagentError
    """
    ledger = MessageLedger()
    for kind, message_id in events:
        if kind == "inserted":
            ledger = ledger.accepted(message_id)
        else:
            ledger = ledger.left(message_id, InboxEvent(kind))
    return ledger
