"""The asyncio adapters: the reference harness, the service and the providers."""

from __future__ import annotations

from dsh_subagent.adapters.composition import PromptComposer, apply_child_composition
from dsh_subagent.adapters.continuation_types import (
    AncestorAuthority,
    ContinuableStart,
    ContinuableStartSpec,
    ParentAgent,
    UserGrant,
    UserInterruptAuthority,
)
from dsh_subagent.adapters.harness import ReferenceHarness
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
from dsh_subagent.adapters.tools import (
    CallingAgents,
    ControlTools,
    JobRegistry,
    ReportTool,
    SubagentTool,
    SubagentToolConfig,
    register_task_tools,
)

__all__ = [
    "AncestorAuthority",
    "CallingAgents",
    "ContinuableStart",
    "ContinuableStartSpec",
    "ControlTools",
    "JobRegistry",
    "ParentAgent",
    "ReferenceHarness",
    "ReportTool",
    "SubagentTool",
    "SubagentToolConfig",
    "UserGrant",
    "UserInterruptAuthority",
    "register_task_tools",
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
