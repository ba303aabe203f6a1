"""Deterministic models for tests, demos and benchmarks.

Theory of operation
-------------------
1. ``ScriptedModel`` answers each step with the next item of its script: a ``ModelStep``
   (text, chunks, tool calls, structured output, refusal, max-tokens), a ``ModelFailure``
   (the step raises, so the turn ends ``error``) or a ``Gated`` item that first waits on a
   ``Gate``. An exhausted script raises ``ScriptExhausted``. Every request is recorded.
2. A ``Gate`` lets a test hold a step at a known point without sleeping: ``reached()`` waits
   until a step arrives at the gate, ``open()`` releases it. A gated step also gives up when
   the turn's signal aborts, raising the abort reason (HARNESS-31).
3. ``FunctionModel(fn)`` answers each step with ``fn(request)``, a plain or ``async``
   function: a ``ModelStep`` (build one with the helpers below, e.g. ``call_tool``) or a
   ``str`` (a text reply). What ``fn`` raises ends the turn with ``error``, as any model
   failure does. Every request is recorded.
4. ``NullModel`` replies at once with a fixed text, for benchmarks.
5. The helpers ``reply``, ``call_tool``, ``structured``, ``refuse``, ``hit_max_tokens`` and
   ``fail`` build script items; ``reply`` and ``call_tool`` take the ``usage`` to report
   (BUDGET-12), and so does ``NullModel``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections import deque
from collections.abc import Awaitable, Callable, Iterable

import attrs

from dsh_subagent.adapters.protocols import ModelRequest, ModelStep, ToolCall, Usage
from dsh_subagent.adapters.signals import race_abort
from dsh_subagent.core.errors import invalid
from dsh_subagent.core.values import DataBlock, JsonObject, JsonValue, TextBlock


class ScriptExhausted(RuntimeError):
    """The scripted model was asked for more steps than its script holds."""


@attrs.frozen
class ModelFailure:
    """A scripted step that raises ``RuntimeError(message)``."""

    message: str = "scripted model failure"


class Gate:
    """A point a scripted step waits at until the test opens it."""

    def __init__(self) -> None:
        self._open = asyncio.Event()
        self._reached = asyncio.Event()
        self.arrivals = 0

    def open(self) -> None:
        """Release every step waiting (and every later arrival)."""
        self._open.set()

    @property
    def is_open(self) -> bool:
        return self._open.is_set()

    async def reached(self) -> None:
        """Wait until some step has arrived at the gate."""
        await self._reached.wait()

    async def pass_through(self, request: ModelRequest) -> None:
        """Record the arrival, then wait for ``open`` or the request's abort."""
        self.arrivals += 1
        self._reached.set()
        await race_abort(self._open.wait(), request.signal)


@attrs.frozen
class Gated:
    """Wait at ``gate``, then answer with ``then``."""

    gate: Gate = attrs.field(eq=False)
    then: ScriptItem


ScriptItem = ModelStep | ModelFailure | Gated


def reply(
    text: str, *, chunks: Iterable[str] | None = None, usage: Usage | None = None
) -> ModelStep:
    """A final text reply (chunks default to the whole text)."""
    return ModelStep(content=(TextBlock(text),), chunks=tuple(chunks or (text,)), usage=usage)


def call_tool(
    name: str,
    arguments: JsonObject | None = None,
    *,
    call_id: str = "",
    usage: Usage | None = None,
) -> ModelStep:
    """A step that calls one tool (the loop continues with its result)."""
    call = ToolCall(call_id or f"call-{name}", name, arguments or {})
    return ModelStep(tool_calls=(call,), usage=usage)


def structured(value: JsonValue) -> ModelStep:
    """A final reply carrying a structured value as a data block."""
    return ModelStep(content=(DataBlock(value),))


def refuse(text: str = "I can't help with that.") -> ModelStep:
    """A refusal."""
    return ModelStep(content=(TextBlock(text),), refusal=True)


def hit_max_tokens(text: str = "") -> ModelStep:
    """A step cut off at the token ceiling."""
    return ModelStep(content=(TextBlock(text),) if text else (), max_tokens=True)


def fail(message: str = "scripted model failure") -> ModelFailure:
    """A step that raises."""
    return ModelFailure(message)


class ScriptedModel:
    """Answers steps from a script; records every request."""

    def __init__(self, script: Iterable[ScriptItem] = ()) -> None:
        self._script: deque[ScriptItem] = deque(script)
        self.requests: list[ModelRequest] = []

    def extend(self, items: Iterable[ScriptItem]) -> None:
        """Append more script items."""
        self._script.extend(items)

    @property
    def remaining(self) -> int:
        return len(self._script)

    async def step(self, request: ModelRequest) -> ModelStep:
        self.requests.append(request)
        if not self._script:
            raise ScriptExhausted(f"no scripted step left for turn {request.turn}")
        item = self._script.popleft()
        while isinstance(item, Gated):
            await item.gate.pass_through(request)
            item = item.then
        if isinstance(item, ModelFailure):
            raise RuntimeError(item.message)
        return item


StepAnswer = ModelStep | str
StepFunction = Callable[[ModelRequest], StepAnswer | Awaitable[StepAnswer]]


class FunctionModel:
    """Answers each step with ``fn(request)``: a ``ModelStep`` or a ``str`` (a text reply).

    ``fn`` may be a plain or an ``async`` function; it sees the whole ``ModelRequest`` (the
    agent's log, the visible tool names, the turn and step numbers). An answer of another
    type fails the step with ``INVALID_ARGUMENT`` naming ``fn``.
    """

    def __init__(self, fn: StepFunction) -> None:
        if not callable(fn):
            raise invalid("fn", f"must be callable, got {type(fn).__name__}")
        self._fn = fn
        self.requests: list[ModelRequest] = []

    async def step(self, request: ModelRequest) -> ModelStep:
        self.requests.append(request)
        answer = self._fn(request)
        if inspect.isawaitable(answer):
            answer = await answer
        if isinstance(answer, str):
            return reply(answer)
        if not isinstance(answer, ModelStep):
            raise invalid("fn", f"returned {type(answer).__name__}, not a ModelStep or str")
        return answer


class NullModel:
    """Replies immediately with a fixed text."""

    def __init__(self, text: str = "ok", *, usage: Usage | None = None) -> None:
        self._step = ModelStep(content=(TextBlock(text),), chunks=(text,), usage=usage)

    async def step(self, request: ModelRequest) -> ModelStep:
        return self._step
