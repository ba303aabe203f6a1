"""The harness surface the seam depends on, as small ``typing.Protocol``s and shared values.

Theory of operation
-------------------
1. The seam never imports a concrete harness: it codes against these protocols. The reference
   asyncio harness (``session.py``, ``agent_loop.py``, ``registry.py``) implements them, and a
   host may supply its own.
2. Each method's docstring names the HARNESS rule (catalog section 17) it must honour. The
   synchronous methods (``send``/``followup``/``steer``/``inject``/``cancel``) must finish
   their splice, notifications and status change before returning (HARNESS-32).
3. Only what the seam reads or calls is declared; everything else is the harness's business.
4. Values shared by every implementation (cancel causes, inbox targets, notifications, model
   requests and steps, tool calls) live here, frozen, so protocols and reference agree.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol, TypeVar

import attrs

from dsh_subagent.adapters.signals import AbortSignal, Emitter, Scope, Unsubscribe
from dsh_subagent.core.residency import AgentStatus as AgentStatus  # noqa: PLC0414 (re-export)
from dsh_subagent.core.values import (
    AgentOptions,
    Content,
    JsonObject,
    JsonValue,
    MessageId,
    SessionEvent,
    SessionHeader,
    SessionId,
    UserMessage,
)
from dsh_subagent.core.values import CancelCause as CancelCause  # noqa: PLC0414 (re-export)
from dsh_subagent.core.values import InboxTarget as InboxTarget  # noqa: PLC0414 (re-export)

T = TypeVar("T")
PromptLine = tuple[str, int, str]
"""A prompt section or runtime-context part as ``(name, order, text)``."""

# --------------------------------------------------------------------------- shared values


class SessionStartSource(enum.Enum):
    """Why ``agent/session-start`` fired (HARNESS-16/17)."""

    STARTUP = "startup"
    RESUME = "resume"


@attrs.frozen
class InboxNotification:
    """``agent/inbox/inserted|claimed|discarded``; ``turn`` is set only on claims (HARNESS-11)."""

    agent: SessionId
    message: UserMessage
    turn: int | None = None


@attrs.frozen
class StatusNotification:
    """``agent/status`` (HARNESS-2)."""

    agent: SessionId
    status: AgentStatus


@attrs.frozen
class ToolCall:
    """One tool call proposed by the model."""

    id: str
    name: str
    arguments: JsonObject = attrs.field(factory=dict)


@attrs.frozen
class ModelRequest:
    """What a model step sees: the log so far, the visible tools and the turn's signal."""

    agent: SessionId
    turn: int
    step: int
    events: tuple[SessionEvent, ...]
    tools: tuple[str, ...]
    signal: AbortSignal = attrs.field(eq=False)
    system_prompt: tuple[PromptLine, ...] = ()
    """Merged system-prompt sections ``(name, order, text)`` visible to this agent."""
    runtime_context: tuple[PromptLine, ...] = ()
    """Merged runtime-context contributions ``(name, order, text)`` (e.g. the delegation
    statement of a child)."""


