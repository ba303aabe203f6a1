"""Every invariant holds on a real trace and reports a planted violation of itself."""

from __future__ import annotations

import attrs

from dsh_subagent.core.authority import AgentRef, ParentAuthority, Presented, UserAuthority
from dsh_subagent.core.manager import ManagerState, apply
from dsh_subagent.core.manager.effects import (
    DisposeHandle,
    EmitEnd,
    EmitStart,
    ReleaseOwnership,
    ResumeAgent,
    SendNotice,
)
from dsh_subagent.core.manager.events import (
    AgentBecameIdle,
    ChildIdReserved,
    ChildMaterialized,
    ChildPrepared,
    DescriptorSnapshotted,
    DisposalFinished,
    Event,
    FlushReported,
    FollowupRequested,
    MessageAccepted,
    MessageClaimed,
    Phase,
)
from dsh_subagent.core.notices import EpochOutcome
from dsh_subagent.core.pmap import PMap
from dsh_subagent.core.teardown import FlushOutcome
from dsh_subagent.core.values import EventId, KnownStop, MessageId, RunId, SessionId
from dsh_subagent.spec.invariants import (
    ALL_INVARIANTS,
    TraceStep,
    check_state,
    check_trace,
    depth_violations,
    inbox_violations,
)

ROOT = AgentRef(SessionId("root"), 1)


def _run(events: list[Event]) -> list[TraceStep]:
    state, trace = ManagerState(), []
    for event in events:
        after, effects = apply(state, event)
        trace.append(TraceStep(event, effects, state, after))
        state = after
    return trace


def _child_lifecycle(name: str, parent: AgentRef) -> list[Event]:
    sid, ref, msg = SessionId(name), AgentRef(SessionId(name), 1), MessageId(f"m-{name}")
    return [
        ChildIdReserved(EventId(f"{name}1"), sid, parent),
        DescriptorSnapshotted(EventId(f"{name}2"), sid),
        ChildPrepared(EventId(f"{name}3"), sid),
        ChildMaterialized(
            EventId(f"{name}4"), sid, RunId(f"run-{name}"), ref, frozenset({ref, parent, ROOT})
        ),
        FollowupRequested(EventId(f"{name}5"), sid, msg, ParentAuthority(Presented(parent, 1))),
        MessageAccepted(EventId(f"{name}6"), sid, msg),
    ]


def _finish(name: str, *notices: str) -> list[Event]:
    """Claim the child's prompt and the notices it received, go idle, flush, release."""
    sid = SessionId(name)
    claims = [f"m-{name}", *(f"n-{n}" for n in notices)]
    return [
        *(MessageClaimed(EventId(f"{name}7{m}"), sid, MessageId(m)) for m in claims),
        AgentBecameIdle(EventId(f"{name}8"), sid),
        FlushReported(EventId(f"{name}9"), sid, FlushOutcome.OK),
        DisposalFinished(
            EventId(f"{name}10"), sid, EpochOutcome(KnownStop.COMPLETED), MessageId(f"n-{name}")
        ),
    ]


def _healthy() -> list[TraceStep]:
    parent = AgentRef(SessionId("p"), 1)
    return _run(
        [
            *_child_lifecycle("p", ROOT),
            *_child_lifecycle("c", parent),
            *_finish("c"),
            *_finish("p", "c"),
        ]
    )


def _swap(trace: list[TraceStep], first: type, second: type) -> list[TraceStep]:
    """Reverse the order of two effect kinds within every step that has both."""
    out = []
    for step in trace:
        kinds = [type(e) for e in step.effects]
        if first in kinds and second in kinds:
            i, j = kinds.index(first), kinds.index(second)
            effects = list(step.effects)
            effects[i], effects[j] = effects[j], effects[i]
            out.append(attrs.evolve(step, effects=tuple(effects)))
        else:
            out.append(step)
    return out


def test_every_invariant_holds_on_a_real_nested_lifecycle() -> None:
    trace = _healthy()
    assert all(not v for v in check_trace(trace, complete=True).values())
    for step in trace:
        assert all(not v for v in check_state(step.after).values())
    assert len({inv.id for inv in ALL_INVARIANTS}) == len(ALL_INVARIANTS)


def test_inv_notice_1_reports_release_before_notice() -> None:
    found = check_trace(_swap(_healthy(), SendNotice, ReleaseOwnership))["INV-NOTICE-1"]
    assert found == [
        "c released before its settlement notice",
        "p released before its settlement notice",
    ]


def test_inv_notice_2_reports_a_notice_for_an_unannounced_child() -> None:
    trace = _healthy()
    step = next(s for s in trace if any(isinstance(e, SendNotice) for e in s.effects))
    record = step.before.activations.get(SessionId("c"))
    assert record is not None
    silent = attrs.evolve(
        step.before,
        activations=step.before.activations.set(
            SessionId("c"), attrs.evolve(record, announced=False)
        ),
    )
    found = check_trace([attrs.evolve(step, before=silent)])["INV-NOTICE-2"]
    assert found == ["notice for c, which never accepted a delivery"]


