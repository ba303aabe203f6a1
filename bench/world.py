"""The world our benchmark workloads run in: a null model, the service, and the measuring.

Theory of operation
-------------------
1. ``World`` assembles one store, agent registry and ``SubagentService`` with the in-process
   spawn provider, as ``tests/adapters/service_world.py`` does, optionally bound to a
   persistence; unless told not to (``keep_ends=False``), it queues each child's
   ``subagent/end`` so a workload can await "that epoch ended" without polling.
2. ``BenchModel`` is the null model: every step builds a fresh ``"done"`` reply and returns
   it at once. A workload may hold steps at a ``Barrier`` (all children in flight), hold them
   until the turn is aborted (a live tree), or count the history each step is handed.
3. Measuring follows the peers' scripts: wall (``perf_counter_ns``) and process CPU
   (``process_time_ns``) per timed call, nearest-rank p95, RSS read from ``/proc``.
"""

from __future__ import annotations

import asyncio
import os
import resource
import statistics
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Final

from dsh_subagent.adapters.continuation_types import ContinuableStartSpec
from dsh_subagent.adapters.protocols import (
    CreateOptions,
    ModelRequest,
    ModelStep,
    SessionPersistence,
)
from dsh_subagent.adapters.providers.base import StartRequest, SubagentRun
from dsh_subagent.adapters.providers.in_process import InProcessHost
from dsh_subagent.adapters.providers.spawn import SpawnProvider
from dsh_subagent.adapters.reference.agent_loop import ReferenceAgent
from dsh_subagent.adapters.reference.composition import PromptComposer
from dsh_subagent.adapters.reference.registry import AgentRegistry
from dsh_subagent.adapters.reference.session import LiveSession, SessionStore, bind_persistence
from dsh_subagent.adapters.reference.tool_registry import ScopedTools, ToolRegistry
from dsh_subagent.adapters.service import LifecyclePayload, SubagentService
from dsh_subagent.adapters.signals import AbortController, race_abort
from dsh_subagent.core.lifecycle import SUBAGENT_END, RunEndInfo
from dsh_subagent.core.values import (
    ASSISTANT_MESSAGE,
    USER_MESSAGE,
    AgentOptions,
    Content,
    KnownStop,
    SessionId,
    SubagentResult,
    TextBlock,
)

ANSWER: Final = "done"
PROMPT: Final[Content] = (TextBlock("go"),)
JsonDict = dict[str, object]


def percentile(ordered: list[float], fraction: float) -> float:
    """Nearest-rank percentile of an ascending list (the peers' definition)."""
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


def summarize(wall_ns: list[int], cpu_ns: list[int]) -> JsonDict:
    """Median, p95, mean, min, max in microseconds, plus the CPU median and p95."""
    wall = sorted(ns / 1000 for ns in wall_ns)
    cpu = sorted(ns / 1000 for ns in cpu_ns)
    return {
        "n": len(wall),
        "median_us": round(statistics.median(wall), 2),
        "p95_us": round(percentile(wall, 0.95), 2),
        "mean_us": round(statistics.fmean(wall), 2),
        "min_us": round(wall[0], 2),
        "max_us": round(wall[-1], 2),
        "cpu_median_us": round(statistics.median(cpu), 2),
        "cpu_p95_us": round(percentile(cpu, 0.95), 2),
    }


def rss_bytes() -> int:
    """This process's resident set size, from ``/proc/self/statm``."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def maxrss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


class Timer:
    """Collects the wall and CPU nanoseconds of each timed call."""

    def __init__(self) -> None:
        self.wall: list[int] = []
        self.cpu: list[int] = []

    async def time(self, call: Callable[[], Awaitable[object]]) -> None:
        cpu0, wall0 = time.process_time_ns(), time.perf_counter_ns()
        await call()
        wall1, cpu1 = time.perf_counter_ns(), time.process_time_ns()
        self.wall.append(wall1 - wall0)
        self.cpu.append(cpu1 - cpu0)

    def summary(self) -> JsonDict:
        return summarize(self.wall, self.cpu)


# --------------------------------------------------------------------------- the world


class Barrier:
    """Holds arriving model steps until ``expected`` are in flight; records RSS at that moment."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.arrived = 0
        self.released = asyncio.Event()
        self.rss_at_release = 0
        self.on_release: Callable[[], object] = lambda: None  # e.g. a memory snapshot

    async def arrive(self) -> None:
        self.arrived += 1
        if self.arrived >= self.expected:
            self.rss_at_release = rss_bytes()
            self.on_release()
            self.released.set()
        await self.released.wait()


