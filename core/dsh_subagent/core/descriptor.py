"""The durable ``subagent/descriptor``: snapshot, JSON payload, parse and fold.

Theory of operation
-------------------
1. The descriptor is a child's durable identity: provider and mode, an optional (one-shot) or
   required (continuable) label, and for continuable children the explicit cold-resume
   composition (agent provider/model, persona, tool filter). It never carries depth, output
   schema or per-activation knobs (DESC-1..4).
2. ``snapshot_descriptor`` validates and detaches its inputs before any provider work
   (DESC-5). Where upstream raises a plain error, this port raises ``INVALID_ARGUMENT``
   naming the field (ERR-18, project standard "bad input gets a typed SubagentError").
3. The payload is JSON with camelCase keys and ``version: 2``. Parsing follows DESC-6 in order;
   its outcome is data: a descriptor, or a ``DescriptorProblem`` that is either **corrupt**
   (a malformed current-version payload) or **unsupported** (another version, never looked
   at further, DESC-7).
4. ``fold_descriptor`` reads only the child's own suffix ``events[seed_length:]`` (DESC-9)
   and keeps both the first and the last descriptor event: resume takes the first (DESC-8),
   listing and projections take the last (PROJ-4, A7); they differ only on corrupt logs
   holding more than one (DESC-14).
5. ``resume_descriptor`` decides cold-resume input (DESC-10): no descriptor, an unsupported
   version or a one-shot child are ``NOT_RESUMABLE``; a malformed one is
   ``CORRUPT_DESCRIPTOR`` (upstream lets a plain error escape, A8; this port types it).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Final

import attrs

from dsh_subagent.core.capabilities import validate_tool_filter
from dsh_subagent.core.errors import ErrorCode, SubagentError, invalid
from dsh_subagent.core.jsonvalue import require_str
from dsh_subagent.core.values import (
    DESCRIPTOR_EVENT,
    DESCRIPTOR_VERSION,
    ContinuableDescriptor,
    JsonObject,
    JsonValue,
    Mode,
    OneShotDescriptor,
    SessionEvent,
    SubagentDescriptorData,
    SubagentStartRequest,
    ToolFilter,
)

_BASE_KEYS: Final = frozenset({"version", "mode", "provider", "label"})
_ALLOWED_KEYS: Final = {
    Mode.ONE_SHOT: _BASE_KEYS,
    Mode.CONTINUABLE: _BASE_KEYS | {"agentProvider", "agentModel", "persona", "toolFilter"},
}
_TOOL_FILTER_KEYS: Final = frozenset({"allow", "deny"})


class ProblemKind(enum.Enum):
    """Why a persisted descriptor payload could not be used."""

    CORRUPT = "corrupt"
    UNSUPPORTED = "unsupported"


@attrs.frozen
class DescriptorProblem:
    """A descriptor payload this runtime cannot use, with the offending field when corrupt."""

    kind: ProblemKind
    message: str
    field: str | None = None


DescriptorOutcome = SubagentDescriptorData | DescriptorProblem


@attrs.frozen
class DescriptorFold:
    """The descriptor events of a child's own suffix: first, last and how many there were."""

    first: DescriptorOutcome | None = None
    last: DescriptorOutcome | None = None
    count: int = 0


# --------------------------------------------------------------------------- snapshot


