"""A small harness for continuation-manager tests: store, persistence, registry, manager."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Sequence

from dsh_subagent.adapters.continuation import ContinuationManager
from dsh_subagent.adapters.continuation_engine import LifecycleInfo
from dsh_subagent.adapters.continuation_types import ContinuableStartSpec, ParentAgent
from dsh_subagent.adapters.protocols import (
    CreateOptions,
    ModelRequest,
    ModelStep,
    SessionPersistence,
    SessionRecord,
    Tool,
    ToolOutcome,
)
from dsh_subagent.adapters.providers.base import ContinuableCreateRequest, ContinuableCreateSpec
from dsh_subagent.adapters.reference.agent_loop import ReferenceAgent
from dsh_subagent.adapters.reference.persistence import InMemoryPersistence
from dsh_subagent.adapters.reference.registry import AgentHandle, AgentRegistry
from dsh_subagent.adapters.reference.scripted_model import ScriptedModel, ScriptItem, reply
from dsh_subagent.adapters.reference.session import LiveSession, SessionStore, bind_persistence
from dsh_subagent.adapters.reference.tool_registry import ToolRegistry
from dsh_subagent.adapters.setup_registry import ContinuableSetupRegistry
from dsh_subagent.adapters.signals import AbortSignal
from dsh_subagent.core import wire
from dsh_subagent.core.lifecycle import RunEndInfo, RunStartInfo
from dsh_subagent.core.values import (
    USER_MESSAGE,
    AgentOptions,
    Content,
    CoordinatorSource,
    JsonObject,
    SessionEvent,
    SessionId,
    SubagentIntent,
    SubagentSettledSource,
    TextBlock,
    ToolFilter,
    UserMessage,
    text_of,
)


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(main())  # type: ignore[arg-type]


async def yield_once() -> None:
    """Let every ready task run one step (deterministic scheduling, not a timed sleep)."""
    await asyncio.sleep(0)


def text(value: str) -> Content:
    return (TextBlock(value),)


class FallbackModel(ScriptedModel):
    """A scripted model that answers "ok" once its script is exhausted."""

    async def step(self, request: ModelRequest) -> ModelStep:
        if not self.remaining:
            self.requests.append(request)
            return reply("ok")
        return await super().step(request)


class SpawnDouble:
    """A provider with ``prepare_continuable``; ``seed`` is returned as the fork prefix."""

    def __init__(self, name: str = "spawn", seed: Sequence[SessionEvent] | None = None) -> None:
        self.name = name
        self.seed = None if seed is None else tuple(seed)
        self.calls: list[ContinuableCreateRequest] = []

    async def prepare_continuable(self, request: ContinuableCreateRequest) -> ContinuableCreateSpec:
        self.calls.append(request)
        return ContinuableCreateSpec(self.seed)


class OneShotOnly:
    """A provider without the continuable capability."""

    name = "one-shot-only"


async def _echo(arguments: JsonObject, _signal: object) -> ToolOutcome:
    return ToolOutcome((TextBlock("echo"),))


class Harness:
    """One manager over an in-memory (or given) persistence, store and registry."""

    def __init__(
        self,
        persistence: SessionPersistence | None = None,
        *,
        bind: bool = True,
        approval: object | None = None,
        sandbox: object | None = None,
        ids: str = "id",
    ):
        self.store = SessionStore()
        self.persistence: SessionPersistence | None = persistence or InMemoryPersistence()
        if bind:
            assert self.persistence is not None
            bind_persistence(self.store, self.persistence)
        self.tools = ToolRegistry()
        for name in ("read", "write"):
            self.tools.register(Tool(name, _echo))
        self.models: dict[str, FallbackModel] = {}
        self.handles: dict[str, AgentHandle] = {}
        self.agents = AgentRegistry(self.store, self.factory, persistence=self.persistence)
        self.events: list[tuple[str, LifecycleInfo]] = []
        self.providers: dict[str, object] = {"spawn": SpawnDouble(), "solo": OneShotOnly()}
        self.setups = ContinuableSetupRegistry()
        counter = itertools.count(1)
        self.manager = ContinuationManager(
            agents=self.agents,
            sessions=self.store,
            persistence=lambda: self.persistence,
            providers=self.providers.get,
            emit=lambda name, info: self.events.append((name, info)),
            setups=self.setups,
            approval=lambda: approval,  # type: ignore[arg-type,return-value]
            sandbox=lambda: sandbox,  # type: ignore[arg-type,return-value]
            ids=lambda: f"{ids}-{next(counter)}",
        )

    def factory(self, session: LiveSession, options: AgentOptions) -> ReferenceAgent:
        return ReferenceAgent(
            session, model=self.model(session.id), options=options, tools=self.tools
        )

    def model(self, agent_id: str) -> FallbackModel:
        return self.models.setdefault(agent_id, FallbackModel())

    def script(self, agent_id: str, *items: ScriptItem) -> None:
        self.model(agent_id).extend(items)

    async def root(
        self, agent_id: str = "root", options: AgentOptions | None = None
    ) -> ReferenceAgent:
        handle = await self.agents.create(
            CreateOptions(session_id=SessionId(agent_id), agent_options=options)
        )
        self.handles[agent_id] = handle
        return handle.agent

    def spec(
        self,
        parent: ReferenceAgent,
        prompt: str = "go",
        *,
        child_id: str | None = None,
        provider: str = "spawn",
        label: str = "worker",
        persona: str | None = None,
        tool_filter: ToolFilter | None = None,
        max_depth: int | None = None,
        agent_options: AgentOptions | None = None,
        signal: AbortSignal | None = None,
    ) -> ContinuableStartSpec:
        return ContinuableStartSpec(
            provider=provider,
            label=label,
            parent=parent,
            intent=SubagentIntent(
                text(prompt),
                max_depth=max_depth,
                tool_filter=tool_filter,
                persona=persona,
                agent_options=agent_options,
            ),
            child_id=None if child_id is None else SessionId(child_id),
            signal=signal,
        )

    async def start(
        self, parent: ReferenceAgent, child_id: str, prompt: str = "go"
    ) -> ReferenceAgent:
        await self.manager.start_continuable(self.spec(parent, prompt, child_id=child_id))
        agent = self.agents.get(SessionId(child_id))
        assert agent is not None
        return agent

    async def followup(self, parent: ReferenceAgent, child_id: str, prompt: str) -> str:
        return await self.manager.followup(
            SessionId(child_id), text(prompt), ParentAgent(parent), source=_coordinator(parent)
        )

    async def quiet(self) -> None:
        """Let every agent and teardown task run to quiescence (no sleeps)."""
        for _ in range(200):
            for agent in self.agents.list():
                await agent.when_idle()
            await self.manager.settled()
            await yield_once()
            busy = any(a.status.value == "running" for a in self.agents.list())
            if not busy and not self.manager._engine._tasks:
                for _ in range(5):
                    await yield_once()
                if not self.manager._engine._tasks:
                    return

    async def start_under(self, parent_id: str, child_id: str, prompt: str = "go") -> None:
        """Start ``child_id`` while ``parent_id``'s turn is held, as a delegating tool would."""
        parent = self.agents.get(SessionId(parent_id))
        assert parent is not None
        await self.manager.start_continuable(self.spec(parent, prompt, child_id=child_id))

    async def quiet_child(self, child_id: str) -> None:
        """Wait until ``child_id`` has released its Activation (its end edge was emitted)."""
        live = self.manager._engine.children.get(SessionId(child_id))
        if live is not None:
            await asyncio.wait([live.released])

    def starts(self) -> list[RunStartInfo]:
        return [info for name, info in self.events if isinstance(info, RunStartInfo)]

    def ends(self) -> list[RunEndInfo]:
        return [info for name, info in self.events if isinstance(info, RunEndInfo)]


