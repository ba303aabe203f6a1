"""The fork provider: an in-process child seeded with the parent's completed turns.

Theory of operation
-------------------
1. Same capabilities as spawn, ``inherits_parent_context`` true, default name ``fork``
   (FORK-1).
2. The seed is the balanced completed-turn prefix of the parent's log at call time: every
   event up to and including the last ``turn/end`` (seqs equal indexes, so the prefix is
   contiguous from 0). The parent's in-flight turn, which holds the delegating tool call, is
   excluded; no completed turn means no seed, and the child is exactly a spawn (FORK-2, CAP-8).
3. The seed is a one-time snapshot of history only: the child gets its own scope and
   composition, never the parent's restrictions or authority (FORK-3). Its header records
   ``seedLength`` and results are read only after it (FORK-4). A continuable preparation
   captures the same prefix once (FORK-5).
"""

from __future__ import annotations

from typing import ClassVar

from dsh_subagent.adapters.protocols import Agent
from dsh_subagent.adapters.providers.in_process import InProcessHost
from dsh_subagent.adapters.providers.spawn import SpawnProvider
from dsh_subagent.core.values import SessionEvent
from dsh_subagent.core.wire import completed_turn_prefix


class ForkProvider(SpawnProvider):
    """In-process children seeded with the parent's completed turns (FORK-*)."""

    inherits_parent_context: ClassVar[bool] = True

    def __init__(self, host: InProcessHost, *, name: str = "fork") -> None:
        super().__init__(host, name=name)

    def _seed(self, parent: Agent) -> tuple[SessionEvent, ...] | None:
        return completed_turn_prefix(parent.session.events)


__all__ = ["ForkProvider", "completed_turn_prefix"]
