"""Each chart (the oracle) has exactly the edges of its core transition table."""

from __future__ import annotations

import pytest
from statemachine.exceptions import TransitionNotAllowed

from dsh_subagent.core import oneshot, oneshot_observer
from dsh_subagent.spec import inbox
from dsh_subagent.spec.charts import (
    InboxMessageChart,
    OneShotRunChart,
    RunObservationChart,
    edges,
)


def test_one_4_one_shot_chart_matches_core_table() -> None:
    core = {(src, ev.__name__, dst) for (src, ev), dst in oneshot.TRANSITIONS.items()}
    assert edges(OneShotRunChart) == core


def test_evt_16_run_observation_chart_matches_core_table() -> None:
    table = oneshot_observer.TRANSITIONS
    core = {(src, ev.__name__, dst) for (src, ev), dst in table.items()}
    assert edges(RunObservationChart) == core


def test_harness_11_inbox_message_chart_matches_core_table() -> None:
    core = {(src, ev.value, dst) for (src, ev), dst in inbox.TRANSITIONS.items()}
    assert edges(InboxMessageChart) == core


def test_charts_are_strict_about_illegal_events() -> None:
    chart = InboxMessageChart()
    chart.send("claimed")
    with pytest.raises(TransitionNotAllowed):
        chart.send("discarded")
    run = OneShotRunChart()
    with pytest.raises(TransitionNotAllowed):
        run.send("ChildQuiesced")
    observed = RunObservationChart()
    observed.send("RunPublished")
    with pytest.raises(TransitionNotAllowed):
        observed.send("RunStarted")


def test_cont_10_activation_chart_matches_core_tables() -> None:
    from dsh_subagent.core import manager
    from dsh_subagent.spec.charts import ActivationChart

    core = {
        (s, e.__name__, target)
        for (s, e), edge in manager.TRANSITIONS.items()
        for target in (edge.target, edge.refused)
        if target is not None
    }
    core |= {(s, trigger.value, t) for (s, trigger), t in manager.STATE_TRIGGERED.items()}
    assert edges(ActivationChart) == core


def test_cont_5_activation_chart_guards_choose_the_refusal_edge() -> None:
    from dsh_subagent.core.manager.events import Phase
    from dsh_subagent.spec.charts import ActivationChart

    chart = ActivationChart()
    for event in ("ChildIdReserved", "DescriptorSnapshotted"):
        chart.send(event)
    chart.send("ChildPrepared", admission_lost=True)
    assert chart.current_state_value is Phase.ABSENT


def test_bg_31_job_chart_matches_core_table() -> None:
    from dsh_subagent.core import jobs
    from dsh_subagent.spec.charts import JobChart

    core = {(src, ev.__name__, dst) for (src, ev), dst in jobs.TRANSITIONS.items()}
    assert edges(JobChart) == core
    chart = JobChart()
    with pytest.raises(TransitionNotAllowed):
        chart.send("JobCompleted")


def test_harness_3_agent_activity_chart_matches_core_table() -> None:
    from dsh_subagent.core import activity
    from dsh_subagent.spec.charts import AgentActivityChart

    core = {(s, e.__name__, t) for (s, e), t in activity.TRANSITIONS.items()}
    assert edges(AgentActivityChart) == core


def test_harness_8_agent_activity_chart_is_strict() -> None:
    from dsh_subagent.core.activity import ActivityPhase
    from dsh_subagent.spec.charts import AgentActivityChart

    chart = AgentActivityChart()
    chart.send("MaintenanceRequested")
    with pytest.raises(TransitionNotAllowed):
        chart.send("MaintenanceRequested")
    with pytest.raises(TransitionNotAllowed):
        chart.send("DriverFinished")
    assert chart.current_state_value is ActivityPhase.MAINTENANCE
