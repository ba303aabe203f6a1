"""Accepted means durable (DESIGN decision 5, issue 19): through the public API on SQLite.

Each test works on a ``ReferenceHarness`` over a SQLite file and, where it matters, opens a
second harness on the same file, as a restarted process would.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import pytest

from dsh_subagent.adapters.continuation_types import ContinuableStartSpec, ParentAgent
from dsh_subagent.adapters.durability import DurabilityFailed
from dsh_subagent.adapters.protocols import ModelRequest, ModelStep, Session
from dsh_subagent.adapters.reference.agent_loop import ReferenceAgent
from dsh_subagent.adapters.reference.harness import ReferenceHarness
from dsh_subagent.adapters.reference.scripted_model import Gate, Gated, ScriptedModel, reply
from dsh_subagent.adapters.reference.sqlite_persistence import SqlitePersistence
from dsh_subagent.adapters.signals import AbortController
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.lifecycle import SUBAGENT_END, RunEndInfo
from dsh_subagent.core.manager.events import ReportDelivery
from dsh_subagent.core.values import (
    INBOX_SPLICED,
    USER_MESSAGE,
    AgentOptions,
    CoordinatorSource,
    JsonValue,
    SessionEvent,
    SessionHeader,
    SessionId,
    TextBlock,
)

P, G = SessionId("p"), SessionId("g")
COORD = CoordinatorSource(SessionId("root"))


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(main())  # type: ignore[arg-type]


class Models:
    """One scripted model per agent id; an exhausted script answers "ok"."""

    def __init__(self) -> None:
        self.models: dict[SessionId, _Fallback] = {}

    def __call__(self, session: Session, _options: AgentOptions) -> _Fallback:
        return self.of(session.id)

    def of(self, agent_id: SessionId) -> _Fallback:
        return self.models.setdefault(agent_id, _Fallback())


class _Fallback(ScriptedModel):
    async def step(self, request: ModelRequest) -> ModelStep:
        if not self.remaining:
            self.requests.append(request)
            return reply("ok")
        return await super().step(request)


def _messages(events: tuple[SessionEvent, ...], kind: str) -> list[dict[str, JsonValue]]:
    """The messages a log's splices inserted (``inserted``) or its turns claimed."""
    found: list[dict[str, JsonValue]] = []
    for event in events:
        data = event.data
        assert isinstance(data, dict) or hasattr(data, "get")
        if kind == "inserted" and event.type == INBOX_SPLICED:
            found += list(data["inserted"])  # type: ignore[index, call-overload, arg-type]
        elif kind == "claimed" and event.type == USER_MESSAGE:
            found.append(data["message"])  # type: ignore[index, call-overload, arg-type]
    return found


async def _grandchild_running(harness: ReferenceHarness, models: Models) -> None:
    """Root, its child ``p`` and ``p``'s child ``g``, both held in their first model step;
    closing the harness then drains ``g`` first, so its notice enters ``p``'s inbox while
    ``p`` is being torn down."""
    working, deep = Gate(), Gate()
    models.of(P).extend([Gated(working, reply("p done"))])
    models.of(G).extend([Gated(deep, reply("g done"))])
    root = await harness.create_agent("root")
    spec = ContinuableStartSpec("spawn", "w", root, (TextBlock("go"),), child_id=P)
    await harness.service.start_continuable(spec)
    await working.reached()
    parent = harness.registry.get(P)
    assert parent is not None
    spec = ContinuableStartSpec("spawn", "w", parent, (TextBlock("dig"),), child_id=G)
    await harness.service.start_continuable(spec)
    await deep.reached()


def _cancels(events: Sequence[SessionEvent]) -> list[SessionEvent]:
    """The splices that cancelled pending messages."""
    return [
        e
        for e in events
        if e.type == INBOX_SPLICED and e.data.get("outcome") == "canceled"  # type: ignore[union-attr]
    ]


class FailsCancels(SqlitePersistence):
    """SQLite persistence whose appends to ``p`` that carry a cancel splice fail: all of
    them, or the first ``failures``. It records the appends to ``p``."""

    failures: int | None = None

    async def append(self, session_id: SessionId, events: Sequence[SessionEvent]) -> None:
        if session_id == P:
            self.appends = [*getattr(self, "appends", []), tuple(events)]
            if _cancels(events) and (self.failures is None or self.failures > 0):
                self.failures = None if self.failures is None else self.failures - 1
                raise OSError("disk gone")
        await super().append(session_id, events)