@attrs.frozen
class ModelStep:
    """One model step's outcome (raise from ``Model.step`` for an error)."""

    content: Content = ()
    chunks: tuple[str, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()
    refusal: bool = False
    max_tokens: bool = False


# --------------------------------------------------------------------------- protocols


class Model(Protocol):
    """A pluggable model: one awaited step per call."""

    async def step(self, request: ModelRequest) -> ModelStep:
        """Produce one step; raise to end the turn with ``error`` (HARNESS-9)."""
        ...


class Session(Protocol):
    """A live session log (HARNESS-20)."""

    @property
    def header(self) -> SessionHeader:
        """The immutable header (HARNESS-21)."""
        ...

    @property
    def id(self) -> SessionId: ...

    @property
    def events(self) -> tuple[SessionEvent, ...]:
        """The immutable events so far (HARNESS-20)."""
        ...

    @property
    def seq(self) -> int:
        """The log length, i.e. the next event's seq (HARNESS-20)."""
        ...

    def append(self, type: str, data: JsonValue) -> SessionEvent:
        """Validate lossless JSON, assign seq and time, notify observers (HARNESS-20)."""
        ...


class SessionStore(Protocol):
    """The live session store (HARNESS-19)."""

    def get(self, session_id: SessionId) -> Session | None:
        """The live session or ``None`` (HARNESS-19)."""
        ...

    def list(self) -> list[Session]:
        """Live sessions in creation order (HARNESS-19)."""
        ...

    async def flush(self, session: Session) -> bool:
        """Await every flush listener; True iff one participated; raise the first failure
        after all settled (HARNESS-19)."""
        ...


class Agent(Protocol):
    """An agent over one session (HARNESS-1)."""

    @property
    def id(self) -> SessionId:
        """Equal to the session id (HARNESS-1)."""
        ...

    @property
    def options(self) -> AgentOptions: ...

    @property
    def session(self) -> Session: ...

    @property
    def status(self) -> AgentStatus:
        """``idle`` while no driver runs, including maintenance (HARNESS-2)."""
        ...

    @property
    def ctx(self) -> Scope:
        """Registrations unwound when the agent is disposed (HARNESS-1)."""
        ...

    @property
    def inserted(self) -> Emitter[InboxNotification]:
        """Synchronous insert notifications (HARNESS-11)."""
        ...

    @property
    def claimed(self) -> Emitter[InboxNotification]: ...

    @property
    def discarded(self) -> Emitter[InboxNotification]: ...

    @property
    def status_changed(self) -> Emitter[StatusNotification]:
        """``agent/status`` on every status transition (HARNESS-2)."""
        ...

    def pending(self) -> tuple[MessageId, ...]:
        """Ids of the unclaimed messages, next-step first (HARNESS-10)."""
        ...

    def send(self, message: UserMessage, target: InboxTarget, wakeup: bool) -> None:
        """Durable splice, insert notification, then wake or latch (HARNESS-3, -32)."""
        ...

    def followup(self, message: UserMessage) -> None:
        """``send(m, next-turn, wake)`` (HARNESS-4)."""
        ...

    def steer(self, message: UserMessage) -> None:
        """``send(m, next-step, wake)`` (HARNESS-4)."""
        ...

    def inject(self, message: UserMessage) -> None:
        """``send(m, next-step, no wake)`` (HARNESS-4)."""
        ...

    def cancel(self, cause: CancelCause, *, keep_inbox: bool = False) -> None:
        """Clear the inbox unless keep_inbox, abort the activity; first cause wins (HARNESS-5)."""
        ...

    async def when_idle(self) -> None:
        """Resolve once no driver and no maintenance is active (HARNESS-7)."""
        ...

    def run_maintenance(self, task: Callable[[AbortSignal], Awaitable[T]]) -> Awaitable[T]:
        """Run ``task`` from true idle only; status stays idle (HARNESS-8)."""
        ...


class AgentHandle(Protocol):
    """An owned agent (HARNESS-18)."""

    @property
    def agent(self) -> Agent: ...

    def dispose(self) -> Awaitable[None]:
        """Memoized: disposed cancel, when_idle, scope, agent/disposed, session/disposed
        (HARNESS-18)."""
        ...


class AgentRegistry(Protocol):
    """The agent registry (HARNESS-14)."""

    def get(self, agent_id: SessionId) -> Agent | None:
        """The live agent or ``None`` (HARNESS-14)."""
        ...


class SessionPersistence(Protocol):
    """Durable session storage (HARNESS-23); mirrors ``persistence.SessionPersistence``."""

    async def list(self) -> Sequence[SessionHeader]:
        """Stored headers in creation order (HARNESS-23)."""
        ...

    async def list_snapshots(self) -> Sequence[SessionSnapshotLike]:
        """``{header, revision}`` per stored session (HARNESS-23)."""
        ...

    async def revision(self, session_id: SessionId) -> int | None:
        """Stored event count, None when no row exists (cheap; used by flush, HARNESS-19)."""
        ...

    async def inspect(self, session_id: SessionId) -> SessionRecordLike:
        """The stored log, never mutating storage (HARNESS-23)."""
        ...

    async def load(self, session_id: SessionId) -> SessionRecordLike:
        """The stored log, durably closing an interrupted tail (HARNESS-17, -23)."""
        ...

    async def create(self, header: SessionHeader, events: Sequence[SessionEvent]) -> None: ...

    async def append(self, session_id: SessionId, events: Sequence[SessionEvent]) -> None: ...


class SessionSnapshotLike(Protocol):
    """A stored header and its revision (``persistence.SessionSnapshot``)."""

    @property
    def header(self) -> SessionHeader: ...

    @property
    def revision(self) -> int: ...


class SessionRecordLike(Protocol):
    """A stored session (``persistence.SessionRecord``)."""

    @property
    def header(self) -> SessionHeader: ...

    @property
    def events(self) -> tuple[SessionEvent, ...]: ...


class ProjectionRegistry(Protocol):
    """Session projections (HARNESS-25)."""

    def snapshot(self, session: Session) -> Mapping[str, JsonValue]:
        """Live values from the per-session watermark cache; raises if a unit raises."""
        ...

    def restore(
        self, checkpoint: Mapping[str, JsonValue], events: Sequence[SessionEvent], base_seq: int
    ) -> Mapping[str, JsonValue]:
        """A detached fold of ``events`` from a checkpoint (HARNESS-25)."""
        ...


class ProjectionCache(Protocol):
    """Persisted projection checkpoints (HARNESS-26)."""

    async def cached_snapshot(self, header: SessionHeader) -> CachedProjectionLike | None:
        """``{as_of_seq, values}`` or ``None``; may raise on a damaged row (HARNESS-26)."""
        ...


class CachedProjectionLike(Protocol):
    @property
    def as_of_seq(self) -> int: ...

    @property
    def values(self) -> Mapping[str, JsonValue]: ...


class SandboxPolicyService(Protocol):
    """Sandbox modes (HARNESS-27)."""

    def override_of(self, session: Session) -> str | None:
        """The mode of the last ``sandbox/mode`` event, or ``None`` (HARNESS-27)."""
        ...


class ApprovalPolicyService(Protocol):
    """Approval policy (HARNESS-27)."""

    def override_of(self, session: Session) -> str | None:
        """The policy of the last ``approval/policy`` event, or ``None`` (HARNESS-27)."""
        ...


class SystemPromptComposer(Protocol):
    """System-prompt composition; the nearest scope wins per name (HARNESS-28)."""

    def context(self, name: str, order: int, text: str) -> Unsubscribe: ...

    def section(self, name: str, order: int, text: str) -> Unsubscribe: ...


class ToolRestrictor(Protocol):
    """Scoped tool restriction affecting visibility and execution (HARNESS-28)."""

    def restrict(
        self, *, allow: Sequence[str] | None = None, deny: Sequence[str] | None = None
    ) -> ToolRestrictor:
        """Validate names (unknown names raise) and return the restricted view."""
        ...


class PresetRoster(Protocol):
    """Agent presets (HARNESS-28)."""

    def compose_from(self, child: Scope, parent: Scope) -> None: ...

    def composed_preset(self, ctx: Scope) -> str | None: ...
