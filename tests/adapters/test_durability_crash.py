"""SIGKILL a busy harness at random points: nothing accepted is lost or duplicated (DUR-2).

A worker process runs a ``ReferenceHarness`` on a SQLite file: a root starts continuable
children and follows them up in a loop, and writes each message id to its stdout pipe only
after the call that accepted it returned. The test kills it at a random point, then checks
the store from this process: every session is balanced after the repairing load, and every
reported id is in its child's log exactly once (inserted, claimed or still pending). A cold
resume then delivers the pending ones with their original ids: each is claimed exactly once.
A few kills by default (bounded to a few seconds), many more under ``DSH_SOAK=1``.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dsh_subagent.adapters.reference.harness import ReferenceHarness, open_persistence
from dsh_subagent.adapters.reference.scripted_model import NullModel
from dsh_subagent.adapters.reference.session import LiveSession
from dsh_subagent.core.values import (
    INBOX_SPLICED,
    USER_MESSAGE,
    CoordinatorSource,
    SessionEvent,
    SessionId,
    TextBlock,
)

SOAK = os.environ.get("DSH_SOAK") == "1"
KILLS = 40 if SOAK else 3

WORKER = """
import asyncio, sys
from dsh_subagent.adapters.continuation_types import ContinuableStartSpec, ParentAgent
from dsh_subagent.adapters.reference.harness import ReferenceHarness, open_persistence
from dsh_subagent.adapters.reference.scripted_model import NullModel
from dsh_subagent.core.values import CoordinatorSource, SessionId, TextBlock

async def main(path, children):
    harness = await ReferenceHarness.open(lambda s, o: NullModel(), db=path, write_interval=0)
    root = await harness.create_agent("root")
    service = harness.service
    def told(child, message_id):
        sys.stdout.write(f"{child} {message_id}\\n")
        sys.stdout.flush()
    for n in range(children):
        child = SessionId(f"c{n}")
        spec = ContinuableStartSpec("spawn", "w", root, (TextBlock("go"),), child_id=child)
        told(child, (await service.start_continuable(spec)).message_id)
    source = CoordinatorSource(SessionId("root"))

    async def sender(child):
        k = 0
        while True:
            k += 1
            body = (TextBlock(f"more {k}"),)
            told(child, await service.followup(child, body, ParentAgent(root), source=source))

    await asyncio.gather(*(sender(SessionId(f"c{n}")) for n in range(children)))

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


def _ids(events: tuple[SessionEvent, ...], kind: str) -> list[str]:
    """The message ids a log inserted into its inbox, or claimed in its turns."""
    found: list[str] = []
    for event in events:
        data: Any = event.data
        if event.type == INBOX_SPLICED and kind == "inserted":
            found += [m["id"] for m in data["inserted"]]
        elif event.type == USER_MESSAGE and kind == "claimed":
            found.append(data["message"]["id"])
    return found


def _run_and_kill(db: str, rng: random.Random, children: int) -> dict[str, list[str]]:
    """Run the worker, SIGKILL it after a random number of acceptances; what it was told."""
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, db, str(children)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert worker.stdout is not None
    told: dict[str, list[str]] = {}
    target = rng.randint(1, 60)
    for count, line in enumerate(worker.stdout, 1):
        child, message_id = line.split()
        told.setdefault(child, []).append(message_id)
        if count >= target:
            break
    os.kill(worker.pid, signal.SIGKILL)
    for line in worker.stdout:  # acceptances reported before the kill landed
        child, message_id = line.split()
        told.setdefault(child, []).append(message_id)
    worker.wait()
    return told


async def _check(db: str, told: dict[str, list[str]]) -> None:
    store = await open_persistence(db)
    try:
        for header in await store.list():
            record = await store.load(header.id)  # repairs an interrupted tail
            LiveSession(record.header, record.events)  # raises unless balanced
        for child, accepted in told.items():
            inserted = _ids((await store.inspect(SessionId(child))).events, "inserted")
            for message_id in accepted:
                assert inserted.count(message_id) == 1, (child, message_id)
    finally:
        await store.close()


async def _cold_resume(db: str, told: dict[str, list[str]]) -> None:
    """A new harness follows every child up: each accepted message is claimed exactly once,
    with its original id, by then."""
    async with ReferenceHarness.open(lambda s, o: NullModel(), db=db) as harness:
        root = await harness.resume_agent("root")
        source = CoordinatorSource(SessionId("root"))
        grant = harness.service.user_authority()
        for child in told:
            await harness.service.followup(
                SessionId(child), (TextBlock("after"),), grant, source=source
            )
        await harness.service.drain_continuable()
        for child, accepted in told.items():
            claimed = _ids((await harness.persistence.inspect(SessionId(child))).events, "claimed")
            for message_id in accepted:
                assert claimed.count(message_id) == 1, (child, message_id)
        assert root.id == "root"


@pytest.mark.parametrize(
    ("backend", "run"),
    [("sqlite", run) for run in range(KILLS)] + [("postgres", run) for run in range(2)],
)
def test_dur_2_a_sigkill_loses_and_duplicates_no_accepted_message(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str, run: int
) -> None:
    rng = random.Random(run)
    db = (
        str(request.getfixturevalue("postgres_db"))
        if backend == "postgres"
        else str(tmp_path / "crash.db")
    )
    told = _run_and_kill(db, rng, children=rng.randint(1, 3))
    assert told
    asyncio.run(_check(db, told))
    asyncio.run(_cold_resume(db, told))
    asyncio.run(_check(db, told))
