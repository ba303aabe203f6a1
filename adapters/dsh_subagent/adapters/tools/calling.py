"""Which agent is calling a tool: the ``exec.agent`` of the model-facing tools.

Theory of operation
-------------------
1. The reference tool registry hands a handler only ``(arguments, signal)``. The seam's tools
   also need the *calling agent* (TOOL-16, CTRL-2). ``CallingAgents`` recovers it without
   changing the registry: it adds one guard to every agent's own tool layer, and a guard runs
   synchronously in the agent's driver task right before the handler it guards. The guard
   records ``(agent, current task)`` in a context variable; the handler reads it back.
2. The binding counts only inside the task that recorded it: a driver task started from
   another agent's tool call inherits that agent's context, so a binding whose task is not
   the current one is ignored (no agent is reported rather than the wrong one).
3. ``attach(registry)`` binds every live agent now and every agent the registry announces
   later; the returned disposer stops binding new agents (guards already installed stay on
   their agents' scopes and unwind with them).
4. ``acting_as(agent)`` binds a caller for a block of code, for hosts that run a tool outside
   an agent's loop (and for tests).
5. ``require_caller(tool_name)`` is the tools' entry check: the caller, or ``<tool> requires a
   calling agent (exec.agent was undefined)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Iterator
from typing import Final

from dsh_subagent.adapters.protocols import Agent, AgentRegistry, ToolCall
from dsh_subagent.adapters.signals import Unsubscribe
from dsh_subagent.core.errors import ErrorCode, SubagentError

_Binding = tuple[Agent, "asyncio.Task[object] | None"]
_CALLER: Final[contextvars.ContextVar[_Binding | None]] = contextvars.ContextVar(
    "dsh_subagent_calling_agent", default=None
)


def _current_task() -> asyncio.Task[object] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running loop
        return None


def calling_agent() -> Agent | None:
    """The agent whose tool call is running in this task, or None (rules 1-2)."""
    binding = _CALLER.get()
    if binding is None or binding[1] is not _current_task():
        return None
    return binding[0]


def missing_caller(tool_name: str) -> SubagentError:
    """TOOL-16 / CTRL-2: the call has no calling agent."""
    return SubagentError(
        ErrorCode.UNAUTHORIZED,
        f"{tool_name} requires a calling agent (exec.agent was undefined)",
        field="exec.agent",
    )


def require_caller(tool_name: str) -> Agent:
    """The calling agent, or ``missing_caller(tool_name)`` (rule 4)."""
    agent = calling_agent()
    if agent is None:
        raise missing_caller(tool_name)
    return agent


def bind(agent: Agent) -> Unsubscribe:
    """Record ``agent`` as the caller of every tool its own layer executes (rule 1)."""

    def record(_call: ToolCall) -> None:
        _CALLER.set((agent, _current_task()))

    remove = agent.tools.add_guard(record)
    agent.ctx.defer(remove)
    return remove


@contextlib.contextmanager
def acting_as(agent: Agent) -> Iterator[None]:
    """Within the block, tools called from this task see ``agent`` as their caller (rule 4)."""
    token = _CALLER.set((agent, _current_task()))
    try:
        yield
    finally:
        _CALLER.reset(token)


class CallingAgents:
    """Binds the agents of one registry as tool callers (rule 3)."""

    def __init__(self) -> None:
        self._bound: set[int] = set()

    def _bind_once(self, agent: Agent) -> None:
        if id(agent) not in self._bound:
            self._bound.add(id(agent))
            bind(agent)
            agent.ctx.defer(lambda: self._bound.discard(id(agent)))

    def attach(self, registry: AgentRegistry) -> Unsubscribe:
        """Bind every live agent of ``registry`` and each one it announces from now on."""
        for agent in registry.list():
            self._bind_once(agent)
        return registry.created.subscribe(self._bind_once)


__all__ = [
    "CallingAgents",
    "acting_as",
    "bind",
    "calling_agent",
    "missing_caller",
    "require_caller",
]
