"""Exhaustive small-scope model checking of the manager's ``apply``, and every checked machine.

Theory of operation
-------------------
1. A ``Scope`` bounds the world: child names, tree depth, follow-up ids per child, epochs
   (materializations) per child, and whether a genuine user grant exists. ``enabled`` lists,
   for one search state, every event of that finite vocabulary whose ``(phase, event type)``
   is in ``manager.TRANSITIONS`` (anything else raises ``ILLEGAL_TRANSITION`` and changes
   nothing), plus the manager-wide events: interrupts, reports, drains of each kind, disposals.
   Data carried by events (agent tokens, lineages, run and notice ids) is derived from the
   state, so the vocabulary stays finite; the event vocabulary is that of ``spec.machines``,
   which takes its chart edges, root agent and chart path (``chart_path``) from here.
2. The search state is the core's ``ManagerState`` plus a minimal harness ``Env``: per child,
   the accounted ids sent but not yet answered (``pending``) and those in its inbox
   (``inbox``). The harness contract the alphabet keeps: a send is answered (accepted or
   failed) before any other event, as the engine's dispatch does; a message is claimed or
   discarded only from the inbox; ids are never reused while in flight; and a child's
   release (``DisposalFinished``) comes only once its inbox is empty
   (a cancelled child's inbox is discarded first, HARNESS-11, TEAR-18).
3. ``ManagerModel`` is one model of the shared engine (``spec.bfs``); ``models`` names it and
   the other core machines (``spec.modelcheck_machines``) for ``verify --exhaustive``.
   Breadth-first search from the empty state dedups states by a canonical key (``bfs.image``
   of the node, derived from its attrs fields, so no field is listed by hand); with
   ``symmetry`` the key is the least one over every renaming of the interchangeable child
   names (the vocabulary is symmetric, so this is sound). BFS keeps one parent pointer per
   state, so the first violation found has a shortest event trace.
4. Checked on every edge: the core raises nothing; every state invariant of
   ``spec.invariants`` on the new state; every trace invariant on the step, prefixed by one
   synthetic ``EmitStart`` per published record (the pairing history the state stands for),
   with ``complete`` when the step ends quiescent; each child's phase change is a path in
   ``ActivationChart`` (the applied event, then state-triggered edges), and the chart edges
   taken are recorded; INV-MC-1, the core accounts exactly what the harness holds
   (``accepted == pending | inbox``); INV-MC-2, no record vanishes while the harness still
   holds an accounted message of it (every accepted message is claimed or discarded, on every
   path, before its child is released).
5. After the search, the "eventually" obligation INV-MC-3: from every reachable state a
   quiescent one (no Activation) is reachable by progress events alone (the harness's own
   answers: start steps, rollbacks, acceptance, claims, discards, status, flush, release; no
   new request, drain or interrupt). It is a backward reachability over the recorded edges.
6. A violation carries its events; ``format_trace`` prints them as Python lines in the form
   of ``verify``'s shrunk sequences, and ``replay`` re-applies them (tests replay them).
"""

from __future__ import annotations

import collections
import enum
import functools
import itertools
import json
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

import attrs

from dsh_subagent.core import manager
from dsh_subagent.core.authority import (
    AgentRef,
    AncestorInterrupt,
    FollowupAuthority,
    ParentAuthority,
    Presented,
    UserAuthority,
)
from dsh_subagent.core.manager import TRANSITIONS, Activation, ManagerState, apply
from dsh_subagent.core.manager import events as ev
from dsh_subagent.core.manager.effects import (
    DeliverReport,
    Effect,
    EmitEnd,
    EmitStart,
    Reject,
    SendNotice,
    SubmitFollowup,
)
from dsh_subagent.core.notices import EpochOutcome
from dsh_subagent.core.pmap import PMap
from dsh_subagent.core.residency import AgentStatus
from dsh_subagent.core.teardown import Boundary, FlushOutcome
from dsh_subagent.core.values import EventId, KnownStop, MessageId, RunId, SessionId
from dsh_subagent.spec.bfs import Findings, Model, Result, Violation, image, search
from dsh_subagent.spec.charts import ActivationChart, Edge, edges
from dsh_subagent.spec.invariants import TraceStep, check_state, check_trace

