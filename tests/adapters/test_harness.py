"""The reference harness: assembly and the host teardown order (TEAR-16)."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Coroutine, Generator
from pathlib import Path
from typing import Any

import pytest

from dsh_subagent.adapters.continuation_types import ContinuableStartSpec
from dsh_subagent.adapters.reference.harness import ReferenceHarness
from dsh_subagent.adapters.reference.session import LiveSession
from dsh_subagent.adapters.reference.sqlite_persistence import SqlitePersistence
from dsh_subagent.cli.demo import DemoModel
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.lifecycle import RunEndInfo
from dsh_subagent.core.values import AgentOptions, SessionEvent, SessionId, TextBlock


def test_tear_16_close_drains_children_before_disposing_their_parent(tmp_path: Path) -> None:
    model = DemoModel()
    order: list[str] = []

    def model_for(_session: LiveSession, _options: AgentOptions) -> DemoModel:
        return model

    async def main() -> None:
        harness = await ReferenceHarness.open(model_for, db=tmp_path / "h.db")
        harness.service.on(
            "subagent/end",
            lambda info: (
                order.append(f"end {info.start.child_id}") if isinstance(info, RunEndInfo) else None
            ),
        )
        harness.registry.disposed.subscribe(lambda agent: order.append(f"disposed {agent.id}"))
        parent = await harness.create_agent("parent")
        child = SessionId("child")
        model.hold(child)
        spec = ContinuableStartSpec("spawn", "c", parent, (TextBlock("work"),), child_id=child)
        await harness.service.start_continuable(spec)
        await model.reached[child].wait()
        await harness.close()

    asyncio.run(main())
    assert order.index("end child") < order.index("disposed parent")
    assert order.index("disposed child") < order.index("disposed parent")


class _Resumed:
    """The rest of a coroutine that ``start_eagerly`` already ran to its first suspension."""

    def __init__(self, work: Coroutine[Any, Any, None], pending: object) -> None:
        self._work = work
        self._pending = pending

    def __await__(self) -> Generator[Any, Any, None]:
        pending = self._pending
        while True:
            error: BaseException | None = None
            sent = None
            try:
                sent = yield pending
            except BaseException as exc:
                error = exc
            try:
                pending = self._work.send(sent) if error is None else self._work.throw(error)
            except StopIteration:
                return


def start_eagerly(work: Coroutine[Any, Any, None]) -> asyncio.Future[None]:
    """Run ``work`` now up to its first await, as an eager task factory (3.12+) would: the
    first step and the rest run in one context, the task's."""
    context = contextvars.copy_context()
    try:
        pending = context.run(work.send, None)
    except StopIteration:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    async def rest() -> None:
        await _Resumed(work, pending)

    return asyncio.get_running_loop().create_task(rest(), context=context)


def test_tear_13_err_7_a_drain_during_publication_refuses_the_start_as_draining(
    tmp_path: Path,
) -> None:
    """A ``subagent/start`` listener drains: the start fails DRAINING, never a transition."""
    model = DemoModel()
    drains: list[asyncio.Future[None]] = []
    ends: list[str] = []

    def model_for(_session: LiveSession, _options: AgentOptions) -> DemoModel:
        return model

    async def main() -> None:
        harness = await ReferenceHarness.open(model_for, db=tmp_path / "h.db")
        service = harness.service
        service.on(
            "subagent/start",
            lambda _info: drains.append(start_eagerly(service.drain_continuable())),
        )
        service.on(
            "subagent/end",
            lambda info: ends.append(info.start.child_id) if isinstance(info, RunEndInfo) else None,
        )
        parent = await harness.create_agent("parent")
        spec = ContinuableStartSpec(
            "spawn", "c", parent, (TextBlock("work"),), child_id=SessionId("child")
        )
        with pytest.raises(SubagentError) as raised:
            await service.start_continuable(spec)
        assert raised.value.code is ErrorCode.DRAINING
        assert len(drains) == 1
        await drains[0]
        assert ends == ["child"]
        assert harness.registry.get(SessionId("child")) is None
        await harness.close()

    asyncio.run(main())


