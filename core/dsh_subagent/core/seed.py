"""Pure decisions about what a child inherits and what a failed result may say.

Theory of operation
-------------------
1. A fork seed is the parent's log through its last ``turn/end``: an in-flight turn cannot be
   replayed, so it is excluded; a log with no completed turn gives no seed (CAP-8).
2. A result diagnostic is bounded to 4096 UTF-8 bytes, cut on a character boundary and marked
   as truncated, so infrastructure detail cannot flood the parent (ONE-15, OOP-7).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from dsh_subagent.core.values import TURN_END, SessionEvent

DIAGNOSTIC_LIMIT: Final = 4096
TRUNCATION_SUFFIX: Final = "\n[diagnostic truncated]"


def completed_turn_prefix(events: Sequence[SessionEvent]) -> tuple[SessionEvent, ...] | None:
    """Every event through the last ``turn/end``, or ``None`` when no turn completed."""
    for index in range(len(events) - 1, -1, -1):
        if events[index].type == TURN_END:
            return tuple(events[: index + 1])
    return None


def limit_diagnostic(text: str) -> str:
    """``text`` if it fits 4096 UTF-8 bytes, else cut on a character boundary plus a suffix."""
    encoded = text.encode("utf-8")
    if len(encoded) <= DIAGNOSTIC_LIMIT:
        return text
    budget = DIAGNOSTIC_LIMIT - len(TRUNCATION_SUFFIX.encode("utf-8"))
    return encoded[:budget].decode("utf-8", errors="ignore") + TRUNCATION_SUFFIX
