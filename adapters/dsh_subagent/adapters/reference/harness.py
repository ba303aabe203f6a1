"""The reference harness assembled end to end, for hosts without one of their own.

Theory of operation
-------------------
1. ``ReferenceHarness.open`` wires, in dependency order: session persistence (SQLite at a
   path, or in memory), a live ``SessionStore`` whose flushes write to it, an
   ``AgentRegistry`` whose agents are ``ReferenceAgent``s on the caller's model, the
   projection registry, and a ``SubagentService`` with the spawn and fork providers.
2. The caller supplies only the model (``model_for(session, options)``), so the same harness
   serves the demo, the benchmarks, the tests and a newcomer's first program.
3. ``close`` is the host's teardown order (TEAR-16): drain every continuable child first,
   then dispose the remaining agents, then close persistence. Durable sessions survive it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from dsh_subagent.adapters.projections import SessionProjectionRegistry
from dsh_subagent.adapters.protocols import CreateOptions, Model, ResumeOptions, SessionMeta
from dsh_subagent.adapters.providers.fork import ForkProvider
from dsh_subagent.adapters.providers.in_process import InProcessHost
from dsh_subagent.adapters.providers.spawn import SpawnProvider
from dsh_subagent.adapters.reference.agent_loop import ReferenceAgent
from dsh_subagent.adapters.reference.composition import PromptComposer
from dsh_subagent.adapters.reference.persistence import InMemoryPersistence
from dsh_subagent.adapters.reference.registry import AgentRegistry
from dsh_subagent.adapters.reference.session import (
    LiveSession,
    SessionStore,
    bind_persistence,
    persist_tail,
)
from dsh_subagent.adapters.reference.sqlite_persistence import SqlitePersistence
from dsh_subagent.adapters.reference.tool_registry import ScopedTools, ToolRegistry
from dsh_subagent.adapters.service import SubagentService
from dsh_subagent.core.values import AgentOptions, SessionId

ModelFor = Callable[[LiveSession, AgentOptions], Model]


class ReferenceHarness:
    """Persistence, store, registry, projections, service and both in-process providers."""

    def __init__(
        self, persistence: InMemoryPersistence | SqlitePersistence, model_for: ModelFor
    ) -> None:
        """Internal: use ``ReferenceHarness.open``."""
        self.persistence = persistence
        self._model_for = model_for
        self.tools = ToolRegistry()
        self.prompt = PromptComposer()
        self.store = SessionStore()
        self._unbind = bind_persistence(self.store, persistence)
        self.registry = AgentRegistry(self.store, self._build_agent, persistence=persistence)
        self.projections = SessionProjectionRegistry()
        self.host = InProcessHost(self.registry)
        self.service = SubagentService(
            self.registry, self.store, persistence, projections=self.projections
        )
        self.spawn = SpawnProvider(self.host)
        self.fork = ForkProvider(self.host)
        self.service.register_provider(self.spawn)
        self.service.register_provider(self.fork)

    @classmethod
    async def open(
        cls,
        model_for: ModelFor,
        *,
        db: str | os.PathLike[str] | None = None,
        synchronous: str = "FULL",
    ) -> ReferenceHarness:
        """Open a harness on SQLite at ``db`` (created if missing), or in memory without one."""
        if db is None:
            return cls(InMemoryPersistence(), model_for)
        Path(db).parent.mkdir(parents=True, exist_ok=True)
        persistence = await SqlitePersistence.open(db, synchronous=synchronous)
        return cls(persistence, model_for)

    def _build_agent(self, session: LiveSession, options: AgentOptions) -> ReferenceAgent:
        return ReferenceAgent(
            session,
            model=self._model_for(session, options),
            tools=ScopedTools(self.tools),
            options=options,
            prompt=PromptComposer(self.prompt),
        )

    async def create_agent(self, session_id: str, *, cwd: str | None = None) -> ReferenceAgent:
        """Create and publish a top-level agent (a parent that delegates)."""
        handle = await self.registry.create(
            CreateOptions(SessionId(session_id), meta=SessionMeta(cwd=cwd))
        )
        return handle.agent

    async def resume_agent(self, session_id: str) -> ReferenceAgent:
        """Resume a persisted top-level agent from its log (HARNESS-17)."""
        handle = await self.registry.resume(ResumeOptions(SessionId(session_id)))
        return handle.agent

    async def flush(self, agent: ReferenceAgent) -> bool:
        """Write the agent's not-yet-persisted events; True when persistence took part."""
        return await self.store.flush(agent.session)

    async def close(self) -> None:
        """Drain continuable children first, then every agent, then persistence (TEAR-16)."""
        try:
            await self.service.drain_continuable()
        finally:
            sessions = self.store.list()
            for session in sessions:
                await self.store.flush(session)
            await self.registry.close()
            # Disposal itself writes (each inbox's cancel splice): persist that tail too.
            for session in sessions:
                await persist_tail(self.persistence, session)
            self._unbind()
            await self.persistence.close()