def snapshot_descriptor(
    *,
    mode: Mode,
    provider: str,
    label: str | None = None,
    agent_provider: str | None = None,
    agent_model: str | None = None,
    persona: str | None = None,
    tool_filter: ToolFilter | None = None,
) -> SubagentDescriptorData:
    """Validate and detach a descriptor's inputs (DESC-5); continuable requires a label.

    raises: SubagentError
    """
    if mode is Mode.ONE_SHOT:
        extras = {
            "agent_provider": agent_provider,
            "agent_model": agent_model,
            "persona": persona,
            "tool_filter": tool_filter,
        }
        for name, value in extras.items():
            if value is not None:
                raise invalid(f"descriptor.{name}", "only a continuable descriptor carries it")
        return _one_shot(provider, label)
    provider = require_str(provider, "descriptor.provider", non_empty=True)
    if label is None:
        raise invalid("descriptor.label", "a continuable descriptor requires a label")
    label = require_str(label, "descriptor.label", non_empty=True)
    if agent_provider is not None:
        require_str(agent_provider, "descriptor.agent_provider", non_empty=True)
    if agent_model is not None:
        require_str(agent_model, "descriptor.agent_model", non_empty=True)
    if persona is not None:
        require_str(persona, "descriptor.persona")
    if tool_filter is not None:
        tool_filter = validate_tool_filter(tool_filter, "descriptor.tool_filter")
    return ContinuableDescriptor(
        provider=provider,
        label=label,
        agent_provider=agent_provider,
        agent_model=agent_model,
        persona=persona,
        tool_filter=tool_filter,
    )


def one_shot_descriptor(provider: str, request: SubagentStartRequest) -> OneShotDescriptor:
    """The descriptor a one-shot start resolves: lookup name plus the request's label (ONE-3).

    raises: SubagentError
    """
    return _one_shot(provider, request.label)


def _one_shot(provider: str, label: str | None) -> OneShotDescriptor:
    provider = require_str(provider, "descriptor.provider", non_empty=True)
    if label is not None:
        label = require_str(label, "descriptor.label", non_empty=True)
    return OneShotDescriptor(provider=provider, label=label)


# --------------------------------------------------------------------------- payload


def descriptor_to_payload(descriptor: SubagentDescriptorData) -> JsonObject:
    """The ``subagent/descriptor`` event payload: ``version: 2``, present fields only.

    post: __return__["version"] == DESCRIPTOR_VERSION
    post: __return__["mode"] == descriptor.mode.value
    post: ("label" in __return__) == (descriptor.label is not None)
    """
    payload: dict[str, JsonValue] = {
        "version": DESCRIPTOR_VERSION,
        "mode": descriptor.mode.value,
        "provider": descriptor.provider,
    }
    if descriptor.label is not None:
        payload["label"] = descriptor.label
    if isinstance(descriptor, ContinuableDescriptor):
        optional: dict[str, str | None] = {
            "agentProvider": descriptor.agent_provider,
            "agentModel": descriptor.agent_model,
            "persona": descriptor.persona,
        }
        payload.update({key: value for key, value in optional.items() if value is not None})
        if descriptor.tool_filter is not None:
            payload["toolFilter"] = _tool_filter_payload(descriptor.tool_filter)
    return payload


def _tool_filter_payload(tool_filter: ToolFilter) -> JsonObject:
    lists = {"allow": tool_filter.allow, "deny": tool_filter.deny}
    return {key: list(names) for key, names in lists.items() if names is not None}


