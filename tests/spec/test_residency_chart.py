"""RES-1: the residency chart (oracle) agrees with the core's derivation, edge for edge."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import attrs
from hypothesis import given
from hypothesis import strategies as st

from dsh_subagent.core.residency import AgentStatus, Residency, ResidencyFacts, residency
from dsh_subagent.spec.charts import ResidencyChart, edges

Change = Callable[[ResidencyFacts], ResidencyFacts | None]
RUNNING, IDLE = AgentStatus.RUNNING, AgentStatus.IDLE


def _evolve(facts: ResidencyFacts, **changes: object) -> ResidencyFacts:
    return attrs.evolve(facts, **changes)  # type: ignore[arg-type]


FACT_EVENTS: dict[str, Change] = {
    "agent_started": lambda f: _evolve(f, status=RUNNING) if f.status is IDLE else None,
    "agent_idled": lambda f: _evolve(f, status=IDLE) if f.status is RUNNING else None,
    "message_admitted": lambda f: _evolve(f, accepted_count=f.accepted_count + 1),
    "message_left": lambda f: (
        _evolve(f, accepted_count=f.accepted_count - 1) if f.accepted_count else None
    ),
    "admission_closed": lambda f: _evolve(f, admission_open=False) if f.admission_open else None,
    "child_owned": lambda f: _evolve(f, owned_count=f.owned_count + 1),
    "child_released": lambda f: (
        _evolve(f, owned_count=f.owned_count - 1) if f.owned_count else None
    ),
}

SMALL_FACTS = [
    ResidencyFacts(status, accepted, owned, admission)
    for status, accepted, owned, admission in itertools.product(
        AgentStatus, range(3), range(3), (False, True)
    )
]


def core_edges() -> set[tuple[object, str, object]]:
    """The transition relation the core's ``residency`` induces over small fact spaces."""
    found: set[tuple[object, str, object]] = {
        ("absent", "materialized", Residency.RUNNING),
        (Residency.SETTLED, "released", "absent"),
    }
    for facts in SMALL_FACTS:
        before = residency(facts)
        if before is Residency.SETTLED:  # disposal opens in the same step (RES-6)
            continue
        for name, change in FACT_EVENTS.items():
            after = change(facts)
            if after is not None:
                found.add((before, name, residency(after)))
    return found


def test_res_1_residency_chart_matches_the_core_derivation() -> None:
    assert edges(ResidencyChart) == core_edges()


@given(st.lists(st.sampled_from(sorted(FACT_EVENTS)), max_size=40))
def test_res_1_chart_and_core_agree_in_lockstep(names: list[str]) -> None:
    chart = ResidencyChart()
    facts = ResidencyFacts(admission_open=True)
    chart.send("materialized")
    for name in names:
        after = FACT_EVENTS[name](facts)
        if after is None:
            continue
        facts = after
        chart.send(name, facts=facts)
        assert chart.current_state_value is residency(facts)
        if residency(facts) is Residency.SETTLED:
            chart.send("released")
            facts = ResidencyFacts(admission_open=True)
            chart.send("materialized")
