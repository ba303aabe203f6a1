"""Our side of the peer workloads W1-W5 through ``SubagentService``, with a null model.

Theory of operation
-------------------
1. The workloads are the ones ``../shared/bench/peers/README.md`` defines for the peer
   frameworks, run through our whole seam (reference harness, in-process spawn provider,
   continuation manager, SQLite persistence) assembled by ``bench/world.py``. The model is
   null (a fresh ``"done"`` reply at once), so only the seam's own cost is measured.
2. W1 times ``service.start`` + ``await run.result`` + ``await run.dispose()`` (one one-shot
   delegation) 2,000 times after 200 untimed ones, in 10 blocks that take turns with a bare
   ``await create_task(coro())`` round trip, as the peers' scripts interleave their variants.
   ``W1_oneshot_budget`` is the same delegation under a budgeted parent (every request
   reserved and settled, the child's node carved and closed), in the same run.
3. W2 runs in a fresh interpreter (``--w2 VARIANT``) after a short warm-up: 1,000 one-shot
   delegations gathered at once, every run and result kept until measured. ``*_barrier`` holds
   each child's model step on one shared event until all 1,000 are in flight. Peak RSS is the
   largest of: RSS at the barrier, RSS after the gather, ``ru_maxrss`` if it rose.
4. W3 builds ``convs`` continuable children of ``turns`` epochs each in one SQLite file (one
   ``start_continuable`` then ``turns - 1`` follow-ups from the live parent, each awaited to its
   ``subagent/end``), closes everything, reopens the file in a new service and follows each
   child up once with a user grant: a cold resume without the parent (seed 002), timed from
   the call to its ``subagent/end`` (which follows the flush). The model checks it was handed
   the whole history: ``2 * turns + 1`` user and assistant messages.
5. W4 builds a live tree of continuable children of depth 4 whose model steps are held until
   aborted, then times ``drain_continuable()`` (child-first disposal of every Activation) at
   two sizes; the ratio of the times shows how teardown scales (10x the nodes: ideal 10x).
   It also records the time CPython's cyclic garbage collector took during the drain, and
   the RSS the live tree added per node (both sizes run in one process: memory the first
   one freed may be reused by the next; ``bench.scaling_curve`` runs each size alone).
6. W5 pushes ``bench/core_scaling.py``'s event stream (10 events per child life) through the
   pure ``manager.apply`` over a manager already holding live Activations; events per second.
7. W6 starts a chain of continuable children, each the child of the one before (depth ``n``),
   every model step held until aborted, then drains it; W7 starts ``n`` held children under
   one parent, then drains them. Both time the start and the drain and report the RSS the
   live tree added per child, at two sizes, each in a fresh interpreter (``--shape``) so that
   memory freed by one size cannot hide the next one's: cost and memory per child should
   not grow with the size.
8. ACC (``bench/acceptance.py``) times a follow-up from the call to its durable
   acknowledgement at 1, 10 and 100 concurrent senders, beside a bare SQLite insert+commit.
9. OTEL (``bench/otel_overhead.py``) runs W1's body with tracing unavailable, with the
   OpenTelemetry API only and with the SDK and no span processor, each in its own
   interpreter, block by block in turn: process CPU per delegation and the overheads.
10. Run from the repository root as ``python -m bench.workloads [--only W1,...]``, it prints
   one JSON line, like the peers' scripts; ``bench/run`` calls it that way. The functions
   are also called at a tiny size by ``tests/bench/test_bench_smoke.py`` so they cannot rot.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Final

from bench.acceptance import acceptance
from bench.core_scaling import cycle_events, filled_manager
from bench.otel_overhead import otel_overhead
from bench.world import (
    Barrier,
    BenchModel,
    JsonDict,
    Timer,
    World,
    delegate,
    delegate_and_dispose,
    maxrss_bytes,
    rss_bytes,
    task_round_trip,
    text,
)
from dsh_subagent.adapters.continuation_types import ParentAgent
from dsh_subagent.adapters.reference.agent_loop import ReferenceAgent
from dsh_subagent.adapters.reference.persistence import InMemoryPersistence
from dsh_subagent.adapters.reference.sqlite_persistence import SqlitePersistence
from dsh_subagent.core.budget import Budget
from dsh_subagent.core.manager import apply
from dsh_subagent.core.values import CoordinatorSource, KnownStop, SessionId

ROOT: Final = Path(__file__).resolve().parent.parent
W2_VARIANTS: Final = ("W2_oneshot_barrier", "W2_oneshot_instant")
TREE_DEPTH: Final = 4
W1_BUDGET: Final = Budget(model_requests=10**12, input_tokens=10**15, output_tokens=10**15)


# --------------------------------------------------------------------------- W1


async def w1(n: int, warmup: int, blocks: int = 10) -> JsonDict:
    """Sequential one-shot delegations and the bare task floor, interleaved block by block."""
    world = World(BenchModel())
    parent = await world.root("parent")
    budgeted = await world.root("budgeted")  # every child carved, metered, settled, closed
    world.service.set_budget(budgeted, W1_BUDGET)
    variants: dict[str, Callable[[], Awaitable[object]]] = {
        "W1_oneshot": lambda: delegate_and_dispose(world, parent),
        "W1_oneshot_budget": lambda: delegate_and_dispose(world, budgeted),
        "W1_task_floor": task_round_trip,
    }
    for call in variants.values():
        for _ in range(warmup):
            await call()
    timers = {name: Timer() for name in variants}
    for _ in range(blocks):
        for name, call in variants.items():
            for _ in range(max(1, n // blocks)):
                await timers[name].time(call)
    return {name: timer.summary() for name, timer in timers.items()}


# --------------------------------------------------------------------------- W2


async def w2(variant: str, children: int, warmup: int = 200) -> JsonDict:
    """One fan-out of ``children`` one-shot delegations in this process (rule 3)."""
    model = BenchModel()
    world = World(model)
    parent = await world.root("parent")
    for _ in range(warmup):
        await delegate_and_dispose(world, parent)
    await _fan_out(world, parent, model, 10, barrier=True)
    return await _fan_out(world, parent, model, children, barrier=variant.endswith("_barrier"))


async def _fan_out(
    world: World, parent: ReferenceAgent, model: BenchModel, children: int, *, barrier: bool
) -> JsonDict:
    gc.collect()
    before, maxrss_before = rss_bytes(), maxrss_bytes()
    model.barrier = Barrier(children) if barrier else None
    cpu0, wall0 = time.process_time_ns(), time.perf_counter_ns()
    kept = await asyncio.gather(*(delegate(world, parent) for _ in range(children)))
    wall_ns, cpu_ns = time.perf_counter_ns() - wall0, time.process_time_ns() - cpu0
    after, maxrss_after = rss_bytes(), maxrss_bytes()
    at_barrier = model.barrier.rss_at_release if model.barrier is not None else 0
    model.barrier = None
    peak = max(after, at_barrier, maxrss_after if maxrss_after > maxrss_before else 0)
    assert len(kept) == children
    for run, _ in kept:
        await run.dispose()
    return {
        "children": children,
        "barrier": barrier,
        "wall_ms": round(wall_ns / 1e6, 2),
        "cpu_ms": round(cpu_ns / 1e6, 2),
        "rss_before_mib": round(before / 2**20, 2),
        "rss_at_barrier_mib": round(at_barrier / 2**20, 2) if at_barrier else None,
        "rss_after_mib": round(after / 2**20, 2),
        "peak_rss_increase_mib": round((peak - before) / 2**20, 2),
        "kib_per_child": round((peak - before) / 1024 / children, 2),
    }


def w2_in_fresh_interpreter(variant: str, children: int) -> JsonDict:
    """Run one W2 variant in a new interpreter so earlier work cannot hide its memory."""
    command = [sys.executable, "-m", "bench.workloads", "--w2", variant, "--fanout", str(children)]
    completed = subprocess.run(
        command, check=False, capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    if completed.returncode != 0:
        return {"error": (completed.stderr.strip().splitlines() or ["failed"])[-1]}
    result: JsonDict = json.loads(completed.stdout.strip().splitlines()[-1])
    return result


# --------------------------------------------------------------------------- W3


async def w3(convs: int, turns: int, folder: Path, build_concurrency: int = 16) -> JsonDict:
    """Build persisted conversations, reopen the file, and time one cold resume each (rule 4)."""
    path = folder / "w3.sqlite"
    children = [SessionId(f"conv-{c}") for c in range(convs)]
    model = BenchModel()
    built = time.perf_counter()
    persistence = await SqlitePersistence.open(path)
    world = World(model, persistence)
    host = await world.root("host")
    gate = asyncio.Semaphore(build_concurrency)

    async def build(child_id: SessionId) -> None:
        async with gate:
            await world.start_child(host, child_id, "turn 0")
            await world.ended(child_id)
            for turn in range(1, turns):
                await world.service.followup(
                    child_id,
                    text(f"turn {turn}"),
                    ParentAgent(host),
                    source=CoordinatorSource(host.id),
                )
                await world.ended(child_id)

    await asyncio.gather(*(build(child_id) for child_id in children))
    await world.service.drain_continuable()
    await persistence.close()
    build_s = time.perf_counter() - built

    reopened = await SqlitePersistence.open(path)
    cold = World(model, reopened)
    grant = cold.service.user_authority()
    model.count_history = True
    timer = Timer()

    async def resume(child_id: SessionId) -> None:
        await cold.service.followup(child_id, text("one more"), grant)
        end = await cold.ended(child_id)
        assert end.stop_reason is KnownStop.COMPLETED, end

    for child_id in children:
        await timer.time(lambda child_id=child_id: resume(child_id))  # type: ignore[misc]
        assert model.history_seen == 2 * turns + 1, model.history_seen
    await cold.service.drain_continuable()
    await reopened.close()
    return {
        **timer.summary(),
        "mechanism": "SqlitePersistence (WAL, synchronous=FULL) + user-grant followup, "
        "timed to subagent/end",
        "build_s": round(build_s, 2),
        "history_items_seen_by_model": model.history_seen,
        "db_bytes": sum(p.stat().st_size for p in folder.glob("w3.sqlite*")),
    }


# --------------------------------------------------------------------------- W4


def tree_levels(size: int, depth: int = TREE_DEPTH) -> list[int]:
    """Level sizes of a ``depth``-level tree of ``size`` nodes: b, b^2, ..., rest at the bottom."""
    branching = max(1, int(round(size ** (1 / depth), 6)))
    upper = [branching**level for level in range(1, depth)]
    while sum(upper) >= size and upper:
        upper.pop()
    return [*upper, size - sum(upper)]


async def held_tree(size: int) -> World:
    """A world holding a live depth-4 tree of ``size`` continuable children, all mid-step."""
    model = BenchModel()
    model.hold_until_aborted = True
    model.hold_target = size
    world = World(model, InMemoryPersistence(), keep_ends=False)
    parents = [await world.root("host")]
    serial = iter(range(size))
    for level_size in tree_levels(size):
        level = []
        for index in range(level_size):
            child_id = SessionId(f"n{next(serial)}")
            await world.start_child(parents[index % len(parents)], child_id, "hold")
            level.append(world.live(child_id))
        parents = level
    await model.all_held.wait()
    return world


async def w4(size: int) -> JsonDict:
    """Build a live tree of ``size`` held continuable children, then time the drain (rule 5)."""
    gc.collect()
    before = rss_bytes()
    built = time.perf_counter()
    world = await held_tree(size)
    build_ms = (time.perf_counter() - built) * 1e3
    gc.collect()
    added = rss_bytes() - before
    collections = GcTimer()
    cpu0, wall0 = time.process_time_ns(), time.perf_counter_ns()
    with collections:
        await world.service.drain_continuable()
    wall_ns, cpu_ns = time.perf_counter_ns() - wall0, time.process_time_ns() - cpu0
    assert all(world.service.activation_state(node) is None for node in _ids(size))
    return {
        "activations": size,
        "levels": tree_levels(size),
        "build_ms": round(build_ms, 2),
        "drain_ms": round(wall_ns / 1e6, 2),
        "drain_cpu_ms": round(cpu_ns / 1e6, 2),
        "gc_ms": round(collections.seconds * 1e3, 2),
        "gc_collections": collections.counts,
        "kib_per_child": round(added / 1024 / size, 2),
    }


class GcTimer:
    """Time spent in CPython's cyclic garbage collector while the block runs (W4 rule 5)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.counts = [0, 0, 0]  # collections per generation
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started
            self.counts[info["generation"]] += 1

    def __enter__(self) -> GcTimer:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *_exc: object) -> None:
        gc.callbacks.remove(self._callback)


