"""A reference harness with every model-facing tool installed, for the tool tests."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from collections import deque
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path

from dsh_subagent.adapters.projections import SessionProjectionRegistry
from dsh_subagent.adapters.protocols import (
    CreateOptions,
    ModelRequest,
    ModelStep,
    SessionMeta,
    Tool,
    ToolCall,
    ToolOutcome,
)
from dsh_subagent.adapters.providers.fork import ForkProvider
from dsh_subagent.adapters.providers.in_process import InProcessHost
from dsh_subagent.adapters.providers.spawn import SpawnProvider
from dsh_subagent.adapters.reference.agent_loop import ReferenceAgent
from dsh_subagent.adapters.reference.composition import PromptComposer
from dsh_subagent.adapters.reference.persistence import InMemoryPersistence
from dsh_subagent.adapters.reference.registry import AgentRegistry
from dsh_subagent.adapters.reference.scripted_model import Gated, ModelFailure, ScriptItem, reply
from dsh_subagent.adapters.reference.session import LiveSession, SessionStore, bind_persistence
from dsh_subagent.adapters.reference.tool_registry import ToolRegistry
from dsh_subagent.adapters.service import SubagentService
from dsh_subagent.adapters.signals import AbortController, AbortSignal
from dsh_subagent.adapters.tools import (
    CallingAgents,
    ControlTools,
    Delivery,
    JobRegistry,
    ReportTool,
    SubagentTool,
    SubagentToolConfig,
    register_task_tools,
)
from dsh_subagent.adapters.tools.calling import acting_as
from dsh_subagent.core import wire
from dsh_subagent.core.manager.events import ReportDelivery
from dsh_subagent.core.values import (
    ASSISTANT_MESSAGE,
    TOOL_RESULT,
    USER_MESSAGE,
    AgentOptions,
    DataBlock,
    JsonObject,
    SessionId,
    TextBlock,
    text_of,
)


def run(main: Callable[[], Coroutine[object, object, None]]) -> None:
    asyncio.run(main())


ScriptTypes = (ModelStep, ModelFailure, Gated)


def ticking() -> Callable[[], float]:
    counter = itertools.count(1000)
    return lambda: float(next(counter))


Dynamic = Callable[[ModelRequest], ModelStep]
"""A script item computed from the request (e.g. to echo an id a tool returned)."""


class RoutedModel:
    """Scripts keyed by agent id, or by the text of the agent's first own user message.

    An agent without a script (or past its script) replies ``ok``.
    """

    def __init__(self, registry: Callable[[], AgentRegistry]) -> None:
        self._registry = registry
        self.scripts: dict[str, deque[ScriptItem | Dynamic]] = {}
        self.requests: list[ModelRequest] = []

    def script(self, key: str, *items: ScriptItem | Dynamic) -> None:
        self.scripts.setdefault(key, deque()).extend(items)

    def _key(self, request: ModelRequest) -> str:
        if request.agent in self.scripts:
            return request.agent
        agent = self._registry().get(request.agent)
        seed = 0 if agent is None else agent.session.header.seed_length or 0
        for event in request.events[seed:]:
            if event.type == USER_MESSAGE:
                data = event.data
                assert isinstance(data, Mapping)
                return text_of(wire.decode_message(data["message"], "m").content)
        return request.agent

    async def step(self, request: ModelRequest) -> ModelStep:
        self.requests.append(request)
        queue = self.scripts.get(self._key(request))
        next_item = queue.popleft() if queue else reply("ok")
        item = next_item if isinstance(next_item, ScriptTypes) else next_item(request)
        while isinstance(item, Gated):
            await item.gate.pass_through(request)
            item = item.then
        if isinstance(item, ModelFailure):
            raise RuntimeError(item.message)
        return item


class ToolsWorld:
    """Store, persistence, registry, service, providers and all the tools."""

    def __init__(
        self,
        *,
        max_per_owner: int = 10,
        delivery: Delivery = Delivery.WAKEUP,
        report_delivery: ReportDelivery = ReportDelivery.NEXT_STEP,
        max_consecutive_wakes: int = 3,
    ) -> None:
        self.store = SessionStore(clock=ticking())
        self.persistence = InMemoryPersistence()
        bind_persistence(self.store, self.persistence)
        self.globals = ToolRegistry()
        self.prompt = PromptComposer()
        self.model = RoutedModel(lambda: self.registry)
        self.registry = AgentRegistry(self.store, self.factory, persistence=self.persistence)
        self.service = SubagentService(
            self.registry,
            self.store,
            self.persistence,
            projections=SessionProjectionRegistry(),
        )
        self.host = InProcessHost(self.registry)
        self.spawn = SpawnProvider(self.host)
        self.fork = ForkProvider(self.host)
        self.unregister = {
            "spawn": self.service.register_provider(self.spawn),
            "fork": self.service.register_provider(self.fork),
        }
        self.callers = CallingAgents()
        self.callers.attach(self.registry)
        self.jobs = JobRegistry(
            self.registry,
            max_per_owner=max_per_owner,
            delivery=delivery,
            max_consecutive_wakes=max_consecutive_wakes,
            clock=ticking(),
        )
        register_task_tools(self.globals, self.jobs, prompt=self.prompt)
        ControlTools(self.service).register(self.globals)
        self.report = ReportTool(self.service, self.registry, report_delivery)
        self.uninstall_report = self.report.install()

    def factory(self, session: LiveSession, options: AgentOptions) -> ReferenceAgent:
        return ReferenceAgent(
            session,
            model=self.model,
            tools=self.globals,
            options=options,
            prompt=PromptComposer(self.prompt),
        )

    def tool(self, provider: str = "spawn", **fields: object) -> SubagentTool:
        """Apply one ``subagent`` tool instance."""
        config = SubagentToolConfig(provider, **fields)  # type: ignore[arg-type]
        instance = SubagentTool(
            self.service, self.globals, config, jobs=self.jobs, prompt=self.prompt
        )
        instance.apply()
        return instance

    async def parent(self, sid: str = "parent", *, depth: int | None = None) -> ReferenceAgent:
        handle = await self.registry.create(
            CreateOptions(SessionId(sid), meta=SessionMeta(cwd="/work", delegation_depth=depth))
        )
        return handle.agent

    async def settle(self) -> None:
        """Let every agent, job and Activation reach quiescence (yields only, no sleeps)."""
        quiet_rounds = 0
        while quiet_rounds < 3:
            for agent in self.registry.list():
                await agent.when_idle()
            await self.jobs.settled()
            manager = self.service._continuations
            if manager is not None:
                await manager.settled()
            for _ in range(5):
                await asyncio.sleep(0)
            busy = any(a.status.value == "running" for a in self.registry.list())
            quiet_rounds = 0 if busy else quiet_rounds + 1


async def call(
    agent: ReferenceAgent,
    name: str,
    arguments: JsonObject | None = None,
    *,
    signal: AbortSignal | None = None,
) -> ToolOutcome:
    """Execute one tool call through ``agent``'s own tool layer, as its loop would."""
    return await agent.tools.execute(
        ToolCall(f"call-{name}", name, arguments or {}),
        signal if signal is not None else AbortController().signal,
    )


