"""Where the time (or memory) of one of our workloads goes: the profile behind RESULTS.md.

Theory of operation
-------------------
1. ``python -m bench.profile W1|W2|W3|W4`` runs one workload of ``bench/workloads.py`` at a
   profiling size and prints its top entries, so the profile quoted in ``RESULTS.md`` can be
   taken again by anyone, on the code as it is. ``W1b`` profiles W1 plain and under a
   budgeted parent (``W1_BUDGET``) and lists the calls the budget adds per delegation.
2. Time (W1, W3, W4) is measured with ``cProfile`` around the measured part only: W1's
   delegations after the warm-up, W3's cold resumes (not the build), W4's drain (not the
   build). The report lists the top functions by own time and the same time summed per
   module (``asyncio``, ``attrs``, each of our modules), as shares of the profiled total.
   cProfile inflates Python-level calls against C, so shares, not absolute times, are read.
3. Memory (W2) is measured with ``tracemalloc`` while every child of a fan-out is held at
   the barrier (all in flight): the allocation lines that grew, per child.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import pstats
import tempfile
import tracemalloc
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from bench import workloads
from bench.world import Barrier, BenchModel, Timer, World, delegate, delegate_and_dispose


@contextmanager
def _profiling(profile: cProfile.Profile) -> Iterator[None]:
    profile.enable()
    try:
        yield
    finally:
        profile.disable()


async def profile_w1(profile: cProfile.Profile, n: int, *, budgeted: bool = False) -> None:
    world = World(BenchModel())
    parent = await world.root("parent")
    if budgeted:
        world.service.set_budget(parent, workloads.W1_BUDGET)
    for _ in range(200):
        await delegate_and_dispose(world, parent)
    with _profiling(profile):
        for _ in range(n):
            await delegate_and_dispose(world, parent)


async def profile_w3(profile: cProfile.Profile, convs: int) -> None:
    timed = Timer.time

    async def time_profiled(self: Timer, call: Callable[[], Awaitable[object]]) -> None:
        with _profiling(profile):
            await timed(self, call)

    Timer.time = time_profiled  # type: ignore[method-assign]  # only the resumes are timed
    try:
        with tempfile.TemporaryDirectory(prefix="dsh-profile-") as folder:
            await workloads.w3(convs, 10, Path(folder))
    finally:
        Timer.time = timed  # type: ignore[method-assign]


async def profile_w4(profile: cProfile.Profile, size: int) -> None:
    world = await workloads.held_tree(size)
    with _profiling(profile):
        await world.service.drain_continuable()


def report_time(profile: cProfile.Profile, top: int) -> None:
    stats = pstats.Stats(profile)
    rows = stats.stats  # type: ignore[attr-defined]  # {(file, line, name): (cc, nc, tt, ct, callers)}
    total = sum(row[2] for row in rows.values()) or 1.0
    print(f"profiled own time: {total:.2f} s (cProfile)\n\ntop functions by own time:")
    ranked = sorted(rows.items(), key=lambda item: item[1][2], reverse=True)
    for (file, line, name), (_, calls, own, cumulative, _) in ranked[:top]:
        where = f"{_short(file)}:{line}({name})"
        print(f"  {own / total:6.1%} own {cumulative / total:6.1%} cum {calls:>9} calls  {where}")
    modules: Counter[str] = Counter()
    for (file, _, _), row in rows.items():
        modules[_short(file)] += row[2]
    print("\nown time per module:")
    for module, own in modules.most_common(top):
        print(f"  {own / total:6.1%}  {module}")


def report_budget_calls(n: int, top: int) -> None:
    """W1 budgeted against plain: the Python-level calls the budget adds per delegation."""
    counts: list[Counter[str]] = []
    for budgeted in (False, True):
        profile = cProfile.Profile()
        asyncio.run(profile_w1(profile, n, budgeted=budgeted))
        rows = pstats.Stats(profile).stats  # type: ignore[attr-defined]
        counted: Counter[str] = Counter()
        for (file, line, name), row in rows.items():
            counted[f"{_short(file)}:{line}({name})"] += row[1]
        counts.append(counted)
    plain, budgeted_ = counts
    print(
        f"calls per delegation: plain {plain.total() / n:.1f}, budgeted "
        f"{budgeted_.total() / n:.1f}, extra {(budgeted_.total() - plain.total()) / n:.1f}\n"
    )
    extra = budgeted_.copy()
    extra.subtract(plain)
    for where, calls in sorted(extra.items(), key=lambda item: -abs(item[1]))[:top]:
        if calls:
            print(f"  {calls / n:+7.2f}  {where}")


def _short(file: str) -> str:
    for marker in ("dsh_subagent/", "site-packages/", "python3.11/", "python3.12/", "/work/"):
        if marker in file:
            return file.split(marker, 1)[1]
    return file


async def report_w2(children: int, top: int) -> None:
    model = BenchModel()
    world = World(model)
    parent = await world.root("parent")
    for _ in range(200):
        await delegate_and_dispose(world, parent)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    barrier = model.barrier = Barrier(children)
    snapshots: list[tracemalloc.Snapshot] = []
    barrier.on_release = lambda: snapshots.append(tracemalloc.take_snapshot())
    kept = await asyncio.gather(*(delegate(world, parent) for _ in range(children)))
    tracemalloc.stop()
    growth = snapshots[0].compare_to(before, "lineno")
    total = sum(stat.size_diff for stat in growth)
    print(f"{total / 1024 / children:.2f} KiB allocated per in-flight child (tracemalloc)\n")
    for stat in growth[:top]:
        frame = stat.traceback[0]
        size, count = stat.size_diff / 1024 / children, stat.count_diff / children
        print(f"  {size:6.2f} KiB {count:5.1f} objects  {_short(frame.filename)}:{frame.lineno}")
    for run, _ in kept:
        await run.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("workload", choices=("W1", "W1b", "W2", "W3", "W4"))
    parser.add_argument("--size", type=int, help="delegations, children, convs or nodes")
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args()
    if args.workload == "W2":
        asyncio.run(report_w2(args.size or 1000, args.top))
        return
    if args.workload == "W1b":
        report_budget_calls(args.size or 1000, args.top)
        return
    profile = cProfile.Profile()
    runs = {
        "W1": lambda: profile_w1(profile, args.size or 2000),
        "W3": lambda: profile_w3(profile, args.size or 100),
        "W4": lambda: profile_w4(profile, args.size or 3000),
    }
    asyncio.run(runs[args.workload]())
    report_time(profile, args.top)


if __name__ == "__main__":
    main()
