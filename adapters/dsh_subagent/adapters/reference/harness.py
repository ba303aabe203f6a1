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
   ``async with ReferenceHarness.open(...) as harness:`` closes on exit (``open`` is both
   awaitable and an async context manager); a harness garbage-collected without ``close``
   warns with a ``ResourceWarning``, since its store may not hold the last events.
4. ``close`` always finishes (issue 19): a failed step (a drain, a refused flush, a tail
   write) never skips a later one, so every agent is disposed and persistence (and its SQLite
   thread) is closed. The failures are raised once, together, as one
   ``ACTIVATION_TEARDOWN_FAILED`` listing them, the originals in an ``ExceptionGroup`` cause.
   The teardown runs in its own task, so cancelling the caller does not stop it halfway;
   a later or concurrent ``close`` waits for it and is otherwise a no-op.
5. ``open(..., readonly=True)`` opens the store for listing only (``mode=ro``): nothing is
   created or written, and a foreign or empty file is "not a dsh-subagent store".
   ``db`` selects the backend by its form: a ``postgresql://`` (or ``postgres://``)
   address opens ``PostgresPersistence`` (the ``postgres`` extra, imported only then;
   ``docs/scale-out.md``), a path opens SQLite.
6. Top-level agents: ``create_agent`` makes a new one and refuses an id the store already
   holds (before anything is created: the stored log would be overwritten), naming
   ``resume_agent`` and ``agent``; ``resume_agent`` reloads a stored one; ``agent`` returns
   the live one, else resumes the stored one, else creates it. ``create_agent(...,
   budget=...)`` sets the host's budget of the agent's delegation tree; ``resume_agent``
   restores a recorded one (``docs/budgets.md``).
7. ``install_tools`` gives the agents the model-facing tools in one call: it binds the
   calling-agent context once (tools learn which agent calls them), then the ``subagent``
   tool (with the task tools when it runs one-shot children in the background), the control
   tools (``send_message``, ``interrupt_agent``, ``list_agents``) and the children's
   ``report``. The returned disposer removes what that call installed.
8. Accepted means durable (``docs/durability.md``): an acceptance is acknowledged once its
   session is stored, so a crash after it loses nothing; ``create_agent`` returns a stored
   agent, and a running agent's log is written as it grows, ``write_interval`` seconds after
   an append (DUR-1, DUR-2). A writer on SQLite watches the durable mailbox from its open,
   so it takes over children with mail whose holder died (DUR-26).
9. A model on a framework that runs the agent's tools itself (pydantic-ai, a chat-completions
   endpoint) must find them at step time, by the agent's id, from a harness that does not
   exist yet when ``model_for`` is written: ``open_with_tools_of`` passes it ``tools_of``.
