"""The provider contract, the start requests, and the run base every shipped provider uses.

Theory of operation
-------------------
1. A provider (REG-2) has a unique ``name``, start-time ``capabilities`` (CAP-1), a descriptive
   ``inherits_parent_context`` (REG-10) and ``async start(ResolvedStartRequest) -> SubagentRun``.
   It may also have ``async prepare_continuable(ContinuableCreateRequest) ->
   ContinuableCreateSpec``; the method's presence is the continuable capability (CAP-5), and
   the spec is data only: an optional balanced seed (CAP-7).
2. ``StartRequest`` is the caller's one-shot request: the core ``SubagentIntent`` both kinds
   of start carry, the one-shot's label and output schema, the live ``parent`` agent and the
   required ``signal`` (ONE-1). The service resolves it into a ``ResolvedStartRequest``: the
   validated core request (the same intent, its ``ParentRef`` derived from the parent), the
   descriptor snapshot (ONE-3) and the service-minted lifecycle run id (EVT-3). The caller's
   request is never mutated (REG-8).
3. ``DrivenRun`` is the run handle of the shipped providers. It owns one core one-shot machine
   (``core.oneshot``) and carries out its run effects: ``RollBack`` aborts the unpublished
   setup, ``CancelRemainingWork`` cancels the child, ``ResolveResult``/``RejectResult`` settle
   ``result``, ``AwaitQuiescence`` releases the child, ``CompleteDispose`` settles the memoized
   dispose; any other effect is a bug (``assert_never``). The run's ``subagent/start`` /
   ``subagent/end`` pair is the service's: its observer (``core.oneshot_observer``) sees the
   published run and its result.
4. Each run owns its state, signal listener and cancellation path, so concurrent siblings never
   settle or release one another (REG-9).
5. A run is an async context manager: ``async with run:`` disposes it on exit, however the
   block ends. ``DisposeOnExit`` gives any run class that behaviour from its ``dispose``.
6. A provider that meters its children against a tree budget declares ``meters_budgets =
   True`` (``can_meter_budgets``); the service refuses a budgeted start through any other
   provider before anything is created (BUDGET-12). Such a provider closes the request's
   ``budget`` when its run's result settles (``DrivenRun`` does, in the span that settles
   it) and the service closes it when the start fails.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from typing import Final, Protocol, Self, assert_never, runtime_checkable

import attrs

from dsh_subagent.adapters.budgets import ChildBudget
from dsh_subagent.adapters.protocols import Agent
from dsh_subagent.adapters.signals import AbortController, AbortSignal
from dsh_subagent.core import oneshot
from dsh_subagent.core.budget import Budget
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import (
    EventId,
    JsonObject,
    OneShotDescriptor,
    RunId,
    SessionEvent,
    SessionId,
    SubagentCapabilities,
    SubagentIntent,
    SubagentResult,
    SubagentStartRequest,
    as_intent,
)

ABORTED_BEFORE_PUBLICATION: Final = "subagent request was aborted before child publication"


def aborted_before_publication() -> SubagentError:
    """The rejection of a start whose signal aborted before the child was published."""
    return SubagentError(ErrorCode.CANCELLED, ABORTED_BEFORE_PUBLICATION, field="request.signal")


@attrs.frozen
class StartRequest:
    """A one-shot start request: the intent, the live parent and the cancellation signal,
    plus the one-shot's own label and output schema (ONE-1).

    ``intent`` is a ``SubagentIntent``, or a bare prompt (content blocks or a plain string)
    for an intent that asks nothing else.
    """

    intent: SubagentIntent = attrs.field(converter=as_intent)
    parent: Agent = attrs.field(eq=False)
    signal: AbortSignal = attrs.field(eq=False)
    label: str | None = None
    output_schema: JsonObject | None = None
    budget: Budget | None = None
    """The child's caps, carved out of the parent's remaining budget (BUDGET-12)."""


@attrs.frozen
class ResolvedStartRequest:
    """What ``provider.start`` receives: the validated request plus what the service resolved.

    ``budget`` is the child's carved budget node when it or its parent is budgeted: an
    in-process provider attaches the child agent to it in its unpublished window and closes
    it when the run's result settles (rule 6)."""

    request: SubagentStartRequest
    parent: Agent = attrs.field(eq=False)
    signal: AbortSignal = attrs.field(eq=False)
    descriptor: OneShotDescriptor
    run_id: RunId
    budget: ChildBudget | None = attrs.field(default=None, eq=False)


