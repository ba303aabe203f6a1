"""The pure, IO-free core of the subagent seam.

Values, errors and transition functions only: no asyncio, clocks, randomness or IO. Ids and
times arrive as event fields. The machines live in their own modules
(``dsh_subagent.core.manager``, ``.oneshot``, ``.activity``, ``.jobs``); this package exports
the value vocabulary and the error type. See ``docs/spec.md`` for the rules each module
implements.
"""

from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.residency import ActivationState, Residency
from dsh_subagent.core.values import (
    AgentOptions,
    BaseSource,
    BaseSourceKind,
    Content,
    ContentBlock,
    ContinuableDescriptor,
    CoordinatorSource,
    DataBlock,
    JsonObject,
    JsonValue,
    KnownStop,
    MessageId,
    MessageSource,
    Mode,
    OneShotDescriptor,
    OtherStop,
    ParentRef,
    RunId,
    SessionEvent,
    SessionHeader,
    SessionId,
    StopReason,
    SubagentCapabilities,
    SubagentDescriptorData,
    SubagentIntent,
    SubagentReportSource,
    SubagentResult,
    SubagentSettledSource,
    SubagentStartRequest,
    TextBlock,
    ToolFilter,
    UserMessage,
)

__all__ = [
    "ActivationState",
    "AgentOptions",
    "BaseSource",
    "BaseSourceKind",
    "Content",
    "ContentBlock",
    "ContinuableDescriptor",
    "CoordinatorSource",
    "DataBlock",
    "ErrorCode",
    "JsonObject",
    "JsonValue",
    "KnownStop",
    "MessageId",
    "MessageSource",
    "Mode",
    "OneShotDescriptor",
    "OtherStop",
    "ParentRef",
    "Residency",
    "RunId",
    "SessionEvent",
    "SessionHeader",
    "SessionId",
    "StopReason",
    "SubagentCapabilities",
    "SubagentDescriptorData",
    "SubagentError",
    "SubagentIntent",
    "SubagentReportSource",
    "SubagentResult",
    "SubagentSettledSource",
    "SubagentStartRequest",
    "TextBlock",
    "ToolFilter",
    "UserMessage",
]
