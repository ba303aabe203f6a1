"""Accepted means durable (DESIGN decision 5, issue 19): through the public API on SQLite.

Each test works on a ``ReferenceHarness`` over a SQLite file and, where it matters, opens a
second harness on the same file, as a restarted process would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from dsh_subagent.adapters.continuation_types import ContinuableStartSpec
from dsh_subagent.adapters.protocols import ModelRequest, ModelStep, Session
from dsh_subagent.adapters.reference.harness import ReferenceHarness
from dsh_subagent.adapters.reference.scripted_model import Gate, Gated, ScriptedModel, reply
from dsh_subagent.adapters.reference.sqlite_persistence import SqlitePersistence
from dsh_subagent.core.values import (
    INBOX_SPLICED,
    USER_MESSAGE,
    AgentOptions,
    CoordinatorSource,
    JsonValue,
    SessionEvent,
    SessionId,
    TextBlock,
)

P, G = SessionId("p"), SessionId("g")


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


def test_dur_4_a_notice_discarded_by_the_parents_disposal_stays_discarded_after_restart(
    tmp_path: Path,
) -> None:
    """The drain settles ``g`` first: its notice enters ``p``'s inbox after ``p`` was
    cancelled, and ``p``'s disposal discards it. After a restart, a cold resume of ``p``
    does not claim it (seed 000: the disposal durably cancels an unclaimed notice)."""
    db = tmp_path / "s.db"
    models = Models()

    async def main() -> None:
        working, deep = Gate(), Gate()
        models.of(P).extend([Gated(working, reply("p done"))])
        models.of(G).extend([Gated(deep, reply("g done"))])
        async with ReferenceHarness.open(models, db=db) as harness:
            root = await harness.create_agent("root")
            spec = ContinuableStartSpec("spawn", "w", root, (TextBlock("go"),), child_id=P)
            await harness.service.start_continuable(spec)
            await working.reached()
            parent = harness.registry.get(P)
            assert parent is not None
            spec = ContinuableStartSpec("spawn", "w", parent, (TextBlock("dig"),), child_id=G)
            await harness.service.start_continuable(spec)
            await deep.reached()
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
