"""The asyncio adapters: the reference harness, the service and the providers."""

from __future__ import annotations

from dsh_subagent.adapters.composition import PromptComposer, apply_child_composition
from dsh_subagent.adapters.providers import (
    ContinuableCreateRequest,
    ContinuableCreateSpec,
    ForkProvider,
    InProcessHost,
    OutOfProcessProvider,
    ResolvedStartRequest,
    SpawnProvider,
    StartRequest,
    SubagentProvider,
    SubagentRun,
)
from dsh_subagent.adapters.service import SubagentService

__all__ = [
    "ContinuableCreateRequest",
    "ContinuableCreateSpec",
    "ForkProvider",
    "InProcessHost",
    "OutOfProcessProvider",
    "PromptComposer",
    "ResolvedStartRequest",
    "SpawnProvider",
    "StartRequest",
    "SubagentProvider",
    "SubagentRun",
    "SubagentService",
    "apply_child_composition",
]