async def _ends_of_p(persistence: SqlitePersistence, models: Models) -> tuple[Session, RunEndInfo]:
    """Run the grandchild scenario to the harness's close; ``p``'s session and its end."""
    ends: list[RunEndInfo] = []
    async with ReferenceHarness(persistence, models) as harness:
        harness.service.on(SUBAGENT_END, ends.append)  # type: ignore[arg-type]
        await _grandchild_running(harness, models)
        parent = harness.registry.get(P)
        assert parent is not None
    (end,) = [info for info in ends if info.start.child_id == P]
    return parent.session, end


async def _stored(db: Path, session_id: SessionId) -> tuple[SessionEvent, ...]:
    reader = await SqlitePersistence.open(db, readonly=True)
    try:
        return (await reader.inspect(session_id)).events
    finally:
        await reader.close()


def test_dur_4_the_disposals_cancel_is_written_by_the_final_flush(tmp_path: Path) -> None:
    """The cancel splice of ``g``'s notice and ``p``'s log tail are one write, the final
    flush: failing every write that carries the cancel is ``p``'s ``DURABILITY_FAILED``, and
    nothing of that tail reaches the store (no second write carries the cancel alone)."""
    db = tmp_path / "s.db"
    models = Models()

    async def main() -> None:
        session, end = await _ends_of_p(await FailsCancels.open(db), models)
        assert _cancels(session.events)  # the disposal cancelled the notice
        assert end.durability_failed
        stored = await _stored(db, P)
        assert not _cancels(stored)
        assert stored == session.events[: len(stored)]
        assert len(stored) < session.seq  # the tail was not written either

    run(main)


def test_dur_4_a_failed_final_flush_is_retried_and_the_discard_is_never_claimed(
    tmp_path: Path,
) -> None:
    """The final flush that carries ``p``'s cancel splice fails once: it is tried again, in
    one write with the tail, before the lease is given up; the epoch ends durable, and after
    a restart the discarded notice is neither pending nor claimed (SVC-INBOX-1)."""
    db = tmp_path / "s.db"
    models = Models()

    async def main() -> None:
        persistence = await FailsCancels.open(db)
        assert isinstance(persistence, FailsCancels)
        persistence.failures = 1
        session, end = await _ends_of_p(persistence, models)
        (cancel,) = _cancels(session.events)
        tried = [events for events in persistence.appends if cancel in events]
        assert len(tried) == 2  # the same write, tried again
        assert tried[0] == tried[1]
        assert tried[1][-1] == session.events[-1]  # nothing was left for a second write
        assert not end.durability_failed
        assert await _stored(db, P) == session.events
        (notice,) = [
            m["id"]
            for m in _messages(session.events, "inserted")
            if m["source"]["kind"] == "subagent-settled"  # type: ignore[index, call-overload]
        ]
        models.models.clear()
        async with ReferenceHarness.open(models, db=db) as harness:
            await harness.resume_agent("root")
            grant = harness.service.user_authority()
            source = CoordinatorSource(SessionId("host"))
            again = await harness.service.followup(P, (TextBlock("again"),), grant, source=source)
            resumed = harness.registry.get(P)
            assert resumed is not None
            assert notice not in resumed.pending()
            await resumed.when_idle()
            claimed = [m["id"] for m in _messages(resumed.session.events, "claimed")]
            assert notice not in claimed
            assert claimed[-1] == again

    run(main)


