"""A Hypothesis machine over two harness instances on one SQLite store, with crashes.

Theory of operation
-------------------
1. Two slots, each an ``ObservedHarness`` on the same SQLite file with its own event loop,
   its own ``GatedModel`` and a root agent of its own (a new one per incarnation). A rule
   runs on one slot's loop and then settles it (a fixpoint: agents idle unless gated, the
   manager's work done, no group commit pending); the other loop does not run meanwhile, so
   the two instances meet only in the store, as two processes do.
2. ``crash`` abandons a slot: its loop never runs again (no flush, no close, no lease
   release: its in-memory state is gone as after SIGKILL). The rows of its leases are
   given a pid no process can have, so the same-host dead-owner rule frees them at once
   (LEASE-5) with no clock and no sleep. A fresh instance opens in the slot.
3. Deterministic replays (Hypothesis replays draws): rules draw only fixed names, never an
   outcome; writes go at the next loop tick (``write_interval=0``); neither the mailbox poll
   nor the lease heartbeat ever fires by time (an hour); ``poll`` runs one
   ``probe_mailbox``, and settling waits for the store's writes, so what a crash leaves in
   the store does not hinge on thread timing.
4. Invariants after every step: LEASE-7, at most one live Activation per child across the
   live instances, and the one that has it holds the child's lease in the store; DUR-6,
   every acknowledged message id is in the store (its child's stored inbox or its mailbox)
   when the call returns and stays there, and the stored log neither inserts nor claims an
   id twice. ``recover`` closes both instances, opens fresh ones, resumes every child (the
   mail and inbox it still holds are delivered by that Activation), drains, and checks the
   eventual form: every acknowledged message was claimed, or discarded, exactly once.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import sqlite3
import tempfile
from collections.abc import Coroutine
from pathlib import Path
from typing import ClassVar, TypeVar

import attrs
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from dsh_subagent.adapters.continuation_types import ContinuableStartSpec
from dsh_subagent.adapters.reference.agent_loop import ReferenceAgent
from dsh_subagent.core.errors import SubagentError
from dsh_subagent.core.values import (
    INBOX_SPLICED,
    USER_MESSAGE,
    CoordinatorSource,
    MessageId,
    SessionId,
    TextBlock,
)
from dsh_subagent.testing.service_faults import FaultySqlite, GatedModel, ObservedHarness

T = TypeVar("T")
CHILDREN = tuple(SessionId(f"c{n}") for n in range(2))
MAX_CRASHES = 2  # per run: every crash opens an instance, the costly part of a step
SLOTS = (0, 1)
OUTCOMES = ("reply", "error", "max_tokens")
_HOUR = 3600.0
_DEAD_PID = 2**22 + 1  # above Linux's PID_MAX_LIMIT: no process has it
SETTLE_TIMEOUT = 5.0  # a hang guard only


@attrs.define(eq=False)
class _Instance:
    """One harness instance: its loop, harness, model and root."""

    loop: asyncio.AbstractEventLoop
    harness: ObservedHarness
    model: GatedModel
    root: ReferenceAgent

    @property
    def persistence(self) -> FaultySqlite:
        persistence = self.harness.persistence
        assert isinstance(persistence, FaultySqlite)
        return persistence

    def run(self, coroutine: Coroutine[object, object, T]) -> T:
        return self.loop.run_until_complete(coroutine)


@attrs.frozen
class StoredFacts:
    """What the store holds now: per child, the message ids its log inserted into the inbox,
    claimed (``user/message``) and still has pending, and the ids in its mailbox."""

    inserted: collections.Counter[tuple[SessionId, MessageId]]
    claimed: collections.Counter[tuple[SessionId, MessageId]]
    pending: set[tuple[SessionId, MessageId]]
    mailbox: set[tuple[SessionId, MessageId]]


def _replay(facts: StoredFacts, child: SessionId, events: list[tuple[str, str]]) -> None:
    """Fold one child's stored inbox splices and user messages into ``facts``."""
    lists: dict[str, list[MessageId]] = collections.defaultdict(list)
    for kind, text in events:
        data = json.loads(text)
        if kind == USER_MESSAGE:
            facts.claimed[(child, MessageId(data["message"]["id"]))] += 1
            continue
        pending = lists[data["target"]]
        start, removed = data["start"], data.get("removedCount", 0)
        inserted = [MessageId(m["id"]) for m in data.get("inserted", ())]
        pending[start : start + removed] = inserted
        for message in inserted:
            facts.inserted[(child, message)] += 1
    facts.pending.update((child, m) for pending in lists.values() for m in pending)