def _coordinator(parent: ReferenceAgent) -> CoordinatorSource:
    return CoordinatorSource(parent.id)


def user_messages(agent: ReferenceAgent) -> list[UserMessage]:
    """Every user/message the agent's log holds, in order."""
    return [
        wire.decode_message(event.data["message"], "message")  # type: ignore[index,call-overload]
        for event in agent.session.events
        if event.type == USER_MESSAGE
    ]


def user_texts(agent: ReferenceAgent) -> list[str]:
    """The first text block of every user/message in the agent's log, in order."""
    return [text_of(message.content[:1]) for message in user_messages(agent)]


class Latch:
    """An awaitable a test opens; used to hold persistence reads or flushes at a point."""

    def __init__(self) -> None:
        self.opened = asyncio.Event()
        self.reached = asyncio.Event()

    async def hold(self) -> None:
        self.reached.set()
        await self.opened.wait()

    def open(self) -> None:
        self.opened.set()


class GatedPersistence(InMemoryPersistence):
    """In-memory persistence whose resume read waits at a latch: ``load``, or the
    ``revision`` check that lets a resume reuse the record it has just inspected."""

    def __init__(self) -> None:
        super().__init__()
        self.load_latch: Latch | None = None

    async def load(self, session_id: SessionId) -> SessionRecord:
        if self.load_latch is not None:
            await self.load_latch.hold()
        return await super().load(session_id)

    async def revision(self, session_id: SessionId) -> int | None:
        if self.load_latch is not None:
            await self.load_latch.hold()
        return await super().revision(session_id)


def notices(agent: ReferenceAgent) -> list[UserMessage]:
    """The settlement notices in the agent's log."""
    return [m for m in user_messages(agent) if isinstance(m.source, SubagentSettledSource)]
