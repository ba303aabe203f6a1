"""The continuation manager as a pure machine: ``apply(state, event) -> (state, effects)``.

Theory of operation
-------------------
1. State and the shared disposal steps live in ``manager_state``, events and effects in
   ``manager_events`` / ``manager_effects``, the manager-wide handlers (interrupt, report,
   drain) in ``manager_ops``. This module holds the tables, ``apply`` and per-child handlers.
2. Per-child events are legal only where ``TRANSITIONS`` lists ``(phase, event type)``;
   anything else raises ``ILLEGAL_TRANSITION`` and, being pure, changes nothing. Expected
   refusals (DRAINING, UNAUTHORIZED, ACTIVATION_CLOSING, DUPLICATE_CHILD, PARENT_UNAVAILABLE)
   are ``Reject`` effects. Hand-written edges: the refusals in ``REFUSALS`` (an unpublished
   start that loses admission is dropped) and the state-triggered edges in ``STATE_TRIGGERED``.
3. Residency is derived after every event that can change it; a RESIDENT Activation found
   SETTLED opens its disposal in the same step (RES-6), so settle and cutoff cannot part.
4. Routing (CONT-14, CONT-15): running or waiting -> ``SubmitFollowup`` with the id accounted
   first (RES-2); absent -> ``ResumeAgent``; disposal open -> ``AwaitRelease``. Ownership is
   acquired at publication and on each parent submission, before the child can run (CONT-26).
5. Disposal (TEAR-1, TEAR-2) is memoized by phase: opening cancels the whole live subtree
   top-down in one step; each node flushes once every owned child is released; its
   ``DisposalFinished`` then emits, in order, the notice (if announced), the ownership
   release and the end edge (NOTICE-1, NOTICE-11, NOTICE-12). Ids, run ids and identity
   tokens always arrive in events; the core mints nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import attrs

from dsh_subagent.core.authority import (
    AgentRef,
    Denied,
    ParentAuthority,
    authorize_followup,
    precheck_followup,
)
from dsh_subagent.core.errors import ErrorCode, SubagentError, invalid
from dsh_subagent.core.manager_effects import (
    AwaitRelease,
    DisposeHandle,
    Effect,
    EmitEnd,
    EmitStart,
    ReleaseOwnership,
    ReportDurabilityFailed,
    ResumeAgent,
    SendNotice,
    SubmitFollowup,
)
from dsh_subagent.core.manager_events import (
    DISPOSAL_OPEN,
    LIVE,
    UNPUBLISHED,
    AgentBecameBusy,
    AgentBecameIdle,
    AgentDisposed,
    ChildEvent,
    ChildIdReserved,
    ChildMaterialized,
    ChildPrepared,
    ColdResumeStarted,
    DescriptorSnapshotted,
    DisposalFinished,
    DrainRequested,
    Event,
    FlushReported,
    FollowupRequested,
    InterruptRequested,
    MessageAccepted,
    MessageClaimed,
    MessageDiscarded,
    MessageSendFailed,
    Phase,
    ReportRequested,
    StartRolledBack,
)
from dsh_subagent.core.manager_ops import drain, interrupt, report
from dsh_subagent.core.manager_state import (
    Activation,
    ManagerState,
    Step,
    activation_state_of,
    flush_if_released,
    open_disposal,
    residency_of,
    settle_if_quiet,
)
from dsh_subagent.core.notices import (
    ParentFacts,
    notice_content,
    notice_outcome,
    notice_source,
    route_notice,
)
from dsh_subagent.core.residency import AgentStatus, admit, settle_message
from dsh_subagent.core.teardown import durability_report

__all__ = [
    "REFUSALS",
    "STATE_TRIGGERED",
    "TRANSITIONS",
    "Activation",
    "ManagerState",
    "activation_state_of",
    "apply",
    "residency_of",
]


_P = Phase
TRANSITIONS: Final[Mapping[tuple[Phase, type[ChildEvent]], Phase]] = {
    (_P.ABSENT, ChildIdReserved): _P.RESERVED,
    **{(p, ChildIdReserved): p for p in Phase if p is not _P.ABSENT},  # DUPLICATE_CHILD
    (_P.RESERVED, DescriptorSnapshotted): _P.SNAPSHOTTED,
    (_P.SNAPSHOTTED, ChildPrepared): _P.PREPARED,
    (_P.ABSENT, ColdResumeStarted): _P.RESUMING,
    (_P.PREPARED, ChildMaterialized): _P.MATERIALIZED,
    (_P.RESUMING, ChildMaterialized): _P.MATERIALIZED,
    **{(p, StartRolledBack): _P.ABSENT for p in UNPUBLISHED},
    (_P.MATERIALIZED, StartRolledBack): _P.DISPOSING,
    (_P.ABSENT, FollowupRequested): _P.ABSENT,
    (_P.MATERIALIZED, FollowupRequested): _P.MATERIALIZED,
    (_P.RESIDENT, FollowupRequested): _P.RESIDENT,
    **{(p, FollowupRequested): p for p in DISPOSAL_OPEN},
    (_P.MATERIALIZED, MessageAccepted): _P.RESIDENT,
    (_P.RESIDENT, MessageAccepted): _P.RESIDENT,
    (_P.MATERIALIZED, MessageSendFailed): _P.MATERIALIZED,
    (_P.RESIDENT, MessageSendFailed): _P.RESIDENT,
    **{
        (p, kind): p
        for p in LIVE
        for kind in (MessageClaimed, MessageDiscarded, AgentBecameIdle, AgentBecameBusy)
    },
    (_P.FLUSHING, FlushReported): _P.RELEASING,
    (_P.RELEASING, DisposalFinished): _P.ABSENT,
}
"""Legal ``(phase, event type) -> phase`` edges of the normal path."""

REFUSALS: Final[Mapping[tuple[Phase, type[ChildEvent]], Phase]] = {
    (_P.ABSENT, ChildIdReserved): _P.ABSENT,
    (_P.ABSENT, ColdResumeStarted): _P.ABSENT,
    (_P.SNAPSHOTTED, ChildPrepared): _P.ABSENT,
    (_P.PREPARED, ChildMaterialized): _P.ABSENT,
    (_P.RESUMING, ChildMaterialized): _P.ABSENT,
}
"""Edges taken when a start or cold resume is refused admission (DRAINING,
ACTIVATION_CLOSING): it never begins, or it is rolled back."""

STATE_TRIGGERED: Final[Mapping[tuple[Phase, str], Phase]] = {
    (_P.RESIDENT, "settled"): _P.DISPOSING,
    (_P.MATERIALIZED, "disposal opened"): _P.DISPOSING,
    (_P.RESIDENT, "disposal opened"): _P.DISPOSING,
    (_P.DISPOSING, "children released"): _P.FLUSHING,
}
"""Edges taken by derivation inside an event (settlement, drain or cascade, release).

