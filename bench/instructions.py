"""Compare trees by instructions, not time: W1-W4 under callgrind, per unit of work.

Theory of operation
-------------------
1. ``python -m bench.instructions --rev a48deee --rev HEAD [--figure W1 ...]`` extracts each
   revision with ``git archive`` (``core``, ``adapters``, ``bench``) into a scratch directory
   and runs ``bench/instructions_child.py`` there, under ``valgrind --tool=callgrind`` with
   ``PYTHONHASHSEED=0``, with this interpreter started with ``-S``: only the snapshot and
   this virtualenv's installed libraries are on the path, never the editable install of the
   working tree (checked by importing the service before measuring). The snapshot's
   bytecode is compiled first, so no measured run pays for compiling it.
2. A figure is the difference of two runs divided by the units between them, so imports,
   the world's setup and the warm-up cancel: W1 = (200 delegations - 0) / 200 (W1b: the
   same under a budgeted parent; with both, a last row gives W1b / W1, the budget's
   overhead, each revision against itself); W2 = (a fan-out of 400 held children - none) /
   400; W3 = (13 cold resumes - 3) / 10, each a user-grant
   follow-up to a child of a 30 x 5-epoch SQLite store awaited to its ``subagent/end``, the
   store built once per tree by that tree's code outside valgrind (``Figure.setup``) and
   copied afresh for each run; W4 = (a 1,000-node tree built and drained - built only) /
   1,000, the drain's cost per node; ACC = (2,000 follow-ups accepted durably by 100
   concurrent senders on SQLite - 500) / 1,500 (all threads: the loop, the SQLite
   connection's, the group commit; trees that have ``bench/acceptance_callgrind.py``).
3. Instruction counts do not depend on the machine's load, so trees can be compared on a
   shared machine where wall and CPU time cannot; they do not see time spent waiting (IO,
   fsync), and a cyclic collection falling inside one run but not the other moves a figure
   by about 1 %, which is this method's resolution. W3's store has timers that fire by the
   wall clock (the ``PRAGMA data_version`` mailbox probe every 50 ms, the lease heartbeat
   every 10 s); valgrind runs about fifty times slower, so a probe would fall 2.1 times per
   resume where the machine sees 0.2: the W3 body opens the store with both periods at an
   hour (where the tree has them), counting per-resume work only.
4. The report is a Markdown table: Ir per unit for each revision and its ratio to the first.
   ``--repeat N`` measures each figure N times per revision (each run printed to stderr) and
   reports the median: the plain W1 path moves by several thousand Ir between runs of one
   tree, so a ratio such as W1b / W1 is read from medians.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
CHILD = Path(__file__).resolve().parent / "instructions_child.py"


class Figure(NamedTuple):
    unit: str
    plus: tuple[str, int]  # (body, units) of the run with the work
    minus: tuple[str, int]  # (body, units) of the run without it
    per: int
    setup: str | None = None  # body run once per tree, outside valgrind, before both runs


FIGURES = {
    "W1": Figure("Ir per delegation", ("W1", 200), ("W1", 0), 200),
    "W1b": Figure("Ir per budgeted delegation", ("W1_budget", 200), ("W1_budget", 0), 200),
    "W2": Figure("Ir per held child", ("W2", 400), ("W2", 0), 400),
    "W3": Figure("Ir per cold resume (30 x 5 store)", ("W3", 13), ("W3", 3), 10, "W3_build"),
    "W4": Figure("Ir per drained node (1k tree)", ("W4", 1000), ("W4_build", 1000), 1000),
    "ACC": Figure("Ir per accepted follow-up (100 senders)", ("ACC", 2000), ("ACC", 500), 1500),
}
RATIOS = {"W1b": "W1"}
"""A figure over another, printed as a row of its own when both are measured (the budget's
overhead: budgeted W1 over plain W1, each revision against itself)."""


def snapshot(rev: str, into: Path) -> Path:
    """``rev``'s tree, extracted under ``into``, with the child body at its root."""
    tree = into / re.sub(r"[^A-Za-z0-9._-]", "_", rev)
    tree.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "core", "adapters", "bench"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    (tree / CHILD.name).write_bytes(CHILD.read_bytes())
    return tree


def _env(tree: Path) -> dict[str, str]:
    path = [str(tree / "core"), str(tree / "adapters"), sysconfig.get_paths()["purelib"]]
    return {"PYTHONPATH": ":".join(path), "PYTHONHASHSEED": "0", "PATH": "/usr/bin:/bin"}


def prepare(tree: Path) -> None:
    """Compile the snapshot's bytecode (else the first measured run pays for it), and refuse
    to measure unless the snapshot's own service module is the one imported."""
    subprocess.run(
        [sys.executable, "-S", "-m", "compileall", "-q", "core", "adapters", "bench"],
        cwd=tree,
        env=_env(tree),
        check=True,
    )
    probe = "import dsh_subagent.adapters.service as s; print(s.__file__)"
    found = subprocess.run(
        [sys.executable, "-S", "-c", probe],
        cwd=tree,
        env=_env(tree),
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not found.startswith(str(tree)):
        raise SystemExit(f"{tree}: imported {found}, not the snapshot")


def instructions(tree: Path, body: str, units: int) -> int:
    """Callgrind's instruction total for one run of ``body`` over ``units``."""
    out = tree / f"callgrind.{body}.{units}.out"
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            "-S",
            CHILD.name,
            body,
            str(units),
        ],
        cwd=tree,
        env=_env(tree),
        check=True,
        capture_output=True,
    )
    match = re.search(r"^summary: (\d+)$", out.read_text(), re.MULTILINE)
    if match is None:
        raise SystemExit(f"{out}: no summary line")
    return int(match.group(1))


def measure(tree: Path, figure: Figure) -> float:
    if figure.setup is not None:
        command = [sys.executable, "-S", CHILD.name, figure.setup, "0"]
        subprocess.run(command, cwd=tree, env=_env(tree), check=True, capture_output=True)
    return (instructions(tree, *figure.plus) - instructions(tree, *figure.minus)) / figure.per


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", action="append", required=True, help="git revision (repeat)")
    parser.add_argument("--figure", action="append", choices=sorted(FIGURES), help="(repeat)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per figure: the median")
    args = parser.parse_args(argv)
    names = args.figure or ["W1", "W2", "W4"]  # ACC only when asked (newer trees only)
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="dsh-instructions-") as scratch:
        for rev in args.rev:
            tree = snapshot(rev, Path(scratch))
            prepare(tree)
            for name in names:
                print(f"{rev} {name} ...", file=sys.stderr, flush=True)
                runs = [measure(tree, FIGURES[name]) for _ in range(max(args.repeat, 1))]
                if len(runs) > 1:
                    print(f"  runs: {', '.join(f'{run:,.0f}' for run in runs)}", file=sys.stderr)
                results.setdefault(name, {})[rev] = statistics.median(runs)
    first = args.rev[0]
    print("| figure | " + " | ".join(args.rev) + " |")
    print("| --- |" + " ---: |" * len(args.rev))
    for name in names:
        row = results[name]
        cells = [f"{row[rev]:,.0f} ({row[rev] / row[first]:.3f})" for rev in args.rev]
        print(f"| {name} {FIGURES[name].unit} | " + " | ".join(cells) + " |")
    for over, under in RATIOS.items():
        if over in results and under in results:
            cells = [f"{results[over][rev] / results[under][rev]:.4f}" for rev in args.rev]
            print(f"| {over} / {under} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
