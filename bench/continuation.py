"""Benchmark of the continuation manager: cold resume, resident memory, drain scaling.

Run: ``.venv/bin/python bench/continuation.py [--quick]``. Prints one table:

1. cold resume latency (follow-up call to inbox acceptance) of a continuable child whose
   SQLite log holds 100, 1,000 and 10,000 events (inspect, descriptor fold, repairing load,
   replay, publication; the median of a few runs);
2. memory per resident idle Activation (KiB, ``tracemalloc``): children interrupted with a
   parked message, so the agent is idle and the Activation stays resident (CONT-25);
3. drain of a live tree of 1,000 and of 10,000 Activations (each held mid-turn, ten
   children per node), and the 10,000 / 1,000 time ratio (about 10 means linear).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path

from dsh_subagent.adapters.continuation import (
    AncestorAuthority,
    ContinuableStartSpec,
    ContinuationManager,
    ParentAgent,
)
from dsh_subagent.adapters.protocols import (
    CreateOptions,
    ModelRequest,
    ModelStep,
    SessionPersistence,
)
from dsh_subagent.adapters.providers.base import ContinuableCreateRequest, ContinuableCreateSpec
from dsh_subagent.adapters.reference.agent_loop import ReferenceAgent
from dsh_subagent.adapters.reference.persistence import InMemoryPersistence
from dsh_subagent.adapters.reference.registry import AgentRegistry
from dsh_subagent.adapters.reference.session import LiveSession, SessionStore, bind_persistence
from dsh_subagent.adapters.reference.sqlite_persistence import SqlitePersistence
from dsh_subagent.adapters.signals import race_abort
from dsh_subagent.core import wire
from dsh_subagent.core.descriptor import descriptor_to_payload
from dsh_subagent.core.values import (
    ASSISTANT_MESSAGE,
    DESCRIPTOR_EVENT,
    END_SEED,
    STEP_END,
    STEP_START,
    TURN_END,
    TURN_START,
    AgentOptions,
    ContinuableDescriptor,
    CoordinatorSource,
    Origin,
    SessionEvent,
    SessionHeader,
    SessionId,
    TextBlock,
    TurnEndReason,
)


class Spawn:
    name = "spawn"

    async def prepare_continuable(self, request: ContinuableCreateRequest) -> ContinuableCreateSpec:
        return ContinuableCreateSpec()


class HeldModel:
    """Replies at once, or holds every step until its turn is aborted."""

    def __init__(self, hold: bool) -> None:
        self.hold = hold
        self._never: asyncio.Event | None = None

    async def step(self, request: ModelRequest) -> ModelStep:
        if self.hold:
            self._never = self._never or asyncio.Event()
            await race_abort(self._never.wait(), request.signal)
        return ModelStep(content=(TextBlock("ok"),))


class Rig:
    """Store, persistence, registry and manager with one shared model."""

    def __init__(self, persistence: SessionPersistence, *, hold: bool) -> None:
        self.store = SessionStore()
        bind_persistence(self.store, persistence)
        self.model = HeldModel(hold)
        self.agents = AgentRegistry(self.store, self.factory, persistence=persistence)
        self.manager = ContinuationManager(
            agents=self.agents,
            sessions=self.store,
            persistence=lambda: persistence,
            providers={"spawn": Spawn()}.get,
            emit=lambda _name, _info: None,
        )

    def factory(self, session: LiveSession, options: AgentOptions) -> ReferenceAgent:
        return ReferenceAgent(session, model=self.model, options=options)

    async def root(self) -> ReferenceAgent:
        handle = await self.agents.create(CreateOptions(session_id=SessionId("root")))
        return handle.agent

    async def start(self, parent: ReferenceAgent, child_id: str | None = None) -> SessionId:
        spec = ContinuableStartSpec(
            provider="spawn",
            label="bench",
            parent=parent,
            intent=(TextBlock("work"),),
            child_id=None if child_id is None else SessionId(child_id),
        )
        return (await self.manager.start_continuable(spec)).child_id


# --------------------------------------------------------------------------- cold resume


def child_log(events: int) -> list[SessionEvent]:
    """A continuable child's log of about ``events`` events: descriptor, then whole turns."""
    descriptor = descriptor_to_payload(ContinuableDescriptor(provider="spawn", label="bench"))
    log = [
        SessionEvent(DESCRIPTOR_EVENT, 0, 0.0, descriptor),
        SessionEvent(END_SEED, 1, 0.0, {}),
    ]
    turn = 0
    while len(log) + 5 <= events:
        turn += 1
        for kind, data in (
            (TURN_START, wire.turn_start_data(turn)),
            (STEP_START, {}),
            (ASSISTANT_MESSAGE, wire.assistant_message_data((TextBlock("x" * 60),))),
            (STEP_END, {}),
            (TURN_END, wire.turn_end_data(turn, TurnEndReason.COMPLETED)),
        ):
            log.append(SessionEvent(kind, len(log), 0.0, data))
    return log


