"""Many workers on one PostgreSQL store, one of them SIGKILLed mid-run (PG-3, PG-4, PG-6, PG-7).

Four worker processes, each its own harness with its own lease owner and its own host name
(as if on four machines, so a dead holder is known only by its lease's expiry), share one
database. Eight continuable children are spread over them (each worker follows its own two
up first and so holds them); then every worker follows up every child. Worker ``w0``'s
children are held by a gated model, and ``w0`` is killed after its first follow-ups of that
phase were accepted. The survivors' orphan sweep takes its children over once their leases
expire (the test waits for those grants in the audit, not for a time). Afterwards this
process checks, from the store alone: every follow-up whose acceptance a worker reported is
in its child's log exactly once, and no two Activations of a child overlapped: the lease
epochs of a child's stored events never go back, and each grant follows either the release
of the epoch before it or, for a holder that stopped renewing, at least a lease lifetime
after that epoch's grant.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import psycopg

from dsh_subagent.adapters.reference.persistence import open_turn
from dsh_subagent.adapters.reference.postgres_persistence import PostgresPersistence
from dsh_subagent.core import wire
from dsh_subagent.core.values import USER_MESSAGE, CoordinatorSource, SessionId, text_of
from tests.adapters.continuation_harness import Harness, text

ROOT = Path(__file__).resolve().parents[2]
WORKERS = [f"w{index}" for index in range(4)]
CHILDREN = [f"c{index}" for index in range(8)]
TTL = 2.0
ROUNDS = 2

WORKER = """
import asyncio, sys
sys.path.insert(0, {root!r})
from tests.adapters.continuation_harness import Harness, text
from dsh_subagent.adapters.reference.postgres_persistence import PostgresPersistence
from dsh_subagent.adapters.reference.scripted_model import Gate, Gated, reply
from dsh_subagent.core.values import CoordinatorSource, SessionId

async def main():
    name, own = sys.argv[1], sys.argv[2].split(",")
    children = {children!r}
    loop = asyncio.get_running_loop()
    db = await PostgresPersistence.open({address!r}, host="host-" + name, lease_ttl={ttl!r})
    h = Harness(db, ids=name)
    gate = Gate()
    if name == "w0":
        for child in own:
            h.script(child, Gated(gate, reply("held")))
    grant = h.manager.user_authority()
    source = CoordinatorSource(SessionId("root"))

    async def followup(child, body):
        try:
            await h.manager.followup(SessionId(child), text(body), grant, source=source)
            print("accepted", child, body, flush=True)
        except SubagentError as error:
            print("refused", child, body, error.code.value, flush=True)

    async def barrier():
        await loop.run_in_executor(None, sys.stdin.readline)

    print("ready", flush=True)
    await barrier()
    for child in own:
        await followup(child, name + "-own")
    print("holding", flush=True)
    await barrier()
    for round in range({rounds!r}):
        for child in children:
            await followup(child, name + "-" + str(round))
    print("sent", flush=True)
    await barrier()
    gate.open()
    await h.quiet()
    await h.manager.drain()
    await db.close()
    print("closed", flush=True)

asyncio.run(main())
"""


class Worker:
    def __init__(self, address: str, name: str, own: Sequence[str]) -> None:
        script = WORKER.format(
            root=str(ROOT), address=address, ttl=TTL, rounds=ROUNDS, children=CHILDREN
        )
        self.name = name
        self.accepted: list[tuple[str, str]] = []
        self.process = subprocess.Popen(
            [sys.executable, "-c", script, name, ",".join(own)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def until(self, marker: str, *, accepted: int | None = None) -> None:
        """Read lines until ``marker`` (or until ``accepted`` more follow-ups were accepted)."""
        assert self.process.stdout is not None
        goal = None if accepted is None else len(self.accepted) + accepted
        while True:
            line = self.process.stdout.readline().split()
            assert line, f"{self.name} ended early"
            if line[0] == "accepted":
                self.accepted.append((line[1], line[2]))
                if goal is not None and len(self.accepted) == goal:
                    return
            elif line[0] == marker:
                return

    def go(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("\n")
        self.process.stdin.flush()


def _seed(address: str) -> None:
    """The root and eight settled, released continuable children."""

    async def main() -> None:
        db = await PostgresPersistence.open(address)
        h = Harness(db, ids="seed")
        root = await h.root()
        for child in CHILDREN:
            await h.start(root, child, "first")
        await h.quiet()
        await h.manager.drain()
        await h.store.flush(root.session)
        await db.close()

    asyncio.run(main())


def _query(address: str, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(address) as conn:
        return conn.execute(sql.encode()).fetchall()


def _taken_over(address: str, dead_owner: str, children: Sequence[str]) -> bool:
    """Whether every child below has a grant after the dead owner's last one."""
    rows = _query(
        address,
        f"""SELECT session_id FROM lease_audit a WHERE action = 'grant'
        AND epoch > (SELECT MAX(epoch) FROM lease_audit b WHERE b.session_id = a.session_id
        AND b.owner = '{dead_owner}')""",
    )
    return {str(row[0]) for row in rows} >= set(children)