CHART_EDGES: Final = edges(ActivationChart)
_TRIGGERED: Final = frozenset(trigger.value for trigger in ev.Trigger)
ROOT: Final = AgentRef(SessionId("root"), 1)
_EID: Final = EventId("e")
PROGRESS: Final[tuple[type[ev.Event], ...]] = (
    ev.DescriptorSnapshotted,
    ev.ChildPrepared,
    ev.ChildMaterialized,
    ev.StartRolledBack,
    ev.MessageAccepted,
    ev.MessageSendFailed,
    ev.MessageClaimed,
    ev.MessageDiscarded,
    ev.AgentBecameIdle,
    ev.AgentBecameBusy,
    ev.FlushReported,
    ev.DisposalFinished,
)
"""The harness's own answers: the events INV-MC-3 may use to reach quiescence."""


@attrs.frozen
class Scope:
    """The bounds of one exhaustive search."""

    children: tuple[str, ...]
    depth: int = 2
    followups: int = 1
    epochs: int = 1
    user_grant: bool = True
    forged: bool = False
    resume: bool = True
    reports: bool = True
    scoped_drains: bool = True
    mailbox: bool = True


SCOPES: Final[Mapping[str, Scope]] = {
    # CI: a parent and a child (or two siblings), no cold resume, report or scoped drain.
    "small": Scope(
        ("a", "b"), depth=2, user_grant=False, resume=False, reports=False, scoped_drains=False
    ),
    # Soak: the whole vocabulary over the same two children.
    "medium": Scope(("a", "b"), depth=2),
}


@attrs.frozen
class Env:
    """The harness side of the search state: accounted ids in flight and in each inbox."""

    pending: frozenset[tuple[SessionId, MessageId]] = frozenset()
    inbox: frozenset[tuple[SessionId, MessageId]] = frozenset()

    def of(self, child: SessionId) -> frozenset[MessageId]:
        return frozenset(m for c, m in self.pending | self.inbox if c == child)


Node = tuple[ManagerState, Env]


# --------------------------------------------------------------------------- the alphabet


def _names(scope: Scope) -> tuple[SessionId, ...]:
    return tuple(SessionId(n) for n in scope.children)


def _depth(record: Activation) -> int:
    """How deep a published record sits below the root (its lineage counts the root)."""
    return len(record.lineage) - 1


def _agents(state: ManagerState) -> list[AgentRef]:
    return [r.agent for r in state.activations.values() if r.agent is not None]


def _legal(state: ManagerState, event: ev.Event) -> bool:
    child = getattr(event, "child_id", None)
    if child is None:
        return True
    record = state.activations.get(child)
    phase = ev.Phase.ABSENT if record is None else record.phase
    return (phase, type(event)) in TRANSITIONS


def enabled(scope: Scope, node: Node) -> Iterator[ev.Event]:
    """Every event of the scope's vocabulary the core has an edge for in this state."""
    state, env = node
    # A send is answered in the same span as the request (the contract). A resident child's
    # success is not reported back (``SubmitFollowup.report_accepted`` False): there the
    # ``MessageAccepted`` below stands for it, and changes nothing (INV-RES-3).
    if env.pending:
        for child, message in sorted(env.pending):
            yield ev.MessageAccepted(_EID, child, message)
            yield ev.MessageSendFailed(_EID, child, message)
        return
    live = {c: r for c, r in state.activations.items() if r.phase in ev.LIVE and r.agent}
    yield ev.DrainRequested(_EID, ev.WholeManager())
    for agent in [ROOT, *_agents(state)] if scope.scoped_drains else [ROOT]:
        yield ev.DrainRequested(_EID, ev.DescendantsOf((Presented(agent, agent.token),)))
    for agent in sorted(state.closing_roots, key=lambda a: (a.session_id, a.token)):
        yield ev.AgentDisposed(_EID, agent)
    for child in _names(scope):
        yield from (e for e in _child_events(scope, state, env, child, live) if _legal(state, e))


