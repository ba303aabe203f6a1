"""One Activation per child across real OS processes on one store (LEASE-1..6): a SQLite
file, or a PostgreSQL database.

Each worker is a Python process with its own harness over the same store. Workers report
``ready``, then wait on their stdin: the test releases them together (the barrier). A worker
whose follow-up or start is accepted holds its Activation (a gated model) until the test has
every outcome, so the others meet a held lease, deterministically; then every worker lets
its child finish, drains and closes. The store is read afterwards by this process.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import TypeVar

import pytest

from dsh_subagent.adapters.protocols import InboxNotification
from dsh_subagent.adapters.reference.harness import open_persistence
from dsh_subagent.adapters.reference.persistence import open_turn
from dsh_subagent.adapters.reference.sqlite_persistence import SqlitePersistence
from dsh_subagent.core import wire
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import (
    USER_MESSAGE,
    CoordinatorSource,
    MessageId,
    SessionEvent,
    SessionId,
    text_of,
)
from tests.adapters.continuation_harness import Harness, run, text

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = ["sqlite", "postgres"]
CHILD = SessionId("c")
T = TypeVar("T")

WORKER = """
import asyncio, sys
sys.path.insert(0, {root!r})
from tests.adapters.continuation_harness import Harness, text
from dsh_subagent.adapters.reference.scripted_model import Gate, Gated, reply
from dsh_subagent.adapters.reference.harness import open_persistence
from dsh_subagent.core.errors import SubagentError
from dsh_subagent.core.values import CoordinatorSource, SessionId

async def main():
    mode, name = sys.argv[1], sys.argv[2]
    loop = asyncio.get_running_loop()
    db = await open_persistence({path!r})
    h = Harness(db, ids=name)
    gate = Gate()
    h.script("c", Gated(gate, reply("done " + name)))
    if mode == "hold":
        await db.acquire(SessionId("c"))
    root = await h.root("root-" + name) if mode == "start" else None
    print("ready", flush=True)
    await loop.run_in_executor(None, sys.stdin.readline)  # the barrier
    try:
        outcome = "accepted"
        if mode in ("followup", "live", "logs"):
            grant = h.manager.user_authority()
            source = CoordinatorSource(SessionId("root"))
            for index in (1, 2):  # one sender's order
                message = text(f"{{name}}-{{index}}")
                await h.manager.followup(SessionId("c"), message, grant, source=source)
            live = h.manager.activation_state(SessionId("c")) is not None
            outcome = "live" if live else "posted"
        elif mode == "start":
            await h.manager.start_continuable(h.spec(root, name, child_id="c"))
    except SubagentError as error:
        outcome = error.code.value
    print(outcome, flush=True)
    if mode == "logs":  # deliver the mailbox to the held child and store its log; await SIGKILL
        await loop.run_in_executor(None, sys.stdin.readline)
        h.manager._mailbox.notice(SessionId("c"))
        await h.manager.settled()
        child = h.agents.get(SessionId("c"))
        await h.store.flush(child.session)
        print(",".join(child.pending()), flush=True)
    await loop.run_in_executor(None, sys.stdin.readline)  # every outcome is in
    gate.open()
    h.manager._mailbox.notice(SessionId("c"))  # one more delivery pass, then quiet
    await h.quiet()
    await h.manager.drain()
    await db.close()
    print("closed", flush=True)

asyncio.run(main())
"""


@pytest.fixture(params=BACKENDS)
def where(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The store the workers share: a SQLite file, or a PostgreSQL database."""
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_db"))
    return str(tmp_path / "sessions.db")


