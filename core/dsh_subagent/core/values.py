"""The seam's value vocabulary: ids, content, sources, headers, events, requests, results.

Theory of operation
-------------------
1. Every value is a frozen attrs class (or an ``Enum``); same-process values are trusted and
   borrowed as immutable (no defensive copies). Validation of hostile input happens at
   process, persistence and model boundaries, in the functions that build these values.
2. Ids are ``NewType`` strings: the core never mints them (no uuid, no randomness); ids,
   clocks and randomness arrive as fields of events.
3. Open vocabularies stay open: ``StopReason`` is a known ``KnownStop`` or an ``OtherStop``
   extension value that every consumer treats as a failure (NOTICE-6, ONE-*).
4. Names are Python spellings; the JSON-facing spellings are the enum values
   (``"one-shot"``, ``"subagent-settled"``, ``"max-tokens"``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from typing import Final, NewType, TypeAlias, TypeVar, cast

import attrs

from dsh_subagent.core.errors import ErrorCode, SubagentError

T = TypeVar("T")

SessionId = NewType("SessionId", str)
MessageId = NewType("MessageId", str)
RunId = NewType("RunId", str)
EventId = NewType("EventId", str)

JsonValue: TypeAlias = (
    "bool | int | float | str | Sequence[JsonValue] | Mapping[str, JsonValue] | None"
)
"""A lossless JSON value (no NaN/Infinity, string keys only)."""

JsonObject: TypeAlias = Mapping[str, JsonValue]


# --------------------------------------------------------------------------- content


@attrs.frozen
class TextBlock:
    """A block of text content (user prompt, assistant output, notice text)."""

    text: str


@attrs.frozen
class DataBlock:
    """A structured (JSON) content block, e.g. a captured structured result."""

    value: JsonValue


ContentBlock: TypeAlias = TextBlock | DataBlock
Content: TypeAlias = tuple[ContentBlock, ...]


def text_of(content: Content) -> str:
    """The concatenated text of ``content``'s text blocks."""
    return "".join(block.text for block in content if isinstance(block, TextBlock))


def as_content(value: Content | str) -> Content:
    """A plain string as one text block; anything else unchanged, for validation to judge.

    The public boundaries (prompts, follow-ups, reports) accept either form.
    """
    return (TextBlock(value),) if isinstance(value, str) else value


def output_text(output: Sequence[JsonValue]) -> str:
    """The concatenated text of a result output's text blocks (wire JSON form), no separator."""
    return "".join(
        str(block["text"])
        for block in output
        if isinstance(block, Mapping)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
    )


# --------------------------------------------------------------------------- stop reasons


class KnownStop(enum.Enum):
    """The stop reasons the seam knows (SubagentResult.stopReason)."""

    COMPLETED = "completed"
    ABORTED = "aborted"
    MAX_TOKENS = "max-tokens"
    REFUSAL = "refusal"
    ERROR = "error"
    BUDGET_EXHAUSTED = "budget-exhausted"


@attrs.frozen
class OtherStop:
    """An extension stop reason the seam does not know; always treated as a failure."""

    reason: str


StopReason: TypeAlias = KnownStop | OtherStop


def stop_reason_text(reason: StopReason) -> str:
    """The wire spelling of a stop reason."""
    return reason.value if isinstance(reason, KnownStop) else reason.reason


def is_success(reason: StopReason) -> bool:
    """Only ``completed`` is success; every other reason, known or not, is a failure."""
    return reason is KnownStop.COMPLETED


# --------------------------------------------------------------------------- message sources

SUMMARY_LIMIT: Final = 120


def bound_summary(summary: str) -> str:
    """Bound a notice summary to 120 characters: the first 119 then an ellipsis (NOTICE-9).

    post: len(__return__) <= 120
    post: __return__ == summary or len(summary) > 120
    """
    if len(summary) <= SUMMARY_LIMIT:
        return summary
    return summary[: SUMMARY_LIMIT - 1] + "\u2026"


class BaseSourceKind(enum.Enum):
    """The harness's base message source kinds (HARNESS-13)."""

    USER = "user"
    PLUGIN = "plugin"
    MODEL = "model"
    TOOL = "tool"


@attrs.frozen
class BaseSource:
    """A message supplied by the user, a plugin, the model or a tool."""

    kind: BaseSourceKind = BaseSourceKind.USER


@attrs.frozen
class CoordinatorSource:
    """A message relayed by another agent (``send_message``); grants no authority."""

    sender_session_id: SessionId
    form: str = "relay"


