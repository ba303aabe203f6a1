"""Cancellation and lifetime primitives for the asyncio adapters.

Theory of operation
-------------------
1. ``AbortController.abort(reason)`` aborts its ``AbortSignal`` once: the first reason wins,
   later calls change nothing. Listeners run synchronously, in registration order, each one
   contained (a failing listener is logged and never starves its peers).
2. ``AbortSignal.throw_if_aborted()`` raises the abort *reason* unchanged when it is an
   exception (HARNESS-31); a non-exception reason (e.g. an agent ``CancelCause``) is wrapped
   in ``AbortError`` whose ``reason`` is that exact object.
3. ``race_abort(awaitable, signal)`` awaits an operation but gives up as soon as the signal
   aborts, cancelling the operation and raising the reason as in rule 2; ``abortable`` does
   the same inside the calling task (no task of its own) for operations that honour
   cancellation, waiting for them to unwind. ``any_signal`` fuses
   signals and returns a detacher, so a long-lived signal keeps no listener per operation.
4. ``Emitter`` is a synchronous, enumerable listener list (HARNESS-29): ``emit`` contains each
   listener; ``emit_vetoable`` lets a raising listener veto (the exception propagates).
   An ``AbortSignal`` keeps its abort listeners in the same kind of table, not in an
   emitter of its own.
5. ``Scope`` collects cleanups and unwinds them in reverse order on ``dispose``; every cleanup
   runs even if an earlier one fails, then the first failure is raised. ``defer`` returns a
   single-shot disposer that runs its cleanup early (an async one is awaited by ``dispose``).
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final, Generic, Protocol, TypeAlias, TypeVar

T = TypeVar("T")
P = TypeVar("P")
P_co = TypeVar("P_co", covariant=True)

_log = logging.getLogger(__name__)

Unsubscribe = Callable[[], None]


class AbortError(Exception):
    """Raised by ``throw_if_aborted`` when the abort reason is not itself an exception."""

    def __init__(self, reason: object) -> None:
        super().__init__(f"aborted: {reason!r}")
        self.reason = reason


_tokens = itertools.count()


class _Subscription:
    """One listener's place in an emitter or a signal; calling it unsubscribes, once, in O(1).

    The table is keyed by an int token, never by this object, so a subscription and its
    emitter form no reference cycle (freed by refcount, not by the cyclic GC).
    """

    __slots__ = ("_emitter", "_token")

    def __init__(self, emitter: _Listeners[Any], token: int) -> None:
        self._emitter: _Listeners[Any] | None = emitter
        self._token = token

    def __call__(self) -> None:
        emitter, self._emitter = self._emitter, None
        if emitter is not None:
            emitter._remove(self._token)


class Subscribable(Protocol[P_co]):
    """The listening side of an emitter (covariant: an emitter of a subtype satisfies it)."""

    def subscribe(self, listener: Callable[[P_co], object], /) -> Unsubscribe: ...


#: A listener table by subscription token.
_Table: TypeAlias = dict[int, Callable[[P], object]]


class _Listeners(Generic[P]):
    """Listeners in registration order, each removable once by its subscription (rule 4).

    The table is created on the second subscription: most emitters and signals of a
    short-lived child are never listened to, or by one listener, which is held with its
    token in two slots (no table and no pair tuple for the cyclic GC to track).
    """

    __slots__ = ("_listeners", "_token")

    def __init__(self) -> None:
        # None, the one listener (its token in ``_token``), or the table (a listener is a
        # callable, never a dict).
        self._listeners: _Table[P] | Callable[[P], object] | None = None
        self._token = -1

    def _add(self, listener: Callable[[P], object]) -> Unsubscribe:
        token = next(_tokens)
        held = self._listeners
        if held is None:
            self._listeners, self._token = listener, token
        elif isinstance(held, dict):
            held[token] = listener
        else:
            self._listeners = {self._token: held, token: listener}
        return _Subscription(self, token)

    def _remove(self, token: int) -> None:
        held = self._listeners
        if isinstance(held, dict):
            held.pop(token, None)
        elif held is not None and self._token == token:
            self._listeners = None

    def _snapshot(self) -> tuple[Callable[[P], object], ...]:
        held = self._listeners
        if held is None:
            return ()
        if isinstance(held, dict):
            return tuple(held.values())
        return (held,)


def _call_contained(name: str, listeners: tuple[Callable[[P], object], ...], payload: P) -> None:
    """Call every listener; each failure is logged and contained."""
    for listener in listeners:
        try:
            listener(payload)
        except Exception:
            _log.warning("%s listener failed", name, exc_info=True)


class Emitter(_Listeners[P]):
    """A synchronous listener list whose callbacks can be enumerated (HARNESS-29)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def subscribe(self, listener: Callable[[P], object]) -> Unsubscribe:
        """Add ``listener``; the returned disposer removes it once (single-shot)."""
        return self._add(listener)

    @property
    def listeners(self) -> tuple[Callable[[P], object], ...]:
        """A snapshot of the current listeners, in registration order."""
        return self._snapshot()

    def emit(self, payload: P) -> None:
        """Call every listener; each failure is logged and contained."""
        held = self._listeners  # ``_snapshot`` inline: an emit per session append
        if held is not None:
            listeners = tuple(held.values()) if isinstance(held, dict) else (held,)
            _call_contained(self.name, listeners, payload)

    def emit_vetoable(self, payload: P) -> None:
        """Call every listener; the first raising listener vetoes (its exception propagates)."""
        for listener in self._snapshot():
            listener(payload)