def _ids(size: int) -> Iterator[SessionId]:
    return (SessionId(f"n{n}") for n in range(size))


# --------------------------------------------------------------------------- W6, W7


async def held_shape(size: int, *, chain: bool) -> tuple[World, JsonDict, int]:
    """``size`` held continuable children, a chain or all under one parent (rule 7);
    with the start's wall and CPU milliseconds and the RSS bytes the live children added."""
    gc.collect()
    before = rss_bytes()
    model = BenchModel()
    model.hold_until_aborted = True
    model.hold_target = size
    world = World(model, InMemoryPersistence(), keep_ends=False)
    parent = await world.root("host")
    cpu0, wall0 = time.process_time_ns(), time.perf_counter_ns()
    for child_id in _ids(size):
        await world.start_child(parent, child_id, "hold")
        if chain:
            parent = world.live(child_id)
    await model.all_held.wait()
    wall_ns, cpu_ns = time.perf_counter_ns() - wall0, time.process_time_ns() - cpu0
    gc.collect()
    started: JsonDict = {
        "start_ms": round(wall_ns / 1e6, 2),
        "start_cpu_ms": round(cpu_ns / 1e6, 2),
    }
    return world, started, rss_bytes() - before


async def held_drain(size: int, *, chain: bool) -> JsonDict:
    """Start, then drain, a held chain (W6) or a held wide tree (W7) of ``size`` children."""
    world, started, added = await held_shape(size, chain=chain)
    collections = GcTimer()
    cpu0, wall0 = time.process_time_ns(), time.perf_counter_ns()
    with collections:
        await world.service.drain_continuable()
    wall_ns, cpu_ns = time.perf_counter_ns() - wall0, time.process_time_ns() - cpu0
    assert all(world.service.activation_state(node) is None for node in _ids(size))
    return {
        "children": size,
        **started,
        "drain_ms": round(wall_ns / 1e6, 2),
        "drain_cpu_ms": round(cpu_ns / 1e6, 2),
        "gc_ms": round(collections.seconds * 1e3, 2),
        "kib_per_child": round(added / 1024 / size, 2),
    }