def test_tear_13_err_7_a_selected_drain_during_publication_refuses_the_start_as_closing(
    tmp_path: Path,
) -> None:
    """A ``subagent/start`` listener drains that one child: ACTIVATION_CLOSING, not an assert."""
    model = DemoModel()
    drains: list[asyncio.Future[None]] = []

    def model_for(_session: LiveSession, _options: AgentOptions) -> DemoModel:
        return model

    async def main() -> None:
        harness = await ReferenceHarness.open(model_for, db=tmp_path / "h.db")
        service = harness.service
        parent = await harness.create_agent("parent")
        service.on(
            "subagent/start",
            lambda _info: drains.append(
                start_eagerly(service.drain_continuable_children(parent, [SessionId("child")]))
            ),
        )
        spec = ContinuableStartSpec(
            "spawn", "c", parent, (TextBlock("work"),), child_id=SessionId("child")
        )
        with pytest.raises(SubagentError) as raised:
            await service.start_continuable(spec)
        assert raised.value.code is ErrorCode.ACTIVATION_CLOSING
        assert raised.value.field == "child_id"
        await drains[0]
        assert harness.registry.get(SessionId("child")) is None
        await harness.close()

    asyncio.run(main())


def sqlite_threads() -> set[threading.Thread]:
    return {thread for thread in threading.enumerate() if thread.name.startswith("dsh-sqlite")}


def test_tear_16_issue_19_close_after_a_refused_flush_still_finishes_and_reports_once(
    tmp_path: Path,
) -> None:
    """A refused flush fails ``close`` once, after every agent and the store are closed."""
    disposed: list[str] = []

    async def main() -> None:
        before = sqlite_threads()
        harness = await ReferenceHarness.open(lambda _s, _o: DemoModel(), db=tmp_path / "h.db")
        harness.registry.disposed.subscribe(lambda agent: disposed.append(agent.id))
        parent = await harness.create_agent("parent")
        await harness.create_agent("other")
        await harness.flush(parent)
        # Another writer extends the stored log: the live session's next flush is refused.
        writer = await SqlitePersistence.open(tmp_path / "h.db")
        stored = await writer.inspect(parent.id)
        await writer.append(parent.id, [SessionEvent("note", len(stored.events), 1.0, None)])
        await writer.close()
        parent.session.append("note", "unflushed")

        with pytest.raises(SubagentError) as raised:
            await harness.close()
        error = raised.value
        assert error.code is ErrorCode.ACTIVATION_TEARDOWN_FAILED
        assert isinstance(error.cause, ExceptionGroup)
        failures = [
            (e.code, e.field) for e in error.cause.exceptions if isinstance(e, SubagentError)
        ]
        assert failures == [(ErrorCode.INVALID_ARGUMENT, "events[0].seq")]
        assert len(error.cause.exceptions) == 1
        assert sorted(disposed) == ["other", "parent"]
        assert harness.registry.get(parent.id) is None
        with pytest.raises(SubagentError) as closed:
            await harness.persistence.list()
        assert closed.value.code is ErrorCode.PERSISTENCE_UNAVAILABLE
        assert sqlite_threads() <= before
        await harness.close()  # a second close is a no-op: nothing raised, nothing disposed
        assert sorted(disposed) == ["other", "parent"]

    asyncio.run(main())


def test_tear_16_issue_19_close_survives_the_caller_being_cancelled(tmp_path: Path) -> None:
    """The teardown runs to its end even when the task awaiting ``close`` is cancelled."""

    async def main() -> None:
        harness = await ReferenceHarness.open(lambda _s, _o: DemoModel(), db=tmp_path / "h.db")
        await harness.create_agent("parent")
        closing = asyncio.ensure_future(harness.close())
        harness.registry.disposed.subscribe(lambda _agent: closing.cancel())  # mid-teardown
        with pytest.raises(asyncio.CancelledError):
            await closing
        await harness.close()  # waits for the same teardown
        assert harness.registry.get(SessionId("parent")) is None
        with pytest.raises(SubagentError) as closed:
            await harness.persistence.list()
        assert closed.value.code is ErrorCode.PERSISTENCE_UNAVAILABLE

    asyncio.run(main())
