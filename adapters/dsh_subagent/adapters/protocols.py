"""The harness surface the seam depends on, as small ``typing.Protocol``s and shared values.

Theory of operation
-------------------
1. The seam never imports a concrete harness: it codes against these protocols (an
   import-linter contract forbids the seam from importing ``dsh_subagent.adapters.reference``).
   The reference asyncio harness (``reference.session``, ``reference.agent_loop``,
   ``reference.registry``, the persistence backends) implements them, and a host may supply
   its own.
2. Each method's docstring says what it must do, with its HARNESS rule id. The
   synchronous methods (``send``/``followup``/``steer``/``inject``/``cancel``) must finish
   their splice, notifications and status change before returning (HARNESS-32).
3. Only what the seam reads or calls is declared; everything else is the harness's business.
4. Values shared by every implementation (cancel causes, inbox targets, notifications, model
   requests and steps, tools and tool calls, creation options, stored records) live here,
   frozen, so protocols and reference agree; each exists once.
"""

from __future__ import annotations

import builtins
import enum
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Final, NamedTuple, Protocol, TypeVar, runtime_checkable

import attrs

from dsh_subagent.adapters.signals import AbortSignal, Emitter, Scope, Subscribable, Unsubscribe
from dsh_subagent.core.budget import Reservation
from dsh_subagent.core.residency import AgentStatus as AgentStatus  # noqa: PLC0414 (re-export)
from dsh_subagent.core.values import (
    USER_SOURCE,
    AgentOptions,
    Content,
    JsonObject,
    JsonValue,
    MessageId,
    MessageSource,
    SessionEvent,
    SessionHeader,
    SessionId,
    UserMessage,
    as_content,
)
from dsh_subagent.core.values import CancelCause as CancelCause  # noqa: PLC0414 (re-export)
from dsh_subagent.core.values import InboxTarget as InboxTarget  # noqa: PLC0414 (re-export)
from dsh_subagent.core.values import SessionMeta as SessionMeta  # noqa: PLC0414 (re-export)

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


def create_user_message(content: Content | str, source: MessageSource = USER_SOURCE) -> UserMessage:
    """A frozen user message with a fresh random id (HARNESS-12); a string is one text block."""
    return UserMessage(MessageId(f"msg-{uuid.uuid4().hex}"), tuple(as_content(content)), source)


@attrs.frozen
class StepEntering:
    """The pre-step decision was to enter ``step`` of ``turn`` (before ``step/start``)."""

    agent: SessionId
    turn: int
    step: int


@attrs.frozen
class ToolOutcome:
    """A tool's result; ``concludes`` ends the turn after this step."""

    content: Content
    is_error: bool = False
    concludes: bool = False


ABORTED_BEFORE_DISPATCH: Final = "tool call aborted before dispatch"
"""The errored result of a call whose signal aborted before it ran (TOOL-24, catalog C-4)."""

ToolHandler = Callable[[JsonObject, AbortSignal], Awaitable[ToolOutcome]]
ToolGuard = Callable[[ToolCall], str | None]
"""``guard(call) -> refusal text | None``: a non-``None`` text refuses the call."""


@attrs.frozen
class Tool:
    """A named tool with an argument schema and an async handler."""

    name: str
    handler: ToolHandler = attrs.field(eq=False)
    schema: JsonObject = attrs.field(factory=lambda: {"type": "object"})
    description: str = ""


@attrs.frozen
class SessionRecord:
    """A persisted session: its header and its whole event log."""

    header: SessionHeader
    events: tuple[SessionEvent, ...]


@attrs.frozen
class SessionSnapshot:
    """A persisted header with its revision (the number of persisted events)."""

    header: SessionHeader
    revision: int


