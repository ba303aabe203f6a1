"""Each chart (the oracle) has exactly the edges of its core transition table."""

from __future__ import annotations

import pytest
from statemachine.exceptions import TransitionNotAllowed

from dsh_subagent.core import inbox, oneshot
from dsh_subagent.spec.charts import InboxMessageChart, OneShotRunChart, edges


def test_one_4_one_shot_chart_matches_core_table() -> None:
    core = {(src, ev.__name__, dst) for (src, ev), dst in oneshot.TRANSITIONS.items()}
    assert edges(OneShotRunChart) == core


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
