"""Benchmark: foreground one-shot delegation overhead through the service (null model).

Run: ``.venv/bin/python bench/oneshot_overhead.py [--runs N] [--warmup N]``.
Each delegation is ``service.start("spawn", ...)``, ``await run.result`` and
``await run.dispose()`` over the reference harness with a ``NullModel`` child (one turn, one
step, no tool), i.e. the whole seam: admission, descriptor, policy capture, child creation and
composition, the prompt turn, result selection, the lifecycle event pair, flush and release.
Beside it, in the same run, a bare ``asyncio.create_task`` round trip (create a task that
returns at once and await it) gives the event loop's own floor. Reports median and p95 in
microseconds over ``--runs`` delegations after ``--warmup`` unmeasured ones.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from dsh_subagent.adapters.protocols import CreateOptions
from dsh_subagent.adapters.providers.base import StartRequest
from dsh_subagent.adapters.providers.in_process import InProcessHost
from dsh_subagent.adapters.providers.spawn import SpawnProvider
from dsh_subagent.adapters.reference.agent_loop import ReferenceAgent
from dsh_subagent.adapters.reference.composition import PromptComposer
from dsh_subagent.adapters.reference.registry import AgentRegistry
from dsh_subagent.adapters.reference.scripted_model import NullModel
from dsh_subagent.adapters.reference.session import LiveSession, SessionStore
from dsh_subagent.adapters.reference.tool_registry import ScopedTools, ToolRegistry
from dsh_subagent.adapters.service import SubagentService
from dsh_subagent.adapters.signals import AbortController
from dsh_subagent.core.values import AgentOptions, SessionId, TextBlock


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def bare_task_round_trips(count: int) -> list[float]:
    async def nothing() -> None:
        return None

    samples = []
    for _ in range(count):
        started = time.perf_counter()
        await asyncio.get_running_loop().create_task(nothing())
        samples.append((time.perf_counter() - started) * 1e6)
    return samples


async def delegations(runs: int, warmup: int) -> tuple[list[float], list[float]]:
    model = NullModel("done")
    tools = ToolRegistry()
    prompt = PromptComposer()

    def factory(session: LiveSession, options: AgentOptions) -> ReferenceAgent:
        return ReferenceAgent(
            session,
            model=model,
            tools=ScopedTools(tools),
            options=options,
            prompt=PromptComposer(prompt),
        )

    store = SessionStore()
    registry = AgentRegistry(store, factory)
    service = SubagentService(registry, store)
    service.register_provider(SpawnProvider(InProcessHost(registry)))
    parent = (await registry.create(CreateOptions(SessionId("parent")))).agent
    prompt_blocks = (TextBlock("do the task"),)
    delegated: list[float] = []
    for index in range(warmup + runs):
        request = StartRequest(prompt_blocks, parent, AbortController().signal)
        started = time.perf_counter()
        run = await service.start("spawn", request)
        await run.result
        await run.dispose()
        elapsed = (time.perf_counter() - started) * 1e6
        if index >= warmup:
            delegated.append(elapsed)
    baseline = await bare_task_round_trips(warmup + runs)
    return delegated, baseline[warmup:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    args = parser.parse_args()
    delegated, baseline = asyncio.run(delegations(args.runs, args.warmup))
    print(f"{'measure':<40} {'median us':>10} {'p95 us':>10}")
    for name, samples in (
        ("one-shot delegation (spawn, NullModel)", delegated),
        ("bare asyncio.create_task round trip", baseline),
    ):
        print(f"{name:<40} {statistics.median(samples):>10.1f} {percentile(samples, 0.95):>10.1f}")
    print(f"runs={args.runs} warmup={args.warmup}")


if __name__ == "__main__":
    main()