@attrs.frozen
class Lease:
    """A child's lease as one persistence instance holds it (LEASE-1).

    ``owner`` names the holder (host, pid and a per-instance token); ``epoch`` grows by one
    at every grant and fences every append of the holder: once another holder took the
    lease, the old epoch's appends are refused with ``LEASE_LOST`` and write nothing.
    ``mail`` is False when the grant's own transaction saw no mailbox row for the child, so
    the taker need not read the mailbox (DUR-23); True when it may have rows (not known).
    ``revision`` is the stored log length the grant's own transaction read (None: not
    read); under the lease no other holder can append, so it stays current for the holder.
    """

    session_id: SessionId
    owner: str
    epoch: int
    mail: bool = attrs.field(default=True, eq=False)
    revision: int | None = attrs.field(default=None, eq=False)


@attrs.frozen
class CachedProjection:
    """A projection-cache row: the values folded from the first ``as_of_seq`` events."""

    as_of_seq: int
    values: Mapping[str, JsonValue]


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
    max_tokens: int | None = None
    """The most output tokens this request may produce (the agent's ``max_tokens``, lowered
    to the budget's grant), or None for the model's own default."""


@attrs.frozen
class Usage:
    """The tokens one model request used, as the model reports them."""

    input_tokens: int = 0
    output_tokens: int = 0