def _child_events(
    scope: Scope,
    state: ManagerState,
    env: Env,
    child: SessionId,
    live: Mapping[SessionId, Activation],
) -> Iterator[ev.Event]:
    record = state.activations.get(child)
    parents = [ROOT] + [
        r.agent
        for c, r in live.items()
        if c != child and r.agent is not None and _depth(r) < scope.depth
    ]
    if record is None:
        for parent in parents:
            yield ev.ChildIdReserved(_EID, child, parent)
        if scope.resume and state.epochs.get(child, 0) < scope.epochs:
            for parent in parents:
                yield ev.ColdResumeStarted(_EID, child, parent.session_id)
    else:
        yield ev.ChildIdReserved(_EID, child, ROOT)  # a duplicate: refused, nothing changes
        yield ev.DescriptorSnapshotted(_EID, child)
        yield ev.ChildPrepared(_EID, child)
        epoch = state.epochs.get(child, 0)
        yield ev.LeaseAcquired(_EID, child, epoch + 1)  # a cold resume's lease (LEASE-1)
        yield ev.LeaseRefused(_EID, child, "held by another harness")
        if record.phase in ev.UNPUBLISHED and epoch < scope.epochs:
            yield _materialized(state, record, epoch)
        yield ev.StartRolledBack(_EID, child, False)
        yield ev.StartRolledBack(_EID, child, True)
        idle = record.status is AgentStatus.IDLE
        yield (ev.AgentBecameBusy if idle else ev.AgentBecameIdle)(_EID, child)
        yield from (ev.FlushReported(_EID, child, outcome) for outcome in FlushOutcome)
        if not env.of(child):
            yield from _finished(state, record)
    held = env.of(child)
    mail = MessageId(f"{child}.mail")  # a message another harness posted (DUR-22, DUR-23)
    if scope.mailbox and mail not in held:
        yield ev.MailboxArrived(_EID, child, mail)
    for message in (MessageId(f"{child}.f{i}") for i in range(1, scope.followups + 1)):
        if message in held:
            continue
        owner = None if record is None else record.parent_agent
        authorities: list[FollowupAuthority] = []
        if owner is None:
            authorities.append(ParentAuthority(Presented(ROOT, ROOT.token)))
        if owner is not None:
            authorities.append(ParentAuthority(Presented(owner, owner.token)))
            authorities.append(ParentAuthority(Presented(owner, None)))
        authorities += [UserAuthority(False)] if scope.forged else []
        authorities += [UserAuthority(True)] if scope.user_grant else []
        for authority in authorities:
            yield ev.FollowupRequested(_EID, child, message, authority)
    for c, message in sorted(env.inbox):
        if c == child:
            yield ev.MessageClaimed(_EID, child, message)
            yield ev.MessageDiscarded(_EID, child, message)
    mine = live.get(child)
    if mine is not None and mine.agent is not None:
        caller = live.get(mine.parent_session) if mine.parent_session else None
        interrupter = ROOT if caller is None or caller.agent is None else caller.agent
        yield ev.InterruptRequested(
            _EID, child, AncestorInterrupt(Presented(interrupter, interrupter.token))
        )
        for delivery in ev.ReportDelivery if scope.reports else ():
            yield ev.ReportRequested(_EID, mine.agent, MessageId(f"{child}.r"), delivery)
        parent = interrupter
        yield ev.DrainRequested(
            _EID, ev.SelectedChildren(Presented(parent, parent.token), (child,))
        )


def _materialized(state: ManagerState, record: Activation, epoch: int) -> ev.ChildMaterialized:
    """The agent of the next epoch: a fresh token, and the parent's lineage plus itself."""
    child = record.child_id
    agent = AgentRef(child, epoch + 2)
    owner = state.activations.get(record.parent_session) if record.parent_session else None
    above = owner.lineage if owner is not None and owner.lineage else frozenset({ROOT})
    if record.parent_agent is not None and record.parent_agent != ROOT and owner is None:
        above = frozenset({record.parent_agent, ROOT})
    return ev.ChildMaterialized(
        _EID, child, RunId(f"{child}.run{epoch + 1}"), agent, above | {agent}
    )


def _finished(state: ManagerState, record: Activation) -> Iterator[ev.DisposalFinished]:
    child = record.child_id
    notice = MessageId(f"{child}.n{record.epoch}")
    outcome = EpochOutcome(KnownStop.COMPLETED)
    yield ev.DisposalFinished(_EID, child, outcome, notice)
    owner = state.activations.get(record.parent_session) if record.parent_session else None
    if owner is not None and owner.phase in ev.LIVE:  # a failed boundary counts for the owner
        yield ev.DisposalFinished(_EID, child, outcome, notice, frozenset({Boundary.ACTIVATION}))
    if record.announced and (owner is None or owner.phase not in ev.LIVE):
        yield ev.DisposalFinished(_EID, child, outcome, notice, parent_registered=False)
        busy = AgentStatus.RUNNING
        yield ev.DisposalFinished(_EID, child, outcome, notice, parent_status=busy)