def stored_facts(db: Path) -> StoredFacts:
    """Read the store with a connection of its own, in one read transaction."""
    facts = StoredFacts(collections.Counter(), collections.Counter(), set(), set())
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("BEGIN")
        by_child: dict[SessionId, list[tuple[str, str]]] = collections.defaultdict(list)
        query = "SELECT session_id, type, data FROM events WHERE type IN (?, ?) ORDER BY seq"
        for sid, kind, data in conn.execute(query, (INBOX_SPLICED, USER_MESSAGE)):
            by_child[SessionId(sid)].append((kind, data))
        for child, events in by_child.items():
            _replay(facts, child, events)
        for sid, mid in conn.execute("SELECT session_id, message_id FROM mailbox"):
            facts.mailbox.add((SessionId(sid), MessageId(mid)))
        conn.execute("COMMIT")
    finally:
        conn.close()
    return facts


class PairMachine(RuleBasedStateMachine):
    """Two harness instances on one store; crashes; LEASE-7 and DUR-6 after every step."""

    CHECKED: ClassVar[tuple[str, ...]] = ("LEASE-7", "DUR-6")
    totals: ClassVar[collections.Counter[str]] = collections.Counter()
    #: How often a run reached what the invariants are about (the test asserts each).
    seen: ClassVar[collections.Counter[str]] = collections.Counter()

    def __init__(self) -> None:
        super().__init__()
        self.scratch = tempfile.TemporaryDirectory()
        self.db = Path(self.scratch.name) / "pair.db"
        self.slots: dict[int, _Instance] = {}
        self.dead: list[_Instance] = []
        self.incarnation = 0
        self.crashes = 0
        self.steps = 0  # rules run: counted, never an outcome, so preconditions replay
        self.recovered = False
        self.acked: list[tuple[SessionId, MessageId]] = []
        self.late: list[str] = []  # acknowledged ids not in the store when acknowledged

    # ------------------------------------------------------------------ plumbing

    def _open(self, slot: int) -> None:
        loop = asyncio.new_event_loop()
        self.incarnation += 1
        model = GatedModel()

        async def opening() -> _Instance:
            # synchronous OFF: the crashes here are a process's, never a power loss.
            persistence = await FaultySqlite.open(
                self.db, synchronous="OFF", mailbox_poll=_HOUR, lease_ttl=_HOUR
            )
            harness = ObservedHarness(persistence, lambda _s, _o: model, write_interval=0)
            harness.service.watch_mailbox()
            root = await harness.create_agent(f"r{slot}-{self.incarnation}")
            return _Instance(loop, harness, model, root)

        instance = loop.run_until_complete(opening())
        self.slots[slot] = instance
        self.poll(slot)  # the scan on open (DUR-26)

    async def _settle(self, instance: _Instance) -> None:
        """Run until nothing but held gates is pending, and no write is (a fixpoint)."""
        harness = instance.harness

        async def quiet() -> None:
            while True:
                for _ in range(10):
                    await asyncio.sleep(0)
                manager = harness.service._continuations
                if manager is not None:
                    await manager.settled()
                for agent in harness.registry.list():
                    if agent.id not in instance.model.gates:
                        await agent.when_idle()
                await instance.persistence._settle_writes()
                busy = manager is not None and bool(manager._engine._tasks)
                if not busy and not any(
                    a.status.value != "idle" and a.id not in instance.model.gates
                    for a in harness.registry.list()
                ):
                    return

        await asyncio.wait_for(quiet(), SETTLE_TIMEOUT)

    def _step(self, slot: int, action: Coroutine[object, object, object]) -> None:
        self.steps += 1
        instance = self.slots[slot]
        with contextlib.suppress(SubagentError):
            instance.run(action)
        instance.run(self._settle(instance))

    def _acknowledged(self, child: SessionId, message_id: MessageId) -> None:
        """The call returned ``message_id``: it must be in the store now (DUR-6)."""
        self.acked.append((child, message_id))
        facts = stored_facts(self.db)
        if (child, message_id) in facts.mailbox:
            PairMachine.seen["accepted into the mailbox"] += 1
        elif (child, message_id) not in facts.inserted:
            self.late.append(f"{child}/{message_id}: acknowledged but not in the store")

    # ------------------------------------------------------------------ rules

    @initialize()
    def open_both(self) -> None:
        for slot in SLOTS:
            self._open(slot)

    @rule(slot=st.sampled_from(SLOTS), child=st.sampled_from(CHILDREN), hold=st.booleans())
    def start(self, slot: int, child: SessionId, hold: bool) -> None:
        instance = self.slots[slot]
        if hold:
            instance.model.hold(child)
        spec = ContinuableStartSpec(
            "spawn", "worker", instance.root, (TextBlock("go"),), child_id=child
        )

        async def go() -> None:
            started = await instance.harness.service.start_continuable(spec)
            self._acknowledged(child, started.message_id)

        self._step(slot, go())

    @rule(slot=st.sampled_from(SLOTS), child=st.sampled_from(CHILDREN), hold=st.booleans())
    def followup(self, slot: int, child: SessionId, hold: bool) -> None:
        instance = self.slots[slot]
        if hold:
            instance.model.hold(child)
        service = instance.harness.service

        async def go() -> None:
            message_id = await service.followup(
                child,
                (TextBlock("more"),),
                service.user_authority(),
                source=CoordinatorSource(SessionId("host")),
            )
            self._acknowledged(child, message_id)

        self._step(slot, go())

    @rule(
        slot=st.sampled_from(SLOTS),
        child=st.sampled_from(CHILDREN),
        outcome=st.sampled_from(OUTCOMES),
    )
    def release(self, slot: int, child: SessionId, outcome: str) -> None:
        model = self.slots[slot].model

        async def go() -> None:
            model.release(child, outcome)

        self._step(slot, go())

    @rule(slot=st.sampled_from(SLOTS))
    def poll(self, slot: int) -> None:
        """One mailbox probe: mail for children held here, orphans taken over (DUR-22/26)."""
        instance = self.slots[slot]
        service = instance.harness.service
        before = {c for c in CHILDREN if service.activation_state(c) is not None}

        async def go() -> None:
            if set(await instance.persistence.probe_mailbox()) - before:
                PairMachine.seen["orphaned mail named"] += 1

        self._step(slot, go())

    @rule(slot=st.sampled_from(SLOTS), child=st.sampled_from(CHILDREN))
    def drain(self, slot: int, child: SessionId) -> None:
        instance = self.slots[slot]
        service = instance.harness.service
        self._step(slot, service.drain_continuable_children(instance.root, [child]))

    @precondition(lambda self: self.crashes < MAX_CRASHES)
    @rule(slot=st.sampled_from(SLOTS))
    def crash(self, slot: int) -> None:
        """Abandon the instance unflushed and unclosed; its process is gone (LEASE-5)."""
        self.crashes += 1
        instance = self.slots.pop(slot)
        if any(instance.harness.service.activation_state(c) is not None for c in CHILDREN):
            PairMachine.seen["crash with a live Activation"] += 1
        self.dead.append(instance)
        conn = sqlite3.connect(self.db, isolation_level=None)
        try:
            owner = instance.persistence._me.token
            conn.execute("UPDATE leases SET pid = ? WHERE owner = ?", (_DEAD_PID, owner))
        finally:
            conn.close()
        self._open(slot)

    @precondition(lambda self: self.steps >= 12 and not self.recovered)
    @rule()
    def recover(self) -> None:
        """Close both, reopen, resume every child for what it holds, drain; eventually
        every acknowledged message was claimed or discarded exactly once (DUR-6)."""
        self.recovered = True
        for slot in SLOTS:
            instance = self.slots.pop(slot)
            for gate in list(instance.model.gates):
                instance.model.release(gate)
            instance.run(self._settle(instance))
            instance.run(asyncio.wait_for(instance.harness.close(), SETTLE_TIMEOUT))
            instance.loop.close()
        for slot in SLOTS:
            self._open(slot)
        for child in CHILDREN:
            self.followup(0, child, hold=False)
        self._check(complete=True)

    # ------------------------------------------------------------------ invariants

    def _violations(self, complete: bool) -> dict[str, list[str]]:
        live = [i for i in self.slots.values() if not i.loop.is_closed()]
        found: dict[str, list[str]] = {"LEASE-7": [], "DUR-6": list(self.late)}
        conn = sqlite3.connect(self.db, isolation_level=None)
        try:
            owners = dict(conn.execute("SELECT session_id, owner FROM leases").fetchall())
        finally:
            conn.close()
        for child in CHILDREN:
            holders = [i for i in live if i.harness.service.activation_state(child) is not None]
            if len(holders) > 1:
                found["LEASE-7"].append(f"{child}: {len(holders)} live Activations")
            for holder in holders:
                if owners.get(child) != holder.persistence._me.token:
                    found["LEASE-7"].append(f"{child}: live where the store's lease is not")
        facts = stored_facts(self.db)
        for key in self.acked:
            child, message = key
            where = f"{child}/{message}"
            if key not in facts.inserted and key not in facts.mailbox:
                found["DUR-6"].append(f"{where}: acknowledged, gone from the store")
            if facts.inserted[key] > 1 or facts.claimed[key] > 1:
                found["DUR-6"].append(f"{where}: delivered twice")
            if (
                complete
                and facts.claimed[key] == 0
                and (key in facts.pending or key in facts.mailbox)
            ):
                found["DUR-6"].append(f"{where}: still pending after every child was resumed")
        return found

    def _check(self, *, complete: bool = False) -> None:
        for inv_id, problems in self._violations(complete).items():
            PairMachine.totals[inv_id] += 1
            assert not problems, f"{inv_id}: {problems}"

    @invariant()
    def pair_invariants_hold(self) -> None:
        if len(self.slots) == len(SLOTS):
            self._check()

    def teardown(self) -> None:
        try:
            for instance in self.slots.values():
                for gate in list(instance.model.gates):
                    instance.model.release(gate)
                with contextlib.suppress(Exception):
                    instance.run(asyncio.wait_for(instance.harness.close(), SETTLE_TIMEOUT))
                instance.loop.close()
            for instance in self.dead:  # the process is gone: drop its thread and loop
                persistence = instance.persistence
                persistence._closed = True
                persistence._executor.submit(persistence._conn.close).result()
                persistence._executor.shutdown(wait=True)
                instance.harness._closed = True  # no ResourceWarning: it crashed on purpose
                loop = instance.loop
                loop.set_exception_handler(lambda _loop, _context: None)
                tasks = asyncio.all_tasks(loop)
                for task in tasks:  # end them (the store is closed to them) before the loop
                    task.cancel()
                with contextlib.suppress(BaseException):
                    loop.run_until_complete(
                        asyncio.wait_for(
                            asyncio.gather(*tasks, return_exceptions=True), SETTLE_TIMEOUT
                        )
                    )
                loop.close()
        finally:
            self.scratch.cleanup()


__all__ = ["PairMachine", "StoredFacts", "stored_facts"]