def _spawn(path: str, mode: str, name: str) -> subprocess.Popen[str]:
    script = WORKER.format(root=str(ROOT), path=path)
    return subprocess.Popen(
        [sys.executable, "-c", script, mode, name],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _line(worker: subprocess.Popen[str]) -> str:
    assert worker.stdout is not None
    return worker.stdout.readline().strip()


def _send(worker: subprocess.Popen[str]) -> None:
    assert worker.stdin is not None
    worker.stdin.write("\n")
    worker.stdin.flush()


def _race(path: str, mode: str, names: Sequence[str]) -> dict[str, str]:
    """Line the workers up, release them together, collect outcomes, let them finish."""
    workers = {name: _spawn(path, mode, name) for name in names}
    try:
        assert [_line(w) for w in workers.values()] == ["ready"] * len(workers)
        for worker in workers.values():
            _send(worker)
        outcomes = {name: _line(worker) for name, worker in workers.items()}
        for worker in workers.values():
            _send(worker)
        for worker in workers.values():
            assert _line(worker) == "closed"
            assert worker.wait(timeout=60) == 0
        return outcomes
    finally:
        for worker in workers.values():
            if worker.poll() is None:
                worker.kill()
                worker.wait()


def _user_texts(events: Sequence[SessionEvent]) -> list[str]:
    texts = []
    for event in events:
        if event.type == USER_MESSAGE:
            data = event.data
            assert isinstance(data, dict)
            texts.append(text_of(wire.decode_message(data["message"], "message").content[:1]))
    return texts


def _cold_child(path: str) -> None:
    """A store holding the root and a settled, released child ``c`` (its lease released)."""

    async def main() -> None:
        db = await open_persistence(path)
        h = Harness(db)
        root = await h.root()
        await h.start(root, "c", "first")
        await h.quiet()
        await h.manager.drain()
        await h.store.flush(root.session)
        await db.close()

    run(main)


async def _record(path: str) -> tuple[list[str], int]:
    db = await open_persistence(path)
    try:
        record = await db.inspect(CHILD)
        assert open_turn(CHILD, record.events) is None  # balanced
        lease = await db.acquire(CHILD)  # released: free now, at the next epoch
        return _user_texts(record.events), lease.epoch
    finally:
        await db.close()


async def _final(path: str, sender: str) -> tuple[list[str], list[str]]:
    """Follow the child up once more from this process (a cold resume that delivers what is
    still pending, then its own message); return its user texts and the mailbox's ids."""
    db = await open_persistence(path)
    try:
        h = Harness(db, ids="final")
        grant = h.manager.user_authority()
        source = CoordinatorSource(SessionId("root"))
        await h.manager.followup(CHILD, text(sender), grant, source=source)
        await h.quiet()
        await h.manager.drain()
        record = await db.inspect(CHILD)
        assert open_turn(CHILD, record.events) is None  # balanced
        return _user_texts(record.events), [m.id for m in await db.mailbox(CHILD)]
    finally:
        await db.close()


@pytest.mark.parametrize("count", [2, 4])
def test_lease_1_lease_2_concurrent_cold_followups_get_one_activation(
    where: str, count: int
) -> None:
    """DUR-20, DUR-22, DUR-24: one Activation; the others' follow-ups go to the mailbox."""
    path = where
    _cold_child(path)
    names = [f"w{index}" for index in range(count)]
    outcomes = _race(path, "followup", names)
    assert sorted(outcomes.values()) == ["live"] + ["posted"] * (count - 1), outcomes
    texts, _pending = run_value(_final(path, "last"))
    expected = {f"{name}-{index}" for name in names for index in (1, 2)}
    assert texts[0] == "first"
    assert texts[-1] == "last"
    assert sorted(texts[1:-1]) == sorted(expected)  # every accepted follow-up exactly once
    for name in names:  # in acceptance order per sender
        assert texts.index(f"{name}-1") < texts.index(f"{name}-2")


def test_dur_23_a_killed_holder_s_pending_mail_is_delivered_by_the_next_taker(
    where: str,
) -> None:
    path = where
    _cold_child(path)
    holder = _spawn(path, "live", "h")
    try:
        assert _line(holder) == "ready"
        _send(holder)
        assert _line(holder) == "live"

        async def post() -> None:
            db = await open_persistence(path)
            try:
                h = Harness(db, ids="poster")
                grant = h.manager.user_authority()
                source = CoordinatorSource(SessionId("root"))
                for index in range(3):
                    await h.manager.followup(CHILD, text(f"p{index}"), grant, source=source)
                assert h.manager.activation_state(CHILD) is None  # accepted, posted
            finally:
                await db.close()

        run_value(post())
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    texts, _pending = run_value(_final(path, "last"))
    assert [t for t in texts if t.startswith("p") or t == "last"] == ["p0", "p1", "p2", "last"]
    assert texts.count("h-1") <= 1


def test_dur_26_a_killed_holder_s_mail_is_delivered_without_a_followup(tmp_path: Path) -> None:
    """A live harness watching the store takes over a child whose holder was SIGKILLed
    with mail pending, and delivers it: nobody follows the child up."""
    path = str(tmp_path / "sessions.db")
    _cold_child(path)
    holder = _spawn(path, "live", "h")

    async def main() -> list[str]:
        db = await SqlitePersistence.open(path, mailbox_poll=0.01)
        watcher = Harness(db, ids="watcher")
        delivered = asyncio.Event()
        seen: list[str] = []

        def created(agent: object) -> None:
            if getattr(agent, "id", None) == CHILD:
                # Claimed, not inserted: mail the holder logged before the kill comes back
                # pending in the restored inbox, with no insert notification.
                agent.claimed.subscribe(claimed)  # type: ignore[attr-defined]

        def claimed(note: InboxNotification) -> None:
            seen.append(text_of(note.message.content[:1]))
            if len([t for t in seen if t.startswith("p")]) == 3:
                delivered.set()

        watcher.agents.created.subscribe(created)
        try:
            assert _line(holder) == "ready"
            _send(holder)
            assert _line(holder) == "live"
            poster = Harness(db, ids="poster")
            grant = poster.manager.user_authority()
            source = CoordinatorSource(SessionId("root"))
            for index in range(3):
                await poster.manager.followup(CHILD, text(f"p{index}"), grant, source=source)
            watcher.manager.watch_mailbox()
            holder.send_signal(signal.SIGKILL)
            holder.wait()
            await asyncio.wait_for(delivered.wait(), 120)  # a bound, not a synchronisation
            await watcher.quiet()
            await watcher.manager.drain()
            record = await db.inspect(CHILD)
            assert open_turn(CHILD, record.events) is None
            return _user_texts(record.events)
        finally:
            await db.close()

    try:
        texts = run_value(main())
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert [t for t in texts if t.startswith("p")] == ["p0", "p1", "p2"]


@pytest.mark.parametrize("logged", [3, 1])
def test_dur_26_mail_a_killed_holder_logged_unclaimed_is_run_by_the_taker(
    tmp_path: Path, logged: int
) -> None:
    """The holder read ``logged`` of three posted follow-ups, spliced them into its child's
    inbox and stored that log, then was SIGKILLed before its child claimed any. A logged
    row is not new to a taker (it prunes it), yet the watching harness must take the child
    over and run it: restored as pending (no ``inserted`` for it), then claimed. Probes are
    driven by hand (the poll interval is an hour), so this order is fixed."""
    path = str(tmp_path / "sessions.db")
    _cold_child(path)
    holder = _spawn(path, "logs", "h")

    async def main() -> tuple[list[str], list[str], list[MessageId]]:
        db = await SqlitePersistence.open(path, mailbox_poll=3600)
        watcher = Harness(db, ids="watcher")
        claimed: list[str] = []

        def created(agent: object) -> None:
            if getattr(agent, "id", None) == CHILD:
                agent.claimed.subscribe(  # type: ignore[attr-defined]
                    lambda note: claimed.append(text_of(note.message.content[:1]))
                )

        watcher.agents.created.subscribe(created)
        grant = watcher.manager.user_authority()
        source = CoordinatorSource(SessionId("root"))

        async def post(index: int) -> MessageId:
            return await watcher.manager.followup(CHILD, text(f"p{index}"), grant, source=source)

        try:
            assert _line(holder) == "ready"
            _send(holder)
            assert _line(holder) == "live"
            ids = [await post(index) for index in range(logged)]
            _send(holder)  # deliver and store
            assert set(ids) <= set(_line(holder).split(","))  # pending in the stored log
            ids += [await post(index) for index in range(logged, 3)]
            assert watcher.manager.activation_state(CHILD) is None  # posted, held elsewhere
            holder.send_signal(signal.SIGKILL)
            holder.wait()
            watcher.manager.watch_mailbox()
            assert await db.probe_mailbox() == [CHILD]  # an orphan: its holder is gone
            await watcher.quiet()
            await watcher.manager.drain()
            record = await db.inspect(CHILD)
            assert open_turn(CHILD, record.events) is None
            left = [m.id for m in await db.mailbox(CHILD)]
            return _user_texts(record.events), claimed, left
        finally:
            await db.close()

    try:
        texts, claimed, left = run_value(main())
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert [t for t in texts if t.startswith("p")] == ["p0", "p1", "p2"]  # each claimed once
    assert [t for t in claimed if t.startswith("p")] == ["p0", "p1", "p2"]  # by the taker
    assert left == []  # pruned by the taker, or removed by its release


def test_lease_4_two_processes_starting_one_new_id_one_is_duplicate(where: str) -> None:
    path = where
    outcomes = _race(path, "start", ["a", "b"])
    assert sorted(outcomes.values()) == sorted(["accepted", ErrorCode.DUPLICATE_CHILD.value])
    (winner,) = [name for name, outcome in outcomes.items() if outcome == "accepted"]

    async def check() -> None:
        db = await open_persistence(path)
        try:
            record = await db.inspect(CHILD)
            assert record.header.parent_session == f"root-{winner}"
            assert open_turn(CHILD, record.events) is None
            assert _user_texts(record.events) == [winner]
            with pytest.raises(SubagentError) as caught:
                await db.reserve(CHILD)
            assert caught.value.code is ErrorCode.DUPLICATE_CHILD
        finally:
            await db.close()

    run_value(check())


def test_lease_5_a_killed_holder_on_this_host_is_taken_over_at_once(where: str) -> None:
    path = where
    _cold_child(path)
    holder = _spawn(path, "hold", "h")
    try:
        assert _line(holder) == "ready"

        async def refused() -> None:
            db = await open_persistence(path)
            try:
                with pytest.raises(SubagentError) as caught:
                    await db.acquire(CHILD)
                assert caught.value.code is ErrorCode.ACTIVATION_HELD
            finally:
                await db.close()

        run_value(refused())
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    _texts, epoch = run_value(_record(path))  # no expiry waited for: the pid is gone
    assert epoch == 3


def run_value(coro: Coroutine[object, object, T]) -> T:
    return asyncio.run(coro)