def _no_op() -> None:
    return None


class AbortSignal(_Listeners[object]):
    """The read side of an ``AbortController``; it holds its abort listeners itself."""

    __slots__ = ("_aborted", "_reason")

    def __init__(self) -> None:
        super().__init__()
        self._aborted = False
        self._reason: object = None

    @property
    def aborted(self) -> bool:
        return self._aborted

    @property
    def reason(self) -> object:
        """The reason given at abort (``None`` while not aborted)."""
        return self._reason

    def throw_if_aborted(self) -> None:
        """Raise the abort reason unchanged (HARNESS-31), or ``AbortError(reason)``."""
        if not self._aborted:
            return
        if isinstance(self._reason, BaseException):
            raise self._reason
        raise AbortError(self._reason)

    def add_listener(self, listener: Callable[[object], object]) -> Unsubscribe:
        """Call ``listener(reason)`` at abort (immediately if already aborted)."""
        if not self._aborted:
            return self._add(listener)
        _call_contained("abort", (listener,), self._reason)
        return _no_op

    def _abort(self, reason: object) -> None:
        self._aborted = True
        self._reason = reason
        listeners = self._snapshot()
        self._listeners = None  # later unsubscriptions find nothing to remove
        _call_contained("abort", listeners, reason)


class AbortController:
    """Owns one ``AbortSignal`` and aborts it once; the first reason wins."""

    __slots__ = ("signal",)

    def __init__(self) -> None:
        self.signal = AbortSignal()

    def abort(self, reason: object = None) -> None:
        """Abort with ``reason`` (``AbortError`` when ``None``); later calls are ignored."""
        if not self.signal.aborted:
            self.signal._abort(AbortError("aborted") if reason is None else reason)


def any_signal(*signals: AbortSignal | None) -> tuple[AbortSignal, Unsubscribe]:
    """A signal aborted with the reason of whichever input aborts first, and its detacher."""
    fused = AbortController()
    detachers = [s.add_listener(fused.abort) for s in signals if s is not None]

    def detach() -> None:
        for remove in detachers:
            remove()

    return fused.signal, detach


async def race_abort(operation: Awaitable[T], signal: AbortSignal | None) -> T:
    """Await ``operation`` unless ``signal`` aborts first; then cancel it and raise the reason."""
    if signal is None:
        return await operation
    task = asyncio.ensure_future(operation)
    if signal.aborted:
        task.cancel()
        signal.throw_if_aborted()
    # One waiter, woken by whichever comes first: the operation finishing or the abort.
    wake = _Wake(asyncio.get_running_loop().create_future())
    task.add_done_callback(wake, context=_BARE)
    remove = signal.add_listener(wake)
    try:
        await wake.waiter
    finally:
        remove()
        task.remove_done_callback(wake)
        if not task.done():
            task.cancel()
    if task.done() and not task.cancelled():
        return task.result()
    signal.throw_if_aborted()
    return await task  # the operation was cancelled from elsewhere: propagate that


