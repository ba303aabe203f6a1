"""Residency derivation (RES-*): derived from facts, never stored."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dsh_subagent.core.residency import (
    ActivationState,
    AgentStatus,
    Residency,
    ResidencyFacts,
    activation_state,
    admit,
    residency,
    settle_message,
)
from dsh_subagent.core.values import MessageId

facts = st.builds(
    ResidencyFacts,
    status=st.sampled_from(AgentStatus),
    accepted_count=st.integers(0, 3),
    owned_count=st.integers(0, 3),
    admission_open=st.booleans(),
)


@given(facts)
def test_res_1_residency_is_a_function_of_facts(f: ResidencyFacts) -> None:
    busy = f.status is AgentStatus.RUNNING or f.accepted_count > 0 or f.admission_open
    expected = (
        Residency.RUNNING if busy else Residency.WAITING if f.owned_count else Residency.SETTLED
    )
    assert residency(f) is expected


def test_res_2_accounting_adds_before_send_and_removes_on_claim_or_discard() -> None:
    accepted = admit(frozenset(), MessageId("m1"))
    assert residency(ResidencyFacts(accepted_count=len(accepted))) is Residency.RUNNING
    assert settle_message(accepted, MessageId("m1")) == frozenset()


def test_res_3_idle_status_with_latched_message_is_running() -> None:
    # Maintenance reads as idle (HARNESS-2); the accounted message keeps it running.
    f = ResidencyFacts(status=AgentStatus.IDLE, accepted_count=1)
    assert residency(f) is Residency.RUNNING


def test_res_4_admission_in_flight_blocks_settlement() -> None:
    assert residency(ResidencyFacts(admission_open=True)) is Residency.RUNNING


def test_res_11_ids_never_admitted_are_ignored() -> None:
    accepted = frozenset({MessageId("mine")})
    assert settle_message(accepted, MessageId("bypassed")) == accepted


def test_res_12_idle_with_owned_children_is_waiting() -> None:
    assert residency(ResidencyFacts(owned_count=2)) is Residency.WAITING


def test_res_1_public_view_maps_settled_and_absent_to_none() -> None:
    assert activation_state(None) is None
    assert activation_state(ResidencyFacts()) is None
    assert activation_state(ResidencyFacts(owned_count=1)) is ActivationState.WAITING
    running = ResidencyFacts(status=AgentStatus.RUNNING)
    assert activation_state(running) is ActivationState.RUNNING
