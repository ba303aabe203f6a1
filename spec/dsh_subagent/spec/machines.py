"""Hypothesis stateful machines over the seam, shared by ``stateful_tests/`` and ``verify``.

``CoreMachine`` is the core lockstep machine: the continuation manager's ``apply`` against the
spec's charts. This module needs Hypothesis (a development / ``verify`` extra dependency).

Hypothesis draws event sequences (rules are named after the events); after every step:
- the core's phase change of every child must be a path in ``ActivationChart`` — the applied
  event (for its child) followed by state-triggered edges (``modelcheck.chart_path``, the one
  path finder the exhaustive search uses too) — and the chart instance, driven
  along that path, must land where the core did; an event the core refuses as illegal must
  have no edge in the chart;
- every state and trace invariant of ``dsh_subagent.spec.invariants`` must hold;
- INV-INBOX-1 over the core's own inbox bookkeeping: each Activation's ``accepted`` set, read
  as a notification ledger (a message entering it is "inserted", leaving it on a
  ``MessageClaimed`` is a claim, on anything else a discard), must be a valid ledger, and a
  record may go away with messages pending only on ``DisposalFinished`` (the harness's
  dispose discarded them, HARNESS-18).
A ``drain_to_completion`` rule tears everything down and checks the "eventually" obligations.
``CHECKED`` names every invariant the machine checks (``verify`` reports each, 0 checks as a
vacuous run). INV-DEPTH-1 is not among them: the core keeps no delegation depth, so the
service machine (``dsh_subagent.testing``) checks it over the real harness.
"""

from __future__ import annotations

import collections
import itertools
from typing import ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from dsh_subagent.core.authority import (
    AgentRef,
    AncestorInterrupt,
    ParentAuthority,
    Presented,
    UserAuthority,
)
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.manager import ManagerState, apply
from dsh_subagent.core.manager import events as ev
from dsh_subagent.core.manager.effects import Reject
from dsh_subagent.core.notices import EpochOutcome
from dsh_subagent.core.teardown import FlushOutcome
from dsh_subagent.core.values import EventId, KnownStop, MessageId, RunId, SessionId
from dsh_subagent.spec.charts import ActivationChart
from dsh_subagent.spec.counting import CountedChecks
from dsh_subagent.spec.invariants import (
    STATE_INVARIANTS,
    TRACE_INVARIANTS,
    TraceStep,
    check_state,
    check_trace,
    inbox_violations,
)
from dsh_subagent.spec.modelcheck import CHART_EDGES, ROOT, chart_path

INBOX = "INV-INBOX-1"
CHILD_NAMES = [SessionId(n) for n in ("a", "b", "c", "d")]
MESSAGES = st.sampled_from(["m1", "m2", "m3"]).map(MessageId)
STOPS = st.sampled_from(list(KnownStop))