def advance(env: Env, effects: Iterable[Effect], event: ev.Event) -> Env:
    """The harness's side of one step: sends leave, accounted deliveries land in inboxes."""
    pending, inbox = set(env.pending), set(env.inbox)
    if isinstance(
        event, ev.MessageAccepted | ev.MessageSendFailed | ev.MessageClaimed | ev.MessageDiscarded
    ):
        key = (event.child_id, event.message_id)
        pending.discard(key)
        if isinstance(event, ev.MessageAccepted):
            inbox.add(key)
        else:
            inbox.discard(key)
    for effect in effects:
        if isinstance(effect, SubmitFollowup):
            pending.add((effect.child_id, effect.message_id))
        elif isinstance(effect, SendNotice | DeliverReport) and effect.accounted:
            inbox.add((effect.parent_session, effect.message_id))
    return Env(frozenset(pending), frozenset(inbox))


# --------------------------------------------------------------------------- canonical keys


def _key(node: Node, perm: Mapping[str, str]) -> object:
    """A comparable, hashable image of the node with child names renamed by ``perm``."""

    def rn(text: str) -> str:
        head, dot, tail = text.partition(".")
        return perm.get(head, head) + dot + tail

    return image(node, rn)


def canonical_key(scope: Scope, node: Node, *, symmetry: bool = True) -> Hashable:
    """The state's key, least over every renaming of the child names when ``symmetry``."""
    names = scope.children
    if not symmetry or len(names) < 2:
        return _key(node, {})
    images = (_key(node, dict(zip(names, p, strict=True))) for p in itertools.permutations(names))
    return min(images)  # type: ignore[type-var]


# --------------------------------------------------------------------------- checks


@functools.cache
def chart_path(
    old: ev.Phase, new: ev.Phase, first: str | None, settled: bool = False
) -> tuple[Edge, ...] | None:
    """Shortest chart path old -> new: ``first`` (if given) then state-triggered edges.

    Settlement and an opening both lead RESIDENT -> DISPOSING; ``settled`` picks the former.
    """
    frontier: collections.deque[tuple[tuple[Edge, ...], object]] = collections.deque()
    if first is None:
        frontier.append(((), old))
    else:
        frontier.extend(((edge,), edge[2]) for edge in CHART_EDGES if edge[:2] == (old, first))
    seen: set[object] = set()
    while frontier:
        path, phase = frontier.popleft()
        if phase is new and (first is None or path):
            return path
        if phase in seen:
            continue
        seen.add(phase)
        frontier.extend(
            ((*path, edge), edge[2])
            for edge in sorted(CHART_EDGES, key=lambda e: (e[1] != "settled") is settled)
            if edge[0] is phase and edge[1] in _TRIGGERED
        )
    return None


def _settles(state: ManagerState, event: ev.Event, child: SessionId) -> bool:
    """Did ``child`` leave RESIDENT by settling: the event's own record, or its owner?"""
    if isinstance(event, ev.DrainRequested):
        return False
    subject = state.activations.get(getattr(event, "child_id", None) or SessionId(""))
    return subject is not None and child in (subject.child_id, subject.parent_session)


def _phase(state: ManagerState, child: SessionId) -> ev.Phase:
    record = state.activations.get(child)
    return ev.Phase.ABSENT if record is None else record.phase


def _history(state: ManagerState) -> list[TraceStep]:
    """One synthetic ``EmitStart`` per published record: the pairing its state stands for."""
    starts = [
        EmitStart(_EID, r.child_id, r.run_id, r.epoch)
        for r in state.activations.values()
        if r.phase in ev.LIVE and r.run_id is not None
    ]
    return [TraceStep(ev.DrainRequested(_EID, ev.WholeManager()), tuple(starts), state, state)]