SHAPES: Final = ("chain", "wide")


def shape_in_fresh_interpreter(shape: str, size: int) -> JsonDict:
    """Run one W6 (``chain``) or W7 (``wide``) size in a new interpreter (rule 7)."""
    command = [sys.executable, "-m", "bench.workloads", "--shape", shape, "--size", str(size)]
    completed = subprocess.run(
        command, check=False, capture_output=True, text=True, timeout=900, cwd=ROOT
    )
    if completed.returncode != 0:
        return {"error": (completed.stderr.strip().splitlines() or ["failed"])[-1]}
    result: JsonDict = json.loads(completed.stdout.strip().splitlines()[-1])
    return result


# --------------------------------------------------------------------------- W5


def w5(live: int, cycles: int, repeats: int = 3) -> JsonDict:
    """Events per second through the pure core's ``apply`` (best of ``repeats``, rule 6)."""
    state = filled_manager(live)
    stream = [event for cycle in range(cycles) for event in cycle_events(cycle)]
    best = float("inf")
    for _ in range(repeats):
        current = state
        started = time.perf_counter()
        for event in stream:
            current, _effects = apply(current, event)
        best = min(best, time.perf_counter() - started)
    return {
        "live_activations": live,
        "events": len(stream),
        "events_per_s": round(len(stream) / best),
        "us_per_event": round(best / len(stream) * 1e6, 3),
    }


