"""Where W6's and W7's 10k/1k excess goes: the cyclic collector's work by counts (issue 22).

Theory of operation
-------------------
1. ``python -m bench.gc_scaling [--sizes 1000,10000] [--shapes wide,chain]`` runs, for each
   shape and size, one fresh interpreter (``PYTHONHASHSEED=0``) that starts ``size`` held
   continuable children (``wide``: W7, all under one parent; ``chain``: W6, each under the one
   before) as ``bench.workloads.held_shape`` does, with its ``gc.collect()`` before the start
   and between the start and the drain, then drains them; each phase is measured on its own.
2. Per phase, a ``gc.callbacks`` probe counts the collections per generation and the objects
   each one walks: at a collection's start, the tracked objects in the generations it
   collects (``len(gc.get_objects(generation=g))`` for ``g`` up to its generation; CPython
   3.11 merges the younger generations into the collected one, so this is what it
   traverses). The probe's lists are freed before the collection resets the allocation
   counts, so it does not move CPython's schedule; ``garbage`` is what the collections
   freed (cyclic garbage: objects only a collection frees). These counts do not depend on the
   machine's load. The phase also reports its minor page faults (``getrusage``), the tracked
   objects at its end (``len(gc.get_objects())``), and process CPU in and out of the
   collector (``time.process_time``; noisy on a loaded machine, shown for orientation).
3. Instructions outside the collector, which the counts above do not see, come from
   callgrind: ``python -m bench.gc_scaling --callgrind`` runs ``bench/instructions_child.py``'s
   ``W7_build`` and ``W6_build`` bodies (the starts, without ``held_shape``'s collections) at
   0, 1,000 and 10,000 children under callgrind with ``PYTHONHASHSEED=0`` (as
   ``bench.instructions`` does, on the working tree), and splits each total into the
   collector's share (``gc_collect_main``'s inclusive cost, which includes the traverse
   functions and whatever the collection frees) and the rest. A start's Ir at N is
   build(N) - build(0); with no child the two bodies run the same code, so ``W7_build 0``
   is the base of both. Slow: a 10k start took 45 minutes under callgrind on a loaded
   shared machine; ``--callgrind-sizes`` picks the sizes, ``--scratch`` keeps the outputs
   (a run already there is read, not repeated), ``--shapes`` the bodies. The drains are left
   to the probe: their callgrind runs would need the build again. With ``--cache-sim`` the
   runs also simulate a 32 KiB L1 and this machine's 32 MiB last-level cache and split their
   L1 and last-level read misses (``D1mr``, ``DLmr``) the same way: whether the code outside
   the collector misses the last level more per child as the tree grows.
4. ``--one SHAPE SIZE [--by-type]`` runs one size in this process and prints its JSON; with
   ``--by-type``, at the start of each of the drain's generation-1 and full collections, the
   objects of the two young generations are counted by type and summed: what the drain
   promotes towards a full collection (it makes no cyclic garbage, so they all survive);
   coroutines, methods and tasks are named by their code (``tracked_per_child.name_of``).
5. Output: one Markdown table per method, each figure at each size and the ratio of the
   largest size to the smallest.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import re
import resource
import subprocess
import sys
import sysconfig
import time
from collections import Counter
from pathlib import Path

from bench.tracked_per_child import name_of
from bench.world import BenchModel, JsonDict, World
from dsh_subagent.adapters.reference.persistence import InMemoryPersistence
from dsh_subagent.core.values import SessionId

ROOT = Path(__file__).resolve().parent.parent
CHILD = Path(__file__).resolve().parent / "instructions_child.py"


class Probe:
    """Collections and the objects they walk while the block runs (rule 2)."""

    def __init__(self, *, by_type: bool = False) -> None:
        self.by_type: Counter[str] | None = Counter() if by_type else None
        self.collections = [0, 0, 0]
        self.walked = [0, 0, 0]
        self.garbage = 0
        self.gc_cpu = 0.0
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        generation = info["generation"]
        if phase == "start":
            self.walked[generation] += sum(
                len(gc.get_objects(generation=g)) for g in range(generation + 1)
            )
            if self.by_type is not None and generation >= 1:
                for young in (0, 1):
                    self.by_type.update(name_of(o) for o in gc.get_objects(young))
            self._started = time.process_time()
        else:
            self.gc_cpu += time.process_time() - self._started
            self.collections[generation] += 1
            self.garbage += info["collected"]

    async def measure(self, phase: object) -> JsonDict:
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        cpu = time.process_time()
        gc.callbacks.append(self._callback)
        try:
            await phase  # type: ignore[misc]
        finally:
            gc.callbacks.remove(self._callback)
        cpu = time.process_time() - cpu
        result: JsonDict = {}
        if self.by_type is not None:
            result["promoted_by_type"] = dict(self.by_type.most_common(40))
        return result | {
            "collections": self.collections,
            "walked": self.walked,
            "walked_total": sum(self.walked),
            "garbage": self.garbage,
            "tracked_after": len(gc.get_objects()),
            "minflt": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults,
            "cpu_ms": round(cpu * 1e3),
            "gc_cpu_ms": round(self.gc_cpu * 1e3),
            "outside_gc_cpu_ms": round((cpu - self.gc_cpu) * 1e3),
        }


async def one(shape: str, size: int, *, by_type: bool = False) -> JsonDict:
    """Start, then drain, ``size`` held children (rule 1), each phase probed (rule 2)."""
    gc.collect()
    model = BenchModel()
    model.hold_until_aborted = True
    model.hold_target = size
    world = World(model, InMemoryPersistence(), keep_ends=False)
    root = await world.root("host")

    async def start() -> None:
        parent = root
        for index in range(size):
            child_id = SessionId(f"n{index}")
            await world.start_child(parent, child_id, "hold")
            if shape == "chain":
                parent = world.live(child_id)
        await model.all_held.wait()

    started = await Probe().measure(start())
    gc.collect()  # as ``held_shape`` does before W6's and W7's timed drain
    drained = await Probe(by_type=by_type).measure(world.service.drain_continuable())
    return {"shape": shape, "size": size, "start": started, "drain": drained}


def in_fresh_interpreter(shape: str, size: int) -> JsonDict:
    command = [sys.executable, "-m", "bench.gc_scaling", "--one", shape, str(size)]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    out = subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    result: JsonDict = json.loads(out.stdout.strip().splitlines()[-1])
    return result


ROWS = (
    "collections",
    "walked",
    "walked_total",
    "garbage",
    "tracked_after",
    "minflt",
    "cpu_ms",
    "gc_cpu_ms",
)


def _cell(value: object) -> str:
    return "/".join(f"{v:,}" for v in value) if isinstance(value, list) else f"{value:,}"


def probe_table(shapes: list[str], sizes: list[int]) -> str:
    lines = [
        "| shape, phase: figure | " + " | ".join(f"{n:,}" for n in sizes) + " | ratio |",
        "| --- |" + " ---: |" * (len(sizes) + 1),
    ]
    for shape in shapes:
        runs = [in_fresh_interpreter(shape, n) for n in sizes]
        for phase in ("start", "drain"):
            for row in (*ROWS, "outside_gc_cpu_ms"):
                values = [run[phase][row] for run in runs]  # type: ignore[index]
                first, last = values[0], values[-1]
                ratio = "" if isinstance(first, list) or not first else f"{last / first:.1f}x"
                cells = " | ".join(_cell(v) for v in values)
                lines.append(f"| {shape}, {phase}: {row} | {cells} | {ratio} |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- callgrind


def _env() -> dict[str, str]:
    path = [str(ROOT), str(ROOT / "core"), str(ROOT / "adapters"), sysconfig.get_paths()["purelib"]]
    return {"PYTHONPATH": ":".join(path), "PYTHONHASHSEED": "0", "PATH": "/usr/bin:/bin"}


CACHE_EVENTS = ("D1mr", "DLmr")  # need the cache simulation (rule 3)
START_BODIES = {"wide": ("W7_build", "W7 start"), "chain": ("W6_build", "W6 start")}
LAST_LEVEL = "--LL=33554432,16,64"  # this machine's L3: 32 MiB, 16-way, 64-byte lines


def callgrind(
    body: str, units: int, scratch: Path, events: tuple[str, ...] = ("Ir",)
) -> tuple[dict[str, int], dict[str, int]]:
    """``events`` of one run of ``body``: the program's and ``gc_collect_main``'s inclusive
    ones (rule 3). Cache events simulate a 32 KiB L1 and this machine's 32 MiB L3."""
    cached = any(event in CACHE_EVENTS for event in events)
    out = scratch / f"callgrind.{body}.{units}{'.cache' if cached else ''}.out"
    if not out.exists():
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}.tmp"]
        if cached:
            command += ["--cache-sim=yes", "--D1=32768,8,64", "--I1=32768,8,64", LAST_LEVEL]
        command += [sys.executable, "-S", str(CHILD), body, str(units)]
        subprocess.run(command, cwd=ROOT, env=_env(), check=True, capture_output=True)
        Path(f"{out}.tmp").rename(out)
    text = out.read_text()
    names = re.search(r"^events: (.+)$", text, re.MULTILINE)
    summary = re.search(r"^summary: (.+)$", text, re.MULTILINE)
    annotated = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(out)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    line = next((x for x in annotated.splitlines() if ":gc_collect_main [" in x), None)
    if names is None or summary is None or line is None:
        raise SystemExit(f"{out}: no summary or no gc_collect_main")
    # the line's counts, each with its share in brackets ("." for none), then the function
    counts = re.sub(r"\([^)]*\)", "", line[: line.index(":gc_collect_main")]).split()[:-1]
    order = names.group(1).split()
    total = dict(zip(order, map(int, summary.group(1).split()), strict=True))
    collector = dict(
        zip(order, (0 if c == "." else int(c.replace(",", "")) for c in counts), strict=True)
    )
    return {e: total[e] for e in events}, {e: collector[e] for e in events}