class BenchModel:
    """The null model: a fresh ``"done"`` reply per step, optionally held (rule 2)."""

    def __init__(self) -> None:
        self.barrier: Barrier | None = None
        self.hold_until_aborted = False
        self.count_history = False
        self.history_seen = 0
        self.steps = 0
        self.all_held = asyncio.Event()
        self.hold_target = 0

    async def step(self, request: ModelRequest) -> ModelStep:
        self.steps += 1
        if self.count_history:
            kinds = (USER_MESSAGE, ASSISTANT_MESSAGE)
            self.history_seen = sum(1 for event in request.events if event.type in kinds)
        if self.barrier is not None:
            await self.barrier.arrive()
        if self.hold_until_aborted:
            if self.steps >= self.hold_target:
                self.all_held.set()
            await race_abort(asyncio.Event().wait(), request.signal)
        return ModelStep(content=(TextBlock(ANSWER),), chunks=(ANSWER,))


class World:
    """One store, registry and service with the spawn provider, as the tests assemble it."""

    def __init__(
        self,
        model: BenchModel,
        persistence: SessionPersistence | None = None,
        *,
        keep_ends: bool = True,
    ) -> None:
        self.model = model
        self.tools = ToolRegistry()
        self.prompt = PromptComposer()
        self.store = SessionStore()
        if persistence is not None:
            bind_persistence(self.store, persistence)
        self.registry = AgentRegistry(self.store, self._agent, persistence=persistence)
        self.service = SubagentService(self.registry, self.store, persistence)
        self.service.register_provider(SpawnProvider(InProcessHost(self.registry)))
        self._ends: defaultdict[SessionId, asyncio.Queue[RunEndInfo]] = defaultdict(asyncio.Queue)
        if keep_ends:  # W4 awaits no end: a queue per child would only load the heap
            self.service.on(SUBAGENT_END, self._on_end)

    def _agent(self, session: LiveSession, options: AgentOptions) -> ReferenceAgent:
        return ReferenceAgent(
            session,
            model=self.model,
            tools=ScopedTools(self.tools),
            options=options,
            prompt=PromptComposer(self.prompt),
        )

    def _on_end(self, payload: LifecyclePayload) -> None:
        if isinstance(payload, RunEndInfo):
            self._ends[SessionId(payload.start.child_id)].put_nowait(payload)

    async def ended(self, child_id: SessionId) -> RunEndInfo:
        """The next ``subagent/end`` of ``child_id`` (one per epoch)."""
        return await self._ends[child_id].get()

    async def root(self, agent_id: str) -> ReferenceAgent:
        return (await self.registry.create(CreateOptions(SessionId(agent_id)))).agent

    def live(self, agent_id: SessionId) -> ReferenceAgent:
        agent = self.registry.get(agent_id)
        assert agent is not None, agent_id
        return agent

    async def start_child(self, parent: ReferenceAgent, child_id: SessionId, prompt: str) -> None:
        spec = ContinuableStartSpec("spawn", "worker", parent, text(prompt), child_id=child_id)
        await self.service.start_continuable(spec)


def text(value: str) -> Content:
    return (TextBlock(value),)


async def delegate(world: World, parent: ReferenceAgent) -> tuple[SubagentRun, SubagentResult]:
    """One one-shot delegation, started and collected (the run is not disposed)."""
    run = await world.service.start("spawn", StartRequest(PROMPT, parent, AbortController().signal))
    result = await run.result
    assert result.stop_reason is KnownStop.COMPLETED, result
    return run, result


async def delegate_and_dispose(world: World, parent: ReferenceAgent) -> None:
    run, _ = await delegate(world, parent)
    await run.dispose()


async def _nothing() -> str:
    return ANSWER


async def task_round_trip() -> None:
    """The asyncio floor: one task created and awaited."""
    await asyncio.get_running_loop().create_task(_nothing())
