"""ChildLocks: FIFO sections per child id; a failed or cancelled one poisons nothing (CONT-22)."""

from __future__ import annotations

import asyncio

import pytest

from dsh_subagent.adapters.continuation_support import ChildLocks
from dsh_subagent.core.values import SessionId

CHILD = SessionId("c")


async def _section(locks: ChildLocks, name: str, order: list[str], hold: asyncio.Event) -> None:
    async with locks.locked(CHILD):
        order.append(f"in {name}")
        await hold.wait()
        order.append(f"out {name}")


async def _contended() -> None:
    locks, order, hold = ChildLocks(), list[str](), asyncio.Event()
    tasks = [asyncio.create_task(_section(locks, name, order, hold)) for name in "abc"]
    await asyncio.sleep(0)
    assert order == ["in a"]
    assert len(locks) == 1
    hold.set()
    await asyncio.gather(*tasks)
    assert order == ["in a", "out a", "in b", "out b", "in c", "out c"]
    assert len(locks) == 0  # the entry leaves with its last user


async def _cancelled_and_failed() -> None:
    locks, order, hold = ChildLocks(), list[str](), asyncio.Event()
    first = asyncio.create_task(_section(locks, "a", order, hold))
    waiter = asyncio.create_task(_section(locks, "b", order, hold))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter

    async def failing() -> None:
        async with locks.locked(CHILD):
            order.append("in f")
            raise RuntimeError("boom")

    failed = asyncio.create_task(failing())
    await asyncio.sleep(0)
    hold.set()
    await first
    with pytest.raises(RuntimeError):
        await failed
    async with locks.locked(CHILD):
        order.append("in d")
    assert order == ["in a", "out a", "in f", "in d"]
    assert len(locks) == 0


def test_contended_sections_run_one_at_a_time_in_arrival_order() -> None:
    asyncio.run(_contended())


def test_a_cancelled_waiter_and_a_failed_section_poison_nothing() -> None:
    asyncio.run(_cancelled_and_failed())
