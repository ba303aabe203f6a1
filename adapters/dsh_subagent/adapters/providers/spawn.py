"""The spawn provider: a fresh in-process child that never sees the parent's conversation.

Theory of operation
-------------------
1. One provider under a configured name (default ``spawn``, SPAWN-1) advertising all four
   start capabilities, ``inherits_parent_context`` false (SPAWN-2).
2. A one-shot start is the shared in-process driver with no seed (SPAWN-3); a continuable
   preparation returns an empty spec, the continuation manager doing the rest (SPAWN-4).
3. ``ForkProvider`` is this provider with another seed (``_seed``) and defaults.
4. The provider holds no per-run state: every start owns its run (REG-9), and unregistering
   the provider revokes nothing already started (SPAWN-5, REG-6).
"""

from __future__ import annotations

from typing import ClassVar, Final

from dsh_subagent.adapters.protocols import Agent
from dsh_subagent.adapters.providers.base import (
    ContinuableCreateRequest,
    ContinuableCreateSpec,
    ResolvedStartRequest,
)
from dsh_subagent.adapters.providers.in_process import InProcessHost, InProcessRun, start_in_process
from dsh_subagent.core.jsonvalue import require_str
from dsh_subagent.core.values import SessionEvent, SubagentCapabilities

IN_PROCESS_CAPABILITIES: Final = SubagentCapabilities(
    output_schema=True, depth_limit=True, tool_filter=True, persona=True
)


class SpawnProvider:
    """Fresh in-process children (SPAWN-*); ``ForkProvider`` differs only in the seed."""

    inherits_parent_context: ClassVar[bool] = False
    capabilities: Final = IN_PROCESS_CAPABILITIES
    meters_budgets: Final = True  # its children are the seam's agents (BUDGET-12)

    def __init__(self, host: InProcessHost, *, name: str = "spawn") -> None:
        self.name: Final = require_str(name, "name", non_empty=True)
        self._host = host

    def _seed(self, parent: Agent) -> tuple[SessionEvent, ...] | None:
        """The child's seed, read from ``parent`` at call time: none for a spawn (SPAWN-3)."""
        return None

    async def start(self, request: ResolvedStartRequest) -> InProcessRun:
        return await start_in_process(self._host, request, self._seed(request.parent))

    async def prepare_continuable(self, request: ContinuableCreateRequest) -> ContinuableCreateSpec:
        return ContinuableCreateSpec(self._seed(request.parent))


__all__ = ["IN_PROCESS_CAPABILITIES", "SpawnProvider"]
