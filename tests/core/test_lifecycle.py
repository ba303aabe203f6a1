"""Lifecycle event payloads and their JSON shapes (EVT-*); pairing is the observer's."""

from __future__ import annotations

import json

from dsh_subagent.core import lifecycle
from dsh_subagent.core.lifecycle import ProviderAddedInfo, ProviderRemovedInfo, RunStartInfo
from dsh_subagent.core.values import (
    EventId,
    KnownStop,
    Mode,
    OtherStop,
    RunId,
    SessionId,
    SubagentCapabilities,
)

E = EventId("e")


def start_info(run: str = "r1", provider: str = "spawn", child: str = "c1") -> RunStartInfo:
    return RunStartInfo(RunId(run), provider, child, True, SessionId("p"))


def test_evt_1_event_names_keep_the_seed_spelling() -> None:
    assert (
        lifecycle.PROVIDER_ADDED,
        lifecycle.PROVIDER_REMOVED,
        lifecycle.SUBAGENT_START,
        lifecycle.SUBAGENT_END,
    ) == (
        "subagent/provider-added",
        "subagent/provider-removed",
        "subagent/start",
        "subagent/end",
    )


def test_evt_1_provider_payloads() -> None:
    caps = SubagentCapabilities(output_schema=True, persona=True)
    added = lifecycle.provider_added_payload(ProviderAddedInfo("spawn", caps, continuable=True))
    assert added == {
        "provider": "spawn",
        "capabilities": {
            "outputSchema": True,
            "depthLimit": False,
            "toolFilter": False,
            "persona": True,
        },
        "continuable": True,
    }
    removed = lifecycle.provider_removed_payload(ProviderRemovedInfo("spawn"))
    assert removed == {"provider": "spawn"}


def test_evt_2_start_and_end_payloads_share_identity() -> None:
    info = RunStartInfo(RunId("r1"), "spawn", "c1", True, SessionId("p"), Mode.CONTINUABLE, "lbl")
    start = lifecycle.start_payload(info)
    assert start == {
        "runId": "r1",
        "provider": "spawn",
        "id": "c1",
        "local": True,
        "parentSession": "p",
        "mode": "continuable",
        "label": "lbl",
    }
    end = lifecycle.end_payload(lifecycle.end_info_for(info, KnownStop.COMPLETED, ("hi",)))
    assert {k: end[k] for k in start} == start
    assert end["stopReason"] == "completed"
    assert end["lastAssistantMessage"] == ["hi"]
    assert json.loads(json.dumps(end)) == end


def test_evt_2_start_payload_omits_absent_label() -> None:
    assert "label" not in lifecycle.start_payload(start_info())


def test_evt_6_end_message_only_for_non_empty_output() -> None:
    end = lifecycle.end_info_for(start_info(), OtherStop("quota"), ())
    assert end.last_assistant_message is None
    payload = lifecycle.end_payload(end)
    assert "lastAssistantMessage" not in payload
    assert payload["stopReason"] == "quota"


def test_evt_6_faulted_end_is_error_without_message() -> None:
    end = lifecycle.faulted_end_info(start_info())
    assert end.stop_reason is KnownStop.ERROR
    assert end.last_assistant_message is None


def test_evt_end_durability_failed_field_design_decision_1() -> None:
    end = lifecycle.end_info_for(start_info(), KnownStop.COMPLETED, durability_failed=True)
    assert lifecycle.end_payload(end)["durabilityFailed"] is True
    assert (
        lifecycle.end_payload(lifecycle.faulted_end_info(start_info()))["durabilityFailed"] is False
    )
