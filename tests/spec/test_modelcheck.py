"""Exhaustive small-scope model checking of the manager (``dsh_subagent.spec.modelcheck``).

The small scope is explored whole with every check holding; the medium scope is a soak run
(``DSH_SOAK=1``). Each bug the stateful machines once found is planted by monkeypatching the
core and must be found by the search, with a shortest trace of a pinned length. Every search
runs once: the tests that read one share it through a cached function (the suite's slowest),
called from the tests themselves so that ``no_cover`` pauses coverage over it (the searches run
the core under branch tracing several times slower, and the core's coverage comes from its
unit tests).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from dsh_subagent.core import activity, jobs, manager, oneshot, oneshot_observer
from dsh_subagent.core.authority import ALLOWED
from dsh_subagent.core.manager import TRANSITIONS, Outcome
from dsh_subagent.core.manager import state as manager_state
from dsh_subagent.core.manager.effects import Effect, SendNotice
from dsh_subagent.core.manager.events import (
    ChildEvent,
    DisposalFinished,
    MessageDiscarded,
    Phase,
    Trigger,
)
from dsh_subagent.core.manager.state import STATE_TRIGGERED, Activation, ManagerState, Step
from dsh_subagent.core.oneshot_observer import Observation
from dsh_subagent.core.values import SessionId
from dsh_subagent.spec import modelcheck
from dsh_subagent.spec.bfs import Result, search
from dsh_subagent.spec.invariants import STATE_INVARIANTS, check_trace
from dsh_subagent.spec.modelcheck import (
    SCOPES,
    Scope,
    explore,
    format_trace,
    replay,
    trace_text,
)

REPORT = "model check"  # these properties are printed after the run (conftest.py)


pytestmark = pytest.mark.no_cover


@functools.cache
def small_scope() -> Result:
    """The small scope, searched once for every test that reads it."""
    return explore(SCOPES["small"])


@functools.cache
def resume_scope() -> Result:
    """One child with cold resume: the edges the small scope leaves out."""
    return explore(Scope(("a",), depth=1))


def test_exh_1_small_scope_is_explored_whole_with_every_invariant_holding(
    record_property: Callable[[str, object], None],
) -> None:
    small = small_scope()
    record_property(REPORT, f"manager {modelcheck.summary(small)}")
    assert small.violations == ()
    assert small.states > 1_000
    for inv in STATE_INVARIANTS:
        assert small.checks[inv.id] == small.states
    assert small.checks["INV-MC-3"] == small.states


def test_exh_3_every_activation_chart_edge_is_taken_by_the_small_or_the_resume_scope() -> None:
    small = small_scope()
    resume = resume_scope()
    missed = {(source, event) for source, event, _ in small.edges_missed}
    assert missed <= {
        (Phase.ABSENT, "ColdResumeStarted"),
        (Phase.RESUMING, "ChildIdReserved"),
        (Phase.RESUMING, "ChildMaterialized"),
        (Phase.RESUMING, "LeaseAcquired"),
        (Phase.RESUMING, "LeaseRefused"),
        (Phase.RESUMING, "MailboxArrived"),
        (Phase.RESUMING, "StartRolledBack"),
    }
    assert resume.violations == ()
    assert small.edges_taken | resume.edges_taken == modelcheck.CHART_EDGES


@pytest.mark.soak
@pytest.mark.skipif(os.environ.get("DSH_SOAK") != "1", reason="soak: set DSH_SOAK=1")
def test_exh_1_medium_scope_is_explored_whole_and_takes_every_chart_edge() -> None:
    result = explore(SCOPES["medium"])
    print(modelcheck.summary(result))
    assert result.violations == ()
    assert result.edges_missed == frozenset()


# --------------------------------------------------------------------------- planted bugs


def _swap_edge(
    monkeypatch: pytest.MonkeyPatch,
    key: tuple[Phase, type[ChildEvent]],
    handler: Callable[..., Outcome],
) -> None:
    edge = attrs.evolve(TRANSITIONS[key], handler=handler)
    monkeypatch.setitem(TRANSITIONS, key, edge)


def _plant_notice_after_release(monkeypatch: pytest.MonkeyPatch) -> None:
    key = (Phase.RELEASING, DisposalFinished)
    original = TRANSITIONS[key].handler
    assert original is not None

    def late_notice(step: Step, record: Activation, event: DisposalFinished) -> manager.Outcome:
        mark = len(step.effects)
        outcome = original(step, record, event)
        tail = step.effects[mark:]
        notices: list[Effect] = [e for e in tail if isinstance(e, SendNotice)]
        step.effects[mark:] = [e for e in tail if not isinstance(e, SendNotice)] + notices
        return outcome

    _swap_edge(monkeypatch, key, late_notice)


def _plant_no_authority_recheck(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manager, "authorize_followup", lambda authority, parent: ALLOWED)


def _plant_parent_flushed_first(monkeypatch: pytest.MonkeyPatch) -> None:
    def eager(record: Activation, phase: Phase) -> Phase | None:
        return STATE_TRIGGERED.get((phase, Trigger.CHILDREN_RELEASED))  # owned children ignored

    monkeypatch.setattr(manager_state, "_released", eager)


def _plant_discarded_notice_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    def keep(step: Step, record: Activation, event: MessageDiscarded) -> manager.Outcome:
        return manager.Outcome.DONE  # the id stays accounted, waiting for a claim

    for phase, kind in list(TRANSITIONS):
        if kind is MessageDiscarded:
            _swap_edge(monkeypatch, (phase, kind), keep)


PLANTED = {
    # bug: (plant, the check that must fire, the shortest trace's length)
    "notice after release": (_plant_notice_after_release, "INV-NOTICE-1", 9),
    "admission without the authority re-check": (_plant_no_authority_recheck, "INV-AUTH-1", 5),
    "parent flushed before a child": (_plant_parent_flushed_first, "INV-OWN-1", 9),
    "the discarded notice claimed later": (_plant_discarded_notice_kept, "INV-MC-1", 7),
}


@functools.cache
def planted_scopes() -> dict[str, Result]:
    """The small scope searched once per planted bug, for every test that reads the result."""
    found = {}
    for bug, (plant, _, _) in PLANTED.items():
        with pytest.MonkeyPatch.context() as patch:
            plant(patch)
            found[bug] = explore(SCOPES["small"])
    return found


@pytest.mark.parametrize("bug", list(PLANTED))
def test_exh_1_planted_bug_is_found_with_a_shortest_trace(
    bug: str, record_property: Callable[[str, object], None]
) -> None:
    planted = planted_scopes()
    _, check, length = PLANTED[bug]
    result = planted[bug]
    assert result.violations, f"{bug} survived"
    violation = result.violations[0]
    trace = format_trace(violation)
    record_property(REPORT, f"manager, planted {bug}: {len(violation.events)} events\n{trace}")
    assert violation.check == check
    assert len(violation.events) == length


def test_exh_1_a_violation_trace_replays_as_code(monkeypatch: pytest.MonkeyPatch) -> None:
    planted = planted_scopes()
    violation = planted["admission without the authority re-check"].violations[0]
    _plant_no_authority_recheck(monkeypatch)  # the replay runs the planted core again
    namespace = dict(modelcheck.REPLAY_NAMESPACE)
    exec(format_trace(violation), namespace)  # the printed trace is the test
    steps = replay(violation.events)
    assert namespace["state"] == steps[-1].after
    assert check_trace(steps)["INV-AUTH-1"]


def test_exh_1_verify_exhaustive_prints_the_counts_and_the_missed_edges(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from click.testing import CliRunner

    from dsh_subagent.cli.main import cli

    monkeypatch.setitem(SCOPES, "small", Scope(("a",), depth=1, resume=False))
    result = CliRunner().invoke(cli, ["verify", "--exhaustive"])
    assert result.exit_code == 0, result.output
    assert "exhaustive small scope, manager: 1 children, depth 1:" in result.output
    assert " states, " in result.output
    assert " transitions, depth " in result.output
    assert "chart edge never taken: resuming --ChildMaterialized--> materialized" in result.output


def test_exh_1_verify_exhaustive_exits_1_with_the_shortest_trace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from click.testing import CliRunner

    from dsh_subagent.cli.main import cli

    _plant_no_authority_recheck(monkeypatch)
    monkeypatch.setitem(SCOPES, "small", Scope(("a",), depth=1, resume=False))
    args = ["verify", "--exhaustive", "small", "--machine", "core"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1
    assert "violation, shortest trace (5 events):" in result.output
    assert "# INV-AUTH-1: a: delivery from a stale or replaced parent" in result.output


def test_exh_4_the_canonical_key_sees_every_activation_field() -> None:
    """A field the key leaves out merges distinct states (the lease once did): change each."""
    from dsh_subagent.core.pmap import PMap

    record = Activation(SessionId("a"), Phase.RESIDENT, SessionId("root"))
    scope = Scope(("a", "b"))

    def key(r: Activation) -> object:
        records: PMap[SessionId, Activation] = PMap()
        state = ManagerState(records.set(r.child_id, r))
        return modelcheck.canonical_key(scope, (state, modelcheck.Env()))

    for field in attrs.fields(Activation):
        sentinel: dict[str, Any] = {field.name: "a.sentinel"}
        changed = attrs.evolve(record, **sentinel)
        assert key(changed) != key(record), field.name


def test_exh_4_symmetry_reduction_is_sound(record_property: Callable[[str, object], None]) -> None:
    """Without and with the reduction: the same canonical keys, the same verdict, fewer states."""
    # Without mail from another harness: the reduction renames it like any child-named id,
    # and the mail-free scope keeps this test (two searches that keep every node) cheap.
    scope = Scope(
        ("a", "b"),
        depth=1,
        user_grant=False,
        resume=False,
        reports=False,
        scoped_drains=False,
        mailbox=False,
    )
    plain = explore(scope, symmetry=False, keep_nodes=True)
    reduced = explore(scope, keep_nodes=True)
    assert plain.violations == reduced.violations == ()
    canon = {modelcheck.canonical_key(scope, n) for n in plain.nodes}  # type: ignore[arg-type]
    assert canon == {modelcheck.canonical_key(scope, n) for n in reduced.nodes}  # type: ignore[arg-type]
    assert reduced.states < plain.states
    assert set(plain.checks) == set(reduced.checks)
    record_property(REPORT, f"symmetry: {plain.states} states without, {reduced.states} with")


def test_exh_4_symmetry_reduction_keeps_the_shortest_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    _plant_no_authority_recheck(monkeypatch)
    scope = Scope(
        ("a", "b"), depth=1, user_grant=False, resume=False, reports=False, scoped_drains=False
    )
    plain, reduced = explore(scope, symmetry=False), explore(scope)
    assert [v.check for v in plain.violations] == [v.check for v in reduced.violations]
    assert len(plain.violations[0].events) == len(reduced.violations[0].events)


# --------------------------------------------------------------------------- the other machines

SMALL = modelcheck.models("small")


@pytest.mark.parametrize("name", [n for n in modelcheck.MACHINES if n != "manager"])
def test_exh_2_machine_is_explored_whole_with_every_check_holding(
    name: str, record_property: Callable[[str, object], None]
) -> None:
    result = search(SMALL[name])
    record_property(REPORT, f"{name} {modelcheck.summary(result)}")
    assert result.violations == ()
    assert result.checks["INV-MC-3"] == result.states
    assert result.edges_missed == frozenset()  # every chart edge is reachable, and taken


def _plant_oneshot_double_cancel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        oneshot, "_cancel_once", lambda state, cause: (True, (oneshot.CancelRemainingWork(cause),))
    )


def _plant_observer_end_without_start(monkeypatch: pytest.MonkeyPatch) -> None:
    original = oneshot_observer._open

    def forgetful(state: Observation, event: object) -> object:
        opened, effects = original(state, event)  # type: ignore[arg-type]
        return attrs.evolve(opened, seen_run_ids=state.seen_run_ids), effects

    monkeypatch.setattr(oneshot_observer, "_open", forgetful)


def _plant_jobs_limit_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobs, "live_count", lambda state, key: 0)


def _plant_activity_no_redirect(monkeypatch: pytest.MonkeyPatch) -> None:
    def send(state: activity.ActivityState, event: activity.MessageSent) -> object:
        if event.wakeup and state.phase is not activity.ActivityPhase.IDLE:
            return state, (activity.InsertMessage(event.target), activity.Wake(False))
        return original(state, event)

    original = activity._send
    monkeypatch.setattr(activity, "_send", send)


PLANTED_MACHINES = {
    # machine: (plant, the check that must fire, the shortest trace's length)
    "one-shot": (_plant_oneshot_double_cancel, "INV-ONE-7", 3),
    "observer": (_plant_observer_end_without_start, "INV-EVT-16", 1),
    "jobs": (_plant_jobs_limit_ignored, "INV-BG-30", 4),
    "activity": (_plant_activity_no_redirect, "INV-HARNESS-3", 3),
}


@pytest.mark.parametrize("name", list(PLANTED_MACHINES))
def test_exh_2_planted_bug_in_each_machine_is_found(
    name: str, monkeypatch: pytest.MonkeyPatch, record_property: Callable[[str, object], None]
) -> None:
    plant, check, length = PLANTED_MACHINES[name]
    plant(monkeypatch)
    result = search(SMALL[name])
    assert result.violations, f"the {name} bug survived"
    violation = result.violations[0]
    trace = trace_text(violation, name)
    record_property(REPORT, f"{name}, planted: {len(violation.events)} events\n{trace}")
    assert (violation.check, len(violation.events)) == (check, length)


def test_exh_2_verify_exhaustive_json_is_one_document(monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from click.testing import CliRunner

    from dsh_subagent.cli.main import EXHAUSTIVE_MACHINES, cli

    assert EXHAUSTIVE_MACHINES == modelcheck.MACHINES
    _plant_jobs_limit_ignored(monkeypatch)
    args = ["verify", "--exhaustive", "--json", "--machine", "jobs"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1, result.output
    document = json.loads(result.output)
    assert (document["verdict"], document["mode"], document["scope"]) == (
        "fail",
        "exhaustive",
        "small",
    )
    (machine,) = document["machines"]
    assert machine["name"] == "jobs"
    assert min(machine["states"], machine["transitions"], machine["depth"]) > 0
    assert "INV-BG-30" in {row["id"] for row in machine["invariants"]}
    assert machine["failure"]["check"] == "INV-BG-30"
    assert len([line for line in machine["failure"]["sequence"] if line.startswith("apply(")]) == 4
