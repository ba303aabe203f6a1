"""Interleave ``bench.workloads`` in two or more checkouts: A/B, then B/A, round by round.

Theory of operation
-------------------
1. ``python bench/ab.py --trees DIR_A DIR_B [--rounds N] -- <bench.workloads arguments>`` runs
   ``DIR/.venv/bin/python -m bench.workloads <arguments>`` in each tree (each tree with its own
   virtualenv, so each measures its own code), the order reversed every round, so a machine
   whose speed drifts during the run burdens every tree alike.
2. Each run prints one JSON line; every numeric field of every workload record is kept.
3. The report, per workload figure: each tree's median over the rounds, the ratio of medians
   to the first tree, and the median of the per-round ratios (the less drift-sensitive one).
4. Wall time on a shared machine is not a reading: run it on a quiet machine, and read
   ``cpu_*`` fields beside the wall ones.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

Figures = dict[str, float]


def run_once(tree: Path, args: list[str]) -> Figures:
    """One ``bench.workloads`` run in ``tree``: its numeric figures, keyed ``workload.field``."""
    out = subprocess.run(
        [str(tree / ".venv" / "bin" / "python"), "-m", "bench.workloads", *args],
        cwd=tree,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    record = json.loads(out.strip().splitlines()[-1])
    figures: Figures = {}
    for name, value in record.items():
        if isinstance(value, dict) and name not in ("env", "params"):
            for field, number in value.items():
                if isinstance(number, (int, float)) and not isinstance(number, bool):
                    figures[f"{name}.{field}"] = float(number)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", nargs="+", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--fields", default="median_us,cpu_median_us", help="comma list")
    parser.add_argument("workload_args", nargs=argparse.REMAINDER)
    ns = parser.parse_args()
    args = [a for a in ns.workload_args if a != "--"]
    trees: list[Path] = ns.trees
    wanted = ns.fields.split(",")
    runs: dict[Path, list[Figures]] = {tree: [] for tree in trees}
    for round_no in range(ns.rounds):
        order = trees if round_no % 2 == 0 else list(reversed(trees))
        for tree in order:
            runs[tree].append(run_once(tree, args))
            print(f"round {round_no + 1}/{ns.rounds}: {tree.name} done", file=sys.stderr)
    keys = [k for k in runs[trees[0]][0] if k.rsplit(".", 1)[1] in wanted]
    print("| figure | " + " | ".join(t.name for t in trees) + " | ratios | per-round ratios |")
    print("| --- |" + " ---: |" * (len(trees) + 2))
    for key in keys:
        medians = [statistics.median(r[key] for r in runs[t]) for t in trees]
        ratios = [m / medians[0] for m in medians[1:]]
        paired = [
            statistics.median(b[key] / a[key] for a, b in zip(runs[trees[0]], runs[t], strict=True))
            for t in trees[1:]
        ]
        print(
            f"| {key} | "
            + " | ".join(f"{m:,.1f}" for m in medians)
            + " | "
            + ", ".join(f"{r:.3f}" for r in ratios)
            + " | "
            + ", ".join(f"{p:.3f}" for p in paired)
            + " |"
        )


if __name__ == "__main__":
    main()
