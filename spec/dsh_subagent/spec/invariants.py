"""Invariant predicates with stable IDs, over the manager's state and over recorded traces.

Theory of operation
-------------------
1. Each invariant has an ID (``INV-<AREA>-<n>``), the catalog rules it checks, a one-line
   statement, and a predicate that returns the list of violations (empty when it holds), so
   a failing check says *what* broke, not just that something did.
2. State invariants look at one ``ManagerState``; trace invariants look at a recorded
   ``Trace`` of ``(event, effects, state before, state after)`` steps from the pure core.
   Harness-level invariants (inbox ledger, depth across resume) take the notifications or
   observations the adapters record.
3. ``complete=True`` marks a trace that ended with everything drained: then "eventually"
   obligations (every start has its end, every accepted message left) must be discharged.
4. The stateful machines call ``check_state`` / ``check_trace`` after every step and count
   the checks per ID (``dsh-subagent verify`` prints that table).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import attrs

from dsh_subagent.core import oneshot_observer
from dsh_subagent.core.authority import ParentAuthority, UserAuthority
from dsh_subagent.core.errors import SubagentError
from dsh_subagent.core.lifecycle import RunEndInfo, RunStartInfo
from dsh_subagent.core.manager import ManagerState, residency_of
from dsh_subagent.core.manager.effects import (
    DisposeHandle,
    Effect,
    EmitEnd,
    EmitStart,
    ReleaseOwnership,
    ResumeAgent,
    SendNotice,
    SubmitFollowup,
)
from dsh_subagent.core.manager.events import LIVE, Event, FollowupRequested, Phase
from dsh_subagent.core.residency import Residency
from dsh_subagent.core.values import MessageId, SessionId
from dsh_subagent.spec.inbox import ledger_of


@attrs.frozen
class TraceStep:
    """One applied event: what happened, what the core asked for, and the states around it."""

    event: Event
    effects: tuple[Effect, ...]
    before: ManagerState
    after: ManagerState


Trace = Sequence[TraceStep]


@attrs.frozen
class Invariant:
    """A named, traceable property and its violation finder."""

    id: str
    rules: tuple[str, ...]
    statement: str


@attrs.frozen
class StateInvariant(Invariant):
    check: Callable[[ManagerState], list[str]] = attrs.field(kw_only=True)


@attrs.frozen
class TraceInvariant(Invariant):
    check: Callable[[Trace, bool], list[str]] = attrs.field(kw_only=True)


# --------------------------------------------------------------------------- state


def _one_activation_per_child(state: ManagerState) -> list[str]:
    found = []
    agents: dict[object, SessionId] = {}
    for child_id, record in state.activations.items():
        if record.child_id != child_id or record.phase is Phase.ABSENT:
            found.append(f"record under {child_id} is {record.child_id} in {record.phase}")
        if record.agent is not None:
            other = agents.setdefault(record.agent, child_id)
            if other != child_id:
                pair = " and ".join(sorted((other, child_id)))
                found.append(f"agent {record.agent} is resident as {pair}")
    return found


def _owner_never_settled(state: ManagerState) -> list[str]:
    return [
        f"{child_id} owns {len(record.owned)} child(ren) but is settled"
        for child_id, record in state.activations.items()
        if record.owned and residency_of(state, child_id) is Residency.SETTLED
    ] + [
        f"{child_id} is resident but settled (disposal must open in the same step)"
        for child_id, record in state.activations.items()
        if record.phase is Phase.RESIDENT and residency_of(state, child_id) is Residency.SETTLED
    ]


def _resident_was_announced(state: ManagerState) -> list[str]:
    return [
        f"{child_id} is resident but not announced"
        for child_id, record in state.activations.items()
        if record.phase is Phase.RESIDENT and not record.announced
    ]


def _ownership_points_at_live_children(state: ManagerState) -> list[str]:
    found = []
    for child_id, record in state.activations.items():
        for owned in record.owned:
            child = state.activations.get(owned)
            if child is None or child.phase not in LIVE or child.parent_session != child_id:
                found.append(f"{child_id} owns {owned}, which is not its live child")
        if record.phase in (Phase.FLUSHING, Phase.RELEASING) and record.owned:
            found.append(f"{child_id} flushes or releases while still owning children")
    return found


# --------------------------------------------------------------------------- traces


def _release_child_first(trace: Trace, complete: bool) -> list[str]:
    found = []
    for step in trace:
        for effect in step.effects:
            if isinstance(effect, DisposeHandle):
                record = step.before.activations.get(effect.child_id)
                if record is not None and record.owned:
                    found.append(f"{effect.child_id} handle disposed before its children")
    return found


def _notice_before_release(trace: Trace, complete: bool) -> list[str]:
    found = []
    for step in trace:
        noticed = set()
        for effect in step.effects:
            if isinstance(effect, SendNotice):
                noticed.add(effect.source.sender_session_id)
            elif isinstance(effect, ReleaseOwnership):
                record = step.before.activations.get(effect.child_id)
                if record is not None and record.announced and effect.child_id not in noticed:
                    found.append(f"{effect.child_id} released before its settlement notice")
    return found


def _no_notice_without_acceptance(trace: Trace, complete: bool) -> list[str]:
    found = []
    for step in trace:
        for effect in step.effects:
            if isinstance(effect, SendNotice):
                child = effect.source.sender_session_id
                record = step.before.activations.get(child)
                if record is None or not record.announced:
                    found.append(f"notice for {child}, which never accepted a delivery")
    return found


def _observed_edge(effect: EmitStart | EmitEnd) -> oneshot_observer.ObserverEvent:
    """A manager edge as the observer sees it; the edge names only the run and the child, so
    the rest of the identity is the same placeholder on both sides."""
    start = RunStartInfo(effect.run_id, "manager", effect.child_id, False, effect.child_id)
    if isinstance(effect, EmitStart):
        return oneshot_observer.RunStarted(effect.cause, start)
    return oneshot_observer.RunEnded(effect.cause, RunEndInfo(start, effect.stop_reason))


def _one_end_per_start(trace: Trace, complete: bool) -> list[str]:
    """The manager's edges, paired by the one pairing machine (``core.oneshot_observer``)."""
    found = []
    observation = oneshot_observer.Observation()
    for step in trace:
        for effect in step.effects:
            if not isinstance(effect, EmitStart | EmitEnd):
                continue
            try:
                observation, _ = oneshot_observer.apply(observation, _observed_edge(effect))
            except SubagentError as error:
                found.append(error.message)
    if complete:
        found += [f"run {run!r} never ended" for run in observation.open_runs]
    return found


