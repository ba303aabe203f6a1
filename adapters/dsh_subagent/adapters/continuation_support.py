"""Concurrency helpers of the continuation manager: per-child lock, barrier, branch awaits.

Theory of operation
-------------------
1. ``ChildLocks.locked(child_id)`` chains critical sections per child id in FIFO order; a
   failed section never poisons the next, and the entry is removed when the last user leaves
   (CONT-22). It serializes the start section and each follow-up routing pass.
2. ``Barrier`` records in-flight materializations with the parent lineage they run under;
   a drain waits for the ones its scope covers, publication or rollback (CONT-10, TEAR-8,
   TEAR-13).
3. ``await_branches`` awaits every branch's release even when some fail, then raises one
   aggregate ``ACTIVATION_TEARDOWN_FAILED`` naming the count and the subject (TEAR-12). It
   awaits the branches one after another, as ``asyncio.gather`` would collect them: a
   cancelled branch raises ``CancelledError`` at once (the others are left), and a cancelled
   awaiter cancels every branch. Only the awaiting task's own wake-up waits on a pending
   branch: a drain of N children adds no callback and context copy per child (``gather``
   adds both to each, and they live until that child's release).
4. ``check_aborted`` is the one check of a caller's signal: aborted on entry (the call names
   the field) is ``CANCELLED``, like a one-shot start, before anything happens; aborted later,
   before acceptance, raises the signal's own reason (CONT-20 deviates from the one-shot
   start by design).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from collections.abc import Set as AbstractSet

import attrs

from dsh_subagent.adapters.protocols import Agent
from dsh_subagent.adapters.signals import AbortSignal
from dsh_subagent.core.authority import AgentRef
from dsh_subagent.core.errors import ErrorCode, SubagentError, invalid
from dsh_subagent.core.residency import AgentStatus
from dsh_subagent.core.teardown import aggregate_branches
from dsh_subagent.core.values import SessionId


@attrs.define(eq=False)
class _Lock:
    lock: asyncio.Lock = attrs.field(factory=asyncio.Lock)
    users: int = 0


class ChildLocks:
    """One FIFO lock per child id, alive only while someone holds or waits (rule 1)."""

    def __init__(self) -> None:
        self._locks: dict[SessionId, _Lock] = {}

    def locked(self, child_id: SessionId) -> _Section:
        """``async with locked(child_id):`` one critical section of that child (rule 1)."""
        return _Section(self._locks, child_id)

    def __len__(self) -> int:
        return len(self._locks)


class _Section:
    """One critical section of ``ChildLocks``: a plain object, not a generator, since every
    follow-up enters one (an uncontended entry never yields)."""

    __slots__ = ("_child_id", "_entry", "_locks")

    def __init__(self, locks: dict[SessionId, _Lock], child_id: SessionId) -> None:
        self._locks = locks
        self._child_id = child_id
        self._entry: _Lock | None = None

    async def __aenter__(self) -> None:
        entry = self._locks.get(self._child_id)
        if entry is None:
            entry = self._locks[self._child_id] = _Lock()
        entry.users += 1
        self._entry = entry
        try:
            await entry.lock.acquire()
        except BaseException:
            self._leave(entry)
            raise

    async def __aexit__(self, *_exc: object) -> None:
        entry = self._entry
        assert entry is not None
        entry.lock.release()
        self._leave(entry)

    def _leave(self, entry: _Lock) -> None:
        entry.users -= 1
        if entry.users == 0:
            del self._locks[self._child_id]


class Barrier:
    """In-flight materializations and the lineage each runs under (rule 2)."""

    def __init__(self) -> None:
        self._entries: dict[object, tuple[AbstractSet[AgentRef], asyncio.Future[None]]] = {}

    @contextlib.asynccontextmanager
    async def in_flight(self, lineage: AbstractSet[AgentRef]) -> AsyncIterator[None]:
        key = object()
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._entries[key] = (lineage, done)
        try:
            yield
        finally:
            del self._entries[key]
            done.set_result(None)

    async def wait(self, selected: Callable[[AbstractSet[AgentRef]], bool]) -> None:
        waits = [done for lineage, done in self._entries.values() if selected(lineage)]
        if waits:
            await asyncio.wait(waits)


async def quietly(future: Awaitable[object]) -> None:
    """Await ``future`` and ignore its outcome (retrieving any exception)."""
    waited = asyncio.ensure_future(future)
    await asyncio.wait([waited])
    if not waited.cancelled():
        waited.exception()


async def await_branches(
    targets: Sequence[asyncio.Future[SubagentError | None]], subject: str
) -> None:
    """Await every branch, then raise one aggregate if any failed (TEAR-12)."""
    failures: list[SubagentError] = []
    for target in targets:
        try:
            failure = await target
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():  # the awaiter's, not the branch's
                for other in targets:
                    other.cancel()
            raise
        if failure is not None:
            failures.append(failure)
    error = aggregate_branches(subject, failures)
    if error is not None:
        raise error


def status_of(agent: Agent | None) -> AgentStatus:
    """The core's view of an agent's status; an absent agent reads as idle."""
    return AgentStatus.IDLE if agent is None else AgentStatus(agent.status.value)


def check_signal(signal: object) -> AbortSignal | None:
    if signal is not None and not isinstance(signal, AbortSignal):
        raise invalid("signal", "must be an AbortSignal")
    return signal


def check_aborted(signal: AbortSignal | None, entry_field: str | None = None) -> None:
    """Raise if ``signal`` is aborted (rule 4): ``CANCELLED`` naming ``entry_field`` on entry,
    the signal's own reason (``throw_if_aborted``) at any later check (CONT-20)."""
    if signal is None or not signal.aborted:
        return
    if entry_field is None:
        signal.throw_if_aborted()  # aborted: raises the reason itself
    reason = signal.reason
    raise SubagentError(
        ErrorCode.CANCELLED,
        "the call's signal was already aborted",
        field=entry_field,
        cause=reason if isinstance(reason, BaseException) else None,
    )


__all__ = [
    "Barrier",
    "ChildLocks",
    "await_branches",
    "check_aborted",
    "check_signal",
    "quietly",
    "status_of",
]
