"""Cost per child of W4, W6 and W7 over a range of sizes, with the collector on and off.

Theory of operation
-------------------
1. Issue 22 asks for each of W4 (drain of a depth-4 tree), W6 (start and drain of a chain)
   and W7 (start and drain of a wide tree) that the 10k figure be within 11x of the 1k one.
   Two sizes cannot tell a cost that grows with the tree (a scan, a log factor) from a step
   in what each operation costs once the tree outgrows a cache; a curve can: an algorithmic
   excess keeps growing with the size, a cache step is paid once and then stays flat.
2. Each (shape, size, collector, repetition) runs in a fresh interpreter with
   ``PYTHONHASHSEED=0`` (``--one``): ``tree`` is ``bench.workloads.w4`` (its build is timed
   as the start), ``chain`` and ``wide`` are ``bench.workloads.held_drain``. With
   ``--gc off`` the child calls ``gc.disable()`` first (the benchmark's own explicit
   ``gc.collect()`` calls still run, in both modes): what is left is the cost outside
   CPython's cyclic collector. The repetitions take turns (every size once, then again), so
   a drift of the machine spreads over all sizes.
3. The table gives, per shape, collector mode and phase, the median microseconds per child
   at each size and the ratios of the pairs 10x apart (1k -> 10k, 2k -> 20k, ...): linear
   within 10 % is a ratio of at most 11; and the median RSS the live tree added per child
   (``kib_per_child``, RSS after ``gc.collect()``), whose ratio is per child: flat within
   10 % is at most 1.1. Progress goes to stderr, the table to stdout, and
   ``--json`` writes every raw reading.
4. Run from the repository root: ``python -m bench.scaling_curve [--shapes chain,wide,tree]
   [--sizes 1000,2000,5000,10000,20000] [--reps 3] [--gc on,off]``. Wall time; run it on a
   quiet machine (the 20k runs take about half a minute each).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("start_ms", "drain_ms")


class Reading(NamedTuple):
    """One fresh interpreter's figures (rule 2)."""

    shape: str
    collector: str
    size: int
    start_ms: float
    drain_ms: float
    kib_per_child: float


def one(shape: str, size: int, collector: str) -> dict[str, float]:
    """One reading in this interpreter (rule 2): milliseconds of the start and the drain."""
    from bench.workloads import held_drain, w4

    if collector == "off":
        gc.disable()
    if shape == "tree":
        figures = asyncio.run(w4(size))
        figures["start_ms"] = figures["build_ms"]
    else:
        figures = asyncio.run(held_drain(size, chain=shape == "chain"))
    return {key: float(str(figures[key])) for key in (*PHASES, "kib_per_child")}


def _fresh(shape: str, size: int, collector: str) -> Reading:
    command = [sys.executable, "-m", "bench.scaling_curve", "--one", shape, str(size), collector]
    done = subprocess.run(
        command,
        cwd=ROOT,
        env={"PYTHONHASHSEED": "0", "PATH": "/usr/bin:/bin"},
        check=True,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    return Reading(shape, collector, size, **figures)


def table(readings: list[Reading], sizes: list[int]) -> str:
    """Medians per child and the ratios 10x apart (rule 3), as a Markdown table: a phase's
    microseconds (its ratio is of the totals: 11x is linear within 10 %) and the RSS the live
    tree added (its ratio is of the KiB per child: 1.1x is flat within 10 %)."""
    pairs = [(small, small * 10) for small in sizes if small * 10 in sizes]
    head = ["shape", "gc", "figure", *(f"{n:,}" for n in sizes)]
    head += [f"{a:,} -> {b:,}" for a, b in pairs]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    keys = sorted({(r.shape, r.collector) for r in readings}, key=lambda k: (k[0], k[1] == "off"))
    for shape, collector in keys:
        for figure in (*PHASES, "kib_per_child"):
            memory = figure == "kib_per_child"
            per_child: dict[int, float] = {}
            for size in sizes:
                values = [
                    getattr(r, figure)
                    for r in readings
                    if (r.shape, r.collector, r.size) == (shape, collector, size)
                ]
                if values:
                    median = statistics.median(values)
                    per_child[size] = median if memory else median * 1e3 / size
            digits, label = (2, "memory KiB/child") if memory else (0, f"{figure[:-3]} us/child")
            cells = [f"{per_child[n]:.{digits}f}" if n in per_child else "" for n in sizes]
            for a, b in pairs:
                if a in per_child and b in per_child:
                    ratio = per_child[b] / per_child[a]
                    cells.append(f"{ratio if memory else ratio * 10:.2f}x")
                else:
                    cells.append("")
            row = [shape, collector, label, *cells]
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def _csv(text: str) -> list[str]:
    return text.split(",")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--shapes", type=_csv, default=["chain", "wide", "tree"])
    parser.add_argument("--sizes", type=_csv, default=["1000", "2000", "5000", "10000", "20000"])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--gc", type=_csv, default=["on", "off"], help="collector modes")
    parser.add_argument("--json", type=Path, help="write every raw reading here")
    parser.add_argument("--one", nargs=3, metavar=("SHAPE", "SIZE", "GC"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        shape, size, collector = args.one
        print(json.dumps(one(shape, int(size), collector)))
        return
    sizes = sorted(int(n) for n in args.sizes)
    readings: list[Reading] = []
    for rep in range(args.reps):
        for shape in args.shapes:
            for collector in args.gc:
                for size in sizes:
                    reading = _fresh(shape, size, collector)
                    readings.append(reading)
                    print(
                        f"rep {rep + 1}/{args.reps} {shape} {size} gc={collector}: "
                        f"start {reading.start_ms:.0f} ms, drain {reading.drain_ms:.0f} ms",
                        file=sys.stderr,
                        flush=True,
                    )
    if args.json:
        args.json.write_text(json.dumps([r._asdict() for r in readings], indent=1) + "\n")
    print(table(readings, sizes))


if __name__ == "__main__":
    main()