# --------------------------------------------------------------------------- the script


def env_info() -> JsonDict:
    packages: dict[str, str | None] = {}
    for name in ("dsh-subagent", "attrs"):
        try:
            packages[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            packages[name] = None
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "packages": packages,
        "nproc": len(os.sched_getaffinity(0)),
        "machine": platform.machine(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
    }


async def run_all(args: argparse.Namespace) -> JsonDict:
    only = set(args.only.split(","))
    result: JsonDict = {"framework": "dsh-subagent", "env": env_info(), "params": vars(args)}
    if "W2" in only:
        for variant in W2_VARIANTS:
            result[variant] = w2_in_fresh_interpreter(variant, args.fanout)
    if "W1" in only:
        result.update(await w1(args.n, args.warmup))
    if "W3" in only:
        with tempfile.TemporaryDirectory(prefix="dsh-bench-") as folder:
            result["W3_resume"] = await w3(args.convs, args.turns, Path(folder))
    if "W4" in only:
        result["W4_drain"] = {str(size): await w4(size) for size in args.tree}
    if "W5" in only:
        result["W5_core"] = w5(args.live, args.cycles)
    if "W6" in only:
        result["W6_chain"] = {str(n): shape_in_fresh_interpreter("chain", n) for n in args.chain}
    if "W7" in only:
        result["W7_wide"] = {str(n): shape_in_fresh_interpreter("wide", n) for n in args.wide}
    if "ACC" in only:
        result.update(await acceptance(args.acc_messages))
    if "OTEL" in only:
        result["W1_otel"] = await otel_overhead(
            args.otel_block, args.otel_blocks, args.otel_warmup, args.otel_rounds
        )
    return result


def _sizes(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=2000, help="timed delegations (W1)")
    parser.add_argument("--warmup", type=int, default=200, help="untimed delegations (W1)")
    parser.add_argument("--fanout", type=int, default=1000, help="concurrent children (W2)")
    parser.add_argument("--convs", type=int, default=500, help="persisted children (W3)")
    parser.add_argument("--turns", type=int, default=10, help="epochs per child (W3)")
    parser.add_argument("--tree", type=_sizes, default=[1000, 10000], help="nodes (W4)")
    parser.add_argument("--live", type=int, default=1000, help="live Activations (W5)")
    parser.add_argument("--cycles", type=int, default=2000, help="child lives of 10 events (W5)")
    parser.add_argument("--chain", type=_sizes, default=[1000, 10000], help="depths (W6)")
    parser.add_argument("--wide", type=_sizes, default=[1000, 10000], help="children (W7)")
    parser.add_argument(
        "--acc-messages", type=int, default=2000, help="follow-ups per sender count (ACC)"
    )
    parser.add_argument("--otel-block", type=int, default=50, help="delegations a block (OTEL)")
    parser.add_argument("--otel-blocks", type=int, default=20, help="blocks a round (OTEL)")
    parser.add_argument("--otel-warmup", type=int, default=200, help="untimed ones (OTEL)")
    parser.add_argument("--otel-rounds", type=int, default=3, help="interleaved rounds (OTEL)")
    parser.add_argument("--only", default="W1,W2,W3,W4,W5,W6,W7,ACC,OTEL")
    parser.add_argument("--w2", choices=W2_VARIANTS, help="run one W2 variant in this process")
    parser.add_argument("--shape", choices=SHAPES, help="run one W6/W7 size in this process")
    parser.add_argument("--size", type=int, default=1000, help="children of --shape")
    return parser.parse_args(argv)


def main() -> None:
    args = parse()
    started = time.perf_counter()
    if args.w2:
        result = asyncio.run(w2(args.w2, args.fanout))
    elif args.shape:
        result = asyncio.run(held_drain(args.size, chain=args.shape == "chain"))
    else:
        result = asyncio.run(run_all(args))
        result["total_s"] = round(time.perf_counter() - started, 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