def check_edge(
    before: Node, event: ev.Event, after: Node, effects: tuple[Effect, ...], taken: set[Edge]
) -> dict[str, list[str]]:
    """Every edge check of rule 4, by check ID (empty lists when all hold)."""
    (s0, _), (s1, env1) = before, after
    found: dict[str, list[str]] = {"CHART": [], "INV-MC-1": [], "INV-MC-2": []}
    step = TraceStep(event, effects, s0, s1)
    if any(not isinstance(e, Reject) for e in effects):  # trace invariants read effects
        edges_ = any(isinstance(e, EmitStart | EmitEnd) for e in effects)
        steps = [*_history(s0), step] if edges_ else [step]
        found |= check_trace(steps, complete=not s1.activations)
    subject = getattr(event, "child_id", None)
    for child in {*s0.activations, *s1.activations}:
        old, new = _phase(s0, child), _phase(s1, child)
        first = type(event).__name__ if child == subject else None
        if first is None and old is new:
            continue
        path = chart_path(old, new, first, _settles(s0, event, child))
        if path is None:
            found["CHART"].append(f"{child}: {old.value} -> {new.value} on {first}")
        else:
            taken.update(path)
    if subject is not None and subject not in s0.activations and subject not in s1.activations:
        taken.update(chart_path(ev.Phase.ABSENT, ev.Phase.ABSENT, type(event).__name__) or ())
    for child, record in s1.activations.items():
        if record.accepted != env1.of(child):
            detail = f"{child} accounts {sorted(record.accepted)}, the harness holds "
            found["INV-MC-1"].append(detail + str(sorted(env1.of(child))))
    for child in s0.activations:
        if child not in s1.activations and env1.of(child):
            found["INV-MC-2"].append(f"{child} released holding {sorted(env1.of(child))}")
    return found


# --------------------------------------------------------------------------- the search

ApplyFn = Callable[[ManagerState, ev.Event], tuple[ManagerState, tuple[Effect, ...]]]


class ManagerModel(Model[Node, ev.Event, tuple[Effect, ...]]):
    """The continuation manager's ``apply`` as a search model (rules 1-5)."""

    name = "manager"
    chart_edges = CHART_EDGES

    def __init__(self, scope: Scope, *, symmetry: bool = True, apply_fn: ApplyFn | None = None):
        self.scope, self.symmetry = scope, symmetry
        self.apply = apply_fn or apply

    def describe(self) -> str:
        return f"{len(self.scope.children)} children, depth {self.scope.depth}"

    def initial(self) -> Sequence[Node]:
        return [(ManagerState(), Env())]

    def enabled(self, node: Node) -> Iterable[ev.Event]:
        return enabled(self.scope, node)

    def step(self, node: Node, event: ev.Event) -> tuple[Node, tuple[Effect, ...]]:
        state, effects = self.apply(node[0], event)
        return (state, advance(node[1], effects, event)), effects

    def key(self, node: Node) -> Hashable:
        return canonical_key(self.scope, node, symmetry=self.symmetry)

    def check_edge(
        self,
        before: Node,
        event: ev.Event,
        after: Node,
        record: tuple[Effect, ...],
        taken: set[Edge],
    ) -> Findings:
        return check_edge(before, event, after, record, taken)

    def check_node(self, node: Node) -> Findings:
        return check_state(node[0])

    def quiescent(self, node: Node) -> bool:
        return not node[0].activations

    def progress(self, event: ev.Event) -> bool:
        return isinstance(event, PROGRESS)

    def unchanged(self, before: Node, after: Node) -> bool:
        (s0, env0), (s1, env1) = before, after
        return (
            s1.activations is s0.activations
            and s1.epochs is s0.epochs
            and s1.closing_roots == s0.closing_roots
            and s1.draining == s0.draining
            and env1 == env0
        )


def explore(
    scope: Scope,
    *,
    symmetry: bool = True,
    max_violations: int = 1,
    max_states: int | None = None,
    apply_fn: ApplyFn | None = None,
    keep_nodes: bool = False,
) -> Result:
    """Breadth-first search of every state the scope reaches; every check on every edge."""
    model = ManagerModel(scope, symmetry=symmetry, apply_fn=apply_fn)
    return search(
        model, max_violations=max_violations, max_states=max_states, keep_nodes=keep_nodes
    )


# --------------------------------------------------------------------------- traces


def _source(value: object) -> str:
    """A value as Python source (enums by name, attrs values by keyword)."""
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if attrs.has(type(value)):
        fields = attrs.fields(type(value))  # type: ignore[arg-type]
        args = ", ".join(f"{f.name}={_source(getattr(value, f.name))}" for f in fields)
        return f"{type(value).__name__}({args})"
    if isinstance(value, frozenset):
        return "frozenset({" + ", ".join(sorted(_source(v) for v in value)) + "})"
    if isinstance(value, tuple):
        return "(" + "".join(f"{_source(v)}, " for v in value) + ")"
    if isinstance(value, PMap):
        return "PMap()"
    return repr(value)


def format_trace(violation: Violation) -> str:
    """The violation's trace as replayable lines, in the form of a shrunk sequence."""
    lines = [f"# {violation.check}: {violation.detail}", "state = ManagerState()"]
    lines += [f"state, _ = apply(state, {_source(e)})" for e in violation.events]
    return "\n".join(lines)


