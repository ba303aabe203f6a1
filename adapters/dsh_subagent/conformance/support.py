"""The conformance suite's support: harness factories, the model hook, and a loop runner.

Theory of operation
-------------------
1. A harness under test is a ``HarnessFactory``: an async callable taking the suite's model
   hook (``model_for(session, options) -> Model``) and an optional store address (a SQLite
   path or a ``postgresql://`` address, as ``ReferenceHarness.open`` takes), and returning
   an opened ``HarnessUnderTest`` whose agents answer from that hook. That protocol is all the
   suite touches: a ``SubagentService`` wired to the harness, its ``AgentRegistry`` and live
   ``SessionStore`` (as the seam's protocols describe them, plus ``session/disposed`` and flush
   listeners), and
   ``create_agent`` / ``resume_agent`` / ``close``. ``ReferenceHarness`` satisfies it; a port
   that replaces the agent loop, the registry or the store satisfies it just as well.
2. The suite scripts every agent through the hook with our ``ModelStep`` vocabulary; a
   harness on another framework translates those steps (see ``adapters.pydantic_ai.bridge``).
3. ``--dsh-harness=module:factory`` selects a factory by import path; a conftest may instead
   override the ``dsh_harness`` fixture. Without either, the reference harness is checked.
4. ``ModelBook`` is the hook the suite passes: one scripted model per agent id, answering a
   plain "ok" once an agent's script is exhausted.
5. Every await of a test is bounded (``--dsh-timeout``, default ``DEFAULT_TIME_BOUND``): a
   harness that never reaches a gate or never goes idle fails with ``TimeBoundExceeded``,
   naming the awaits still pending (test line first, innermost last), instead of hanging.
   ``run`` bounds a whole test body; ``bounded`` one await on a loop the test owns.
6. Most tests need one fresh in-memory harness: ``@harness_test`` turns an async
   ``body(harness, book)`` into a pytest test taking ``dsh_harness`` that opens it, runs the
   body under ``run`` and closes it; ``parked`` puts agent ``a`` in a turn held at a gate.
"""

from __future__ import annotations

import asyncio
import importlib
import linecache
from collections.abc import Awaitable, Callable, Coroutine
from types import CoroutineType
from typing import Any, Protocol, TypeVar

from dsh_subagent.adapters.protocols import (
    Agent,
    AgentRegistry,
    Model,
    ModelRequest,
    ModelStep,
    Session,
    SessionStore,
)
from dsh_subagent.adapters.reference.harness import ReferenceHarness
from dsh_subagent.adapters.reference.scripted_model import (
    Gate,
    Gated,
    ScriptedModel,
    ScriptItem,
    reply,
)
from dsh_subagent.adapters.service import SubagentService
from dsh_subagent.adapters.signals import Subscribable, Unsubscribe
from dsh_subagent.core.errors import invalid
from dsh_subagent.core.values import AgentOptions, SessionId, UserMessage

T = TypeVar("T")
ModelFor = Callable[[Session, AgentOptions], Model]


class StoreUnderTest(SessionStore, Protocol):
    """The live session store, with ``session/disposed`` and flush listeners (HARNESS-18, -19)."""

    @property
    def disposed(self) -> Subscribable[Session]: ...

    def on_flush(self, listener: Callable[[Session], Awaitable[None] | None]) -> Unsubscribe:
        """Register a flush listener (sync or async) that ``flush`` awaits (HARNESS-19)."""
        ...


class HarnessUnderTest(Protocol):
    """What the conformance suite needs from an opened harness, and nothing more."""

    @property
    def store(self) -> StoreUnderTest: ...

    @property
    def registry(self) -> AgentRegistry: ...

    @property
    def service(self) -> SubagentService: ...

    async def create_agent(self, session_id: str) -> Agent:
        """Create and publish a top-level agent."""
        ...

    async def resume_agent(self, session_id: str) -> Agent:
        """Resume a persisted top-level agent from its log (HARNESS-17)."""
        ...

    async def close(self) -> None:
        """Drain the service, dispose every agent, close persistence."""
        ...


HarnessFactory = Callable[[ModelFor, "str | None"], Awaitable[HarnessUnderTest]]
"""``factory(model_for, db) -> opened harness`` (``db``: a SQLite path, a ``postgresql://``
address, or ``None`` for memory)."""


class _FallbackModel(ScriptedModel):
    async def step(self, request: ModelRequest) -> ModelStep:
        if not self.remaining:
            self.requests.append(request)
            return reply("ok")
        return await super().step(request)


