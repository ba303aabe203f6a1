"""Delegated policy: what a child may do is fixed at delegation and replayable from its log.

Theory of operation
-------------------
1. Capture (POLICY-1, POLICY-2): the parent's explicit sandbox override (the last
   ``sandbox/mode`` of the parent's log, ``None`` when it never switched) and an approval pin
   ``never`` whenever an approval service exists, whatever the parent's own policy. Inputs are
   plain values; the adapter captures before its first await.
2. Placement (POLICY-3..5): a fresh child's setup appends ``sandbox/mode {mode, source:
   "delegation"}`` (only if captured) then ``approval/policy {policy: "never", source:
   "delegation"}`` (only if pinned), after any fork seed, so they win over stale seed state
   under last-wins replay. An unswitched parent writes no sandbox event (the deployment
   default stays dynamic). Cold resume appends nothing.
3. Replay (HARNESS-27, POLICY-6): the effective policy of a log is the last value of each
   event type, so a child's own later switch wins, and a grandchild captures its parent's
   delegated mode naturally. A malformed policy payload is ``CORRUPT_SESSION``.
4. Sandbox modes are ``read-only``, ``workspace-write`` and ``danger-full-access``; anything
   else is ``INVALID_ARGUMENT`` naming the field.
5. Composition (POLICY-7): join the parent's preset (when a roster exists), add the
   delegation statement as runtime context ``subagent:delegation`` at order 120, a persona
   section ``deployment:persona`` at order 0 (an empty persona still shadows), then a tool
   restriction. The statement text is seed 000's, verbatim (it is user-visible).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Final, TypeAlias

import attrs

from dsh_subagent.core.errors import ErrorCode, SubagentError, invalid
from dsh_subagent.core.values import (
    APPROVAL_POLICY,
    SANDBOX_MODE,
    JsonObject,
    JsonValue,
    SessionEvent,
    ToolFilter,
)

DELEGATION_STATEMENT: Final = (
    "You are a delegated subagent: your permission scope was fixed when you were "
    "started and cannot be widened from inside this session — operations that require "
    "approval are rejected automatically. When the job needs access beyond that "
    "scope, do not retry the denied operation; state the limitation in your reply so "
    "the delegating agent can handle it."
)
"""The delegation-scope statement every in-process child sees (seed 000, verbatim)."""

DELEGATION_CONTEXT_NAME: Final = "subagent:delegation"
DELEGATION_CONTEXT_ORDER: Final = 120
PERSONA_SECTION_NAME: Final = "deployment:persona"
PERSONA_SECTION_ORDER: Final = 0
DELEGATION_SOURCE: Final = "delegation"
APPROVAL_NEVER: Final = "never"


class SandboxMode(enum.Enum):
    """The sandbox modes (HARNESS-27)."""

    READ_ONLY = "read-only"
    WORKSPACE_WRITE = "workspace-write"
    DANGER_FULL_ACCESS = "danger-full-access"


def parse_sandbox_mode(value: object, field: str) -> SandboxMode:
    """Return the sandbox mode spelled ``value``, or raise ``INVALID_ARGUMENT`` naming ``field``.

    raises: SubagentError
    """
    for mode in SandboxMode:
        if mode.value == value:
            return mode
    known = ", ".join(m.value for m in SandboxMode)
    raise invalid(field, f"{value!r} is not a sandbox mode (one of {known})")


# --------------------------------------------------------------------------- capture


@attrs.frozen
class DelegatedPolicy:
    """The policy captured at delegation: an explicit sandbox mode and/or the approval pin."""

    sandbox_mode: SandboxMode | None = None
    approval_never: bool = False


def capture_delegated_policy(
    sandbox_override: str | None, *, approval_available: bool
) -> DelegatedPolicy:
    """Capture the parent's explicit sandbox override and pin approval (POLICY-1).

    raises: SubagentError
    """
    mode = None
    if sandbox_override is not None:
        mode = parse_sandbox_mode(sandbox_override, "sandbox_override")
    return DelegatedPolicy(sandbox_mode=mode, approval_never=approval_available)


# --------------------------------------------------------------------------- log events


@attrs.frozen
class LogEntry:
    """A session event to append: its type and JSON payload."""

    type: str
    data: JsonObject


def sandbox_mode_data(mode: SandboxMode, *, source: str | None = DELEGATION_SOURCE) -> JsonObject:
    """``sandbox/mode`` payload."""
    data: dict[str, JsonValue] = {"mode": mode.value}
    if source is not None:
        data["source"] = source
    return data


def approval_policy_data(policy: str, *, source: str | None = DELEGATION_SOURCE) -> JsonObject:
    """``approval/policy`` payload."""
    data: dict[str, JsonValue] = {"policy": policy}
    if source is not None:
        data["source"] = source
    return data


def delegation_log_entries(policy: DelegatedPolicy, *, fresh: bool) -> tuple[LogEntry, ...]:
    """The events a child's setup appends after any seed: sandbox first, then approval.

    A cold resume (``fresh=False``) appends nothing: the persisted events are the state.

    post: fresh or __return__ == ()
    post: len(__return__) <= 2
    post: not fresh or len(__return__) >= int(policy.approval_never)
    """
    if not fresh:
        return ()
    entries: list[LogEntry] = []
    if policy.sandbox_mode is not None:
        entries.append(LogEntry(SANDBOX_MODE, sandbox_mode_data(policy.sandbox_mode)))
    if policy.approval_never:
        entries.append(LogEntry(APPROVAL_POLICY, approval_policy_data(APPROVAL_NEVER)))
    return tuple(entries)


# --------------------------------------------------------------------------- replay


@attrs.frozen
class EffectivePolicy:
    """A log's effective overrides; ``None`` means the deployment default applies."""

    sandbox_mode: SandboxMode | None = None
    approval_policy: str | None = None