def test_inv_tear_1_reports_a_parent_released_before_its_child() -> None:
    trace = _healthy()
    step = next(s for s in trace if any(isinstance(e, DisposeHandle) for e in s.effects))
    record = step.before.activations.get(SessionId("c"))
    assert record is not None
    owning = attrs.evolve(
        step.before,
        activations=step.before.activations.set(
            SessionId("c"),
            attrs.evolve(record, owned=PMap[SessionId, bool]().set(SessionId("g"), True)),
        ),
    )
    assert check_trace([attrs.evolve(step, before=owning)])["INV-TEAR-1"] == [
        "c handle disposed before its children"
    ]


def test_inv_evt_1_reports_unpaired_and_misordered_edges() -> None:
    trace = _healthy()
    ends_first = _swap(trace, EmitStart, EmitEnd)
    assert check_trace(trace[:8], complete=True)["INV-EVT-1"] == ["run 'run-p' never ended"]
    doubled = [*trace, trace[3]]
    assert "run id 'run-p' repeated" in check_trace(doubled)["INV-EVT-1"]
    only_ends = [s for s in trace if any(isinstance(e, EmitEnd) for e in s.effects)]
    assert check_trace(only_ends)["INV-EVT-1"] == [
        "end of run 'run-c' has no open start",
        "end of run 'run-p' has no open start",
    ]
    assert check_trace(ends_first)["INV-EVT-1"] == []  # no step emits both, so nothing moved


def test_inv_auth_1_reports_delivery_from_a_stale_parent_or_forged_grant() -> None:
    trace = _healthy()
    step = trace[4]
    assert isinstance(step.event, FollowupRequested)
    stale = attrs.evolve(
        step, event=attrs.evolve(step.event, authority=ParentAuthority(Presented(ROOT, None)))
    )
    forged = attrs.evolve(step, event=attrs.evolve(step.event, authority=UserAuthority(False)))
    other = attrs.evolve(
        step,
        event=attrs.evolve(
            step.event, authority=ParentAuthority(Presented(AgentRef(SessionId("x"), 1), 1))
        ),
    )
    resume = attrs.evolve(
        forged, effects=(ResumeAgent(EventId("e"), SessionId("p"), MessageId("m")),)
    )
    assert check_trace([stale, other, resume])["INV-AUTH-1"] == [
        "p: delivery from a stale or replaced parent",
        "p: delivery from a parent it does not belong to",
        "p: delivery under a forged user grant",
    ]


def test_state_invariants_report_planted_corruption() -> None:
    trace = _healthy()
    state = trace[11].after  # both p and c resident
    p = state.activations.get(SessionId("p"))
    c = state.activations.get(SessionId("c"))
    assert p is not None
    assert c is not None
    twin = state.activations.set(SessionId("c"), attrs.evolve(c, agent=p.agent))
    assert check_state(attrs.evolve(state, activations=twin))["INV-RES-1"] == [
        "agent AgentRef(session_id='p', token=1) is resident as c and p"
    ]
    flushing_owner = state.activations.set(SessionId("p"), attrs.evolve(p, phase=Phase.FLUSHING))
    assert check_state(attrs.evolve(state, activations=flushing_owner))["INV-OWN-1"] == [
        "p flushes or releases while still owning children"
    ]
    dangling = state.activations.remove(SessionId("c"))
    assert check_state(attrs.evolve(state, activations=dangling))["INV-OWN-1"] == [
        "p owns c, which is not its live child"
    ]
    mislabeled = state.activations.set(SessionId("c"), attrs.evolve(c, child_id=SessionId("z")))
    assert check_state(attrs.evolve(state, activations=mislabeled))["INV-RES-1"] == [
        "record under c is z in Phase.RESIDENT"
    ]
    unannounced = state.activations.set(SessionId("c"), attrs.evolve(c, announced=False))
    assert check_state(attrs.evolve(state, activations=unannounced))["INV-RES-3"] == [
        "c is resident but not announced"
    ]
    idle_c = attrs.evolve(c, accepted=frozenset())
    quiet = state.activations.set(SessionId("c"), idle_c)
    assert check_state(attrs.evolve(state, activations=quiet))["INV-RES-2"] == [
        "c is resident but settled (disposal must open in the same step)"
    ]


def test_inv_inbox_1_and_inv_depth_1_harness_predicates() -> None:
    m1, m2 = MessageId("m1"), MessageId("m2")
    assert inbox_violations([("inserted", m1), ("claimed", m1)], complete=True) == []
    assert inbox_violations([("inserted", m1), ("inserted", m2)], complete=True) == [
        "message m1 never left the inbox",
        "message m2 never left the inbox",
    ]
    assert inbox_violations([("inserted", m1)], complete=False) == []
    assert inbox_violations([("inserted", m1), ("claimed", m1), ("discarded", m1)], complete=False)
    c = SessionId("c")
    assert depth_violations([(c, 1), (c, 2), (c, 2)]) == []
    assert depth_violations([(c, 2), (c, 1)]) == ["c: depth fell from 2 to 1 across a resume"]
