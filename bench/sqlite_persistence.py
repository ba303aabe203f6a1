"""Benchmark of SQLite session persistence: append throughput and cold load time.

Run: ``.venv/bin/python bench/sqlite_persistence.py [--appends N] [--events N]``.
Measures single-event appends per second (one ``BEGIN IMMEDIATE`` transaction each) at
``synchronous=FULL`` (the default) and ``NORMAL``, and the time to open a database and
``load`` a session of 10,000 events (decode and repair check included). Prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from dsh_subagent.adapters.reference.sqlite_persistence import SqlitePersistence
from dsh_subagent.core import wire
from dsh_subagent.core.values import SessionEvent, SessionHeader, SessionId

SID = SessionId("bench")


def event(seq: int) -> SessionEvent:
    """A representative small event: an assistant chunk of about 80 characters."""
    return SessionEvent("assistant/chunk", seq, float(seq), wire.assistant_chunk_data("x" * 80))


async def appends_per_second(path: Path, synchronous: str, count: int) -> float:
    store = await SqlitePersistence.open(path, synchronous=synchronous)
    await store.create(SessionHeader(SID), [])
    started = time.perf_counter()
    for seq in range(count):
        await store.append(SID, [event(seq)])
    elapsed = time.perf_counter() - started
    await store.close()
    return count / elapsed


async def cold_load_seconds(path: Path, events: int) -> float:
    store = await SqlitePersistence.open(path, synchronous="NORMAL")
    await store.create(SessionHeader(SID), [])
    for first in range(0, events, 1000):
        await store.append(SID, [event(s) for s in range(first, min(first + 1000, events))])
    await store.close()
    started = time.perf_counter()
    reopened = await SqlitePersistence.open(path)
    record = await reopened.load(SID)
    elapsed = time.perf_counter() - started
    await reopened.close()
    assert len(record.events) == events
    return elapsed


async def main(appends: int, events: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        full = await appends_per_second(base / "full.db", "FULL", appends)
        normal = await appends_per_second(base / "normal.db", "NORMAL", appends)
        load = await cold_load_seconds(base / "load.db", events)
    rows = [
        ("append, synchronous=FULL", f"{full:,.0f} appends/s"),
        ("append, synchronous=NORMAL", f"{normal:,.0f} appends/s"),
        (f"cold open + load, {events:,} events", f"{load * 1000:,.1f} ms"),
    ]
    width = max(len(name) for name, _ in rows)
    print(f"{'measure':<{width}}  result")
    print(f"{'-' * width}  {'-' * 20}")
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--appends", type=int, default=2_000, help="appends per level")
    parser.add_argument("--events", type=int, default=10_000, help="events in the loaded log")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.appends, arguments.events))
