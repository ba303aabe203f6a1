"""Lifecycle event payloads and the start/end pairing monitor (EVT-*)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh_subagent.core import lifecycle
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.lifecycle import (
    PairingState,
    ProviderAdded,
    ProviderAddedInfo,
    ProviderRemoved,
    ProviderRemovedInfo,
    RunEnded,
    RunEndInfo,
    RunStarted,
    RunStartInfo,
)
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


def started(state: PairingState, info: RunStartInfo) -> PairingState:
    return lifecycle.apply(state, RunStarted(E, info))


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


def test_evt_16_paired_start_and_end_close_the_run() -> None:
    info = start_info()
    state = started(PairingState(), info)
    assert not lifecycle.is_paired(state)
    state = lifecycle.apply(state, RunEnded(E, lifecycle.end_info_for(info, KnownStop.COMPLETED)))
    assert lifecycle.is_paired(state)


def test_evt_16_end_without_start_is_a_violation() -> None:
    end = lifecycle.faulted_end_info(start_info())
    with pytest.raises(SubagentError) as caught:
        lifecycle.apply(PairingState(), RunEnded(E, end))
    assert caught.value.code is ErrorCode.ILLEGAL_TRANSITION


def test_evt_16_second_end_of_one_start_is_a_violation() -> None:
    info = start_info()
    end = RunEnded(E, lifecycle.faulted_end_info(info))
    state = lifecycle.apply(started(PairingState(), info), end)
    with pytest.raises(SubagentError):
        lifecycle.apply(state, end)


@pytest.mark.parametrize(
    "other",
    [
        start_info(provider="fork"),
        start_info(child="c2"),
        RunStartInfo(RunId("r1"), "spawn", "c1", False, SessionId("p")),
    ],
)
def test_evt_16_end_identity_must_match_start(other: RunStartInfo) -> None:
    state = started(PairingState(), start_info())
    with pytest.raises(SubagentError) as caught:
        lifecycle.apply(state, RunEnded(E, RunEndInfo(other, KnownStop.COMPLETED)))
    assert caught.value.code is ErrorCode.ILLEGAL_TRANSITION
    assert not lifecycle.end_matches_start(start_info(), RunEndInfo(other, KnownStop.ERROR))


def test_evt_3_run_id_never_repeats_even_after_its_end() -> None:
    info = start_info()
    state = started(PairingState(), info)
    state = lifecycle.apply(state, RunEnded(E, lifecycle.faulted_end_info(info)))
    with pytest.raises(SubagentError) as caught:
        started(state, start_info(child="c9"))
    assert caught.value.field == "run_id"


@pytest.mark.parametrize(
    ("info", "field"),
    [
        (start_info(provider=""), "provider"),
        (start_info(run=""), "run_id"),
        (start_info(child=""), "child_id"),
    ],
)
def test_evt_16_start_fields_must_be_non_empty(info: RunStartInfo, field: str) -> None:
    with pytest.raises(SubagentError) as caught:
        started(PairingState(), info)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert caught.value.field == field


@pytest.mark.parametrize("run", ["spawn", "c1"])
def test_evt_3_run_id_is_never_a_reusable_name(run: str) -> None:
    with pytest.raises(SubagentError) as caught:
        started(PairingState(), start_info(run=run))
    assert caught.value.field == "run_id"


def test_evt_16_provider_registry_invariants() -> None:
    state = lifecycle.apply(PairingState(), ProviderAdded(E, ProviderAddedInfo("spawn")))
    with pytest.raises(SubagentError):
        lifecycle.apply(state, ProviderAdded(E, ProviderAddedInfo("spawn")))
    with pytest.raises(SubagentError) as empty:
        lifecycle.apply(state, ProviderAdded(E, ProviderAddedInfo("")))
    assert empty.value.code is ErrorCode.INVALID_ARGUMENT
    state = lifecycle.apply(state, ProviderRemoved(E, ProviderRemovedInfo("spawn")))
    assert state.providers == frozenset()
    with pytest.raises(SubagentError):
        lifecycle.apply(state, ProviderRemoved(E, ProviderRemovedInfo("spawn")))


def test_evt_5_start_of_a_removed_provider_is_allowed() -> None:
    state = lifecycle.apply(PairingState(), ProviderAdded(E, ProviderAddedInfo("spawn")))
    state = lifecycle.apply(state, ProviderRemoved(E, ProviderRemovedInfo("spawn")))
    assert not lifecycle.is_paired(started(state, start_info(provider="spawn")))


@given(st.lists(st.integers(min_value=0, max_value=5), max_size=30))
def test_evt_16_interleaved_runs_pair_exactly_once(order: list[int]) -> None:
    """Any interleaving of distinct runs, each ended once after its start, pairs cleanly."""
    state = PairingState()
    open_infos: dict[int, RunStartInfo] = {}
    for step, slot in enumerate(order):
        if slot in open_infos:
            info = open_infos.pop(slot)
            state = lifecycle.apply(state, RunEnded(E, lifecycle.faulted_end_info(info)))
        else:
            open_infos[slot] = start_info(run=f"r{step}", child=f"c{slot}")
            state = started(state, open_infos[slot])
        assert set(state.open_runs) == {i.run_id for i in open_infos.values()}
    assert lifecycle.is_paired(state) == (not open_infos)
