"""Observer rules the mutation check found unpinned (docs/mutation.md lists each mutant)."""

from __future__ import annotations

from dsh_subagent.core import oneshot_observer
from dsh_subagent.core.lifecycle import RunEndInfo, RunStartInfo
from dsh_subagent.core.oneshot_observer import EmitRunEnd, Observation, RunFaulted, RunPublished
from dsh_subagent.core.values import EventId, KnownStop, Mode, RunId, SessionId

RUN = RunId("run-1")


def test_evt_6_a_faulted_run_ends_as_an_error_of_its_start() -> None:
    publish = RunPublished(EventId("p"), RUN, "spawn", "child-1", True, SessionId("parent"))
    state, _ = oneshot_observer.apply(Observation(), publish)
    _, effects = oneshot_observer.apply(state, RunFaulted(EventId("f"), RUN, "lost"))
    start = RunStartInfo(RUN, "spawn", "child-1", True, SessionId("parent"), mode=Mode.ONE_SHOT)
    assert effects == (EmitRunEnd(EventId("f"), RunEndInfo(start, KnownStop.ERROR)),)
