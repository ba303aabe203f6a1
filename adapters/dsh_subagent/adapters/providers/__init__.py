"""Subagent providers: the contract, the in-process spawn and fork providers, the
out-of-process base."""

from __future__ import annotations

from dsh_subagent.adapters.providers.base import (
    ContinuableCreateRequest,
    ContinuableCreateSpec,
    DisposeOnExit,
    ResolvedStartRequest,
    StartRequest,
    SubagentProvider,
    SubagentRun,
    can_prepare_continuable,
)
from dsh_subagent.adapters.providers.fork import ForkProvider, completed_turn_prefix
from dsh_subagent.adapters.providers.in_process import InProcessHost
from dsh_subagent.adapters.providers.out_of_process import (
    NO_START_CAPABILITIES,
    OutOfProcessProvider,
)
from dsh_subagent.adapters.providers.spawn import SpawnProvider

__all__ = [
    "NO_START_CAPABILITIES",
    "ContinuableCreateRequest",
    "ContinuableCreateSpec",
    "DisposeOnExit",
    "ForkProvider",
    "InProcessHost",
    "OutOfProcessProvider",
    "ResolvedStartRequest",
    "SpawnProvider",
    "StartRequest",
    "SubagentProvider",
    "SubagentRun",
    "can_prepare_continuable",
    "completed_turn_prefix",
]