@attrs.frozen
class ContinuableCreateRequest:
    """What ``prepare_continuable`` receives (CAP-7)."""

    session_id: SessionId
    parent: Agent = attrs.field(eq=False)
    signal: AbortSignal = attrs.field(eq=False)


@attrs.frozen
class ContinuableCreateSpec:
    """Data only: an optional seed, a balanced prefix of the parent's log (CAP-7)."""

    seed: tuple[SessionEvent, ...] | None = None


class SubagentRun(AbstractAsyncContextManager["SubagentRun", None], Protocol):
    """One published one-shot delegation (ONE-4 .. ONE-9); ``async with run:`` disposes it
    on exit, however the block ended (rule 5)."""

    @property
    def id(self) -> str:
        """The child session id (local) or a parent-scoped minted id (remote)."""
        ...

    @property
    def local_agent(self) -> Agent | None:
        """The exact child agent of a local run, ``None`` for a remote one."""
        ...

    @property
    def result(self) -> asyncio.Future[SubagentResult]:
        """Resolves with any stop reason; rejects only on an infrastructure fault (ONE-8)."""
        ...

    def dispose(self) -> Awaitable[None]:
        """Idempotent: cancel, then wait for result settlement and quiescence (ONE-9)."""
        ...


class DisposeOnExit:
    """``async with run:`` for a run class with ``dispose()``: disposes on exit (rule 5)."""

    def dispose(self) -> Awaitable[None]:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.dispose()


class SubagentProvider(Protocol):
    """A named way to run a one-shot child (REG-2)."""

    @property
    def name(self) -> str: ...

    @property
    def capabilities(self) -> SubagentCapabilities: ...

    @property
    def inherits_parent_context(self) -> bool: ...

    async def start(self, request: ResolvedStartRequest) -> SubagentRun:
        """Publish the child, then fulfil; roll back and reject on any failure before (ONE-4)."""
        ...


@runtime_checkable
class ContinuableProvider(Protocol):
    """A provider that can also prepare continuable children (CAP-5)."""

    async def prepare_continuable(
        self, request: ContinuableCreateRequest
    ) -> ContinuableCreateSpec: ...


def can_prepare_continuable(provider: object) -> bool:
    """The continuable capability: a ``prepare_continuable`` method is present (CAP-5)."""
    return callable(getattr(provider, "prepare_continuable", None))


def can_meter_budgets(provider: object) -> bool:
    """Whether ``provider`` meters its children's model requests against a tree budget: it
    declares ``meters_budgets = True`` (the in-process providers, whose children are the
    seam's own agents). Any other provider's start cannot be budgeted (BUDGET-12)."""
    return getattr(provider, "meters_budgets", False) is True


def render_error(error: BaseException) -> str:
    """A one-line rendering of ``error`` that never raises."""
    try:
        return f"{type(error).__name__}: {error}"
    except Exception:
        return f"{type(error).__name__}: <unrenderable>"


class EventIds:
    """The event ids of one run's machine: ``{prefix}1``, ``{prefix}2``, ... (two slots)."""

    __slots__ = ("_count", "_prefix")

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._count = 0

    def next(self) -> EventId:
        self._count += 1
        return EventId(f"{self._prefix}{self._count}")


