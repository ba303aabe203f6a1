"""What the conformance tests observe of an agent, through the seam's protocols only.

Theory of operation
-------------------
1. A ``Trace`` subscribes to an agent's inbox and status emitters and records every
   notification in order, so a test can assert orderings (HARNESS-3, -11, -32).
2. The other probes read the session log as the seam does: turn-end payloads and reasons
   (HARNESS-9, -22), event types, and the user messages as they were logged (HARNESS-12/13).
3. Nothing here touches a reference-harness internal: a port that passes these probes is
   observed exactly as the seam observes it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from dsh_subagent.adapters.protocols import (
    Agent,
    CancelCause,
    InboxNotification,
    create_user_message,
)
from dsh_subagent.core import wire
from dsh_subagent.core.values import (
    TURN_END,
    USER_MESSAGE,
    CancelKind,
    JsonValue,
    TextBlock,
    TurnEndReason,
    UserMessage,
    text_of,
)

USER = CancelCause(CancelKind.USER)
PARENT = CancelCause(CancelKind.PARENT)
DISPOSED = CancelCause(CancelKind.DISPOSED)


def msg(text: str) -> UserMessage:
    """A fresh user message with one text block."""
    return create_user_message((TextBlock(text),))


class Trace:
    """Every notification of one agent, in order, as ``(kind, message id or status)``."""

    def __init__(self, agent: Agent) -> None:
        self.log: list[tuple[str, str]] = []
        self.turns: list[tuple[str, int | None]] = []
        agent.inserted.subscribe(self._record("inserted"))
        agent.claimed.subscribe(self._record("claimed"))
        agent.discarded.subscribe(self._record("discarded"))
        agent.status_changed.subscribe(lambda n: self.log.append(("status", n.status.value)))

    def _record(self, kind: str) -> Callable[[InboxNotification], None]:
        def record(n: InboxNotification) -> None:
            self.log.append((kind, n.message.id))
            if kind == "claimed":
                self.turns.append((n.message.id, n.turn))

        return record

    def of(self, kind: str) -> list[str]:
        return [value for k, value in self.log if k == kind]


def turn_ends(agent: Agent) -> list[JsonValue]:
    """The ``turn/end`` payloads of the agent's log, in order."""
    return [e.data for e in agent.session.events if e.type == TURN_END]


def reasons(agent: Agent) -> list[TurnEndReason]:
    """The reasons of the agent's ``turn/end`` events, in order."""
    return [wire.turn_end_reason(e.data) for e in agent.session.events if e.type == TURN_END]


def types(agent: Agent) -> list[str]:
    """The event types of the agent's log, in order."""
    return [e.type for e in agent.session.events]


def logged_messages(agent: Agent) -> list[UserMessage]:
    """The user messages the agent's log holds, decoded as the seam decodes them."""
    found = []
    for event in agent.session.events:
        if event.type == USER_MESSAGE and isinstance(event.data, Mapping):
            found.append(wire.decode_message(event.data.get("message"), "message"))
    return found


def user_texts(agent: Agent) -> list[str]:
    """The text of every logged user message, in order."""
    return [text_of(m.content) for m in logged_messages(agent)]