def _delivery_only_under_authority(trace: Trace, complete: bool) -> list[str]:
    found = []
    for step in trace:
        event = step.event
        delivers = any(isinstance(e, SubmitFollowup | ResumeAgent) for e in step.effects)
        if not delivers or not isinstance(event, FollowupRequested):
            continue
        authority = event.authority
        if isinstance(authority, UserAuthority):
            if not authority.grant_genuine:
                found.append(f"{event.child_id}: delivery under a forged user grant")
            continue
        assert isinstance(authority, ParentAuthority)
        caller = authority.caller
        record = step.before.activations.get(event.child_id)
        if not caller.is_exact_live:
            found.append(f"{event.child_id}: delivery from a stale or replaced parent")
        elif record is not None and record.parent_session != caller.agent.session_id:
            found.append(f"{event.child_id}: delivery from a parent it does not belong to")
    return found


# --------------------------------------------------------------------------- harness


def inbox_violations(
    notifications: Iterable[tuple[str, MessageId]], *, complete: bool
) -> list[str]:
    """INV-INBOX-1 over ``("inserted" | "claimed" | "discarded", message id)`` notifications."""
    try:
        ledger = ledger_of(notifications)
    except SubagentError as error:
        return [error.message]
    if complete:
        return [f"message {m} never left the inbox" for m in sorted(ledger.pending())]
    return []