def test_dur_4_a_notice_discarded_by_the_parents_disposal_stays_discarded_after_restart(
    tmp_path: Path,
) -> None:
    """The drain settles ``g`` first: its notice enters ``p``'s inbox after ``p`` was
    cancelled, and ``p``'s disposal discards it. After a restart, a cold resume of ``p``
    does not claim it (seed 000: the disposal durably cancels an unclaimed notice)."""
    db = tmp_path / "s.db"
    models = Models()

    async def main() -> None:
        async with ReferenceHarness.open(models, db=db) as harness:
            await _grandchild_running(harness, models)
        store = await SqlitePersistence.open(db)
        try:
            events = (await store.inspect(P)).events
        finally:
            await store.close()
        notices = [
            m
            for m in _messages(events, "inserted")
            if m["source"]["kind"] == "subagent-settled"  # type: ignore[index, call-overload]
        ]
        assert len(notices) == 1  # the scenario happened: g's notice entered p's inbox
        models.models.clear()
        async with ReferenceHarness.open(models, db=db) as harness:
            await harness.resume_agent("root")
            grant = harness.service.user_authority()
            source = CoordinatorSource(SessionId("host"))
            await harness.service.followup(P, (TextBlock("again"),), grant, source=source)
            resumed = harness.registry.get(P)
            assert resumed is not None
            await resumed.when_idle()
            claimed = _messages(resumed.session.events, "claimed")
            assert notices[0]["id"] not in [m["id"] for m in claimed]
            seen = [e for r in models.of(P).requests for e in r.events if e.type == USER_MESSAGE]
            sources = [e.data["message"]["source"]["kind"] for e in seen]  # type: ignore[index, call-overload]
            assert "subagent-settled" not in sources
            assert sources[-1] == "coordinator"

    run(main)


# --------------------------------------------------------------------------- write-ahead


class HeldWrites(SqlitePersistence):
    """SQLite persistence whose writes wait at a gate while ``held`` (or fail while
    ``failing``): acceptance must not be reported before they are done."""

    held: asyncio.Event | None = None
    reached: asyncio.Event | None = None
    failing = False

    async def _write(
        self, job: Callable[[sqlite3.Connection], None], session_id: SessionId
    ) -> None:
        if self.failing:
            raise OSError("disk gone")
        if self.held is not None and self.reached is not None:
            self.reached.set()
            await self.held.wait()
        await super()._write(job, session_id)


async def held_harness(db: Path, models: Models) -> tuple[ReferenceHarness, HeldWrites]:
    persistence = await HeldWrites.open(db)
    assert isinstance(persistence, HeldWrites)
    return ReferenceHarness(persistence, models), persistence


async def stored_ids(db: Path, session_id: SessionId) -> list[JsonValue]:
    """The ids a stored log inserted into its inbox, read by another connection."""
    reader = await SqlitePersistence.open(db, readonly=True)
    try:
        return [m["id"] for m in _messages((await reader.inspect(session_id)).events, "inserted")]
    finally:
        await reader.close()


async def _running_child(
    db: Path, models: Models
) -> tuple[ReferenceHarness, HeldWrites, Gate, ReferenceAgent, ReferenceAgent]:
    """A held-writes harness on ``db`` with root and child ``p``, whose first model step is
    held at the returned gate: ``(harness, persistence, gate, root, child)``."""
    gate = Gate()
    models.of(P).extend([Gated(gate, reply("first"))])
    harness, persistence = await held_harness(db, models)
    root = await harness.create_agent("root")
    spec = ContinuableStartSpec("spawn", "w", root, (TextBlock("go"),), child_id=P)
    await harness.service.start_continuable(spec)
    await gate.reached()
    child = harness.registry.get(P)
    assert child is not None
    return harness, persistence, gate, root, child