async def cold_resume_ms(directory: Path, events: int, runs: int) -> float:
    samples: list[float] = []
    for run in range(runs):
        db = await SqlitePersistence.open(directory / f"resume-{events}-{run}.db")
        header = SessionHeader(
            SessionId("child"),
            parent_session=SessionId("root"),
            origin=Origin.SUBAGENT,
            delegation_depth=1,
        )
        await db.create(header, child_log(events))
        rig = Rig(db, hold=False)
        root = await rig.root()
        started = time.perf_counter()
        await rig.manager.followup(
            SessionId("child"),
            (TextBlock("again"),),
            ParentAgent(root),
            source=CoordinatorSource(root.id),
        )
        samples.append((time.perf_counter() - started) * 1000)
        await rig.manager.drain()
        await db.close()
    return statistics.median(samples)


# --------------------------------------------------------------------------- memory


async def resident_kib(count: int) -> float:
    rig = Rig(InMemoryPersistence(), hold=True)
    root = await rig.root()
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for index in range(count):
        child = await rig.start(root, f"idle-{index}")
        await asyncio.sleep(0)  # let the child's driver reach its held step
        await rig.manager.followup(
            child, (TextBlock("parked"),), ParentAgent(root), source=CoordinatorSource(root.id)
        )
        rig.manager.interrupt(child, AncestorAuthority(root))
    for agent in rig.agents.list():
        await agent.when_idle()
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    assert all(rig.manager.activation_state(SessionId(f"idle-{i}")) for i in range(count))
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    await rig.manager.drain()
    return grown / count / 1024


# --------------------------------------------------------------------------- drain


async def drain_seconds(nodes: int) -> float:
    rig = Rig(InMemoryPersistence(), hold=True)
    root = await rig.root()
    frontier: list[ReferenceAgent] = [root]
    built = 0
    while built < nodes:
        parent = frontier[built // 10]
        child_id = await rig.start(parent)
        agent = rig.agents.get(child_id)
        assert agent is not None
        frontier.append(agent)
        built += 1
    await asyncio.sleep(0)
    started = time.perf_counter()
    await rig.manager.drain()
    elapsed = time.perf_counter() - started
    assert len(rig.agents.list()) == 1
    return elapsed


def table(rows: Sequence[tuple[str, str]]) -> str:
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name.ljust(width)}  {value}" for name, value in rows)


async def main(quick: bool) -> None:
    rows: list[tuple[str, str]] = []
    sizes = (100, 1_000) if quick else (100, 1_000, 10_000)
    with tempfile.TemporaryDirectory() as tmp:
        for events in sizes:
            ms = await cold_resume_ms(Path(tmp), events, runs=3)
            rows.append((f"cold resume, {events:>6,} events (SQLite)", f"{ms:8.1f} ms"))
    rows.append(("resident idle Activation", f"{await resident_kib(200):8.1f} KiB"))
    small_n, large_n = (100, 1_000) if quick else (1_000, 10_000)
    small = await drain_seconds(small_n)
    large = await drain_seconds(large_n)
    rows.append((f"drain, {small_n:>6,} live Activations", f"{small:8.3f} s"))
    rows.append((f"drain, {large_n:>6,} live Activations", f"{large:8.3f} s"))
    rows.append((f"drain ratio {large_n:,} / {small_n:,}", f"{large / small:8.1f} x"))
    print(table(rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    asyncio.run(main(parser.parse_args().quick))
