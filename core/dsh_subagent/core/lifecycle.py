"""Lifecycle event payloads (``subagent/start`` / ``subagent/end`` / provider events).

Theory of operation
-------------------
1. The seam emits four observe-only events (EVT-1): ``subagent/provider-added``,
   ``subagent/provider-removed``, ``subagent/start`` and ``subagent/end``. Their payloads are the
   frozen values here; ``*_payload`` functions give the one JSON shape (camelCase keys) that
   every writer and reader uses.
2. A run's identity is ``RunStartInfo``: the service-minted ``run_id`` (EVT-3, supplied in,
   never derived from provider or session names), the provider name recorded when the child
   was first created (EVT-5), the child id, the ``local`` snapshot (EVT-4), the delegating
   parent session (EVT-12 scoping) and the child's mode and label.
3. ``RunEndInfo`` embeds the very ``RunStartInfo`` of its start, so an end built with
   ``end_info_for`` carries the same identity by construction (EVT-2). ``last_assistant_message``
   is present only for non-empty output (EVT-6); ``durability_failed`` says the final flush
   of the child's session failed or was not confirmed (the stop reason stays as it was).
4. Pairing a stream's starts with its ends (EVT-16) is the observer machine's job
   (``core.oneshot_observer``); this module only says what a well-formed start is
   (``check_start_info``) and whether an end carries its start's identity.
"""

from __future__ import annotations

from typing import Final

import attrs

from dsh_subagent.core.errors import invalid
from dsh_subagent.core.values import (
    JsonObject,
    JsonValue,
    KnownStop,
    Mode,
    RunId,
    SessionId,
    StopReason,
    SubagentCapabilities,
    stop_reason_text,
)

SUBAGENT_START: Final = "subagent/start"
SUBAGENT_END: Final = "subagent/end"
PROVIDER_ADDED: Final = "subagent/provider-added"
PROVIDER_REMOVED: Final = "subagent/provider-removed"


# --------------------------------------------------------------------------- payload values


@attrs.frozen
class RunStartInfo:
    """``subagent/start`` payload: the run's identity, shared by its ``subagent/end``."""

    run_id: RunId
    provider: str
    child_id: str
    local: bool
    parent_session: SessionId
    mode: Mode = Mode.ONE_SHOT
    label: str | None = None


@attrs.frozen
class RunEndInfo:
    """``subagent/end`` payload: the start identity plus the run's outcome."""

    start: RunStartInfo
    stop_reason: StopReason
    last_assistant_message: tuple[JsonValue, ...] | None = None
    durability_failed: bool = False


@attrs.frozen
class ProviderAddedInfo:
    """``subagent/provider-added`` payload."""

    name: str
    capabilities: SubagentCapabilities = attrs.field(factory=SubagentCapabilities)
    continuable: bool = False


@attrs.frozen
class ProviderRemovedInfo:
    """``subagent/provider-removed`` payload."""

    name: str


def check_start_info(info: RunStartInfo) -> None:
    """Refuse a start with an empty provider, run id or child id (EVT-16), or whose run id
    is one of the reusable names (the provider or the child id, EVT-3).

    raises: SubagentError
    """
    for field, value in (
        ("provider", info.provider),
        ("run_id", info.run_id),
        ("child_id", info.child_id),
    ):
        if not value:
            raise invalid(field, "must not be empty")
    if info.run_id in (info.provider, info.child_id):
        raise invalid("run_id", "must be minted fresh, not taken from the provider or child id")


def end_info_for(
    start: RunStartInfo,
    stop_reason: StopReason,
    output: tuple[JsonValue, ...] = (),
    *,
    durability_failed: bool = False,
) -> RunEndInfo:
    """The end of ``start``: the output becomes ``last_assistant_message`` only if non-empty.

    post: __return__.start == start
    post: (__return__.last_assistant_message is None) == (len(output) == 0)
    """
    return RunEndInfo(start, stop_reason, output or None, durability_failed)


def faulted_end_info(start: RunStartInfo) -> RunEndInfo:
    """The end of a run whose result rejected: ``error`` and no message (EVT-6, ONE-16)."""
    return RunEndInfo(start, KnownStop.ERROR)


def end_matches_start(start: RunStartInfo, end: RunEndInfo) -> bool:
    """Whether ``end`` carries the identity of ``start`` (same run id, provider, id, local).

    post: __return__ or end.start != start
    """
    other = end.start
    return (
        other.run_id == start.run_id
        and other.provider == start.provider
        and other.child_id == start.child_id
        and other.local == start.local
    )


# --------------------------------------------------------------------------- JSON shapes


def start_payload(info: RunStartInfo) -> JsonObject:
    """JSON form of a ``subagent/start`` payload."""
    data: dict[str, JsonValue] = {
        "runId": info.run_id,
        "provider": info.provider,
        "id": info.child_id,
        "local": info.local,
        "parentSession": info.parent_session,
        "mode": info.mode.value,
    }
    if info.label is not None:
        data["label"] = info.label
    return data


def end_payload(info: RunEndInfo) -> JsonObject:
    """JSON form of a ``subagent/end`` payload (``lastAssistantMessage`` only when present)."""
    data: dict[str, JsonValue] = {
        **start_payload(info.start),
        "stopReason": stop_reason_text(info.stop_reason),
        "durabilityFailed": info.durability_failed,
    }
    if info.last_assistant_message is not None:
        data["lastAssistantMessage"] = list(info.last_assistant_message)
    return data


def provider_added_payload(info: ProviderAddedInfo) -> JsonObject:
    """JSON form of a ``subagent/provider-added`` payload."""
    caps = info.capabilities
    return {
        "provider": info.name,
        "capabilities": {
            "outputSchema": caps.output_schema,
            "depthLimit": caps.depth_limit,
            "toolFilter": caps.tool_filter,
            "persona": caps.persona,
        },
        "continuable": info.continuable,
    }


def provider_removed_payload(info: ProviderRemovedInfo) -> JsonObject:
    """JSON form of a ``subagent/provider-removed`` payload."""
    return {"provider": info.name}


__all__ = [
    "PROVIDER_ADDED",
    "PROVIDER_REMOVED",
    "SUBAGENT_END",
    "SUBAGENT_START",
    "ProviderAddedInfo",
    "ProviderRemovedInfo",
    "RunEndInfo",
    "RunStartInfo",
    "check_start_info",
    "end_info_for",
    "end_matches_start",
    "end_payload",
    "faulted_end_info",
    "provider_added_payload",
    "provider_removed_payload",
    "start_payload",
]