@attrs.frozen
class SubagentReportSource:
    """A child-authored report relayed to its parent."""

    sender_session_id: SessionId
    form: str = "relay"


@attrs.frozen
class SubagentSettledSource:
    """A runtime-written settlement notice about a child (never credited to the child)."""

    sender_session_id: SessionId
    summary: str = attrs.field(converter=bound_summary)
    form: str = "notice"


MessageSource: TypeAlias = (
    BaseSource | CoordinatorSource | SubagentReportSource | SubagentSettledSource
)

USER_SOURCE: Final = BaseSource(BaseSourceKind.USER)


@attrs.frozen
class UserMessage:
    """A user-role message: its id is its identity across inbox, log and model request."""

    id: MessageId
    content: Content
    source: MessageSource = USER_SOURCE


# --------------------------------------------------------------------------- sessions

SESSION_VERSION: Final = 1


class Origin(enum.Enum):
    """Coarse navigation classifier of a session header (not proof of anything)."""

    SUBAGENT = "subagent"


@attrs.frozen(kw_only=True)
class SessionMeta:
    """The header fields a creator chooses for a new session (HARNESS-21): a header without
    the id and the version; ``created_at`` is ``None`` to let the store stamp the time."""

    cwd: str | None = None
    parent_session: SessionId | None = None
    seed_length: int | None = None
    origin: Origin | None = None
    delegation_depth: int | None = None
    agent_preset: str | None = None
    created_at: float | None = None


@attrs.frozen
class SessionHeader(SessionMeta):
    """The immutable header of a session (HARNESS-21): the creator's fields, the id, the
    version and the creation time (always set)."""

    id: SessionId
    created_at: float = 0.0
    version: int = SESSION_VERSION


def new_header(session_id: SessionId, meta: SessionMeta, now: float) -> SessionHeader:
    """The header of a new session: ``meta``'s fields, and ``now`` unless ``meta`` chose a time."""
    chosen = {field.name: getattr(meta, field.name) for field in attrs.fields(SessionMeta)}
    chosen["created_at"] = now if meta.created_at is None else meta.created_at
    return SessionHeader(id=session_id, **chosen)


@attrs.frozen
class SessionEvent:
    """One appended session log event (HARNESS-22)."""

    type: str
    seq: int
    time: float
    data: JsonValue = None


# Session event type names the seam reads or writes.
TURN_START: Final = "turn/start"
TURN_END: Final = "turn/end"
STEP_START: Final = "step/start"
STEP_END: Final = "step/end"
USER_MESSAGE: Final = "user/message"
ASSISTANT_CHUNK: Final = "assistant/chunk"
ASSISTANT_MESSAGE: Final = "assistant/message"
TOOL_RESULT: Final = "tool/result"
INBOX_SPLICED: Final = "agent/inbox/spliced"
END_SEED: Final = "session/end-seed"
SANDBOX_MODE: Final = "sandbox/mode"
APPROVAL_POLICY: Final = "approval/policy"
DESCRIPTOR_EVENT: Final = "subagent/descriptor"


class TurnEndReason(enum.Enum):
    """``turn/end`` reasons (HARNESS-22); ``interrupted`` is written only by repair."""

    COMPLETED = "completed"
    ABORTED = "aborted"
    BLOCKED = "blocked"
    ERROR = "error"
    MAX_TOKENS = "max-tokens"
    INTERRUPTED = "interrupted"
    BUDGET_EXHAUSTED = "budget-exhausted"


class CancelKind(enum.Enum):
    """Agent cancel causes (HARNESS-6)."""

    USER = "user"
    PARENT = "parent"
    HOOK = "hook"
    DISPOSED = "disposed"


@attrs.frozen
class CancelCause:
    """An agent cancel cause (HARNESS-6); ``reason`` only for ``hook`` causes."""

    kind: CancelKind
    reason: str | None = None


class InboxTarget(enum.Enum):
    """The two ordered inbox lists (HARNESS-10)."""

    NEXT_TURN = "next-turn"
    NEXT_STEP = "next-step"


# --------------------------------------------------------------------------- requests


@attrs.frozen
class SubagentCapabilities:
    """Start-time features a provider supports; each maps to one start-request option."""

    output_schema: bool = False
    depth_limit: bool = False
    tool_filter: bool = False
    persona: bool = False


@attrs.frozen
class ToolFilter:
    """A child's global-tool restriction: names to allow and/or deny."""

    allow: tuple[str, ...] | None = None
    deny: tuple[str, ...] | None = None