They chain within one step: a record that owns no live child passes DISPOSING and lands in
FLUSHING in the same ``apply`` call.
"""

_EVENT_TYPES: Final = (
    *{kind for _, kind in TRANSITIONS},
    InterruptRequested,
    ReportRequested,
    DrainRequested,
    AgentDisposed,
)


def apply(state: ManagerState, event: Event) -> tuple[ManagerState, tuple[Effect, ...]]:
    """Apply one event; return the new state and the effects to perform, in order.

    raises: SubagentError
    """
    if not _is_event(event):
        raise invalid("event", f"not a manager event: {type(event).__name__}")
    step = Step(state, event.event_id)
    match event:
        case InterruptRequested():
            interrupt(step, event)
        case ReportRequested():
            report(step, event)
        case DrainRequested():
            drain(step, event)
        case AgentDisposed():
            step.closing_roots = step.closing_roots - {event.agent}
        case _:
            _child_event(step, event)
    return step.result()


def _is_event(value: object) -> bool:
    return isinstance(value, _EVENT_TYPES)


def _child_event(step: Step, event: ChildEvent) -> None:
    record = step.get(event.child_id)
    phase = Phase.ABSENT if record is None else record.phase
    if (phase, type(event)) not in TRANSITIONS:
        raise SubagentError(
            ErrorCode.ILLEGAL_TRANSITION,
            f"{type(event).__name__} is not accepted in phase {phase.value}",
            field="event",
        )
    if record is None:
        _absent_child_event(step, event)
        return
    match event:
        case ChildIdReserved():
            step.reject(ErrorCode.DUPLICATE_CHILD, f"{event.child_id} is already live")
        case DescriptorSnapshotted():
            step.put(attrs.evolve(record, phase=Phase.SNAPSHOTTED))
        case ChildPrepared():
            if step.agent_closing(record.parent_agent):
                step.reject(ErrorCode.DRAINING, "admission closed while preparing")
                step.drop(record.child_id)
            else:
                step.put(attrs.evolve(record, phase=Phase.PREPARED))
        case ChildMaterialized():
            _materialized(step, record, event)
        case StartRolledBack():
            if record.phase in UNPUBLISHED:
                if event.handle_created:
                    step.effects.append(DisposeHandle(step.cause, record.child_id))
                step.drop(record.child_id)
            else:
                open_disposal(step, (record.child_id,))
        case FollowupRequested():
            _followup(step, record, event)
        case MessageAccepted():
            settle_if_quiet(step, step.put(attrs.evolve(record, phase=_P.RESIDENT, announced=True)))
        case MessageSendFailed() | MessageClaimed() | MessageDiscarded():
            accepted = settle_message(record.accepted, event.message_id)
            settle_if_quiet(step, step.put(attrs.evolve(record, accepted=accepted)))
        case AgentBecameIdle() | AgentBecameBusy():
            idle = isinstance(event, AgentBecameIdle)
            status = AgentStatus.IDLE if idle else AgentStatus.RUNNING
            settle_if_quiet(step, step.put(attrs.evolve(record, status=status)))
        case FlushReported():
            report = durability_report(record.child_id, event.outcome)
            if report is not None:
                step.effects.append(ReportDurabilityFailed(step.cause, report))
            step.put(attrs.evolve(record, phase=Phase.RELEASING, durability=report))
            step.effects.append(DisposeHandle(step.cause, record.child_id))
        case _:
            assert isinstance(event, DisposalFinished)
            _disposal_finished(step, record, event)


def _absent_child_event(step: Step, event: ChildEvent) -> None:
    """The events legal with no record: a fresh start, a cold resume, a routing request."""
    if isinstance(event, ChildIdReserved):
        if step.agent_closing(event.parent):
            step.reject(ErrorCode.DRAINING, "admission is closed for this parent")
            return
        parent = event.parent
        step.put(Activation(event.child_id, Phase.RESERVED, parent.session_id, parent))
    elif isinstance(event, ColdResumeStarted):
        if step.draining:
            step.reject(ErrorCode.DRAINING, "the manager is draining")
            return
        step.put(Activation(event.child_id, Phase.RESUMING, event.parent_session))
    else:
        assert isinstance(event, FollowupRequested)
        if not _admits_delivery(step, event, frozenset()):
            return
        decision = precheck_followup(event.authority)
        if isinstance(decision, Denied):
            step.reject(decision.code, decision.reason)
            return
        step.effects.append(ResumeAgent(step.cause, event.child_id, event.message_id))


def _admits_delivery(step: Step, event: FollowupRequested, lineage: frozenset[AgentRef]) -> bool:
    """The admission check of a delivery (CONT-14, CONT-16 step 2); rejects when closed."""
    caller = event.authority.caller.agent if isinstance(event.authority, ParentAuthority) else None
    if step.lineage_closing(lineage) or (caller is not None and step.agent_closing(caller)):
        step.reject(ErrorCode.DRAINING, "admission is closed")
        return False
    return True


def _materialized(step: Step, record: Activation, event: ChildMaterialized) -> None:
    """Publish a created or resumed child, or roll it back unpublished (CONT-10, TEAR-7)."""
    owner = step.live(record.parent_session)
    refusal: tuple[ErrorCode, str] | None = None
    if step.lineage_closing(event.lineage):
        refusal = (ErrorCode.DRAINING, "admission closed during materialization")
    elif owner is not None and owner.phase in DISPOSAL_OPEN:
        refusal = (ErrorCode.ACTIVATION_CLOSING, "the parent Activation is being released")
    if refusal is not None:
        step.reject(*refusal)
        step.effects.append(DisposeHandle(step.cause, record.child_id))
        step.drop(record.child_id)
        return
    epoch = step.epochs.get(record.child_id, 0) + 1
    step.epochs = step.epochs.set(record.child_id, epoch)
    step.put(
        attrs.evolve(
            record,
            phase=Phase.MATERIALIZED,
            agent=event.agent,
            lineage=event.lineage,
            epoch=epoch,
            run_id=event.run_id,
            status=event.status,
        )
    )
    if owner is not None:
        step.put(attrs.evolve(owner, owned=owner.owned.set(record.child_id, True)))
    step.effects.append(EmitStart(step.cause, record.child_id, event.run_id, epoch))


def _followup(step: Step, record: Activation, event: FollowupRequested) -> None:
    """Route a delivery to a record by residency (CONT-14, CONT-15, CONT-16)."""
    if not _admits_delivery(step, event, record.lineage):
        return
    if record.phase in DISPOSAL_OPEN:
        step.effects.append(AwaitRelease(step.cause, record.child_id, event.message_id))
        return
    decision = authorize_followup(event.authority, record.parent_session)
    if isinstance(decision, Denied):
        step.reject(decision.code, decision.reason)
        return
    owner = step.live(record.parent_session)
    if isinstance(event.authority, ParentAuthority) and owner is not None:
        if owner.phase in DISPOSAL_OPEN:
            step.reject(ErrorCode.ACTIVATION_CLOSING, "the parent Activation is being released")
            return
        step.put(attrs.evolve(owner, owned=owner.owned.set(record.child_id, True)))
    step.put(attrs.evolve(record, accepted=admit(record.accepted, event.message_id)))
    step.effects.append(SubmitFollowup(step.cause, record.child_id, event.message_id))


def _disposal_finished(step: Step, record: Activation, event: DisposalFinished) -> None:
    """Remove the record, then notice, release and end edge, in that order (TEAR-2 11-14)."""
    assert record.run_id is not None
    failed = bool(event.failures) or record.child_failures > 0
    outcome = notice_outcome(event.outcome, failed)
    step.drop(record.child_id)
    owner = step.live(record.parent_session)
    if record.announced and record.parent_session is not None:
        if owner is not None:
            closing = owner.phase in DISPOSAL_OPEN or step.lineage_closing(owner.lineage)
            parent = ParentFacts(True, owner.status, closing, resident=True)
        else:
            ancestors = record.lineage - {record.agent} if record.agent else record.lineage
            closing = step.lineage_closing(ancestors)
            parent = ParentFacts(event.parent_registered, event.parent_status, closing)
        decision = route_notice(parent)
        if decision.accounted:
            assert owner is not None
            owner = attrs.evolve(owner, accepted=admit(owner.accepted, event.notice_id))
        step.effects.append(
            SendNotice(
                step.cause,
                record.parent_session,
                event.notice_id,
                decision.route,
                decision.accounted,
                notice_content(record.child_id, outcome),
                notice_source(record.child_id, outcome),
            )
        )
    if owner is not None:
        owner = attrs.evolve(
            owner,
            owned=owner.owned.remove(record.child_id),
            child_failures=owner.child_failures + failed,
        )
        step.put(owner)
    step.effects.append(
        ReleaseOwnership(step.cause, record.child_id, None if owner is None else owner.child_id)
    )
    step.effects.append(
        EmitEnd(step.cause, record.child_id, record.run_id, outcome.stop_reason, record.durability)
    )
    if owner is not None:
        flush_if_released(step, owner)
        settle_if_quiet(step, owner)