@attrs.frozen
class ModelStep:
    """One model step's outcome (raise from ``Model.step`` for an error).

    ``usage`` is optional: a model that reports none is counted in model requests only."""

    content: Content = ()
    chunks: tuple[str, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()
    refusal: bool = False
    max_tokens: bool = False
    usage: Usage | None = None


class StepGrant(NamedTuple):
    """A model request's admitted reservation: settle it exactly once (a named tuple: one
    per metered request)."""

    ticket: Reservation
    """The reservation, handed back to the meter's ``settle``."""
    max_tokens: int | None = None
    """The output cap the request must be sent with (None: uncapped)."""


# --------------------------------------------------------------------------- protocols


class Model(Protocol):
    """A pluggable model: one awaited step per call."""

    async def step(self, request: ModelRequest) -> ModelStep:
        """Produce one step; raise to end the turn with ``error`` (HARNESS-9)."""
        ...


class StepMeter(Protocol):
    """Budget admission of an agent's model requests (BUDGET-12, ``docs/budgets.md``)."""

    def admit(self, agent: SessionId, max_tokens: int | None) -> StepGrant:
        """Reserve one model request, synchronously, in the span that admits the step;
        raise ``BUDGET_EXHAUSTED`` (field ``budget.<dimension>``) to end the turn
        ``budget-exhausted`` instead."""
        ...

    def settle(
        self, agent: SessionId, grant: StepGrant, usage: Usage | None, *, ok: bool
    ) -> JsonObject | None:
        """Release ``grant`` and charge the request: its ``usage`` (or one request only) when
        ``ok``, the whole grant when it failed or was aborted. Returns the charge the agent
        records in the same span (the ``charged`` of its ``assistant/message``, or a
        ``budget/charged`` record when no answer is recorded), or None: record nothing."""
        ...


@runtime_checkable
class MeteredAgent(Protocol):
    """An agent whose model requests a ``StepMeter`` admits (the reference agent is one)."""

    def install_meter(self, meter: StepMeter) -> Unsubscribe:
        """Admit every later model request through ``meter``; the disposer removes it."""
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

    def observe(self, observer: Callable[[SessionEvent], object]) -> Unsubscribe:
        """Call ``observer`` after every later append, synchronously (HARNESS-20)."""
        ...


class SessionStore(Protocol):
    """The live session store (HARNESS-19)."""

    def get(self, session_id: SessionId) -> Session | None:
        """The live session or ``None`` (HARNESS-19)."""
        ...

    def list(self) -> Sequence[Session]:
        """Live sessions in creation order (HARNESS-19)."""
        ...

    async def flush(self, session: Session) -> bool:
        """Await every flush listener; True iff one participated; raise the first failure
        after all settled (HARNESS-19)."""
        ...

    def commit(self, session: Session) -> Awaitable[bool]:
        """``flush`` for a session that may have left the store: called synchronously (in
        an acceptance's span), it resolves True once every event the session holds now is
        durable, False when nothing persists, or fails (DUR-1, DUR-4). A harness shares one
        write among many commits (group commit), yet each call's awaitable is the caller's
        own: cancelling it never cancels the shared write (DUR-5)."""
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

    @property
    def step_entering(self) -> Subscribable[StepEntering]:
        """Vetoable: the pre-step decision was to enter a step, before ``step/start``."""
        ...

    @property
    def tools(self) -> AgentTools:
        """The agent's own tool layer over the global tools (DRIVER-7/8)."""
        ...

    @property
    def prompt(self) -> SystemPromptComposer:
        """The agent's scoped system-prompt sections and runtime context (HARNESS-28)."""
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

    def wake(self) -> None:
        """Wake for the input already pending, as a waking send would but with no new
        message: the unclaimed work of a restored inbox runs (DUR-26). Nothing if none."""
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

    def on_idle(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` once, when ``when_idle`` would resolve (a callback, no task)."""
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


class SetupCommit(Protocol):
    """What ``setup`` may return: ``commit()`` runs synchronously before publication."""

    def commit(self) -> None: ...


AgentSetup = Callable[[Scope], Awaitable[SetupCommit | None]]
AgentConfigure = Callable[[Agent], None]
"""Synchronous composition of a not-yet-published agent (its registrations go on ``ctx``)."""


@attrs.frozen
class CreateOptions:
    """``create`` options (HARNESS-15)."""

    session_id: SessionId
    meta: SessionMeta | None = None
    seed: Sequence[SessionEvent] | None = None
    agent_options: AgentOptions | None = None
    signal: AbortSignal | None = attrs.field(default=None, eq=False)
    setup: AgentSetup | None = attrs.field(default=None, eq=False)
    configure: AgentConfigure | None = attrs.field(default=None, eq=False)


@attrs.frozen
class ResumeOptions:
    """``resume`` options (HARNESS-15)."""

    resume_session_id: SessionId
    agent_options: AgentOptions | None = None
    signal: AbortSignal | None = attrs.field(default=None, eq=False)
    setup: AgentSetup | None = attrs.field(default=None, eq=False)
    #: A record the caller has just read with ``inspect``: reused instead of a second read
    #: when it needs no repair and the stored log still has its length (it only grows).
    inspected: SessionRecord | None = attrs.field(default=None, eq=False)
    #: The stored log length the caller read under the child's lease after ``inspected``
    #: (``Lease.revision``), so the check that ``inspected`` is current needs no read.
    stored_revision: int | None = attrs.field(default=None, eq=False)


class AgentRegistry(Protocol):
    """The agent registry (HARNESS-14 .. HARNESS-18)."""

    def get(self, agent_id: SessionId) -> Agent | None:
        """The live agent or ``None`` (HARNESS-14)."""
        ...

    def list(self) -> Sequence[Agent]:
        """The live agents, in creation order."""
        ...

    @property
    def store(self) -> SessionStore:
        """The live session store the registry creates sessions in (HARNESS-19)."""
        ...

    @property
    def created(self) -> Subscribable[Agent]:
        """``agent/created``, vetoable: a raising listener rolls the creation back (HARNESS-16)."""
        ...

    @property
    def disposed(self) -> Subscribable[Agent]:
        """``agent/disposed`` (HARNESS-18)."""
        ...

    async def create(self, options: CreateOptions) -> AgentHandle:
        """The create transaction (HARNESS-15, -16)."""
        ...

    async def resume(self, options: ResumeOptions) -> AgentHandle:
        """The resume transaction over the repairing load (HARNESS-15, -17)."""
        ...


class SessionPersistence(Protocol):
    """Durable session storage (HARNESS-23)."""

    async def list(self) -> builtins.list[SessionHeader]:
        """Every stored header, in creation order (HARNESS-23)."""
        ...

    async def list_snapshots(self) -> builtins.list[SessionSnapshot]:
        """Every stored header with its revision, in creation order (HARNESS-23)."""
        ...

    async def revision(self, session_id: SessionId) -> int | None:
        """Stored event count, None when no row exists (cheap; used by flush, HARNESS-19)."""
        ...

    async def inspect(self, session_id: SessionId) -> SessionRecord:
        """The stored log as it is, never mutating storage (HARNESS-23)."""
        ...

    async def load(self, session_id: SessionId) -> SessionRecord:
        """The stored log, after durably closing an interrupted tail (HARNESS-17, -23)."""
        ...

    async def create(self, header: SessionHeader, events: Sequence[SessionEvent]) -> None:
        """Store a new session whose log starts at seq 0."""
        ...

    async def append(self, session_id: SessionId, events: Sequence[SessionEvent]) -> None:
        """Append events that continue the stored log exactly."""
        ...

    async def reserve(self, session_id: SessionId) -> Lease:
        """Durably reserve a new id and hold its lease; ``DUPLICATE_CHILD`` when the id is
        stored or reserved by another live holder (LEASE-4)."""
        ...

    async def acquire(self, session_id: SessionId) -> Lease:
        """Take the child's lease in one compare-and-set, at a new epoch; ``ACTIVATION_HELD``
        when another live holder has it (LEASE-1, LEASE-2, LEASE-5)."""
        ...

    async def release(self, lease: Lease) -> bool | None:
        """Give the lease up (the Activation was released); a lost lease is left alone.

        ``False`` when the release's own transaction saw no mailbox row for the child: no
        mail can come to a free child (a post writes only while another holder has the
        lease), so its former holder need not look again (DUR-23); ``True`` or ``None``
        (not known): it looks."""
        ...

    async def close(self) -> None:
        """Release every held lease and the backend; later calls raise
        ``PERSISTENCE_UNAVAILABLE``."""
        ...


@runtime_checkable
class SessionMailbox(Protocol):
    """A persistence's durable mailbox (DUR-20..29, ``docs/durability.md``): follow-ups for
    a child whose lease another live harness holds. A persistence without it refuses such a
    follow-up with ``ACTIVATION_HELD``."""

    async def post(self, session_id: SessionId, message: UserMessage) -> bool:
        """Write ``message`` to the child's mailbox, committed before returning True, iff
        another live holder has its lease (one atomic step); False writes nothing (DUR-21)."""
        ...

    async def mailbox(self, session_id: SessionId) -> builtins.list[UserMessage]:
        """The child's mailbox messages with their ids and sources, in acceptance order."""
        ...

    async def prune(self, session_id: SessionId, message_ids: Sequence[MessageId]) -> None:
        """Remove delivered rows (their ids are in the child's stored log); a fenced write."""
        ...

    def watch_mailbox(self, listener: Callable[[SessionId], object]) -> Unsubscribe:
        """Call ``listener(child_id)`` on the loop when rows may be pending for a child this
        backend holds (DUR-22)."""
        ...


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
    """Durable projection checkpoints (HARNESS-26)."""

    async def cached_snapshot(self, header: SessionHeader) -> CachedProjection | None:
        """The cached values for this exact session lifecycle, or ``None``; may raise on a
        damaged row (HARNESS-26)."""
        ...

    async def store_projection(
        self, session_id: SessionId, as_of_seq: int, values: Mapping[str, JsonValue]
    ) -> None:
        """Record values folded from the first ``as_of_seq`` events of the session."""
        ...


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


class ToolHost(Protocol):
    """A registry the seam registers its model-facing tools in."""

    def register(self, tool: Tool) -> Unsubscribe:
        """Add ``tool``; a taken name raises; the disposer removes it once."""
        ...

    def get(self, name: str) -> Tool | None:
        """The visible tool called ``name``, or ``None``."""
        ...

    def names(self) -> tuple[str, ...]:
        """The visible tool names, in registration order."""
        ...


class AgentTools(ToolHost, Protocol):
    """One agent's tool layer: child-local tools, scoped restrictions and call guards."""

    def install_restriction(
        self, *, allow: Sequence[str] | None = None, deny: Sequence[str] | None = None
    ) -> Unsubscribe:
        """Restrict the global tools this layer shows (unknown names raise, DRIVER-8)."""
        ...

    def add_guard(self, guard: ToolGuard) -> Unsubscribe:
        """Refuse calls for which ``guard`` returns a reason (checked before execution)."""
        ...


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
