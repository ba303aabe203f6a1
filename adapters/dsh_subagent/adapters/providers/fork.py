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

from typing import Final

from dsh_subagent.adapters.providers.base import (
    ContinuableCreateRequest,
    ContinuableCreateSpec,
    ResolvedStartRequest,
)
from dsh_subagent.adapters.providers.in_process import InProcessHost, InProcessRun, start_in_process
from dsh_subagent.adapters.providers.spawn import IN_PROCESS_CAPABILITIES
from dsh_subagent.core.jsonvalue import require_str
from dsh_subagent.core.wire import completed_turn_prefix


class ForkProvider:
    """In-process children seeded with the parent's completed turns (FORK-*)."""

    inherits_parent_context: Final = True
    capabilities: Final = IN_PROCESS_CAPABILITIES
    meters_budgets: Final = True  # its children are the seam's agents (BUDGET-12)

    def __init__(self, host: InProcessHost, *, name: str = "fork") -> None:
        self.name: Final = require_str(name, "name", non_empty=True)
        self._host = host

    async def start(self, request: ResolvedStartRequest) -> InProcessRun:
        seed = completed_turn_prefix(request.parent.session.events)
        return await start_in_process(self._host, request, seed)

    async def prepare_continuable(self, request: ContinuableCreateRequest) -> ContinuableCreateSpec:
        return ContinuableCreateSpec(completed_turn_prefix(request.parent.session.events))


__all__ = ["ForkProvider", "completed_turn_prefix"]