class DrivenRun(DisposeOnExit, abc.ABC):
    """A run handle that carries out the run effects of its own core one-shot machine."""

    def __init__(self, request: ResolvedStartRequest, run_key: str) -> None:
        self._request = request
        self._state = oneshot.begin_run()
        self._ids = EventIds(f"{run_key}#")
        loop = asyncio.get_running_loop()
        self._result: asyncio.Future[SubagentResult] = loop.create_future()
        self._disposed: asyncio.Future[None] | None = None  # made on first use (``_disposal``)
        self._setup_abort = AbortController()
        self._tasks: set[asyncio.Task[None]] | None = None  # made by the first ``_spawn``
        self._start_cancelled = False
        self._fault: BaseException | None = None
        self._release_error: BaseException | None = None
        self._remove_abort: Callable[[], None] = lambda: None

    # ------------------------------------------------------------------ the handle

    @property
    def result(self) -> asyncio.Future[SubagentResult]:
        return self._result

    def dispose(self) -> asyncio.Future[None]:
        """Request disposal (a repeat is a no-op) and return the memoized completion."""
        self._apply(oneshot.DisposeRequested(self._next_id()))
        return self._disposal()

    def _disposal(self) -> asyncio.Future[None]:
        if self._disposed is None:
            self._disposed = asyncio.get_running_loop().create_future()
        return self._disposed

    @property
    def work_cancelled(self) -> bool:
        """Whether the machine cancelled this run's remaining work."""
        return self._state.work_cancelled

    # ------------------------------------------------------------------ driving the machine

    def _next_id(self) -> EventId:
        return self._ids.next()

    def _apply(self, event: oneshot.RunEvent) -> None:
        self._state, effects = oneshot.apply(self._state, event)
        for effect in effects:
            self._carry_out(effect)

    def _carry_out(self, effect: oneshot.RunEffect) -> None:
        match effect:
            case oneshot.RollBack():
                self._setup_abort.abort(aborted_before_publication())
            case oneshot.RejectStart(cancelled=cancelled):
                self._start_cancelled = cancelled
            case oneshot.CancelRemainingWork():
                self._cancel_work()
            case oneshot.ResolveResult(result=result):
                self._close_budget()
                self._result.set_result(result)
            case oneshot.RejectResult(message=message):
                self._close_budget()
                self._result.set_exception(self._fault or RuntimeError(message))
            case oneshot.AwaitQuiescence():
                self._spawn(self._quiesce())
            case oneshot.CompleteDispose(release_failure=failure):
                self._remove_abort()
                if failure is None:
                    self._disposal().set_result(None)
                else:
                    self._disposal().set_exception(self._release_error or RuntimeError(failure))
            case _:
                assert_never(effect)

    def _close_budget(self) -> None:
        """Return the child's unused budget as its result settles (rule 6)."""
        if self._request.budget is not None:
            self._request.budget.close()

    def _spawn(self, work: Coroutine[object, object, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        if self._tasks is None:
            self._tasks = set()
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _publish(self, setup: Awaitable[None]) -> None:
        """Await the unpublished ``setup`` under the signal; publish on success, else reject."""
        self._remove_abort = self._request.signal.add_listener(self._on_abort)
        try:
            await setup
        except BaseException as error:
            self._apply(oneshot.StartFailed(self._next_id(), render_error(error)))
            self._remove_abort()
            if self._start_cancelled:
                raise aborted_before_publication() from error
            raise
        self._apply(oneshot.ChildPublished(self._next_id()))

    def _on_abort(self, _reason: object) -> None:
        self._apply(oneshot.StartAborted(self._next_id()))

    def _settle(self, result: SubagentResult) -> None:
        self._apply(oneshot.ResultSettled(self._next_id(), result))

    def _settle_fault(self, error: BaseException) -> None:
        self._fault = error
        self._apply(oneshot.ResultFaulted(self._next_id(), render_error(error)))

    async def _quiesce(self) -> None:
        failure = None
        try:
            await self._release()
        except Exception as error:
            self._release_error = error
            failure = render_error(error)
        self._apply(oneshot.ChildQuiesced(self._next_id(), failure))

    # ------------------------------------------------------------------ provider hooks

    @abc.abstractmethod
    def _cancel_work(self) -> None:
        """Cancel the published child's remaining work (the run and its id stay valid)."""

    @abc.abstractmethod
    async def _release(self) -> None:
        """Release every child resource; raise only if releasing fails."""


__all__ = [
    "ABORTED_BEFORE_PUBLICATION",
    "ContinuableCreateRequest",
    "ContinuableCreateSpec",
    "ContinuableProvider",
    "DisposeOnExit",
    "DrivenRun",
    "EventIds",
    "ResolvedStartRequest",
    "StartRequest",
    "SubagentProvider",
    "SubagentRun",
    "aborted_before_publication",
    "can_meter_budgets",
    "can_prepare_continuable",
    "render_error",
]
