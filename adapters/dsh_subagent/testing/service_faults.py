"""Fault doubles for ``ServiceMachine``: the plan, a gated model, a failing store, a flaky
provider and a harness that reports every agent it builds.

Theory of operation
-------------------
1. ``FaultPlan`` is drawn once per run (``fault_plans``); the machine arms and disarms it.
2. ``GatedModel`` replies at once unless a rule holds the agent's gate; the release picks how
   the step ends (reply, model error, max tokens, refusal), so every stop reason occurs.
3. ``FaultySqlite`` reports every store operation (``before_io``: the await points where a
   caller's abort is placed) and fails every n-th append while armed (``StoreFaults``, which
   ``postgres_faults.FaultyPostgres`` shares). The machine opens its store through a
   ``MachineStore``: ``SqliteStore`` (the default, a file in the run's scratch directory) or
   ``postgres_faults.PostgresStore``; both open without clock-driven I/O (no mailbox poll, no
   heartbeat within a run), so a failing example replays.
4. ``FlakyProvider`` is the spawn provider under the name ``flaky``, raising in the planned
   phase; ``ObservedHarness`` calls ``on_agent`` for every agent it builds (every
   materialization: create, wake, cold resume). ``PlannedFault`` marks each planted failure.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

import attrs
from hypothesis import strategies as st

from dsh_subagent.adapters.protocols import ModelRequest, ModelStep
from dsh_subagent.adapters.providers.base import (
    ContinuableCreateRequest,
    ContinuableCreateSpec,
    ResolvedStartRequest,
)
from dsh_subagent.adapters.providers.in_process import InProcessRun
from dsh_subagent.adapters.providers.spawn import SpawnProvider
from dsh_subagent.adapters.reference.agent_loop import ReferenceAgent
from dsh_subagent.adapters.reference.harness import ReferenceHarness
from dsh_subagent.adapters.reference.session import LiveSession
from dsh_subagent.adapters.reference.sqlite_persistence import SqlitePersistence
from dsh_subagent.adapters.signals import race_abort
from dsh_subagent.core.values import AgentOptions, SessionEvent, SessionId, TextBlock

if TYPE_CHECKING:
    from dsh_subagent.testing.postgres_faults import FaultyPostgres

T = TypeVar("T")
QUIET = 3600.0
"""Seconds between a store's timed reads (mailbox poll, heartbeat): never within a run."""


class PlannedFault(RuntimeError):
    """Raised by an armed fault; never by the code under test itself."""


@attrs.frozen
class FaultPlan:
    """Which faults are armed for one run (drawn once per example)."""

    flush: str = "ok"  # ok | false | raise : the final flush of child sessions
    provider_phase: str = "none"  # none | prepare | start : where ``flaky`` raises
    abort_after: int | None = None  # the store operation at which a caller's signal aborts
    listener_throws: bool = False
    sqlite_append_every: int | None = None  # every n-th append raises

    @property
    def durability_at_risk(self) -> bool:
        return self.flush != "ok" or self.sqlite_append_every is not None


fault_plans = st.builds(
    FaultPlan,
    flush=st.sampled_from(["ok", "ok", "ok", "false", "raise"]),
    provider_phase=st.sampled_from(["none", "none", "prepare", "start"]),
    abort_after=st.sampled_from([None, 0, 1, 2, 4, 8]),
    listener_throws=st.booleans(),
    sqlite_append_every=st.sampled_from([None, None, None, 3, 7]),
)


class GatedModel:
    """Replies at once unless the agent's gate is held; a release chooses how the step ends."""

    def __init__(self) -> None:
        self.gates: dict[SessionId, asyncio.Event] = {}
        self.outcome: dict[SessionId, str] = {}

    def hold(self, agent: SessionId) -> None:
        self.gates.setdefault(agent, asyncio.Event())

    def release(self, agent: SessionId, outcome: str = "reply") -> None:
        self.outcome[agent] = outcome
        gate = self.gates.pop(agent, None)
        if gate is not None:
            gate.set()

    async def step(self, request: ModelRequest) -> ModelStep:
        gate = self.gates.get(request.agent)
        if gate is not None:
            await race_abort(gate.wait(), request.signal)
        outcome = self.outcome.pop(request.agent, "reply")
        if outcome == "error":
            raise PlannedFault("model failed")
        return ModelStep(
            content=(TextBlock("done"),),
            max_tokens=outcome == "max_tokens",
            refusal=outcome == "refusal",
        )


class StoreFaults:
    """The machine's hooks on a store: ``before_io`` runs before each operation, and while
    ``every`` is set every n-th append fails (rule 3)."""

    every: int | None = None
    appends = 0
    before_io: Callable[[], None] = staticmethod(lambda: None)

    def count_append(self) -> None:
        """Count one append; raise the planned failure when it is an n-th one."""
        self.appends += 1
        if self.every is not None and self.appends % self.every == 0:
            raise PlannedFault("store write failed")


class FaultySqlite(StoreFaults, SqlitePersistence):
    """SQLite persistence that reports each operation and fails every n-th append when armed."""

    async def _run(
        self, job: Callable[[sqlite3.Connection], T], session_id: SessionId | None = None
    ) -> T:
        self.before_io()  # the await points a caller's abort is placed at
        return await super()._run(job, session_id)

    async def _write(
        self, job: Callable[[sqlite3.Connection], None], session_id: SessionId
    ) -> None:
        self.before_io()  # a write joins a group commit rather than running alone
        await super()._write(job, session_id)

    async def append(self, session_id: SessionId, events: Sequence[SessionEvent]) -> None:
        self.count_append()
        await super().append(session_id, events)


class MachineStore(Protocol):
    """How ``ServiceMachine`` opens its store; ``fresh`` at the start of each run."""

    async def open(self, scratch: Path, *, fresh: bool) -> FaultySqlite | FaultyPostgres:
        """Open the store (empty when ``fresh``) with its faults disarmed."""
        ...


@attrs.frozen
class SqliteStore:
    """``FaultySqlite`` on a file in the run's scratch directory (empty at each run's start)."""

    async def open(self, scratch: Path, *, fresh: bool) -> FaultySqlite:
        """Open ``seam.db`` under ``scratch``; no mailbox poll, no heartbeat within a run."""
        opened = await FaultySqlite.open(scratch / "seam.db", mailbox_poll=QUIET, lease_ttl=QUIET)
        assert isinstance(opened, FaultySqlite)
        return opened


class FlakyProvider:
    """A spawn provider named ``flaky`` that raises in the planned phase."""

    def __init__(self, inner: SpawnProvider, phase: Callable[[], str]) -> None:
        self.name = "flaky"
        self.inherits_parent_context = False
        self.capabilities = inner.capabilities
        self._inner = inner
        self._phase = phase

    async def prepare_continuable(self, request: ContinuableCreateRequest) -> ContinuableCreateSpec:
        if self._phase() == "prepare":
            raise PlannedFault("provider failed to prepare")
        return await self._inner.prepare_continuable(request)

    async def start(self, request: ResolvedStartRequest) -> InProcessRun:
        if self._phase() == "start":
            raise PlannedFault("provider failed to start")
        return await self._inner.start(request)


class ObservedHarness(ReferenceHarness):
    """The reference harness, telling the machine about every agent it builds."""

    on_agent: Callable[[ReferenceAgent], None] = staticmethod(lambda _agent: None)

    def _build_agent(self, session: LiveSession, options: AgentOptions) -> ReferenceAgent:
        agent = super()._build_agent(session, options)
        self.on_agent(agent)
        return agent
