"""The model-facing tools over ``SubagentService``: ``subagent``, the task surface, the
control tools and the child-scoped ``report``.

Wiring, in a host: ``CallingAgents().attach(registry)`` (tools learn their calling agent),
``SubagentTool(service, tools, SubagentToolConfig(provider="spawn"), jobs=...).apply()`` per
instance, ``register_task_tools(tools, jobs)``, ``ControlTools(service).register(tools)`` and
``ReportTool(service, registry).install()``.
"""

from __future__ import annotations

from dsh_subagent.adapters.tools.calling import CallingAgents, calling_agent
from dsh_subagent.adapters.tools.control import ControlTools
from dsh_subagent.adapters.tools.jobs import (
    Delivery,
    JobOutcome,
    JobRegistry,
    JobSnapshot,
    JobStatus,
    settle_run,
)
from dsh_subagent.adapters.tools.report import ReportTool
from dsh_subagent.adapters.tools.subagent_config import (
    PROVIDER_MANAGED,
    BackgroundMode,
    BackgroundValue,
    ContinuableValue,
    ForegroundValue,
    SubagentToolConfig,
    render_value,
    value_json,
)
from dsh_subagent.adapters.tools.subagent_tool import SubagentTool
from dsh_subagent.adapters.tools.task_tools import register_task_tools, task_tools

__all__ = [
    "PROVIDER_MANAGED",
    "BackgroundMode",
    "BackgroundValue",
    "CallingAgents",
    "ContinuableValue",
    "ControlTools",
    "Delivery",
    "ForegroundValue",
    "JobOutcome",
    "JobRegistry",
    "JobSnapshot",
    "JobStatus",
    "ReportTool",
    "SubagentTool",
    "SubagentToolConfig",
    "calling_agent",
    "register_task_tools",
    "render_value",
    "settle_run",
    "task_tools",
    "value_json",
]
