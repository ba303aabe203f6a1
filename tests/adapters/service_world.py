"""A reference harness wired to a ``SubagentService`` with the in-process providers, for tests."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence

from dsh_subagent.adapters.protocols import (
    Agent,
    ApprovalPolicyService,
    CreateOptions,
    PresetRoster,
    SandboxPolicyService,
    SessionMeta,
    SessionPersistence,
)
from dsh_subagent.adapters.providers.base import (
    DisposeOnExit,
    ResolvedStartRequest,
    StartRequest,
)
from dsh_subagent.adapters.providers.fork import ForkProvider
from dsh_subagent.adapters.providers.in_process import ChildSetup, InProcessHost
from dsh_subagent.adapters.providers.spawn import SpawnProvider
from dsh_subagent.adapters.reference.agent_loop import PreStepHook, ReferenceAgent
from dsh_subagent.adapters.reference.composition import PromptComposer
from dsh_subagent.adapters.reference.registry import AgentRegistry
from dsh_subagent.adapters.reference.scripted_model import ScriptedModel, ScriptItem
from dsh_subagent.adapters.reference.session import LiveSession, SessionStore
from dsh_subagent.adapters.reference.tool_registry import ScopedTools, ToolRegistry
from dsh_subagent.adapters.service import EVENT_NAMES, LifecyclePayload, SubagentService
from dsh_subagent.adapters.signals import AbortController, AbortSignal
from dsh_subagent.core.values import (
    AgentOptions,
    SessionEvent,
    SessionId,
    SubagentCapabilities,
    SubagentResult,
)
from tests.flat_intent import evolve_flat

DEPLOYMENT_PERSONA = "You are the deployment's assistant."


def run(main: Callable[[], Coroutine[object, object, None]]) -> None:
    asyncio.run(main())


class World:
    """One store, registry, global tools, deployment prompt, service and both providers."""

    def __init__(
        self,
        script: Iterable[ScriptItem] = (),
        *,
        sandbox: SandboxPolicyService | None = None,
        approval: ApprovalPolicyService | None = None,
        roster: PresetRoster | None = None,
        setup: ChildSetup | None = None,
        persistence: SessionPersistence | None = None,
        pre_step: PreStepHook | None = None,
    ) -> None:
        self.model = ScriptedModel(script)
        self.globals = ToolRegistry()
        self.prompt = PromptComposer()
        self.prompt.section("deployment:persona", 0, DEPLOYMENT_PERSONA)
        self.pre_step = pre_step
        self.store = SessionStore(clock=lambda: 1.0)
        self.registry = AgentRegistry(self.store, self.factory, persistence=persistence)
        self.host = InProcessHost(self.registry, sandbox, approval, roster, setup)
        self.service = SubagentService(self.registry, self.store, persistence)
        self.spawn = SpawnProvider(self.host)
        self.fork = ForkProvider(self.host)
        self.unregister = {
            "spawn": self.service.register_provider(self.spawn),
            "fork": self.service.register_provider(self.fork),
        }
        self.events: list[tuple[str, LifecyclePayload]] = []
        for name in EVENT_NAMES:
            self.service.on(name, self._recorder(name))

    def _recorder(self, name: str) -> Callable[[LifecyclePayload], None]:
        def record(payload: LifecyclePayload) -> None:
            self.events.append((name, payload))

        return record

    def factory(self, session: LiveSession, options: AgentOptions) -> ReferenceAgent:
        return ReferenceAgent(
            session,
            model=self.model,
            tools=ScopedTools(self.globals),
            options=options,
            prompt=PromptComposer(self.prompt),
            pre_step=self.pre_step,
        )

    async def parent(
        self,
        sid: str = "parent",
        *,
        cwd: str | None = "/work",
        depth: int | None = None,
        options: AgentOptions | None = None,
        seed: Sequence[SessionEvent] | None = None,
    ) -> ReferenceAgent:
        meta = SessionMeta(cwd=cwd, delegation_depth=depth)
        handle = await self.registry.create(
            CreateOptions(SessionId(sid), meta=meta, agent_options=options, seed=seed)
        )
        return handle.agent

    def names(self) -> list[str]:
        """The run lifecycle events seen so far (``subagent/start`` / ``subagent/end``)."""
        return [name for name, _ in self.events if name in ("subagent/start", "subagent/end")]


def ask(
    parent: ReferenceAgent,
    prompt: str = "do the task",
    *,
    signal: AbortSignal | None = None,
    **fields: object,
) -> StartRequest:
    """A start request from ``parent`` with a fresh signal unless one is given; ``fields``
    are flat (``max_depth=1``, ``label="x"``, ``evolve_flat``)."""
    signal = signal if signal is not None else AbortController().signal
    return evolve_flat(StartRequest(prompt, parent, signal), **fields)


ALL = SubagentCapabilities(True, True, True, True)


class FakeRun(DisposeOnExit):
    """A provider-made run whose result the test settles."""

    def __init__(self, run_id: str, local_agent: Agent | None = None) -> None:
        self.id = run_id
        self.local_agent = local_agent
        self.result: asyncio.Future[SubagentResult] = asyncio.get_running_loop().create_future()
        self.disposals = 0

    async def _dispose(self) -> None:
        self.disposals += 1

    def dispose(self) -> Awaitable[None]:
        return self._dispose()


class FakeProvider:
    """A provider that records its requests and returns ``FakeRun``s (or raises)."""

    inherits_parent_context = False

    def __init__(
        self,
        name: str = "fake",
        capabilities: SubagentCapabilities = ALL,
        *,
        failure: BaseException | None = None,
        run_id: str = "remote-1",
    ) -> None:
        self.name = name
        self.capabilities = capabilities
        self.failure = failure
        self.run_id = run_id
        self.requests: list[ResolvedStartRequest] = []
        self.runs: list[FakeRun] = []

    async def start(self, request: ResolvedStartRequest) -> FakeRun:
        self.requests.append(request)
        if self.failure is not None:
            raise self.failure
        fake = FakeRun(self.run_id)
        self.runs.append(fake)
        return fake