async def handle(
    agent: ReferenceAgent, name: str, arguments: JsonObject, signal: AbortSignal
) -> ToolOutcome:
    """Run a tool's handler as ``agent`` without the registry's abort re-check."""
    tool = agent.tools.get(name)
    assert tool is not None, name
    with acting_as(agent):
        return await tool.handler(arguments, signal)


async def until(predicate: Callable[[], object], rounds: int = 500) -> None:
    """Yield to the loop until ``predicate()`` holds (deterministic, no timed sleeps)."""
    for _ in range(rounds):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


async def as_caller(
    world: ToolsWorld,
    agent: ReferenceAgent,
    name: str,
    arguments: JsonObject,
    signal: AbortSignal | None = None,
) -> ToolOutcome:
    """Run a global tool's handler with ``agent`` as the caller, registered or not."""
    tool = world.globals.get(name)
    assert tool is not None, name
    with acting_as(agent):
        return await tool.handler(arguments, signal or AbortController().signal)


async def without_caller(world: ToolsWorld, name: str, arguments: JsonObject) -> ToolOutcome:
    """Run a global tool's handler in a fresh task that has no calling agent."""
    tool = world.globals.get(name)
    assert tool is not None, name
    return await asyncio.ensure_future(tool.handler(arguments, AbortController().signal))


def started_id(outcome: ToolOutcome) -> SessionId:
    """The child id of a ``started subagent <id>`` answer."""
    prefix = "started subagent "
    assert text(outcome).startswith(prefix), text(outcome)
    return SessionId(text(outcome)[len(prefix) :])


def text(outcome: ToolOutcome) -> str:
    return text_of(outcome.content)


def transcript(agent: ReferenceAgent) -> list[tuple[str, str]]:
    """The agent's conversation as ``(role, text)`` rows: user, assistant, tool results."""
    rows: list[tuple[str, str]] = []
    for event in agent.session.events:
        data = event.data
        if not isinstance(data, Mapping):
            continue
        if event.type == USER_MESSAGE:
            message = wire.decode_message(data["message"], "m")
            rows.append(("user", " | ".join(_block(b) for b in message.content)))
        elif event.type == ASSISTANT_MESSAGE:
            inner = data["message"]
            assert isinstance(inner, Mapping)
            content = wire.decode_content(inner["content"], "c")
            rows.append(("assistant", " | ".join(_block(b) for b in content)))
        elif event.type == TOOL_RESULT:
            content = wire.decode_content(data["content"], "c")
            error = "error " if data["isError"] else ""
            rows.append((f"{error}tool {data['tool']}", text_of(content)))
    return rows


def _block(block: TextBlock | DataBlock) -> str:
    if isinstance(block, TextBlock):
        return block.text
    value = block.value
    if isinstance(value, Mapping) and value.get("type") == "tool-call":
        return f"call {value['name']}"
    return repr(value)


SNAPSHOTS = Path(__file__).parent / "snapshots"
UPDATE_SNAPSHOTS = "DSH_UPDATE_SNAPSHOTS"


def check_snapshot(name: str, tool: Tool) -> None:
    """Compare a tool's live name, description and schema to ``snapshots/<name>.json``.

    A deliberate change is accepted by re-running with ``DSH_UPDATE_SNAPSHOTS=1``, which
    rewrites the file; review the diff before committing it.
    """
    live = {"name": tool.name, "description": tool.description, "parameters": tool.schema}
    path = SNAPSHOTS / f"{name}.json"
    if os.environ.get(UPDATE_SNAPSHOTS) == "1":
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(json.dumps(live, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    stored = json.loads(path.read_text(encoding="utf-8"))
    assert stored == json.loads(json.dumps(live)), (
        f"the {name} tool changed; if deliberate, re-run with {UPDATE_SNAPSHOTS}=1"
    )