class ModelBook:
    """The suite's model hook: a scripted model per agent id, "ok" when unscripted."""

    def __init__(self) -> None:
        self._models: dict[SessionId, _FallbackModel] = {}

    def model(self, agent: str) -> ScriptedModel:
        """The (shared, created on demand) scripted model of ``agent``."""
        return self._models.setdefault(SessionId(agent), _FallbackModel())

    def script(self, agent: str, *items: ScriptItem) -> None:
        """Append steps to ``agent``'s script."""
        self.model(agent).extend(items)

    def held(self, agent: str, step: ScriptItem, *after: ScriptItem) -> Gate:
        """Script ``agent``'s next step to wait at a new gate (returned), then ``after``."""
        gate = Gate()
        self.script(agent, Gated(gate, step), *after)
        return gate

    def __call__(self, session: Session, _options: AgentOptions) -> Model:
        return self.model(session.id)


async def reference_harness(model_for: ModelFor, db: str | None = None) -> ReferenceHarness:
    """The default factory: the reference asyncio loop."""
    return await ReferenceHarness.open(model_for, db=db)


def load_factory(path: str) -> HarnessFactory:
    """Resolve ``module:attribute`` to a harness factory; bad input raises before import."""
    module, sep, name = path.partition(":")
    if not sep or not module or not name:
        raise invalid("dsh_harness", f"expected module:factory, got {path!r}")
    factory: HarnessFactory = getattr(importlib.import_module(module), name)
    return factory


DEFAULT_TIME_BOUND = 30.0
"""Seconds one conformance test may wait before it fails (``--dsh-timeout`` overrides)."""


class TimeBoundExceeded(AssertionError):
    """A conformance await did not complete within the time bound."""


def time_bound() -> float:
    """The configured bound: ``--dsh-timeout`` when the plugin is loaded, else the default."""
    from dsh_subagent.conformance import plugin

    return plugin.time_bound or DEFAULT_TIME_BOUND


def _pending(task: asyncio.Task[Any]) -> list[str]:
    """The chain of awaits ``task`` is suspended in, outermost first, as ``file:line source``."""
    chain: list[str] = []
    awaited: object = task.get_coro()
    while isinstance(awaited, CoroutineType) and awaited.cr_frame is not None:
        frame = awaited.cr_frame
        code = frame.f_code
        source = linecache.getline(code.co_filename, frame.f_lineno).strip()
        if "/asyncio/" not in code.co_filename:
            name = code.co_filename.rsplit("/", 1)[-1]
            chain.append(f"{name}:{frame.f_lineno} in {code.co_qualname}: {source}")
        awaited = awaited.cr_await
    return chain


async def _bounded(awaitable: Awaitable[T], seconds: float) -> T:
    task = asyncio.ensure_future(awaitable)
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if done:
        return task.result()
    chain = _pending(task)
    task.cancel()
    await asyncio.wait({task}, timeout=1.0)  # let it unwind; a harness may swallow cancels
    never = chain[-1] if chain else "the test body"
    raise TimeBoundExceeded(
        f"not reached within {seconds:g}s (--dsh-timeout): {never}"
        + "".join(f"\n  awaiting {step}" for step in chain)
    )


def run(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run one test body on a fresh event loop, failing it after ``time_bound()`` seconds."""
    return asyncio.run(_bounded(main(), time_bound()))


def bounded(loop: asyncio.AbstractEventLoop, awaitable: Awaitable[T]) -> T:
    """Run one await to completion on ``loop`` (a loop the test owns), within the bound."""
    return loop.run_until_complete(_bounded(awaitable, time_bound()))


def harness_test(
    body: Callable[[HarnessUnderTest, ModelBook], Coroutine[Any, Any, None]],
) -> Callable[[HarnessFactory], None]:
    """A test taking ``dsh_harness``: ``body(harness, book)`` on a fresh in-memory harness
    answering from ``book``, under ``run``'s bound; the harness closes after the body."""

    def test(dsh_harness: HarnessFactory) -> None:
        async def main() -> None:
            book = ModelBook()
            harness = await dsh_harness(book, None)
            await body(harness, book)
            await harness.close()

        run(main)

    test.__name__ = test.__qualname__ = body.__name__
    test.__module__, test.__doc__ = body.__module__, body.__doc__
    return test


async def parked(
    harness: HarnessUnderTest, book: ModelBook, first: UserMessage, *after: ScriptItem
) -> tuple[Agent, Gate]:
    """Agent ``a`` in its first turn on ``first``, its model step held at the returned gate
    (opened, it answers "never"; ``after`` is scripted next)."""
    gate = book.held("a", reply("never"), *after)
    agent = await harness.create_agent("a")
    agent.followup(first)
    await gate.reached()
    return agent, gate


__all__ = [
    "DEFAULT_TIME_BOUND",
    "HarnessFactory",
    "HarnessUnderTest",
    "ModelBook",
    "ModelFor",
    "StoreUnderTest",
    "TimeBoundExceeded",
    "bounded",
    "harness_test",
    "load_factory",
    "parked",
    "reference_harness",
    "run",
    "time_bound",
]
