"""SIGKILL a writer mid-stream: the SQLite log reloads to a balanced, intact committed prefix."""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dsh_subagent.adapters.reference.persistence import open_turn
from dsh_subagent.adapters.reference.sqlite_persistence import SqlitePersistence
from dsh_subagent.core import wire
from dsh_subagent.core.values import (
    TURN_END,
    TURN_START,
    SessionEvent,
    SessionId,
    TurnEndReason,
)

CRASH_ID = SessionId("crash")


def expected_event(seq: int) -> SessionEvent:
    """The writer's deterministic stream: turns of five events, the chunk carrying bulk."""
    turn, step = divmod(seq, 5)
    kinds = [TURN_START, "step/start", "assistant/chunk", "step/end", TURN_END]
    data = [
        wire.turn_start_data(turn),
        {},
        wire.assistant_chunk_data(f"chunk {seq} " + "x" * (seq % 97)),
        {},
        wire.turn_end_data(turn, TurnEndReason.COMPLETED),
    ]
    return SessionEvent(kinds[step], seq, float(seq), data[step])


WRITER = f"""
import asyncio, sys
from dsh_subagent.adapters.reference.sqlite_persistence import SqlitePersistence
from dsh_subagent.core import wire
from dsh_subagent.core.values import (
    TURN_END, TURN_START, SessionEvent, SessionHeader, SessionId, TurnEndReason,
)

{inspect.getsource(expected_event)}

async def main(path: str) -> None:
    store = await SqlitePersistence.open(path)
    await store.create(SessionHeader(SessionId("crash"), created_at=0.0), [])
    seq = 0
    while True:  # until killed; batches of 1..3 events, one transaction each
        batch = [expected_event(s) for s in range(seq, seq + seq % 3 + 1)]
        await store.append(SessionId("crash"), batch)
        seq += len(batch)
        print(seq, flush=True)

asyncio.run(main(sys.argv[1]))
"""


def kill_writer_after(path: Path, committed: int) -> int:
    """Run the writer until it reports ``committed`` events, SIGKILL it, return its last count."""
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert writer.stdout is not None
    reported = 0
    for line in writer.stdout:
        reported = int(line)
        if reported >= committed:
            break
    writer.send_signal(signal.SIGKILL)
    _, errors = writer.communicate()
    assert reported >= committed, f"writer stopped early: {errors}"
    assert writer.returncode == -signal.SIGKILL
    return reported


async def reload_balanced(path: Path, reported: int) -> None:
    store = await SqlitePersistence.open(path)
    inspected = await store.inspect(CRASH_ID)
    assert len(inspected.events) >= reported
    assert list(inspected.events) == [expected_event(s) for s in range(len(inspected.events))]
    loaded = await store.load(CRASH_ID)
    assert loaded.events[: len(inspected.events)] == inspected.events
    assert open_turn(CRASH_ID, loaded.events) is None
    repairs = len(loaded.events) - len(inspected.events)
    assert repairs == (0 if open_turn(CRASH_ID, inspected.events) is None else 1)
    assert await store.load(CRASH_ID) == loaded
    await store.close()


def test_harness_17_sigkilled_writer_reloads_to_balanced_committed_prefix(tmp_path: Path) -> None:
    path = tmp_path / "crash.db"
    reported = kill_writer_after(path, 200)
    asyncio.run(reload_balanced(path, reported))


@pytest.mark.soak
@pytest.mark.skipif(os.environ.get("DSH_SOAK") != "1", reason="soak: set DSH_SOAK=1")
@pytest.mark.parametrize("committed", [5_000, 20_000, 50_000])
def test_harness_17_soak_sigkilled_writer_reloads(tmp_path: Path, committed: int) -> None:
    path = tmp_path / "crash.db"
    reported = kill_writer_after(path, committed)
    asyncio.run(reload_balanced(path, reported))
