"""One measured body for ``bench/instructions.py``, run under callgrind inside a tree's snapshot.

``python -S instructions_child.py W1|W1_budget|W2|W3|W4|W4_build|W6|W7 N`` from the
snapshot's root runs, after a fixed warm-up, N units of one workload through that tree's own
``bench.world`` and ``bench.workloads`` (whose ``World``, ``delegate_and_dispose``,
``_fan_out`` and ``held_tree`` have had the same shape since ``a48deee``, so one body
measures old and new trees alike; ``W1_budget`` needs ``W1_BUDGET``, issue 25's):

* ``W1``: N sequential one-shot delegations, each started, collected and disposed;
* ``W1_budget``: the same under a parent with ``bench.workloads.W1_BUDGET`` set, as
  ``W1_oneshot_budget`` runs it (every child joins the parent's node, its request reserved
  and settled, the child leaves);
* ``W2``: one fan-out of N one-shot children held at a barrier until all are in flight;
* ``W3_build`` (run once outside valgrind): W3's store, ``W3_CONVS`` continuable children of
  ``W3_TURNS`` epochs each in one SQLite file (``W3_STORE``), built as ``bench.workloads.w3``
  builds it (a start, then follow-ups from the live parent, each awaited to its end), closed;
* ``W3``: a copy of that store reopened in a new world (without its clock-paced timers,
  ``_untimed``), then the first N children each
  followed up once with a user grant and awaited to ``subagent/end``: N cold resumes, as
  W3's timed loop runs them (the classes are taken from the tree's own ``bench.workloads``,
  whose imports name them wherever that tree keeps them);
* ``W4_build``: a live depth-4 tree of N held continuable children, built and left;
* ``W4``: the same tree built, then drained child-first;
* ``W7_build`` / ``W7``: N held continuable children under one parent, started (and left) /
  started, then drained; ``W6_build`` / ``W6``: the same as a chain of depth N (W6's and W7's
  shapes as ``bench.workloads.held_shape`` starts them, without its ``gc.collect()`` calls,
  which would add full collections of their own). N = 0 starts the world and its parent only.
* ``ACC``: ``bench.acceptance``'s world (``bench.acceptance_callgrind``: 100 concurrent senders
  round-robin over 20 held children on SQLite with ``synchronous=FULL``), N follow-ups sent
  and each acknowledged once durable (trees since ``e3ab237``'s successor, issue 19).

It prints nothing and exits straight after the body (no loop or interpreter shutdown): the
caller reads the instruction count from callgrind's output file.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import workloads
from bench.world import BenchModel, World, delegate_and_dispose
from dsh_subagent.core.values import SessionId

if TYPE_CHECKING:  # the import path of the agent class differs between trees
    from dsh_subagent.adapters.reference.agent_loop import ReferenceAgent

WARMUP = 50
W3_CONVS = 30
W3_TURNS = 5
W3_STORE = Path("w3-store.sqlite")
W3_COPY = Path("w3-run.sqlite")


async def _warm_world(*, budgeted: bool = False) -> tuple[World, BenchModel, ReferenceAgent]:
    model = BenchModel()
    world = World(model)
    parent = await world.root("parent")
    if budgeted:
        world.service.set_budget(parent, workloads.W1_BUDGET)
    for _ in range(WARMUP):
        await delegate_and_dispose(world, parent)
    return world, model, parent


async def w1(n: int) -> None:
    world, _, parent = await _warm_world()
    for _ in range(n):
        await delegate_and_dispose(world, parent)


async def w1_budget(n: int) -> None:
    world, _, parent = await _warm_world(budgeted=True)
    for _ in range(n):
        await delegate_and_dispose(world, parent)


async def w2(n: int) -> None:
    world, model, parent = await _warm_world()
    await workloads._fan_out(world, parent, model, 10, barrier=True)
    if n:
        await workloads._fan_out(world, parent, model, n, barrier=True)


async def w3_build(n: int) -> None:
    for stale in Path().glob(f"{W3_STORE}*"):
        stale.unlink()
    w: Any = workloads  # its imports name the classes wherever this tree keeps them
    model = BenchModel()
    persistence = await w.SqlitePersistence.open(W3_STORE)
    world = World(model, persistence)
    host = await world.root("host")
    gate = asyncio.Semaphore(16)

    async def build(child_id: str) -> None:
        async with gate:
            await world.start_child(host, w.SessionId(child_id), "turn 0")
            await world.ended(w.SessionId(child_id))
            for turn in range(1, W3_TURNS):
                await world.service.followup(
                    w.SessionId(child_id),
                    w.text(f"turn {turn}"),
                    w.ParentAgent(host),
                    source=w.CoordinatorSource(host.id),
                )
                await world.ended(w.SessionId(child_id))

    await asyncio.gather(*(build(f"conv-{c}") for c in range(W3_CONVS)))
    await world.service.drain_continuable()
    await persistence.close()


def _untimed(store: Any) -> dict[str, float]:
    """Open options that keep a store's wall-clock timers out of the run, where the tree has
    them: the mailbox probe (every 50 ms) and the lease heartbeat (every 10 s) fire by the
    clock, and valgrind runs some fifty times slower than the machine, so in a measured run
    a probe would fall about twice per resume (2.1 counted) instead of 0.2 times."""
    accepted = inspect.signature(store.open).parameters
    return {name: 3600.0 for name in ("mailbox_poll", "lease_ttl") if name in accepted}


async def w3(n: int) -> None:
    w: Any = workloads  # its imports name the classes wherever this tree keeps them
    for stale in Path().glob(f"{W3_COPY}*"):
        stale.unlink()
    for suffix in ("", "-wal"):  # the close checkpoints: normally no WAL is left
        if Path(f"{W3_STORE}{suffix}").exists():
            shutil.copyfile(f"{W3_STORE}{suffix}", f"{W3_COPY}{suffix}")
    model = BenchModel()
    cold = World(model, await w.SqlitePersistence.open(W3_COPY, **_untimed(w.SqlitePersistence)))
    grant = cold.service.user_authority()
    model.count_history = True
    for c in range(n):
        child_id = w.SessionId(f"conv-{c}")
        await cold.service.followup(child_id, w.text("one more"), grant)
        end = await cold.ended(child_id)
        assert end.stop_reason is w.KnownStop.COMPLETED, end
        assert model.history_seen == 2 * W3_TURNS + 1, model.history_seen


async def w4_build(n: int) -> None:
    await workloads.held_tree(n)


async def w4(n: int) -> None:
    world = await workloads.held_tree(n)
    await world.service.drain_continuable()


async def acc(n: int) -> None:
    from bench.acceptance_callgrind import send  # not in trees before issue 19's driver

    with tempfile.TemporaryDirectory(prefix="dsh-acc-") as folder:
        await send(n, 100, 20, Path(folder), None)


async def _held_shape(n: int, *, chain: bool) -> World:
    # Imported here: trees before the seam/harness split keep it elsewhere (W1-W4 run there).
    from dsh_subagent.adapters.reference.persistence import InMemoryPersistence

    model = BenchModel()
    model.hold_until_aborted = True
    model.hold_target = n
    world = World(model, InMemoryPersistence(), keep_ends=False)
    parent = await world.root("host")
    for index in range(n):
        child_id = SessionId(f"n{index}")
        await world.start_child(parent, child_id, "hold")
        if chain:
            parent = world.live(child_id)
    if n:
        await model.all_held.wait()
    return world


async def w7_build(n: int) -> None:
    await _held_shape(n, chain=False)


async def w7(n: int) -> None:
    world = await _held_shape(n, chain=False)
    await world.service.drain_continuable()


async def w6_build(n: int) -> None:
    await _held_shape(n, chain=True)


async def w6(n: int) -> None:
    world = await _held_shape(n, chain=True)
    await world.service.drain_continuable()


BODIES = {
    "W1": w1,
    "W1_budget": w1_budget,
    "W2": w2,
    "W3_build": w3_build,
    "W3": w3,
    "W4_build": w4_build,
    "W4": w4,
    "W7_build": w7_build,
    "W7": w7,
    "W6_build": w6_build,
    "W6": w6,
    "ACC": acc,
}


async def run_and_exit(body: str, units: int) -> None:
    """Run one body, then leave at once: the loop's shutdown (which would cancel what the
    body left held, e.g. ``W4_build``'s tree) must not count in one run and not the other."""
    await BODIES[body](units)
    os._exit(0)


if __name__ == "__main__":
    asyncio.run(run_and_exit(sys.argv[1], int(sys.argv[2])))