def test_dur_1_a_followup_returns_only_once_its_message_is_stored(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    models = Models()

    async def main() -> None:
        harness, persistence, gate, root, _ = await _running_child(db, models)
        persistence.held, persistence.reached = asyncio.Event(), asyncio.Event()
        call = asyncio.ensure_future(
            harness.service.followup(P, (TextBlock("more"),), ParentAgent(root), source=COORD)
        )
        await persistence.reached.wait()
        for _ in range(5):
            await asyncio.sleep(0)
        assert not call.done()  # accepted, not yet stored: not reported
        persistence.held.set()
        message_id = await call
        assert message_id in await stored_ids(db, P)
        gate.open()
        await harness.close()

    run(main)


def test_dur_1_a_failed_commit_raises_durability_failed_with_the_message_id(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    models = Models()

    async def main() -> None:
        harness, persistence, gate, root, child = await _running_child(db, models)
        persistence.failing = True
        with pytest.raises(DurabilityFailed) as raised:
            await harness.service.followup(P, (TextBlock("more"),), ParentAgent(root), source=COORD)
        assert raised.value.code is ErrorCode.DURABILITY_FAILED
        # Accepted in this process, not durable: it is still delivered.
        assert raised.value.message_id in [m.id for m in child.next_turn]
        persistence.failing = False
        gate.open()
        await harness.close()

    run(main)


def test_dur_5_an_abort_or_a_cancel_while_durability_is_awaited_withdraws_nothing(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    models = Models()

    async def main() -> None:
        harness, persistence, gate, root, _ = await _running_child(db, models)
        persistence.held, persistence.reached = asyncio.Event(), asyncio.Event()
        controller = AbortController()
        aborted = asyncio.ensure_future(
            harness.service.followup(
                P, (TextBlock("a"),), ParentAgent(root), source=COORD, signal=controller.signal
            )
        )
        cancelled = asyncio.ensure_future(
            harness.service.followup(P, (TextBlock("b"),), ParentAgent(root), source=COORD)
        )
        await persistence.reached.wait()
        controller.abort(RuntimeError("caller gave up"))
        cancelled.cancel()
        persistence.held.set()
        message_id = await aborted  # the abort came after admission: nothing withdrawn
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        stored = await stored_ids(db, P)
        assert message_id in stored
        assert len(stored) == 3  # the prompt, "a" and the cancelled caller's "b"
        gate.open()
        await harness.close()

    run(main)


def test_dur_1_a_report_and_a_settlement_notice_are_stored_when_acknowledged(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    models = Models()

    async def main() -> None:
        working = Gate()
        models.of(P).extend([Gated(working, reply("p done"))])
        async with ReferenceHarness.open(models, db=db) as harness:
            root = await harness.create_agent("root")
            spec = ContinuableStartSpec("spawn", "w", root, (TextBlock("go"),), child_id=P)
            await harness.service.start_continuable(spec)
            await working.reached()
            child = harness.registry.get(P)
            assert child is not None
            report = await harness.service.report_from_durably(
                child, "found it", delivery=ReportDelivery.NEXT_STEP
            )
            assert report in await stored_ids(db, SessionId("root"))
            working.open()
            await harness.service.drain_continuable()  # returns once the notice is stored
            stored = await stored_ids(db, SessionId("root"))
            assert len(stored) == 2  # the report, then p's settlement notice
            assert stored[0] == report

    run(main)


def test_dur_1_a_settlement_notice_whose_commit_fails_is_logged_and_the_drain_returns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "s.db"
    models = Models()

    async def main() -> None:
        harness, persistence, *_ = await _running_child(db, models)
        persistence.failing = True
        await harness.service.drain_continuable()  # the release resolves all the same
        assert harness.service.activation_state(P) is None
        assert f"settlement notice of {P} is not durable" in caplog.text
        persistence.failing = False
        await harness.close()

    run(main)


def test_dur_3_acceptances_of_one_tick_share_one_commit(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    models = Models()

    async def main() -> None:
        children = [SessionId(f"c{n}") for n in range(20)]
        gates = {child: Gate() for child in children}
        for child in children:
            models.of(child).extend([Gated(gates[child], reply("first"))])
        harness, persistence = await held_harness(db, models)
        root = await harness.create_agent("root")
        for child in children:
            spec = ContinuableStartSpec("spawn", "w", root, (TextBlock("go"),), child_id=child)
            await harness.service.start_continuable(spec)
        for gate in gates.values():
            await gate.reached()  # every child is running, its step held
        commits: list[str] = []
        trace = lambda sql: commits.append(sql) if sql == "COMMIT" else None  # noqa: E731
        await persistence._run(lambda conn: conn.set_trace_callback(trace))
        ids = await asyncio.gather(
            *(
                harness.service.followup(c, (TextBlock("more"),), ParentAgent(root), source=COORD)
                for c in children
            )
        )
        await persistence._run(lambda conn: conn.set_trace_callback(None))
        assert len(set(ids)) == 20
        assert 1 <= len(commits) <= 3  # one batch per tick, not one per message
        for gate in gates.values():
            gate.open()
        await harness.close()

    run(main)


def test_dur_3_a_refused_or_failing_write_in_a_group_commit_fails_alone(tmp_path: Path) -> None:
    """One batch: a refused append (a gap: refused before it writes), an append whose insert
    fails midway (a trigger aborts it) and good appends around them. Only the two fail, each
    with its own typed error, and the good ones commit (the batch ran again with a savepoint
    per write)."""
    db = tmp_path / "s.db"

    def event(seq: int) -> SessionEvent:
        return SessionEvent("note", seq, float(seq), None)

    async def main() -> None:
        store = await SqlitePersistence.open(db)
        names = [SessionId(name) for name in ("a", "gap", "bad", "z")]
        for name in names:
            await store.create(SessionHeader(name, created_at=1.0), [event(0)])
        raw = sqlite3.connect(db)
        raw.execute(
            """CREATE TRIGGER refuse_bad BEFORE INSERT ON events WHEN NEW.session_id = 'bad'
            BEGIN SELECT RAISE(ABORT, 'the disk says no'); END"""
        )
        raw.commit()
        raw.close()
        outcomes = await asyncio.gather(
            store.append(names[0], [event(1)]),
            store.append(names[1], [event(5)]),
            store.append(names[2], [event(1)]),
            store.append(names[3], [event(1), event(2)]),
            return_exceptions=True,
        )
        assert outcomes[0] is None
        assert outcomes[3] is None
        gap, bad = outcomes[1], outcomes[2]
        assert isinstance(gap, SubagentError)
        assert gap.field == "events[0].seq"
        assert isinstance(bad, SubagentError)
        assert bad.code is ErrorCode.PERSISTENCE_UNAVAILABLE
        assert "the disk says no" in str(bad)
        assert [await store.revision(name) for name in names] == [2, 1, 1, 3]
        await store.close()

    run(main)


# --------------------------------------------------------------------------- the growing log


class NotifyingSqlite(SqlitePersistence):
    """SQLite persistence that signals after every append it stored."""

    written: asyncio.Event | None = None

    async def append(self, session_id: SessionId, events: Sequence[SessionEvent]) -> None:
        await super().append(session_id, events)
        if self.written is not None:
            self.written.set()


def test_dur_2_a_running_childs_log_reaches_the_store_while_it_runs(tmp_path: Path) -> None:
    """The child's model step is held: its turn and claimed prompt are stored before it ends
    (no flush was asked for), and the final flush stays a barrier."""
    db = tmp_path / "s.db"
    models = Models()

    async def main() -> None:
        gate = Gate()
        models.of(P).extend([Gated(gate, reply("done"))])
        persistence = await NotifyingSqlite.open(db)
        assert isinstance(persistence, NotifyingSqlite)
        persistence.written = asyncio.Event()
        harness = ReferenceHarness(persistence, models, write_interval=0)
        root = await harness.create_agent("root")
        spec = ContinuableStartSpec("spawn", "w", root, (TextBlock("go"),), child_id=P)
        started = await harness.service.start_continuable(spec)
        await gate.reached()
        child = harness.registry.get(P)
        assert child is not None
        target = child.session.seq  # turn/start, the claim, step/start, user/message
        while True:
            persistence.written.clear()  # before the read: a write during it is not missed
            if (await persistence.revision(P) or 0) >= target:
                break
            await persistence.written.wait()
        stored = (await persistence.inspect(P)).events
        assert [started.message_id] == [m["id"] for m in _messages(stored, "claimed")]
        assert stored[-1].type == USER_MESSAGE  # mid-step: the turn has not ended
        gate.open()
        await harness.service.drain_continuable()
        assert (await persistence.inspect(P)).events == child.session.events  # the barrier
        await harness.close()

    run(main)


def test_dur_6_message_ids_are_random_uuids_and_a_forked_process_draws_its_own() -> None:
    """Ids are cut from a pool of OS randomness (a follow-up's id costs no syscall): each is
    a version-4 UUID string, and a forked process (the crash tests' workers) never repeats
    its parent's pool, so ids stay unique across the processes sharing a store."""
    import os
    import uuid

    from dsh_subagent.adapters.continuation import _fresh_id

    ids = [_fresh_id() for _ in range(600)]  # more than one pool
    assert len(set(ids)) == len(ids)
    for each in ids:
        parsed = uuid.UUID(each)
        assert (str(parsed), parsed.version, parsed.variant) == (each, 4, uuid.RFC_4122)
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child process
        os.write(writer, _fresh_id().encode())
        os._exit(0)
    os.close(writer)
    os.waitpid(pid, 0)
    with os.fdopen(reader) as pipe:
        child = pipe.read()
    assert child != _fresh_id()