class _Corrupt(Exception):
    """Internal: a malformed current-version payload; surfaces as a ``DescriptorProblem``."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def parse_descriptor_payload(payload: JsonValue) -> SubagentDescriptorData | DescriptorProblem:
    """Classify a persisted payload (DESC-6, DESC-7): a descriptor, corrupt or unsupported."""
    try:
        return _parse(payload)
    except _Corrupt as corrupt:
        return DescriptorProblem(ProblemKind.CORRUPT, str(corrupt), corrupt.field)


def _parse(payload: JsonValue) -> SubagentDescriptorData | DescriptorProblem:
    if not isinstance(payload, Mapping):
        raise _Corrupt("payload", "the payload must be an object")
    version = payload.get("version")
    if isinstance(version, bool) or not isinstance(version, int | float):
        raise _Corrupt("payload.version", "the version must be a number")
    if version != DESCRIPTOR_VERSION:
        return DescriptorProblem(
            ProblemKind.UNSUPPORTED, f"descriptor version {version} is not supported"
        )
    mode = next((m for m in Mode if m.value == payload.get("mode")), None)
    if mode is None:
        raise _Corrupt("payload.mode", 'the mode must be "one-shot" or "continuable"')
    _known_keys(payload, _ALLOWED_KEYS[mode], "payload")
    provider = _string(payload, "provider")
    if mode is Mode.ONE_SHOT:
        return OneShotDescriptor(provider=provider, label=_optional_string(payload, "label"))
    label = _string(payload, "label")
    tool_filter = None
    if "toolFilter" in payload:
        tool_filter = _parse_tool_filter(payload["toolFilter"])
    return ContinuableDescriptor(
        provider=provider,
        label=label,
        agent_provider=_optional_string(payload, "agentProvider"),
        agent_model=_optional_string(payload, "agentModel"),
        persona=_optional_string(payload, "persona"),
        tool_filter=tool_filter,
    )


def _known_keys(value: Mapping[str, JsonValue], allowed: frozenset[str], path: str) -> None:
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise _Corrupt(f"{path}.{unknown[0]}", f"unknown field {unknown[0]!r}")


def _string(payload: Mapping[str, JsonValue], key: str) -> str:
    value = payload.get(key)
    if not isinstance(value, str):
        raise _Corrupt(f"payload.{key}", f"{key} must be a string")
    return value


def _optional_string(payload: Mapping[str, JsonValue], key: str) -> str | None:
    return _string(payload, key) if key in payload else None


def _parse_tool_filter(value: JsonValue) -> ToolFilter:
    if not isinstance(value, Mapping):
        raise _Corrupt("payload.toolFilter", "toolFilter must be an object")
    _known_keys(value, _TOOL_FILTER_KEYS, "payload.toolFilter")
    if not value:
        raise _Corrupt("payload.toolFilter", "toolFilter must declare allow and/or deny")
    lists: dict[str, tuple[str, ...]] = {}
    for key, names in value.items():
        field = f"payload.toolFilter.{key}"
        if isinstance(names, str) or not isinstance(names, Sequence):
            raise _Corrupt(field, f"{key} must be an array of strings")
        if not all(isinstance(name, str) for name in names):
            raise _Corrupt(field, f"{key} must be an array of strings")
        lists[key] = tuple(str(name) for name in names)
    return ToolFilter(allow=lists.get("allow"), deny=lists.get("deny"))


# --------------------------------------------------------------------------- fold


def fold_descriptor(events: Sequence[SessionEvent], seed_length: int | None) -> DescriptorFold:
    """Fold the ``subagent/descriptor`` events of the own suffix ``events[seed_length:]``.

    raises: SubagentError
    """
    start = seed_length or 0
    if isinstance(start, bool) or not 0 <= start <= len(events):
        raise SubagentError(
            ErrorCode.CORRUPT_SESSION,
            f"seed length {seed_length!r} does not fit a log of {len(events)} events",
            field="header.seed_length",
        )
    first: DescriptorOutcome | None = None
    last: DescriptorOutcome | None = None
    count = 0
    for index in range(start, len(events)):
        event = events[index]
        if event.type == DESCRIPTOR_EVENT:
            last = parse_descriptor_payload(event.data)
            first = last if first is None else first
            count += 1
    return DescriptorFold(first=first, last=last, count=count)


def resume_descriptor(fold: DescriptorFold) -> ContinuableDescriptor:
    """The cold-resume input: the first own descriptor, which must be continuable (DESC-10).

    raises: SubagentError
    """
    found = fold.first
    if isinstance(found, ContinuableDescriptor):
        return found
    if isinstance(found, DescriptorProblem) and found.kind is ProblemKind.CORRUPT:
        raise SubagentError(
            ErrorCode.CORRUPT_DESCRIPTOR,
            f"the persisted subagent descriptor is corrupt: {found.message}",
            field=found.field,
        )
    raise SubagentError(
        ErrorCode.NOT_RESUMABLE,
        "the child has no supported continuable descriptor and cannot be resumed; "
        "do not retry send_message with this id",
    )


__all__ = [
    "DescriptorFold",
    "DescriptorOutcome",
    "DescriptorProblem",
    "ProblemKind",
    "descriptor_to_payload",
    "fold_descriptor",
    "one_shot_descriptor",
    "parse_descriptor_payload",
    "resume_descriptor",
    "snapshot_descriptor",
]