async def abortable(operation: Awaitable[T], signal: AbortSignal) -> T:
    """``race_abort`` for a well-behaved operation, run in the calling task (no task of its own).

    An abort cancels this task's await of ``operation`` (from the loop, one callback later,
    so an abort raised inside the operation itself is safe); once the operation has unwound,
    the abort reason is raised as ``race_abort`` raises it. An operation that finishes first
    wins, as in ``race_abort``. Unlike ``race_abort``, an operation that ignores cancellation
    is waited for: use this only for operations that honour it (the agent's model step).
    """
    if signal.aborted:
        if asyncio.iscoroutine(operation):
            operation.close()
        signal.throw_if_aborted()
    task = asyncio.current_task()
    assert task is not None, "abortable() runs inside a task"
    canceller = _CancelWhileWaiting(task)
    remove = signal.add_listener(canceller)
    try:
        return await operation
    except asyncio.CancelledError:
        if canceller.cancelled and task.uncancel() == 0:
            signal.throw_if_aborted()  # ours alone: the abort, not an outer cancellation
        raise
    finally:
        canceller.waiting = False
        remove()


_BARE: Final = contextvars.Context()
"""The context ``_Wake`` and ``_CancelWhileWaiting`` run in: they read no context variable,
so they need no copy of the caller's per call (a wake-up's own callbacks keep theirs)."""


class _Wake:
    """``race_abort``'s one waiter and its wake-up, as one slotted callable (no closure)."""

    __slots__ = ("waiter",)

    def __init__(self, waiter: asyncio.Future[None]) -> None:
        self.waiter = waiter

    def __call__(self, _: object) -> None:
        if not self.waiter.done():
            self.waiter.set_result(None)


class _CancelWhileWaiting:
    """``abortable``'s abort listener: cancels the task from the loop, one callback later,
    while it still awaits the operation (one slotted object, no closures or cells). Called
    with the abort's reason it is the listener; called with nothing, the loop's callback
    (itself, so an abort schedules no bound method: a drain aborts every held child at once)."""

    __slots__ = ("_task", "cancelled", "waiting")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self._task = task
        self.waiting = True
        self.cancelled = False

    def __call__(self, *reason: object) -> None:
        if reason:
            asyncio.get_running_loop().call_soon(self, context=_BARE)
        elif self.waiting:
            self.cancelled = True
            self._task.cancel()


class Scope:
    """Single-shot cleanups unwound in reverse order on ``dispose`` (HARNESS-1 ``ctx``)."""

    def __init__(self) -> None:
        self._cleanups: list[Callable[[], Awaitable[None] | None]] = []
        self._early: list[Awaitable[None]] | None = None  # made by the first early async one
        self._disposed = False

    @property
    def disposed(self) -> bool:
        return self._disposed

    def defer(self, cleanup: Callable[[], Awaitable[None] | None]) -> Unsubscribe:
        """Register ``cleanup`` to run at dispose; the disposer runs it now, once."""
        if self._disposed:
            raise RuntimeError("scope already disposed")
        self._cleanups.append(cleanup)

        def run_now() -> None:
            if cleanup in self._cleanups:
                self._cleanups.remove(cleanup)
                result = cleanup()
                if result is not None and isinstance(result, Awaitable):
                    if self._early is None:
                        self._early = []
                    self._early.append(result)  # awaited by dispose

        return run_now

    async def dispose(self) -> None:
        """Run every cleanup in reverse order; raise the first failure after all ran."""
        self._disposed = True
        failure: BaseException | None = None
        while self._cleanups or self._early:
            try:
                result = self._early.pop() if self._early else self._cleanups.pop()()
                # a sync cleanup's None skips the ABC's instance check (a Python call)
                if result is not None and isinstance(result, Awaitable):
                    await result
            except Exception as exc:
                failure = failure or exc
        if failure is not None:
            raise failure
