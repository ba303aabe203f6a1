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
   ``--chain`` starts each child under the one before instead (W6's shape).
   ``--after-drain`` also counts, after the drain and ``gc.collect()``, the tracked objects
   the drained tree leaves behind (against the count before the first child), per child.
3. It prints one JSON line: the total per child and the types above ``--floor`` per child,
   largest first. Run from the repository root: ``python -m bench.tracked_per_child``.
4. ``--run wide|chain --size N`` instead runs one W7/W6 size as ``bench.workloads --shape``
   does and adds what the collector did over the whole run: collections per generation
   (``gc.get_stats()``, after minus before) and the process CPU of the run. It uses only
   ``bench.workloads``, so the same file run against an older tree measures that tree.
5. ``--detail`` names the objects by what they are rather than by type: a coroutine by its
   code's qualified name, a bound method or builtin by its function's, a task by its
   coroutine's, a loop callback's handle by its callback's, and every other object by its
   type followed by the types of the tracked objects that refer to it (``dict<-LiveChild``),
   so a cut can be aimed at one owner (``bench.gc_scaling --by-type`` names them the same).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import time
import types
from collections import Counter

from bench.workloads import held_drain
from bench.world import BenchModel, JsonDict, World
from dsh_subagent.adapters.reference.persistence import InMemoryPersistence
from dsh_subagent.core.values import SessionId


def tracked_by_type() -> Counter[str]:
    gc.collect()
    return Counter(type(obj).__qualname__ for obj in gc.get_objects())


def name_of(obj: object) -> str:
    """A coroutine, method, builtin or task by its code's name, else its type's (rule 5)."""
    kind = type(obj).__qualname__
    if isinstance(obj, types.CoroutineType):
        return f"coroutine {obj.cr_code.co_qualname}"
    if isinstance(obj, types.MethodType):
        return f"method {obj.__func__.__qualname__}"
    if isinstance(obj, types.BuiltinFunctionType):
        return f"builtin {type(obj.__self__).__qualname__}.{obj.__name__}"
    if isinstance(obj, asyncio.Handle):
        callback = getattr(obj, "_callback", None)
        inner = getattr(callback, "__func__", callback)
        return f"Handle {getattr(inner, '__qualname__', type(callback).__qualname__)}"
    if isinstance(obj, asyncio.Task):
        coro = obj.get_coro()
        return f"Task {getattr(getattr(coro, 'cr_code', None), 'co_qualname', '?')}"
    return kind


def tracked_in_detail() -> Counter[str]:
    """Tracked objects named by what they are and what refers to them (rule 5)."""
    gc.collect()
    objects = gc.get_objects()
    owners: dict[int, set[str]] = {}
    for obj in objects:
        kind = type(obj).__qualname__
        for referent in gc.get_referents(obj):
            owners.setdefault(id(referent), set()).add(kind)
    named: Counter[str] = Counter()
    for obj in objects:
        name = name_of(obj)
        if name == type(obj).__qualname__:
            name += "<-" + ",".join(sorted(owners.get(id(obj), {"?"})))
        named[name] += 1
    return named


async def per_child(
    low: int,
    high: int,
    floor: float,
    *,
    chain: bool,
    after_drain: bool = False,
    detail: bool = False,
) -> JsonDict:
    """Tracked objects per held child, by type (rule 2)."""
    model = BenchModel()
    model.hold_until_aborted = True
    world = World(model, InMemoryPersistence(), keep_ends=False)
    parent = await world.root("host")
    before = tracked_by_type()
    counts: list[Counter[str]] = []
    started = 0
    for target in (low, high):
        model.hold_target = target
        model.all_held.clear()
        while started < target:
            child_id = SessionId(f"n{started}")
            await world.start_child(parent, child_id, "hold")
            started += 1
            if chain:
                parent = world.live(child_id)
        await model.all_held.wait()
        counts.append(tracked_in_detail() if detail else tracked_by_type())
    span = high - low
    growth = {name: (counts[1][name] - counts[0][name]) / span for name in counts[1] | counts[0]}
    shown = sorted(
        ((name, round(value, 2)) for name, value in growth.items() if abs(value) >= floor),
        key=lambda item: -item[1],
    )
    await world.service.drain_continuable()
    result: JsonDict = {
        "shape": "chain" if chain else "wide",
        "children": [low, high],
        "tracked_per_child": round(sum(growth.values()), 2),
        "by_type": dict(shown),
    }
    if after_drain:
        left = tracked_by_type() - before
        kept = sorted(
            ((name, round(count / high, 2)) for name, count in left.items()),
            key=lambda item: -item[1],
        )
        result["kept_per_child_after_drain"] = round(sum(left.values()) / high, 2)
        result["kept_by_type"] = {name: value for name, value in kept if value >= floor}
    return result


def collected(shape: str, size: int) -> JsonDict:
    """One W6/W7 size, with the collections per generation and the process CPU (rule 4)."""
    before = [generation["collections"] for generation in gc.get_stats()]
    cpu0 = time.process_time_ns()
    result = asyncio.run(held_drain(size, chain=shape == "chain"))
    cpu_ms = round((time.process_time_ns() - cpu0) / 1e6)
    after = [generation["collections"] for generation in gc.get_stats()]
    counts = [now - then for now, then in zip(after, before, strict=True)]
    return {"shape": shape, **result, "process_cpu_ms": cpu_ms, "collections": counts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--low", type=int, default=300)
    parser.add_argument("--high", type=int, default=900)
    parser.add_argument("--floor", type=float, default=0.5, help="smallest per-child figure shown")
    parser.add_argument("--chain", action="store_true", help="W6's shape: a chain")
    parser.add_argument("--after-drain", action="store_true", help="what the drain leaves")
    parser.add_argument("--detail", action="store_true", help="name objects by owner (rule 5)")
    parser.add_argument("--run", choices=("wide", "chain"), help="run one W7/W6 size instead")
    parser.add_argument("--size", type=int, default=1000, help="children of --run")
    args = parser.parse_args()
    if args.run:
        print(json.dumps(collected(args.run, args.size)))
        return
    print(
        json.dumps(
            asyncio.run(
                per_child(
                    args.low,
                    args.high,
                    args.floor,
                    chain=args.chain,
                    after_drain=args.after_drain,
                    detail=args.detail,
                )
            )
        )
    )


if __name__ == "__main__":
    main()