def depth_violations(observations: Iterable[tuple[SessionId, int]]) -> list[str]:
    """INV-DEPTH-1 over ``(child id, delegation depth)`` seen at each materialization."""
    seen: dict[SessionId, int] = {}
    found = []
    for child, depth in observations:
        if child in seen and depth < seen[child]:
            found.append(f"{child}: depth fell from {seen[child]} to {depth} across a resume")
        seen[child] = max(depth, seen.get(child, depth))
    return found


STATE_INVARIANTS: tuple[StateInvariant, ...] = (
    StateInvariant(
        "INV-RES-1",
        ("RES-9",),
        "At most one Activation per child session, and one agent is resident once.",
        check=_one_activation_per_child,
    ),
    StateInvariant(
        "INV-RES-2",
        ("RES-1", "RES-6", "RES-12"),
        "A parent that owns an undisposed child is never settled; no resident record is.",
        check=_owner_never_settled,
    ),
    StateInvariant(
        "INV-RES-3",
        ("RES-10", "NOTICE-2"),
        "A resident record is announced: a delivery to it is accepted in one transition.",
        check=_resident_was_announced,
    ),
    StateInvariant(
        "INV-OWN-1",
        ("CONT-26", "TEAR-3", "TEAR-6"),
        "Ownership names live children of the owner; nothing flushes while owning one.",
        check=_ownership_points_at_live_children,
    ),
)

TRACE_INVARIANTS: tuple[TraceInvariant, ...] = (
    TraceInvariant(
        "INV-TEAR-1",
        ("TEAR-2", "TEAR-3"),
        "Release is child-first: a handle is disposed only after all its children.",
        check=_release_child_first,
    ),
    TraceInvariant(
        "INV-NOTICE-1",
        ("NOTICE-1", "NOTICE-11"),
        "The settlement notice is sent before the parent's ownership is released.",
        check=_notice_before_release,
    ),
    TraceInvariant(
        "INV-NOTICE-2",
        ("NOTICE-2", "CONT-9"),
        "No notice for a child rolled back before its first accepted delivery.",
        check=_no_notice_without_acceptance,
    ),
    TraceInvariant(
        "INV-EVT-1",
        ("EVT-6", "EVT-16"),
        "Every subagent/start has exactly one subagent/end with the same identity, after it.",
        check=_one_end_per_start,
    ),
    TraceInvariant(
        "INV-AUTH-1",
        ("AUTH-1", "AUTH-2", "CONT-16"),
        "A follow-up is delivered only under the exact live direct parent or a genuine grant.",
        check=_delivery_only_under_authority,
    ),
)

HARNESS_INVARIANTS: tuple[Invariant, ...] = (
    Invariant(
        "INV-INBOX-1",
        ("HARNESS-11", "CONT-25"),
        "Every accepted message leaves the inbox exactly once, by claim or discard.",
    ),
    Invariant(
        "INV-DEPTH-1",
        ("DEPTH-5", "DEPTH-7"),
        "A child's delegation depth never decreases across resume.",
    ),
)

ALL_INVARIANTS: tuple[Invariant, ...] = STATE_INVARIANTS + TRACE_INVARIANTS + HARNESS_INVARIANTS


def check_state(state: ManagerState) -> dict[str, list[str]]:
    """Violations of every state invariant, by ID (empty lists when all hold)."""
    return {inv.id: inv.check(state) for inv in STATE_INVARIANTS}


def check_trace(trace: Trace, *, complete: bool = False) -> dict[str, list[str]]:
    """Violations of every trace invariant, by ID (empty lists when all hold)."""
    return {inv.id: inv.check(trace, complete) for inv in TRACE_INVARIANTS}