class CoreMachine(CountedChecks, RuleBasedStateMachine):
    """Drives ``manager.apply`` and one ``ActivationChart`` per child in lockstep."""

    CHECKED: ClassVar[tuple[str, ...]] = (
        *(inv.id for inv in STATE_INVARIANTS + TRACE_INVARIANTS),
        INBOX,
    )
    totals: ClassVar[collections.Counter[str]] = collections.Counter()
    """Checks per invariant ID across every instance since the last ``reset_counts``."""
    violated: ClassVar[set[str]] = set()

    children = Bundle("children")
    agents = Bundle("agents")
    # Any child id seen so far: reserved, resumed, or started whole (an agent's session id).
    subjects = st.one_of(children, agents.map(lambda ref: ref.session_id))

    def __init__(self) -> None:
        super().__init__()
        self.state = ManagerState()
        self.trace: list[TraceStep] = []
        self.charts: dict[SessionId, ActivationChart] = {}
        self.ids = itertools.count()
        self.tokens = itertools.count(2)
        self.checks: collections.Counter[str] = collections.Counter()
        # Per child, the inbox ledger of its current Activation (INV-INBOX-1), and the
        # problems found in ledgers already closed by their record going away.
        self.inboxes: dict[SessionId, list[tuple[str, MessageId]]] = {}
        self.inbox_problems: list[str] = []
        self.arrivals: collections.Counter[tuple[SessionId, MessageId]] = collections.Counter()

    # ------------------------------------------------------------------ plumbing

    def _eid(self) -> EventId:
        return EventId(f"e{next(self.ids)}")

    def _phase(self, state: ManagerState, child: SessionId) -> ev.Phase:
        record = state.activations.get(child)
        return ev.Phase.ABSENT if record is None else record.phase

    def _apply(self, event: ev.Event) -> None:
        subject = getattr(event, "child_id", None)
        name = type(event).__name__
        try:
            after, effects = apply(self.state, event)
        except SubagentError as error:
            assert error.code is ErrorCode.ILLEGAL_TRANSITION, error  # noqa: PT017
            assert subject is not None, "only per-child events may be illegal"
            old = self._phase(self.state, subject)
            assert not any(s is old and e == name for s, e, _ in CHART_EDGES), (
                f"core refused {name} in {old}, the chart accepts it"
            )
            return
        lost = any(isinstance(e, Reject) for e in effects)
        for child in {
            *self.charts,
            *(r for r in after.activations),
            *([subject] if subject else []),
        }:
            old, new = self._phase(self.state, child), self._phase(after, child)
            first = name if child == subject else None
            if first is None and old is new:
                continue
            path = chart_path(old, new, first)
            assert path is not None, f"{child}: {old} -> {new} on {name} is not in the chart"
            chart = self.charts.setdefault(child, ActivationChart())
            assert chart.current_state_value is old
            for _, step, _ in path:
                chart.send(step, admission_lost=lost)
            assert chart.current_state_value is new
        self._follow_inboxes(event, after)
        self.trace.append(TraceStep(event, effects, self.state, after))
        self.state = after

    def _follow_inboxes(self, event: ev.Event, after: ManagerState) -> None:
        """Extend each child's ledger with how its ``accepted`` set changed (INV-INBOX-1)."""
        left = {"MessageClaimed": "claimed"}.get(type(event).__name__, "discarded")
        for child in {*self.state.activations, *after.activations}:
            old = self.state.activations.get(child)
            new = after.activations.get(child)
            before = old.accepted if old else frozenset()
            now = new.accepted if new else frozenset()
            ledger = self.inboxes.setdefault(child, [])
            for m in sorted(now - before):
                self.arrivals[child, m] += 1
            ledger += [("inserted", self._arrival(child, m)) for m in sorted(now - before)]
            if new is None:  # the record went away: its ledger closes, nothing may be pending
                if isinstance(event, ev.DisposalFinished):
                    ledger += [("discarded", self._arrival(child, m)) for m in sorted(before)]
                problems = inbox_violations(ledger, complete=True)
                self.inbox_problems += [f"{child}: {p}" for p in problems]
                del self.inboxes[child]
            else:
                ledger += [(left, self._arrival(child, m)) for m in sorted(before - now)]

    def _arrival(self, child: SessionId, message: MessageId) -> MessageId:
        """The machine reuses message ids; each arrival of one is a distinct message."""
        return MessageId(f"{message}#{self.arrivals[child, message]}")

    # ------------------------------------------------------------------ rules

    @rule(target=children, name=st.sampled_from(CHILD_NAMES))
    def reserve(self, name: SessionId) -> SessionId:
        self._apply(ev.ChildIdReserved(self._eid(), name, ROOT))
        return name

    @rule(target=children, name=st.sampled_from(CHILD_NAMES))
    def cold_resume(self, name: SessionId) -> SessionId:
        self._apply(ev.ColdResumeStarted(self._eid(), name, ROOT.session_id))
        self.LeaseAcquired(name)
        return name

    @rule(child=subjects)
    def LeaseAcquired(self, child: SessionId) -> None:
        self._apply(ev.LeaseAcquired(self._eid(), child, next(self.ids)))

    @rule(child=subjects)
    def LeaseRefused(self, child: SessionId) -> None:
        self._apply(ev.LeaseRefused(self._eid(), child, "another harness"))

    @rule(target=agents, name=st.sampled_from(CHILD_NAMES), parent=st.none() | agents)
    def start_resident(self, name: SessionId, parent: AgentRef | None) -> AgentRef:
        """A whole fresh start, reserve to first acceptance, under root or a live child."""
        return self._start(name, parent)

    def _start(self, name: SessionId, parent: AgentRef | None) -> AgentRef:
        owner = parent or ROOT
        ref = AgentRef(name, next(self.tokens))
        message = MessageId(f"m-{next(self.ids)}")
        for event in (
            ev.ChildIdReserved(self._eid(), name, owner),
            ev.DescriptorSnapshotted(self._eid(), name),
            ev.ChildPrepared(self._eid(), name),
            ev.ChildMaterialized(
                self._eid(),
                name,
                RunId(f"run-{next(self.ids)}"),
                ref,
                frozenset({ref, owner, ROOT}),
            ),
            ev.FollowupRequested(
                self._eid(), name, message, ParentAuthority(Presented(owner, owner.token))
            ),
            ev.MessageAccepted(self._eid(), name, message),
        ):
            self._apply(event)
        return ref

    @rule(
        target=agents,
        names=st.lists(st.sampled_from(CHILD_NAMES), min_size=3, max_size=3, unique=True),
    )
    def start_family(self, names: list[SessionId]) -> AgentRef:
        """A parent with two live children: the shape child-first release is about."""
        parent = self._start(names[0], None)
        for name in names[1:]:
            self._start(name, parent)
        return parent

    @rule(child=subjects)
    def settle(self, child: SessionId) -> None:
        """The child claims everything it was sent and goes idle."""
        record = self.state.activations.get(child)
        for message in sorted(record.accepted) if record else []:
            self._apply(ev.MessageClaimed(self._eid(), child, message))
        self._apply(ev.AgentBecameIdle(self._eid(), child))

    @rule(child=subjects)
    def DescriptorSnapshotted(self, child: SessionId) -> None:
        self._apply(ev.DescriptorSnapshotted(self._eid(), child))

    @rule(child=subjects)
    def ChildPrepared(self, child: SessionId) -> None:
        self._apply(ev.ChildPrepared(self._eid(), child))

    @rule(target=agents, child=children)
    def ChildMaterialized(self, child: SessionId) -> AgentRef:
        ref = AgentRef(child, next(self.tokens))
        run = RunId(f"run-{next(self.ids)}")
        self._apply(ev.ChildMaterialized(self._eid(), child, run, ref, frozenset({ref, ROOT})))
        return ref

    @rule(child=subjects, handle=st.booleans())
    def StartRolledBack(self, child: SessionId, handle: bool) -> None:
        self._apply(ev.StartRolledBack(self._eid(), child, handle))

    @rule(child=subjects, message=MESSAGES, stale=st.booleans(), user=st.booleans())
    def FollowupRequested(
        self, child: SessionId, message: MessageId, stale: bool, user: bool
    ) -> None:
        authority = (
            UserAuthority(grant_genuine=not stale)
            if user
            else ParentAuthority(Presented(ROOT, None if stale else ROOT.token))
        )
        self._apply(ev.FollowupRequested(self._eid(), child, message, authority))

    @rule(child=subjects, message=MESSAGES)
    def MessageAccepted(self, child: SessionId, message: MessageId) -> None:
        self._apply(ev.MessageAccepted(self._eid(), child, message))

    @rule(child=subjects, message=MESSAGES, claimed=st.booleans())
    def MessageLeft(self, child: SessionId, message: MessageId, claimed: bool) -> None:
        kind = ev.MessageClaimed if claimed else ev.MessageDiscarded
        self._apply(kind(self._eid(), child, message))

    @rule(child=subjects, busy=st.booleans())
    def AgentStatusChanged(self, child: SessionId, busy: bool) -> None:
        self._apply((ev.AgentBecameBusy if busy else ev.AgentBecameIdle)(self._eid(), child))

    @rule(child=subjects, outcome=st.sampled_from(list(FlushOutcome)))
    def FlushReported(self, child: SessionId, outcome: FlushOutcome) -> None:
        self._apply(ev.FlushReported(self._eid(), child, outcome))

    @rule(child=subjects, stop=STOPS)
    def DisposalFinished(self, child: SessionId, stop: KnownStop) -> None:
        notice = MessageId(f"notice-{next(self.ids)}")
        self._apply(ev.DisposalFinished(self._eid(), child, EpochOutcome(stop), notice))

    @rule(child=subjects, caller=agents)
    def InterruptRequested(self, child: SessionId, caller: AgentRef) -> None:
        authority = AncestorInterrupt(Presented(caller, caller.token))
        self._apply(ev.InterruptRequested(self._eid(), child, authority))

    @rule(sender=agents, message=MESSAGES, delivery=st.sampled_from(list(ev.ReportDelivery)))
    def ReportRequested(
        self, sender: AgentRef, message: MessageId, delivery: ev.ReportDelivery
    ) -> None:
        self._apply(ev.ReportRequested(self._eid(), sender, message, delivery))

    @rule(root=agents)
    def DrainDescendants(self, root: AgentRef) -> None:
        self._apply(
            ev.DrainRequested(self._eid(), ev.DescendantsOf((Presented(root, root.token),)))
        )

    @rule(child=subjects)
    def DrainChildren(self, child: SessionId) -> None:
        scope = ev.SelectedChildren(Presented(ROOT, ROOT.token), (child,))
        self._apply(ev.DrainRequested(self._eid(), scope))

    @rule(agent=agents)
    def AgentDisposed(self, agent: AgentRef) -> None:
        self._apply(ev.AgentDisposed(self._eid(), agent))

    @rule()
    def drain_to_completion(self) -> None:
        """Close admission, dispose everything child-first, then check the obligations."""
        self._apply(ev.DrainRequested(self._eid(), ev.WholeManager()))
        for _ in range(8 * len(CHILD_NAMES)):
            pending = [(c, r.phase) for c, r in self.state.activations.items()]
            if not pending:
                break
            for child, phase in pending:
                for event in self._finishers(child, phase):
                    self._apply(event)
        assert not list(self.state.activations), "drain left records behind"
        self._check(complete=True)

    def _finishers(self, child: SessionId, phase: ev.Phase) -> list[ev.Event]:
        if phase is ev.Phase.FLUSHING:
            return [ev.FlushReported(self._eid(), child, FlushOutcome.OK)]
        if phase is ev.Phase.RELEASING:
            outcome = EpochOutcome(KnownStop.ABORTED)
            notice = MessageId(f"notice-{next(self.ids)}")
            return [ev.DisposalFinished(self._eid(), child, outcome, notice)]
        if phase is ev.Phase.DISPOSING:
            record = self.state.activations.get(child)
            accepted = sorted(record.accepted) if record else []
            return [ev.MessageDiscarded(self._eid(), child, m) for m in accepted]
        unpublished: ev.ChildEvent = ev.StartRolledBack(self._eid(), child, False)
        return [unpublished] if phase is not ev.Phase.MATERIALIZED else []

    # ------------------------------------------------------------------ invariants

    def _check(self, *, complete: bool = False) -> None:
        inbox = self.inbox_problems + [
            f"{child}: {problem}"
            for child, ledger in self.inboxes.items()
            for problem in inbox_violations(ledger, complete=complete)
        ]
        self.assert_held(
            {
                **check_state(self.state),
                **check_trace(self.trace, complete=complete),
                INBOX: inbox,
            }
        )

    @invariant()
    def spec_invariants_hold(self) -> None:
        self._check()