def callgrind_table(
    sizes: list[int], scratch: Path, shapes: list[str], events: tuple[str, ...] = ("Ir",)
) -> str:
    """The starts' ``events`` per child at each size: all, the collector's, the rest (rule 3)."""
    bodies = [START_BODIES[shape] for shape in shapes]  # an unknown shape fails before any run
    scratch.mkdir(parents=True, exist_ok=True)
    compile_all = [sys.executable, "-m", "compileall", "-q", "core", "adapters", "bench"]
    subprocess.run(compile_all, cwd=ROOT, check=True)
    # with no child the two bodies are one run: its counts are the base of both
    base_all, base_gc = callgrind("W7_build", 0, scratch, events)
    lines = [
        "| phase: per child | " + " | ".join(f"{n:,}" for n in sizes) + " | ratio of totals |",
        "| --- |" + " ---: |" * (len(sizes) + 1),
    ]
    for body, name in bodies:
        print(f"{body} ...", file=sys.stderr, flush=True)
        runs = [callgrind(body, n, scratch, events) for n in sizes]
        for event in events:
            columns: dict[str, list[int]] = {"all": [], "collector": [], "outside": []}
            for every, collector in runs:
                grown = every[event] - base_all[event]
                in_collector = collector[event] - base_gc[event]
                columns["all"].append(grown)
                columns["collector"].append(in_collector)
                columns["outside"].append(grown - in_collector)
            for label, values in columns.items():
                per = " | ".join(f"{v / n:,.1f}" for v, n in zip(values, sizes, strict=True))
                ratio = f"{values[-1] / values[0]:.1f}x" if values[0] > 0 else "-"
                lines.append(f"| {name}: {event} {label} | {per} | {ratio} |")
    return "\n".join(lines)


def _sizes(text: str) -> list[int]:
    return [int(part) for part in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=_sizes, default=[1000, 10000])
    parser.add_argument("--shapes", default="wide,chain")
    parser.add_argument("--one", nargs=2, metavar=("SHAPE", "SIZE"), help="one run (rule 1)")
    parser.add_argument("--by-type", action="store_true", help="with --one: rule 4")
    parser.add_argument("--callgrind", action="store_true", help="Ir outside the collector")
    parser.add_argument("--callgrind-sizes", type=_sizes, default=[1000, 10000])
    parser.add_argument(
        "--cache-sim", action="store_true", help="with --callgrind: L1 and L3 read misses too"
    )
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/dsh-gc-scaling"))
    args = parser.parse_args()
    shapes = args.shapes.split(",")
    if args.one:
        run = one(args.one[0], int(args.one[1]), by_type=args.by_type)
        print(json.dumps(asyncio.run(run)))
    elif args.callgrind:
        events = ("Ir", *CACHE_EVENTS) if args.cache_sim else ("Ir",)
        print(callgrind_table(args.callgrind_sizes, args.scratch, shapes, events))
    else:
        print(probe_table(shapes, args.sizes))


if __name__ == "__main__":
    main()
