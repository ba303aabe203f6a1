"""PostgreSQL beside SQLite in one run: acceptance latency, cold resume, fan-out (issue 23).

Theory of operation
-------------------
1. One throwaway PostgreSQL cluster (``dsh_subagent.testing.postgres.PostgresCluster``,
   started *with* ``fsync``, so its commits are as durable as SQLite's ``synchronous=FULL``)
   on a Unix socket; every figure gets a fresh database, or a fresh SQLite file in a
   temporary directory. Both backends run the same code: ``ReferenceHarness.open(db=...)``
   selects the backend by the address.
2. ``ACC``: ``bench.acceptance.accepted`` on each backend (held children, ``senders``
   concurrent senders; the call to its durable return).
3. ``W3``: ``convs`` continuable children of ``turns`` turns each are built and drained;
   a fresh harness on the same store then follows each up once: the time from the call
   to that epoch's ``subagent/end`` (cold resume, one turn) per child.
4. ``FANOUT``: 1 and then 4 worker processes on one PostgreSQL database, each its own
   harness starting ``children`` continuable children under its own root; released
   together (a stdin barrier), each reports its own elapsed time. Children per second is
   the total over the slowest worker's time; the scaling ratio is 4 workers' rate over 1's.
5. ``python -m bench.postgres [--quick]`` prints one JSON line. ``--quick`` is a smoke run
   at small sizes (seconds); numbers are only comparable within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from bench.acceptance import accepted
from bench.world import percentile
from dsh_subagent.adapters.continuation_types import ContinuableStartSpec
from dsh_subagent.adapters.reference.harness import ReferenceHarness
from dsh_subagent.adapters.reference.scripted_model import NullModel
from dsh_subagent.core.lifecycle import SUBAGENT_END, RunEndInfo
from dsh_subagent.core.values import CoordinatorSource, SessionId, TextBlock
from dsh_subagent.testing.postgres import PostgresCluster, find_bindir, server_account

JsonDict = dict[str, object]
ROOT = Path(__file__).resolve().parents[1]


def _null(_session: object, _options: object) -> NullModel:
    return NullModel()


def _ends(harness: ReferenceHarness) -> defaultdict[str, asyncio.Queue[RunEndInfo]]:
    """Each child's ``subagent/end`` notifications, one per epoch, as they come."""
    ends: defaultdict[str, asyncio.Queue[RunEndInfo]] = defaultdict(asyncio.Queue)

    def on_end(payload: object) -> None:
        if isinstance(payload, RunEndInfo):
            ends[payload.start.child_id].put_nowait(payload)

    harness.service.on(SUBAGENT_END, on_end)
    return ends


async def cold_resumes(db: str, convs: int, turns: int) -> JsonDict:
    """Build, then time one cold resume per child to its epoch's end (rule 3)."""
    async with ReferenceHarness.open(_null, db=db) as harness:
        ends = _ends(harness)
        root = await harness.create_agent("root")
        source = CoordinatorSource(root.id)
        grant = harness.service.user_authority()
        for c in range(convs):
            child = SessionId(f"conv-{c}")
            spec = ContinuableStartSpec("spawn", "w", root, (TextBlock("t0"),), child_id=child)
            await harness.service.start_continuable(spec)
            await ends[child].get()
            for turn in range(1, turns):
                await harness.service.followup(
                    child, (TextBlock(f"t{turn}"),), grant, source=source
                )
                await ends[child].get()
        await harness.service.drain_continuable()
    latencies: list[float] = []
    async with ReferenceHarness.open(_null, db=db) as harness:
        ends = _ends(harness)
        grant = harness.service.user_authority()
        for c in range(convs):
            child = SessionId(f"conv-{c}")
            began = time.perf_counter()
            await harness.service.followup(child, (TextBlock("more"),), grant)
            await ends[child].get()
            latencies.append((time.perf_counter() - began) * 1e6)
        await harness.service.drain_continuable()
    ordered = sorted(latencies)
    return {
        "n": len(ordered),
        "median_us": round(statistics.median(ordered), 1),
        "p95_us": round(percentile(ordered, 0.95), 1),
    }


WORKER = """
import asyncio, sys, time
from dsh_subagent.adapters.continuation_types import ContinuableStartSpec
from dsh_subagent.adapters.reference.harness import ReferenceHarness
from dsh_subagent.adapters.reference.scripted_model import NullModel
from dsh_subagent.core.values import SessionId, TextBlock

async def main(db, name, count):
    async with ReferenceHarness.open(lambda s, o: NullModel(), db=db) as harness:
        root = await harness.create_agent("root-" + name)
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        began = time.perf_counter()
        for n in range(count):
            child = SessionId(name + "-" + str(n))
            spec = ContinuableStartSpec("spawn", "w", root, (TextBlock("go"),), child_id=child)
            await harness.service.start_continuable(spec)
        await harness.service.drain_continuable()
        print(time.perf_counter() - began, flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


def fanout(db: str, workers: int, children: int) -> JsonDict:
    """``workers`` processes each start ``children`` children on one store (rule 4)."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, db, f"w{k}", str(children)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for k in range(workers)
    ]
    for proc in procs:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("\n")
        proc.stdin.flush()
    elapsed = []
    for proc in procs:
        assert proc.stdout is not None
        elapsed.append(float(proc.stdout.readline()))
        assert proc.wait(timeout=600) == 0
    return {
        "workers": workers,
        "children": workers * children,
        "children_per_s": round(workers * children / max(elapsed), 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    messages, convs, turns, children = (40, 5, 3, 10) if args.quick else (1000, 50, 10, 100)
    bindir = find_bindir()
    if bindir is None:
        sys.exit("no PostgreSQL server binaries (initdb, pg_ctl) found")
    cluster = PostgresCluster(bindir, Path(tempfile.mkdtemp(prefix="dshpg")), server_account())
    result: JsonDict = {}
    try:
        cluster.start(fsync=True)
        with tempfile.TemporaryDirectory(prefix="dsh-pgbench-") as folder:
            for senders in (1, 10):
                pg = cluster.address(cluster.database())
                result[f"ACC_{senders}_postgres"] = asyncio.run(
                    accepted(senders, messages, Path(folder), db=pg)
                )
                result[f"ACC_{senders}_sqlite"] = asyncio.run(
                    accepted(senders, messages, Path(folder))
                )
            result["W3_postgres"] = asyncio.run(
                cold_resumes(cluster.address(cluster.database()), convs, turns)
            )
            result["W3_sqlite"] = asyncio.run(
                cold_resumes(str(Path(folder) / "w3.sqlite"), convs, turns)
            )
        one = fanout(cluster.address(cluster.database()), 1, children)
        four = fanout(cluster.address(cluster.database()), 4, children)
        result["FANOUT_1"], result["FANOUT_4"] = one, four
        rate = float(str(four["children_per_s"])) / float(str(one["children_per_s"]))
        result["FANOUT_scaling_4_over_1"] = round(rate, 2)
    finally:
        cluster.stop()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
