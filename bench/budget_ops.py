"""What each ``core.budget`` transition of a W1b delegation costs, in instructions.

Theory of operation
-------------------
1. ``python -m bench.budget_ops [--n 4000]`` runs this module's ``--body`` under
   ``valgrind --tool=callgrind`` (``PYTHONHASHSEED=0``) with this tree's code, once per
   operation and once doing nothing, each over the same ledger as ``W1_oneshot_budget``'s
   parent (``bench.workloads.W1_BUDGET``, a root paying all three counted dimensions): Ir
   per operation = (Ir of N operations - Ir of N empty iterations) / N, so the interpreter's
   start, the imports and the ledger's setup cancel.
2. The operations: ``join`` + ``leave`` of the root; ``reserve`` of one request (want
   ``(1, 1, 4096)``, at least ``MINIMAL_REQUEST``) on the same ledger each time; ``settle``
   of one outstanding reservation with one request's usage, on the same ledger each time;
   ``tuple``/``namedtuple``/``tuple_new``: a plain 4-tuple, an ``Account(...)`` and
   ``tuple.__new__(Account, ...)``, for the price of a value.
3. Instruction counts do not depend on the machine's load (``bench/instructions.py``).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from dsh_subagent.core import budget as b

OPERATIONS = ("join_leave", "reserve", "settle", "tuple", "namedtuple", "tuple_new")


def body(operation: str, n: int) -> None:
    from bench.workloads import W1_BUDGET

    ledger = b.open_root(b.Ledger(), "budgeted", W1_BUDGET, 0)
    want, used = b.Amounts(1, 1, 4096), b.Amounts(1, 0, 0)
    held = b.reserve(ledger, "budgeted", want, b.MINIMAL_REQUEST, 0)
    assert not isinstance(held, b.Exhausted)
    booked, reservation = held
    make, one = tuple.__new__, 1
    if operation == "join_leave":
        for _ in range(n):
            b.leave(b.join(ledger, "budgeted", 0), "budgeted")
    elif operation == "reserve":
        for _ in range(n):
            b.reserve(ledger, "budgeted", want, b.MINIMAL_REQUEST, 0)
    elif operation == "settle":
        for _ in range(n):
            b.settle(booked, reservation, used)
    elif operation == "tuple":
        for _ in range(n):
            (one, 2, 3, 4)  # noqa: B018 (the value is the measurement)
    elif operation == "namedtuple":
        for _ in range(n):
            b.Account(one, 2, 3, 4)
    elif operation == "tuple_new":
        for _ in range(n):
            make(b.Account, (one, 2, 3, 4))
    else:
        for _ in range(n):
            pass


def instructions(operation: str, n: int, scratch: Path) -> int:
    out = scratch / f"callgrind.{operation}.out"
    root = Path(__file__).resolve().parent.parent
    command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable]
    subprocess.run(
        [*command, "-m", "bench.budget_ops", "--body", operation, "--n", str(n)],
        cwd=root,
        env={"PYTHONHASHSEED": "0", "PATH": "/usr/bin:/bin"},
        check=True,
        capture_output=True,
    )
    match = re.search(r"^summary: (\d+)$", out.read_text(), re.MULTILINE)
    assert match is not None, out
    return int(match.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=4000)
    parser.add_argument("--body", choices=(*OPERATIONS, "none"))
    args = parser.parse_args()
    if args.body is not None:
        body(args.body, args.n)
        return 0
    with tempfile.TemporaryDirectory(prefix="dsh-budget-ops-") as folder:
        scratch = Path(folder)
        instructions("none", 1, scratch)  # compiles what is stale: no measured run pays it
        empty = instructions("none", args.n, scratch)
        for operation in OPERATIONS:
            per = (instructions(operation, args.n, scratch) - empty) / args.n
            print(f"| {operation} | {per:,.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