REPLAY_NAMESPACE: Final[Mapping[str, object]] = {
    name: getattr(module, name)
    for module in (manager, manager.events)
    for name in dir(module)
    if not name.startswith("_")
} | {
    cls.__name__: cls
    for cls in (
        AgentRef,
        AncestorInterrupt,
        ParentAuthority,
        Presented,
        UserAuthority,
        EpochOutcome,
        KnownStop,
        FlushOutcome,
        Boundary,
        AgentStatus,
        PMap,
    )
}
"""The names ``format_trace``'s lines use: ``exec(text, dict(REPLAY_NAMESPACE))`` runs them."""


def replay(events: Iterable[object]) -> list[TraceStep]:
    """Apply ``events`` from the empty state; the recorded steps (raises what ``apply`` does)."""
    state = ManagerState()
    steps = []
    for event in events:
        assert isinstance(event, ev.Event)
        after, effects = apply(state, event)
        steps.append(TraceStep(event, effects, state, after))
        state = after
    return steps


# --------------------------------------------------------------------------- every machine


def models(scope_name: str) -> dict[str, Model[Any, Any, Any]]:
    """Every exhaustively checked machine in the named scope, by its ``--machine`` name."""
    from dsh_subagent.spec import modelcheck_machines as mm

    jobs_scope = mm.JobsScope() if scope_name == "small" else mm.JobsScope((1, 2), jobs=3, limit=2)
    return {
        "manager": ManagerModel(SCOPES[scope_name]),
        "one-shot": mm.OneShotModel(mm.RunScope()),
        "observer": mm.ObserverModel(mm.ObsScope()),
        "jobs": mm.JobsModel(jobs_scope),
        "activity": mm.ActivityModel(mm.ActScope(2 if scope_name == "small" else 3)),
    }


MACHINES: Final = ("manager", "one-shot", "observer", "jobs", "activity")


def summary(result: Result) -> str:
    """One line: the counts ``verify --exhaustive`` prints."""
    return (
        f"{result.scope}: {result.states} states, {result.transitions} transitions, "
        f"depth {result.depth}, {result.seconds:.1f} s"
    )


def trace_text(violation: Violation, machine: str) -> str:
    """A violation's shortest trace as ``verify --exhaustive`` prints it, replayable as code."""
    if machine == "manager":
        return format_trace(violation)
    lines = [f"# {violation.check}: {violation.detail}", f"state = {_source(violation.start)}"]
    return "\n".join(lines + [f"apply({_source(e)})" for e in violation.events])


def _document(scope_name: str, results: list[Result]) -> dict[str, object]:
    """The ``--json`` document: one entry per machine, as the other verify modes have."""
    return {
        "verdict": "fail" if any(r.violations for r in results) else "pass",
        "mode": "exhaustive",
        "scope": scope_name,
        "machines": [
            {
                "name": r.machine,
                "scope": r.scope,
                "states": r.states,
                "transitions": r.transitions,
                "depth": r.depth,
                "seconds": round(r.seconds, 3),
                "verdict": "fail" if r.violations else "pass",
                "invariants": [
                    {"id": check, "checks": count} for check, count in sorted(r.checks.items())
                ],
                "edges_missed": sorted(" ".join(map(str, e)) for e in r.edges_missed),
                "failure": None
                if not r.violations
                else {
                    "check": r.violations[0].check,
                    "message": r.violations[0].detail,
                    "sequence": trace_text(r.violations[0], r.machine).splitlines(),
                },
            }
            for r in results
        ],
    }


def run_exhaustive(
    scope_name: str,
    machines: Iterable[str] = MACHINES,
    *,
    as_json: bool = False,
    echo: Callable[[str], None] = print,
) -> bool:
    """``verify --exhaustive``: search each chosen machine, print counts, missed edges, traces."""
    chosen = models(scope_name)
    results = []
    for name in machines:
        result = search(chosen[name])
        results.append(result)
        if as_json:
            continue
        echo(f"exhaustive {scope_name} scope, {name}: {summary(result)}")
        for source, event, target in sorted(result.edges_missed, key=repr):
            named = getattr(source, "value", source), event, getattr(target, "value", target)
            echo("chart edge never taken: {} --{}--> {}".format(*named))
        for violation in result.violations:
            echo(f"violation, shortest trace ({len(violation.events)} events):")
            echo(trace_text(violation, name))
    if as_json:
        echo(json.dumps(_document(scope_name, results), indent=2))
    return not any(r.violations for r in results)