async def _final_texts(address: str) -> dict[str, list[str]]:
    """Follow every child up once more from here (a cold resume delivers what is still
    pending), then read each child's user texts; every log must be balanced."""
    db = await PostgresPersistence.open(address, host="host-check", lease_ttl=TTL)
    try:
        h = Harness(db, ids="check")
        grant = h.manager.user_authority()
        source = CoordinatorSource(SessionId("root"))
        for child in CHILDREN:
            await h.manager.followup(SessionId(child), text("final"), grant, source=source)
        await h.quiet()
        await h.manager.drain()
        texts: dict[str, list[str]] = {}
        for child in CHILDREN:
            record = await db.inspect(SessionId(child))
            assert open_turn(child, record.events) is None  # balanced
            texts[child] = [
                text_of(wire.decode_message(e.data["message"], "m").content[:1])  # type: ignore[index,call-overload]
                for e in record.events
                if e.type == USER_MESSAGE
            ]
            assert [m.id for m in await db.mailbox(SessionId(child))] == []
        return texts
    finally:
        await db.close()


def _check_epochs(address: str) -> None:
    """No two Activations of one child at once, from the store's own records."""
    for (child,) in _query(address, "SELECT DISTINCT session_id FROM lease_audit"):
        events = _query(
            address,
            f"SELECT epoch FROM events WHERE session_id = '{child}' "
            "AND epoch IS NOT NULL ORDER BY seq",
        )
        written = [int(str(row[0])) for row in events]
        assert written == sorted(written), f"{child}: two Activations' writes interleave"
        audit = _query(
            address,
            f"SELECT epoch, owner, action, at FROM lease_audit WHERE session_id = '{child}' "
            "ORDER BY id",
        )
        grants = [(int(str(e)), str(o), float(str(t))) for e, o, a, t in audit if a == "grant"]
        assert [epoch for epoch, _, _ in grants] == list(range(1, len(grants) + 1)), child
        assert set(written) <= {epoch for epoch, _, _ in grants}
        released = set()
        for epoch, _owner, action, _at in audit:
            if action == "release":
                released.add(int(str(epoch)))
                continue
            previous = [g for g in grants if g[0] == int(str(epoch)) - 1]
            if previous and previous[0][0] not in released:
                taker_at = next(g[2] for g in grants if g[0] == int(str(epoch)))
                assert taker_at >= previous[0][2] + TTL * 1000, f"{child}: epoch {epoch} overlaps"


def test_pg_3_pg_6_four_workers_one_killed_lose_nothing_and_never_overlap(
    postgres_db: str,
) -> None:
    _seed(postgres_db)
    own = {name: CHILDREN[2 * index : 2 * index + 2] for index, name in enumerate(WORKERS)}
    workers = {name: Worker(postgres_db, name, own[name]) for name in WORKERS}
    try:
        for worker in workers.values():
            worker.until("ready")
        for worker in workers.values():
            worker.go()
        for worker in workers.values():
            worker.until("holding")
        (dead_owner,) = _query(
            postgres_db, "SELECT owner FROM leases WHERE session_id = 'c0' AND owner IS NOT NULL"
        )
        for worker in workers.values():
            worker.go()
        victim = workers["w0"]
        victim.until("", accepted=3)  # mid-run: some of its follow-ups accepted, not all
        victim.process.send_signal(signal.SIGKILL)
        victim.process.wait()
        survivors = [w for name, w in workers.items() if name != "w0"]
        for worker in survivors:
            worker.until("sent")
        deadline = 60 / 0.2
        while not _taken_over(postgres_db, str(dead_owner[0]), own["w0"]):  # the sweep's grants
            deadline -= 1
            assert deadline > 0, "the dead worker's children were never taken over"
            time.sleep(0.2)  # a poll for the leases' expiry, the behaviour under test
        for worker in survivors:
            worker.go()
        for worker in survivors:
            worker.until("closed")
            assert worker.process.wait(timeout=60) == 0
    finally:
        for worker in workers.values():
            if worker.process.poll() is None:
                worker.process.kill()
                worker.process.wait()
    texts = asyncio.run(_final_texts(postgres_db))
    for worker in workers.values():
        for child, body in worker.accepted:
            assert texts[child].count(body) == 1, (child, body, texts[child])
    for child, logged in texts.items():
        counts = Counter(logged)
        assert all(n == 1 for body, n in counts.items() if body != "first"), (child, counts)
    _check_epochs(postgres_db)
