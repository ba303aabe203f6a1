"""Acceptance latency: a follow-up's call to its durable acknowledgement (DUR-1, DUR-3).

Theory of operation
-------------------
1. One ``ReferenceHarness`` on a SQLite file with ``synchronous=FULL`` holds ``children``
   continuable children whose model steps are held (each stays running, so every follow-up
   is a live delivery into its inbox: the measured cost is admission plus the durable
   commit, not a turn). ``senders`` tasks send follow-ups round-robin over the children,
   each waiting for its previous one's acknowledgement; every call is timed from the call
   to its return (the message is in the store by then).
2. The figures per sender count: median and p99 latency (µs) and accepted messages per
   second over the whole run.
3. The floor, in the same run and on the same disk: a bare ``sqlite3`` insert plus commit
   per message into a WAL table with ``synchronous=FULL``, one at a time (the latency of
   one fsync'd commit, and so what a store without group commit could accept per second).
4. ``python -m bench.acceptance [--messages N] [--senders 1,10,100]`` prints one JSON line;
   ``bench.workloads --only ACC`` runs it as the ``ACC`` workload for ``bench/run``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from bench.world import percentile
from dsh_subagent.adapters.continuation_types import ContinuableStartSpec, ParentAgent
from dsh_subagent.adapters.protocols import ModelRequest, ModelStep, Session
from dsh_subagent.adapters.reference.harness import ReferenceHarness
from dsh_subagent.core.values import AgentOptions, CoordinatorSource, SessionId, TextBlock

JsonDict = dict[str, object]


class HeldModel:
    """Every step waits until the run ends: the children stay running (rule 1)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def step(self, request: ModelRequest) -> ModelStep:
        await self.release.wait()
        return ModelStep(content=(TextBlock("done"),))


def _summary(latencies_ns: list[int], wall_s: float) -> JsonDict:
    ordered = sorted(ns / 1000 for ns in latencies_ns)
    return {
        "n": len(ordered),
        "median_us": round(statistics.median(ordered), 1),
        "p99_us": round(percentile(ordered, 0.99), 1),
        "msgs_per_s": round(len(ordered) / wall_s, 1),
    }


async def accepted(
    senders: int, messages: int, folder: Path, children: int = 20, db: str | None = None
) -> JsonDict:
    """Time ``messages`` follow-ups from ``senders`` concurrent senders (rule 1); ``db`` is
    another store to use (a PostgreSQL address: ``bench/postgres.py``)."""
    model = HeldModel()

    def model_for(_session: Session, _options: AgentOptions) -> HeldModel:
        return model

    path = db or folder / f"acc-{senders}.sqlite"
    harness = await ReferenceHarness.open(model_for, db=path, synchronous="FULL")
    root = await harness.create_agent("root")
    ids = [SessionId(f"c{n}") for n in range(children)]
    for child in ids:
        spec = ContinuableStartSpec("spawn", "w", root, (TextBlock("go"),), child_id=child)
        await harness.service.start_continuable(spec)
    source = CoordinatorSource(root.id)
    latencies: list[int] = []
    per_sender = max(1, messages // senders)

    async def sender(k: int) -> None:
        for n in range(per_sender):
            child = ids[(k + n) % len(ids)]
            began = time.perf_counter_ns()
            await harness.service.followup(
                child, (TextBlock(f"m{n}"),), ParentAgent(root), source=source
            )
            latencies.append(time.perf_counter_ns() - began)

    started = time.perf_counter()
    await asyncio.gather(*(sender(k) for k in range(senders)))
    wall = time.perf_counter() - started
    model.release.set()
    await harness.close()
    return _summary(latencies, wall)


def sqlite_floor(messages: int, folder: Path) -> JsonDict:
    """One insert and one commit per message, WAL, ``synchronous=FULL`` (rule 3)."""
    conn = sqlite3.connect(folder / "floor.sqlite", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE t (n INTEGER, body TEXT)")
    latencies: list[int] = []
    started = time.perf_counter()
    for n in range(messages):
        began = time.perf_counter_ns()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t VALUES (?, ?)", (n, "m"))
        conn.execute("COMMIT")
        latencies.append(time.perf_counter_ns() - began)
    wall = time.perf_counter() - started
    conn.close()
    return _summary(latencies, wall)


async def acceptance(messages: int, senders: tuple[int, ...] = (1, 10, 100)) -> JsonDict:
    """The ``ACC`` workload: every sender count, then the floor (rules 2-3)."""
    result: JsonDict = {}
    with tempfile.TemporaryDirectory(prefix="dsh-acc-") as folder:
        for count in senders:
            result[f"ACC_{count}"] = await accepted(count, messages, Path(folder))
        result["ACC_sqlite_floor"] = sqlite_floor(messages, Path(folder))
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--senders", default="1,10,100")
    args = parser.parse_args(argv)
    senders = tuple(int(each) for each in args.senders.split(","))
    print(json.dumps(asyncio.run(acceptance(args.messages, senders))))


if __name__ == "__main__":
    main()
