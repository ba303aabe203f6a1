"""One measured body for ``bench/instructions.py``, run under callgrind inside a tree's snapshot.

``python -S instructions_child.py W1|W2|W4|W4_build N`` from the snapshot's root runs, after a
fixed warm-up, N units of one workload through that tree's own ``bench.world`` and
``bench.workloads`` (whose ``World``, ``delegate_and_dispose``, ``_fan_out`` and ``held_tree``
have had the same shape since ``a48deee``, so one body measures old and new trees alike):

* ``W1``: N sequential one-shot delegations, each started, collected and disposed;
* ``W2``: one fan-out of N one-shot children held at a barrier until all are in flight;
* ``W4_build``: a live depth-4 tree of N held continuable children, built and left;
* ``W4``: the same tree built, then drained child-first;
* ``ACC``: ``bench.acceptance``'s world (``bench.acceptance_callgrind``: 100 concurrent senders
  round-robin over 20 held children on SQLite with ``synchronous=FULL``), N follow-ups sent
  and each acknowledged once durable (trees since ``e3ab237``'s successor, issue 19).

It prints nothing and exits straight after the body (no loop or interpreter shutdown): the
caller reads the instruction count from callgrind's output file.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from bench import workloads
from bench.world import BenchModel, World, delegate_and_dispose

if TYPE_CHECKING:  # the import path of the agent class differs between trees
    from dsh_subagent.adapters.reference.agent_loop import ReferenceAgent

WARMUP = 50


async def _warm_world() -> tuple[World, BenchModel, ReferenceAgent]:
    model = BenchModel()
    world = World(model)
    parent = await world.root("parent")
    for _ in range(WARMUP):
        await delegate_and_dispose(world, parent)
    return world, model, parent


async def w1(n: int) -> None:
    world, _, parent = await _warm_world()
    for _ in range(n):
        await delegate_and_dispose(world, parent)


async def w2(n: int) -> None:
    world, model, parent = await _warm_world()
    await workloads._fan_out(world, parent, model, 10, barrier=True)
    if n:
        await workloads._fan_out(world, parent, model, n, barrier=True)


async def w4_build(n: int) -> None:
    await workloads.held_tree(n)


async def w4(n: int) -> None:
    world = await workloads.held_tree(n)
    await world.service.drain_continuable()


async def acc(n: int) -> None:
    from bench.acceptance_callgrind import send  # not in trees before issue 19's driver

    with tempfile.TemporaryDirectory(prefix="dsh-acc-") as folder:
        await send(n, 100, 20, Path(folder), None)


BODIES = {"W1": w1, "W2": w2, "W4_build": w4_build, "W4": w4, "ACC": acc}


async def run_and_exit(body: str, units: int) -> None:
    """Run one body, then leave at once: the loop's shutdown (which would cancel what the
    body left held, e.g. ``W4_build``'s tree) must not count in one run and not the other."""
    await BODIES[body](units)
    os._exit(0)


if __name__ == "__main__":
    asyncio.run(run_and_exit(sys.argv[1], int(sys.argv[2])))
