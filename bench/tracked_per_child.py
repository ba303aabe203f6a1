"""Objects tracked by CPython's cyclic garbage collector per held wide child (issue 22).

Theory of operation
-------------------
1. The full collections of a growing live tree walk every tracked object (``gc.is_tracked``)
   a few times over, so their work per child is proportional to the tracked objects each held
   child keeps. This script counts them deterministically, without timing anything.
2. It builds W7's world (``bench.workloads.held_shape``'s setup: a null model holding every
   step until aborted, in-memory persistence) and starts ``--low`` held children under one
   parent, runs ``gc.collect()`` and counts ``gc.get_objects()`` by type; then starts more up
   to ``--high`` and counts again. Tracked objects per child = (count at high - count at low)
   / (high - low), per type and in total, so the world's fixed heap cancels.
3. It prints one JSON line: the total per child and the types above ``--floor`` per child,
   largest first. Run from the repository root: ``python -m bench.tracked_per_child``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
from collections import Counter

from bench.world import BenchModel, JsonDict, World
from dsh_subagent.adapters.reference.persistence import InMemoryPersistence
from dsh_subagent.core.values import SessionId


def tracked_by_type() -> Counter[str]:
    gc.collect()
    return Counter(type(obj).__qualname__ for obj in gc.get_objects())


async def per_child(low: int, high: int, floor: float) -> JsonDict:
    """Tracked objects per held wide child, by type (rule 2)."""
    model = BenchModel()
    model.hold_until_aborted = True
    world = World(model, InMemoryPersistence(), keep_ends=False)
    parent = await world.root("host")
    counts: list[Counter[str]] = []
    started = 0
    for target in (low, high):
        model.hold_target = target
        model.all_held.clear()
        while started < target:
            await world.start_child(parent, SessionId(f"n{started}"), "hold")
            started += 1
        await model.all_held.wait()
        counts.append(tracked_by_type())
    span = high - low
    growth = {name: (counts[1][name] - counts[0][name]) / span for name in counts[1] | counts[0]}
    shown = sorted(
        ((name, round(value, 2)) for name, value in growth.items() if abs(value) >= floor),
        key=lambda item: -item[1],
    )
    await world.service.drain_continuable()
    return {
        "children": [low, high],
        "tracked_per_child": round(sum(growth.values()), 2),
        "by_type": dict(shown),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--low", type=int, default=300)
    parser.add_argument("--high", type=int, default=900)
    parser.add_argument("--floor", type=float, default=0.5, help="smallest per-child figure shown")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(per_child(args.low, args.high, args.floor))))


if __name__ == "__main__":
    main()
