"""Lifecycle event payloads (``subagent/start`` / ``subagent/end`` / provider events) and pairing.

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
   is present only for non-empty output (EVT-6); ``durability_failed`` is DESIGN decision 1.
4. ``PairingState`` / ``apply`` is the invariant companion (EVT-16): a monitor over the
   observed event stream. It is not a machine with effects, so ``apply`` returns only the new
   state; a violated invariant raises ``SubagentError`` (``INVALID_ARGUMENT`` for an empty
   name or id, ``ILLEGAL_TRANSITION`` for a pairing or registry violation). A start naming a
   provider that is no longer registered is allowed.
5. Run ids must never repeat, not even after their end (EVT-3 "fresh"): the tracker remembers
   every run id it saw (memory grows with the runs observed). Runs live in persistent maps, so
   one event costs O(log n), never a copy of every open run.
"""

from __future__ import annotations

from typing import Final, TypeAlias

import attrs

from dsh_subagent.core.errors import ErrorCode, SubagentError, invalid
from dsh_subagent.core.pmap import PMap
from dsh_subagent.core.values import (
    EventId,
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


# --------------------------------------------------------------------------- pairing monitor


@attrs.frozen
class ProviderAdded:
    """A ``subagent/provider-added`` event was observed."""

    event_id: EventId
    info: ProviderAddedInfo


@attrs.frozen
class ProviderRemoved:
    """A ``subagent/provider-removed`` event was observed."""

    event_id: EventId
    info: ProviderRemovedInfo


@attrs.frozen
class RunStarted:
    """A ``subagent/start`` event was observed."""

    event_id: EventId
    info: RunStartInfo


@attrs.frozen
class RunEnded:
    """A ``subagent/end`` event was observed."""

    event_id: EventId
    info: RunEndInfo


LifecycleEvent: TypeAlias = ProviderAdded | ProviderRemoved | RunStarted | RunEnded


@attrs.frozen
class PairingState:
    """What the monitor knows: registered providers, open runs, every run id ever started."""

    providers: frozenset[str] = frozenset()
    open_runs: PMap[RunId, RunStartInfo] = attrs.field(factory=PMap)
    seen_run_ids: PMap[RunId, bool] = attrs.field(factory=PMap)


def _violation(field: str, message: str) -> SubagentError:
    return SubagentError(ErrorCode.ILLEGAL_TRANSITION, message, field=field)


def check_end(start: RunStartInfo | None, end: RunEndInfo) -> RunStartInfo:
    """The open start that ``end`` closes; refuses an end without one or with another identity.

    post: __return__ == start
    post: end_matches_start(__return__, end)
    raises: SubagentError
    """
    run_id = end.start.run_id
    if start is None:
        raise _violation("run_id", f"end of run {run_id!r} has no open start")
    if not end_matches_start(start, end):
        raise _violation("run_id", f"end of run {run_id!r} diverges from its start")
    return start


def apply(state: PairingState, event: LifecycleEvent) -> PairingState:
    """Fold one observed lifecycle event, raising on a broken invariant (EVT-16).

    raises: SubagentError
    """
    match event:
        case ProviderAdded(info=ProviderAddedInfo(name=name)):
            if not name:
                raise invalid("provider", "must not be empty")
            if name in state.providers:
                raise _violation("provider", f"provider {name!r} added twice")
            return attrs.evolve(state, providers=state.providers | {name})
        case ProviderRemoved(info=ProviderRemovedInfo(name=name)):
            if name not in state.providers:
                raise _violation("provider", f"removal names unknown provider {name!r}")
            return attrs.evolve(state, providers=state.providers - {name})
        case RunStarted(info=info):
            check_start_info(info)
            if info.run_id in state.seen_run_ids:
                raise _violation("run_id", f"run id {info.run_id!r} repeated")
            return attrs.evolve(
                state,
                open_runs=state.open_runs.set(info.run_id, info),
                seen_run_ids=state.seen_run_ids.set(info.run_id, True),
            )
    run_id = event.info.start.run_id
    check_end(state.open_runs.get(run_id), event.info)
    return attrs.evolve(state, open_runs=state.open_runs.remove(run_id))


def is_paired(state: PairingState) -> bool:
    """Whether every observed start has had its end (no run left open)."""
    return not state.open_runs


__all__ = [
    "PROVIDER_ADDED",
    "PROVIDER_REMOVED",
    "SUBAGENT_END",
    "SUBAGENT_START",
    "LifecycleEvent",
    "PairingState",
    "ProviderAdded",
    "ProviderAddedInfo",
    "ProviderRemoved",
    "ProviderRemovedInfo",
    "RunEndInfo",
    "RunEnded",
    "RunStartInfo",
    "RunStarted",
    "apply",
    "check_end",
    "check_start_info",
    "end_info_for",
    "end_matches_start",
    "end_payload",
    "faulted_end_info",
    "is_paired",
    "provider_added_payload",
    "provider_removed_payload",
    "start_payload",
]
