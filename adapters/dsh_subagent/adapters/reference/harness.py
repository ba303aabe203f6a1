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
4. ``close`` always finishes (issue 19): a failed step (a drain, a refused flush, a tail
   write) never skips a later one, so every agent is disposed and persistence (and its SQLite
   thread) is closed. The failures are raised once, together, as one
   ``ACTIVATION_TEARDOWN_FAILED`` listing them, the originals in an ``ExceptionGroup`` cause.
   The teardown runs in its own task, so cancelling the caller does not stop it halfway;
   a later or concurrent ``close`` waits for it and is otherwise a no-op.
5. ``open(..., readonly=True)`` opens the store for listing only (``mode=ro``): nothing is
   created or written, and a foreign or empty file is "not a dsh-subagent store".
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
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
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.teardown import aggregate_branches
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
        self._teardown: asyncio.Future[SubagentError | None] | None = None

    @classmethod
    async def open(
        cls,
        model_for: ModelFor,
        *,
        db: str | os.PathLike[str] | None = None,
        synchronous: str = "FULL",
        readonly: bool = False,
    ) -> ReferenceHarness:
        """Open a harness on SQLite at ``db`` (created if missing), or in memory without one.

        ``readonly`` opens an existing ``db`` for listing only (rule 5).
        """
        if db is None:
            return cls(InMemoryPersistence(), model_for)
        if not readonly:
            Path(db).parent.mkdir(parents=True, exist_ok=True)
        persistence = await SqlitePersistence.open(db, synchronous=synchronous, readonly=readonly)
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
        """Drain continuable children first, then every agent, then persistence (TEAR-16).

        Every step runs whatever failed before it; the failures are raised once, together
        (rule 4). A second ``close`` is a no-op.
        """
        if self._teardown is None:
            self._teardown = asyncio.ensure_future(self._close_all())
            failure = await asyncio.shield(self._teardown)
            if failure is not None:
                raise failure
        else:
            await asyncio.shield(self._teardown)

    async def _close_all(self) -> SubagentError | None:
        failures: list[SubagentError] = []

        async def attempt(step: Awaitable[object]) -> None:
            try:
                await step
            except SubagentError as error:
                failures.append(error)
            except Exception as error:  # reported with the rest, never skipping a step
                failures.append(
                    SubagentError(ErrorCode.ACTIVATION_TEARDOWN_FAILED, repr(error), cause=error)
                )

        await attempt(self.service.drain_continuable())
        sessions = self.store.list()
        for session in sessions:
            await attempt(self.store.flush(session))
        await attempt(self.registry.close())
        # Disposal itself writes (each inbox's cancel splice): persist that tail too.
        for session in sessions:
            await attempt(persist_tail(self.persistence, session))
        self._unbind()
        await attempt(self.persistence.close())
        return aggregate_branches("harness", failures)