"""

from __future__ import annotations

import asyncio
import os
import warnings
from collections.abc import Awaitable, Callable, Coroutine, Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Self, TypeAlias, TypeVar

from dsh_subagent.adapters.budgets import check_budget
from dsh_subagent.adapters.projections import SessionProjectionRegistry
from dsh_subagent.adapters.protocols import CreateOptions, Model, ResumeOptions, SessionMeta
from dsh_subagent.adapters.providers.fork import ForkProvider
from dsh_subagent.adapters.providers.in_process import InProcessHost
from dsh_subagent.adapters.providers.spawn import SpawnProvider
from dsh_subagent.adapters.reference.agent_loop import ReferenceAgent
from dsh_subagent.adapters.reference.composition import PromptComposer
from dsh_subagent.adapters.reference.persistence import InMemoryPersistence, is_postgres_address
from dsh_subagent.adapters.reference.registry import AgentRegistry
from dsh_subagent.adapters.reference.session import (
    DEFAULT_WRITE_INTERVAL,
    LiveSession,
    SessionStore,
    bind_persistence,
)
from dsh_subagent.adapters.reference.sqlite_persistence import SqlitePersistence
from dsh_subagent.adapters.reference.tool_registry import ScopedTools, ToolRegistry
from dsh_subagent.adapters.service import SubagentService
from dsh_subagent.adapters.signals import Unsubscribe
from dsh_subagent.adapters.tools import (
    BackgroundMode,
    CallingAgents,
    ControlTools,
    JobRegistry,
    ReportTool,
    SubagentTool,
    SubagentToolConfig,
    register_task_tools,
)
from dsh_subagent.core.budget import Budget
from dsh_subagent.core.errors import SubagentError, invalid
from dsh_subagent.core.teardown import aggregate_branches, teardown_failure
from dsh_subagent.core.values import AgentOptions, SessionId

if TYPE_CHECKING:
    from dsh_subagent.adapters.reference.postgres_persistence import PostgresPersistence

ModelFor = Callable[[LiveSession, AgentOptions], Model]
ToolsOf = Callable[[SessionId], ToolRegistry | None]
"""The tools of a live agent by its id; ``None`` once it is gone (rule 9)."""
Backend: TypeAlias = "InMemoryPersistence | SqlitePersistence | PostgresPersistence"
_H = TypeVar("_H", bound="ReferenceHarness")


async def open_persistence(
    db: str | os.PathLike[str], *, synchronous: str = "FULL", readonly: bool = False
) -> SqlitePersistence | PostgresPersistence:
    """The store ``db`` names (rule 5): PostgreSQL for a ``postgresql://`` address, else the
    SQLite file at the path (its directory created for a writer)."""
    if is_postgres_address(db):
        from dsh_subagent.adapters.reference.postgres_persistence import PostgresPersistence

        assert isinstance(db, str)
        return await PostgresPersistence.open(db, readonly=readonly)
    if not readonly:
        Path(db).parent.mkdir(parents=True, exist_ok=True)
    return await SqlitePersistence.open(db, synchronous=synchronous, readonly=readonly)


class HarnessOpening(Generic[_H]):
    """What ``ReferenceHarness.open`` returns: await it, or ``async with`` it (rule 3)."""

    def __init__(self, opening: Coroutine[Any, Any, _H]) -> None:
        self._opening = opening
        self._harness: _H | None = None

    def __await__(self) -> Generator[Any, None, _H]:
        return self._opening.__await__()

    async def __aenter__(self) -> _H:
        self._harness = await self._opening
        return self._harness

    async def __aexit__(self, *_exc: object) -> None:
        if self._harness is not None:
            await self._harness.close()


class ReferenceHarness:
    """Persistence, store, registry, projections, service and both in-process providers."""

    def __init__(
        self,
        persistence: Backend,
        model_for: ModelFor,
        *,
        write_interval: float | None = DEFAULT_WRITE_INTERVAL,
    ) -> None:
        """Internal: use ``ReferenceHarness.open``."""
        self.persistence = persistence
        self._model_for = model_for
        self.tools = ToolRegistry()
        self.prompt = PromptComposer()
        self.store = SessionStore()
        self._unbind = bind_persistence(self.store, persistence, interval=write_interval)
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
        self.jobs = JobRegistry(self.registry)
        self._calling: Unsubscribe | None = None
        self._closed = False

    @classmethod
    def open(
        cls,
        model_for: ModelFor,
        *,
        db: str | os.PathLike[str] | None = None,
        synchronous: str = "FULL",
        readonly: bool = False,
        write_interval: float | None = DEFAULT_WRITE_INTERVAL,
    ) -> HarnessOpening[Self]:
        """Open a harness on SQLite at ``db`` (created if missing), on PostgreSQL when ``db``
        is a ``postgresql://`` address (rule 5), or in memory without one.

        Await the result for the harness, or use it as ``async with ... as harness:``, which
        closes the harness on exit. ``readonly`` opens an existing ``db`` for listing only
        (rule 5). ``write_interval``: seconds a running agent's new events wait before they
        are written (rule 8; ``0``: the next loop tick; ``None``: only at acceptances and
        flushes).
        """
        return HarnessOpening(cls._open(model_for, db, synchronous, readonly, write_interval))

    @classmethod
    async def _open(
        cls,
        model_for: ModelFor,
        db: str | os.PathLike[str] | None,
        synchronous: str,
        readonly: bool,
        write_interval: float | None,
    ) -> Self:
        if db is None:
            return cls(InMemoryPersistence(), model_for, write_interval=write_interval)
        persistence = await open_persistence(db, synchronous=synchronous, readonly=readonly)
        harness = cls(persistence, model_for, write_interval=write_interval)
        if not readonly:
            harness.service.watch_mailbox()  # mail of a dead holder's children (DUR-26)
        return harness

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    def __del__(self, _warn: Callable[..., None] = warnings.warn) -> None:
        # ``_warn`` is bound at definition: module globals may be gone at interpreter exit.
        if not getattr(self, "_closed", True):  # a half-built harness has nothing to close
            _warn(
                f"unclosed {self!r}: call `await harness.close()` or use `async with`",
                ResourceWarning,
                stacklevel=1,
                source=self,
            )

    def _build_agent(self, session: LiveSession, options: AgentOptions) -> ReferenceAgent:
        return ReferenceAgent(
            session,
            model=self._model_for(session, options),
            tools=ScopedTools(self.tools),
            options=options,
            prompt=PromptComposer(self.prompt),
        )

    async def _stored(self, session_id: str) -> bool:
        return await self.persistence.revision(SessionId(session_id)) is not None

    async def create_agent(
        self, session_id: str, *, cwd: str | None = None, budget: Budget | None = None
    ) -> ReferenceAgent:
        """Create and publish a new top-level agent (a parent that delegates), with the
        host's ``budget`` for its whole delegation tree when given (BUDGET-12).

        raises: SubagentError (``INVALID_ARGUMENT`` naming ``session_id``) when the store
        already holds that id: resume it with ``resume_agent`` or use ``agent`` (rule 4).
        """
        check_budget(budget, "budget")
        if await self._stored(session_id):
            raise invalid(
                "session_id",
                f"session {session_id!r} is already stored; resume it with "
                f"resume_agent({session_id!r}), or use agent({session_id!r})",
            )
        handle = await self.registry.create(
            CreateOptions(SessionId(session_id), meta=SessionMeta(cwd=cwd))
        )
        if budget is not None:
            self.service.set_budget(handle.agent, budget)
        await self.store.commit(handle.agent.session)  # stored when returned (rule 8)
        return handle.agent

    async def resume_agent(self, session_id: str) -> ReferenceAgent:
        """Resume a persisted top-level agent from its log (HARNESS-17); a budget recorded
        in it is restored with what it consumed (BUDGET-15)."""
        handle = await self.registry.resume(ResumeOptions(SessionId(session_id)))
        self.service.budgets.restore(handle.agent, None)
        return handle.agent

    async def agent(self, session_id: str, *, cwd: str | None = None) -> ReferenceAgent:
        """The live agent ``session_id``, else the stored one resumed, else a new one (rule 4).

        ``cwd`` applies only when the agent is created.
        """
        live = self.registry.get(SessionId(session_id))
        if live is not None:
            return live
        if await self._stored(session_id):
            return await self.resume_agent(session_id)
        return await self.create_agent(session_id, cwd=cwd)

    def install_tools(
        self,
        *,
        subagent: SubagentToolConfig | bool = True,
        control: bool = False,
        report: bool = False,
    ) -> Unsubscribe:
        """Give every agent the model-facing tools in one call (rule 5).

        ``subagent``: ``True`` for the ``subagent`` tool on the spawn provider, a
        ``SubagentToolConfig`` for another configuration, ``False`` for none. ``control``:
        ``send_message``, ``interrupt_agent`` and ``list_agents``. ``report``: the ``report``
        tool of continuable children. Returns a disposer that removes what this call
        installed.
        """
        if not isinstance(subagent, SubagentToolConfig | bool):
            raise invalid("subagent", "must be a SubagentToolConfig or a bool")
        for name, flag in (("control", control), ("report", report)):
            if not isinstance(flag, bool):
                raise invalid(name, "must be a bool")
        config = SubagentToolConfig("spawn") if subagent is True else subagent or None
        if self._calling is None:
            self._calling = CallingAgents().attach(self.registry)
        removers: list[Unsubscribe] = []
        if config is not None:
            tool = SubagentTool(
                self.service, self.tools, config, jobs=self.jobs, prompt=self.prompt
            )
            tool.apply()
            removers.append(tool.dispose)
            one_shot = config.background_mode is BackgroundMode.ONE_SHOT
            if (
                config.enable_run_in_background
                and one_shot
                and self.tools.get("task_output") is None
            ):
                removers.append(register_task_tools(self.tools, self.jobs, prompt=self.prompt))
        if control:
            removers.append(ControlTools(self.service).register(self.tools))
        if report:
            removers.append(ReportTool(self.service, self.registry).install())

        def uninstall() -> None:
            while removers:
                removers.pop()()

        return uninstall

    async def flush(self, agent: ReferenceAgent) -> bool:
        """Write the agent's not-yet-persisted events; True when persistence took part."""
        return await self.store.flush(agent.session)

    async def close(self) -> None:
        """Drain continuable children first, then every agent, then persistence (TEAR-16).

        Every step runs whatever failed before it; the failures are raised once, together
        (rule 4). A second ``close`` is a no-op.
        """
        self._closed = True
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
            except Exception as error:  # reported with the rest, never skipping a step
                failures.append(teardown_failure(error))

        await attempt(self.service.drain_continuable())
        sessions = self.store.list()
        for session in sessions:  # ``commit``: a session may leave the store meanwhile
            await attempt(self.store.commit(session))
        await attempt(self.registry.close())
        # Disposal itself writes (each inbox's cancel splice): persist that tail too.
        for session in sessions:
            await attempt(self.store.commit(session))
        self._unbind()
        await attempt(self.persistence.close())
        return aggregate_branches("harness", failures)


async def open_with_tools_of(
    model_for: Callable[[LiveSession, AgentOptions, ToolsOf], Model], *, db: str | None = None
) -> ReferenceHarness:
    """Open a harness whose ``model_for`` also gets ``tools_of`` (rule 9)."""
    opened: list[ReferenceHarness] = []

    def tools_of(agent_id: SessionId) -> ToolRegistry | None:
        agent = opened[0].registry.get(agent_id)
        return None if agent is None else agent.tools

    def bound(session: LiveSession, options: AgentOptions) -> Model:
        return model_for(session, options, tools_of)

    opened.append(await ReferenceHarness.open(bound, db=db))
    return opened[0]