def _payload_field(event: SessionEvent, key: str) -> str:
    field = f"{event.type}.{key}"
    value = event.data.get(key) if isinstance(event.data, Mapping) else None
    if not isinstance(value, str) or not value:
        raise SubagentError(
            ErrorCode.CORRUPT_SESSION, f"{field}: missing or not a string", field=field
        )
    return value


def effective_policy(events: Sequence[SessionEvent]) -> EffectivePolicy:
    """Replay a log: the last ``sandbox/mode`` and the last ``approval/policy`` win.

    raises: SubagentError
    """
    mode: SandboxMode | None = None
    approval: str | None = None
    for event in events:
        if event.type == SANDBOX_MODE:
            try:
                mode = parse_sandbox_mode(_payload_field(event, "mode"), "sandbox/mode.mode")
            except SubagentError as error:
                raise SubagentError(
                    ErrorCode.CORRUPT_SESSION, error.message, field=error.field, cause=error
                ) from error
        elif event.type == APPROVAL_POLICY:
            approval = _payload_field(event, "policy")
    return EffectivePolicy(sandbox_mode=mode, approval_policy=approval)


# --------------------------------------------------------------------------- composition


@attrs.frozen
class JoinParentPreset:
    """Join the parent's preset composition into the child scope."""


@attrs.frozen
class AddRuntimeContext:
    """Register a scoped runtime-context contribution."""

    name: str
    order: int
    text: str


@attrs.frozen
class AddPromptSection:
    """Register a scoped system-prompt section."""

    name: str
    order: int
    text: str


@attrs.frozen
class RestrictTools:
    """Install a scoped tool restriction."""

    tool_filter: ToolFilter


CompositionStep: TypeAlias = JoinParentPreset | AddRuntimeContext | AddPromptSection | RestrictTools


def child_composition(
    *, preset_roster: bool, persona: str | None, tool_filter: ToolFilter | None
) -> tuple[CompositionStep, ...]:
    """The child's composition steps in order (POLICY-7), for fresh creation and resume alike."""
    steps: list[CompositionStep] = []
    if preset_roster:
        steps.append(JoinParentPreset())
    steps.append(
        AddRuntimeContext(DELEGATION_CONTEXT_NAME, DELEGATION_CONTEXT_ORDER, DELEGATION_STATEMENT)
    )
    if persona is not None:
        steps.append(AddPromptSection(PERSONA_SECTION_NAME, PERSONA_SECTION_ORDER, persona))
    if tool_filter is not None:
        steps.append(RestrictTools(tool_filter))
    return tuple(steps)


__all__ = [
    "APPROVAL_NEVER",
    "DELEGATION_CONTEXT_NAME",
    "DELEGATION_CONTEXT_ORDER",
    "DELEGATION_SOURCE",
    "DELEGATION_STATEMENT",
    "PERSONA_SECTION_NAME",
    "PERSONA_SECTION_ORDER",
    "AddPromptSection",
    "AddRuntimeContext",
    "CompositionStep",
    "DelegatedPolicy",
    "EffectivePolicy",
    "JoinParentPreset",
    "LogEntry",
    "RestrictTools",
    "SandboxMode",
    "approval_policy_data",
    "capture_delegated_policy",
    "child_composition",
    "delegation_log_entries",
    "effective_policy",
    "parse_sandbox_mode",
    "sandbox_mode_data",
]