@attrs.frozen
class AgentOptions:
    """The agent options the seam reads and overrides (HARNESS-1)."""

    provider: str | None = None
    model: str | None = None
    max_tokens: int | None = None
    subagent_depth: int | None = None


@attrs.frozen
class ParentRef:
    """What a start request knows of its delegating parent."""

    session_id: SessionId
    cwd: str | None = None
    delegation_depth: int = 0
    options: AgentOptions = AgentOptions()


@attrs.frozen
class SubagentIntent:
    """What a child is asked to do, the same for both kinds of start (ONE-1, CONT-1): the
    prompt and the optional depth cap, tool filter, persona and agent options.

    ``prompt`` is content blocks, or a plain string for one text block.
    """

    prompt: Content = attrs.field(converter=as_content)
    max_depth: int | None = None
    tool_filter: ToolFilter | None = None
    persona: str | None = None
    agent_options: AgentOptions | None = None


def as_intent(value: SubagentIntent | Content | str) -> SubagentIntent:
    """A bare prompt as the intent that asks nothing else; an intent unchanged.

    The starts accept either form; whatever else is given becomes the prompt, for
    validation to judge.
    """
    return value if isinstance(value, SubagentIntent) else SubagentIntent(value)


@attrs.frozen
class SubagentStartRequest:
    """A one-shot start request as the core sees it: the intent, the delegating parent, and
    the one-shot's own label and output schema (the signal is an adapter concern)."""

    intent: SubagentIntent = attrs.field(converter=as_intent)
    parent: ParentRef
    label: str | None = None
    output_schema: JsonObject | None = None


@attrs.frozen
class SubagentResult:
    """A one-shot run's result: final output, optional structured value, stop reason."""

    output: tuple[JsonValue, ...]
    stop_reason: StopReason
    structured: JsonValue = None
    has_structured: bool = False
    diagnostic: str | None = None
    """Provider-written failure detail, only for non-completed results (ONE-15)."""

    @property
    def text(self) -> str:
        """The output's text blocks joined: the child's final answer as plain text."""
        return output_text(self.output)

    # ``Callable[..., T]``: any class or factory, whatever its parameters (the one explicit Any).
    def output_as(self, kind: Callable[..., T]) -> T:  # type: ignore[explicit-any]
        """The structured value (the run's ``output_schema`` answer) as an instance of ``kind``.

        A class with ``model_validate`` (a pydantic model) validates the value; otherwise a
        JSON object becomes ``kind(**value)`` (an attrs class, a dataclass, a ``TypedDict``)
        and any other value ``kind(value)``. A run without a structured value, or a value
        ``kind`` refuses (``TypeError`` or ``ValueError``, which pydantic's errors are), is an
        ``INVALID_ARGUMENT`` ``SubagentError`` naming ``structured``.
        """
        if not self.has_structured:
            raise SubagentError(
                ErrorCode.INVALID_ARGUMENT,
                "structured: the run has no structured value (start it with an output_schema)",
                field="structured",
            )
        value = self.structured
        validate = getattr(kind, "model_validate", None)
        try:
            if callable(validate):
                return cast(T, validate(value))
            if isinstance(value, Mapping):
                return kind(**value)
            return kind(value)
        except (TypeError, ValueError) as err:
            name = getattr(kind, "__name__", repr(kind))
            raise SubagentError(
                ErrorCode.INVALID_ARGUMENT,
                f"structured: the value does not fit {name}: {err}",
                field="structured",
                cause=err,
            ) from err


# --------------------------------------------------------------------------- descriptor

DESCRIPTOR_VERSION: Final = 2


class Mode(enum.Enum):
    """A child's lifecycle mode."""

    ONE_SHOT = "one-shot"
    CONTINUABLE = "continuable"


@attrs.frozen
class OneShotDescriptor:
    """``subagent/descriptor`` payload of a one-shot child (DESC-2)."""

    provider: str
    label: str | None = None

    @property
    def mode(self) -> Mode:
        return Mode.ONE_SHOT


@attrs.frozen
class ContinuableDescriptor:
    """``subagent/descriptor`` payload of a continuable child (DESC-3)."""

    provider: str
    label: str
    agent_provider: str | None = None
    agent_model: str | None = None
    persona: str | None = None
    tool_filter: ToolFilter | None = None

    @property
    def mode(self) -> Mode:
        return Mode.CONTINUABLE


SubagentDescriptorData: TypeAlias = OneShotDescriptor | ContinuableDescriptor
