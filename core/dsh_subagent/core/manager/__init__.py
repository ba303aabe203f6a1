"""The continuation manager as a pure machine: ``apply(state, event) -> (state, effects)``.

Theory of operation
-------------------
1. The package splits by kind: ``state`` (records, ``Step``, the state-triggered derivations
   and their ``STATE_TRIGGERED`` table), ``events``, ``effects``, and ``ops`` (the
   manager-wide handlers: interrupt, report, drain). This module holds the event table,
   ``apply`` and the per-child handlers.
2. ``TRANSITIONS`` is the machine (as in h2): ``(phase, event type) -> Edge(handler, target,
   refused)``. ``apply`` looks the pair up (anything else raises ``ILLEGAL_TRANSITION`` and,
   being pure, changes nothing), runs the handler, then applies the edge's ``target``, or its
   ``refused`` phase when the handler answered ``Outcome.REFUSED``. Handlers update fields
   and emit effects; a handler writing its own record writes it in ``step.entering``, the
   edge's target (or the record's phase where ``apply`` alone takes the target: the drop
   and the disposal cutoff), so the record is copied once per event. Expected refusals
   (DRAINING, UNAUTHORIZED, ACTIVATION_CLOSING, DUPLICATE_CHILD, PARENT_UNAVAILABLE) are
   ``Reject`` effects; an unpublished start that loses admission is refused to ABSENT.
3. Residency is derived after every per-child event; a RESIDENT Activation found SETTLED
   opens its disposal in the same step (RES-6), so settle and cutoff cannot part. Entering
   DISPOSING is the disposal cutoff itself: ``open_disposal`` moves the record and its live
   subtree along ``STATE_TRIGGERED``.
4. Routing (CONT-14, CONT-15): running or waiting -> ``SubmitFollowup`` with the id accounted
   first (RES-2); absent -> ``ResumeAgent``; disposal open -> ``AwaitRelease``. Ownership is
   acquired at publication and on each parent submission, before the child can run (CONT-26).
   A cold resume refused the lease posts its follow-up to the child's durable mailbox
   (``PostToMailbox``, DUR-20). A mailbox message accepted elsewhere (``MailboxArrived``) is
   delivered into a live Activation, accounted like a follow-up; an absent child is resumed
   for it; in any other phase it stays pending in the store, for whoever activates the child
   next (DUR-22, DUR-23).
5. Disposal (TEAR-1, TEAR-2) is memoized by phase: opening cancels the whole live subtree
   top-down in one step; each node flushes once every owned child is released; its
   ``DisposalFinished`` then emits, in order, the notice (if announced), the ownership
   release and the end edge (NOTICE-1, NOTICE-11, NOTICE-12). A start rolled back after its
   disposal opened (a drain during publication) changes nothing more (TEAR-13, ERR-7). Ids,
   run ids and identity tokens always arrive in events; the core mints nothing.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from typing import Final, TypeVar, cast

import attrs

from dsh_subagent.core.authority import (
    AgentRef,
    Denied,
    ParentAuthority,
    authorize_followup,
    precheck_followup,
)
from dsh_subagent.core.errors import ErrorCode, invalid, not_accepted
from dsh_subagent.core.manager.effects import (
    AwaitRelease,
    DisposeHandle,
    Effect,
    EmitEnd,
    EmitStart,
    PostToMailbox,
    ReleaseOwnership,
    ReportDurabilityFailed,
    ResumeAgent,
    SendNotice,
    SubmitFollowup,
)
from dsh_subagent.core.manager.events import (
    DISPOSAL_OPEN,
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
    LeaseAcquired,
    LeaseRefused,
    MailboxArrived,
    MessageAccepted,
    MessageClaimed,
    MessageDiscarded,
    MessageSendFailed,
    Phase,
    ReportRequested,
    StartRolledBack,
)
from dsh_subagent.core.manager.ops import drain, interrupt, report
from dsh_subagent.core.manager.state import (
    STATE_TRIGGERED,
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
from dsh_subagent.core.values import MessageId

__all__ = [
    "STATE_TRIGGERED",
    "TRANSITIONS",
    "Activation",
    "Edge",
    "ManagerState",
    "Outcome",
    "activation_state_of",
    "apply",
    "residency_of",
]


class Outcome(enum.Enum):
    """What a handler answered: its edge's ``target`` applies, or its ``refused`` phase."""

    DONE = "done"
    REFUSED = "refused"


Handler = Callable[[Step, Activation | None, ChildEvent], Outcome]
"""A per-child handler: the working step, the event's record, the event. The record is None
exactly in the ABSENT edges; their handlers build a record, if any, from the event."""

_E = TypeVar("_E", bound=ChildEvent)


def _on(
    handler: Callable[[Step, Activation, _E], Outcome] | Callable[[Step, None, _E], Outcome],
) -> Handler:
    """A handler as a table entry; the table's key guarantees the event type it receives and
    whether a record exists (None in the ABSENT phase, a record in every other)."""
    return cast(Handler, handler)


@attrs.frozen
class Edge:
    """One entry of ``TRANSITIONS``: the handler, then the phase each outcome leads to.

    ``target`` is None where the handler always refuses, ``refused`` where it never does.
    """

    handler: Handler | None
    target: Phase | None
    refused: Phase | None = None


# --------------------------------------------------------------------------- per-child handlers


def _reserve(step: Step, record: None, event: ChildIdReserved) -> Outcome:
    """A fresh start reserves its id unless its parent is closing (CONT-3, TEAR-13)."""
    parent = event.parent
    if step.agent_closing(parent):
        step.reject(ErrorCode.DRAINING, "admission is closed for this parent")
        return Outcome.REFUSED
    step.put(Activation(event.child_id, step.entering, parent.session_id, parent_agent=parent))
    return Outcome.DONE


def _duplicate(step: Step, record: Activation, event: ChildIdReserved) -> Outcome:
    step.reject(ErrorCode.DUPLICATE_CHILD, f"{event.child_id} is already live")
    return Outcome.REFUSED


def _prepared(step: Step, record: Activation, event: ChildPrepared) -> Outcome:
    """Admission is checked again after the provider's await (CONT-5)."""
    if step.agent_closing(record.parent_agent):
        step.reject(ErrorCode.DRAINING, "admission closed while preparing")
        return Outcome.REFUSED
    return Outcome.DONE


def _resume_started(step: Step, record: None, event: ColdResumeStarted) -> Outcome:
    """A cold resume begins unless the manager is draining (CONT-17, TEAR-13)."""
    if step.draining:
        step.reject(ErrorCode.DRAINING, "the manager is draining")
        return Outcome.REFUSED
    step.put(Activation(event.child_id, step.entering, event.parent_session))
    return Outcome.DONE


def _lease_acquired(step: Step, record: Activation, event: LeaseAcquired) -> Outcome:
    """A cold resume holds the child's lease at ``epoch`` (LEASE-1)."""
    step.put(attrs.evolve(record, phase=step.entering, lease=event.epoch))
    return Outcome.DONE


def _lease_refused(step: Step, record: Activation, event: LeaseRefused) -> Outcome:
    """Another live harness holds the child: this cold resume never runs (LEASE-2). The
    follow-up that asked for it goes to the child's durable mailbox instead (DUR-20)."""
    if event.message_id is None:
        step.reject(ErrorCode.ACTIVATION_HELD, event.reason)
    else:
        step.effects.append(PostToMailbox(step.cause, event.child_id, event.message_id))
    return Outcome.REFUSED


def _materialized(step: Step, record: Activation, event: ChildMaterialized) -> Outcome:
    """Publish a created or resumed child, or roll it back unpublished (CONT-10, TEAR-7)."""
    owner = step.live(record.parent_session)
    refusal: tuple[ErrorCode, str] | None = None
    if record.phase is Phase.RESUMING and record.lease is None:
        refusal = (ErrorCode.ACTIVATION_HELD, "a cold resume without the lease never runs")
    elif step.lineage_closing(event.lineage):
        refusal = (ErrorCode.DRAINING, "admission closed during materialization")
    elif owner is not None and owner.phase in DISPOSAL_OPEN:
        refusal = (ErrorCode.ACTIVATION_CLOSING, "the parent Activation is being released")
    if refusal is not None:
        step.reject(*refusal)
        step.effects.append(DisposeHandle(step.cause, record.child_id))
        return Outcome.REFUSED
    epoch = step.epochs.get(record.child_id, 0) + 1
    step.epochs = step.epochs.set(record.child_id, epoch)
    step.put(
        attrs.evolve(
            record,
            phase=step.entering,
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
    return Outcome.DONE


def _drop_unpublished(step: Step, record: Activation, event: StartRolledBack) -> Outcome:
    """An unpublished start vanishes silently, its handle disposed if one exists (CONT-9)."""
    if event.handle_created:
        step.effects.append(DisposeHandle(step.cause, record.child_id))
    return Outcome.DONE


def _admits_delivery(step: Step, event: FollowupRequested, lineage: AbstractSet[AgentRef]) -> bool:
    """The admission check of a delivery (CONT-14, CONT-16 step 2); rejects when closed."""
    caller = event.authority.caller.agent if isinstance(event.authority, ParentAuthority) else None
    if step.lineage_closing(lineage) or (caller is not None and step.agent_closing(caller)):
        step.reject(ErrorCode.DRAINING, "admission is closed")
        return False
    return True


def _route_absent(step: Step, record: None, event: FollowupRequested) -> Outcome:
    """No Activation: admit and precheck, then ask for a cold resume (CONT-17)."""
    if not _admits_delivery(step, event, frozenset()):
        return Outcome.REFUSED
    decision = precheck_followup(event.authority)
    if isinstance(decision, Denied):
        step.reject(decision.code, decision.reason)
        return Outcome.REFUSED
    step.effects.append(ResumeAgent(step.cause, event.child_id, event.message_id))
    return Outcome.DONE


def _route_live(step: Step, record: Activation, event: FollowupRequested) -> Outcome:
    """Running or waiting: authorize, take ownership, account, send (CONT-15, CONT-16)."""
    if not _admits_delivery(step, event, record.lineage):
        return Outcome.REFUSED
    decision = authorize_followup(event.authority, record.parent_session)
    if isinstance(decision, Denied):
        step.reject(decision.code, decision.reason)
        return Outcome.REFUSED
    owner = step.live(record.parent_session)
    if isinstance(event.authority, ParentAuthority) and owner is not None:
        if owner.phase in DISPOSAL_OPEN:
            step.reject(ErrorCode.ACTIVATION_CLOSING, "the parent Activation is being released")
            return Outcome.REFUSED
        step.put(attrs.evolve(owner, owned=owner.owned.set(record.child_id, True)))
    _deliver(step, record, event.message_id)
    return Outcome.DONE


def _deliver(step: Step, record: Activation, message_id: MessageId) -> None:
    """Account ``message_id`` and send it (RES-2). A resident child was announced when it
    became resident (its first acceptance), so the send's acceptance changes nothing more:
    only a materialized child's first acceptance is reported back (``MessageAccepted``)."""
    step.put(record.moved(step.entering, admit(record.accepted, message_id)))
    first = record.phase is _MATERIALIZED
    step.effects.append(SubmitFollowup(step.cause, record.child_id, message_id, first))


def _route_disposing(step: Step, record: Activation, event: FollowupRequested) -> Outcome:
    """Disposal is open: wait for the release, then route again (CONT-14)."""
    if not _admits_delivery(step, event, record.lineage):
        return Outcome.REFUSED
    step.effects.append(AwaitRelease(step.cause, record.child_id, event.message_id))
    return Outcome.DONE


def _mailbox_live(step: Step, record: Activation, event: MailboxArrived) -> Outcome:
    """Deliver a mailbox message like a follow-up, unless admission closed (DUR-22).

    Its sender was admitted and authorized where it was accepted; a closing lineage leaves
    it pending in the store for the next Activation (DUR-23).
    """
    if not step.lineage_closing(record.lineage):
        _deliver(step, record, event.message_id)
    return Outcome.DONE


def _mailbox_absent(step: Step, record: None, event: MailboxArrived) -> Outcome:
    """No Activation holds a child with pending mail: resume it, unless draining (DUR-23)."""
    if not step.draining:
        step.effects.append(ResumeAgent(step.cause, event.child_id, event.message_id))
    return Outcome.DONE


def _accepted(step: Step, record: Activation, event: MessageAccepted) -> Outcome:
    """An accepted delivery: the child is resident and owes a notice (NOTICE-2)."""
    step.put(attrs.evolve(record, phase=step.entering, announced=True))
    return Outcome.DONE


def _message_left(
    step: Step, record: Activation, event: MessageSendFailed | MessageClaimed | MessageDiscarded
) -> Outcome:
    """An accounted id leaves: claimed, discarded, or withdrawn after a failed send (RES-2)."""
    step.put(record.moved(step.entering, settle_message(record.accepted, event.message_id)))
    return Outcome.DONE


def _status(step: Step, record: Activation, event: AgentBecameIdle | AgentBecameBusy) -> Outcome:
    idle = isinstance(event, AgentBecameIdle)
    status = AgentStatus.IDLE if idle else AgentStatus.RUNNING
    step.put(attrs.evolve(record, phase=step.entering, status=status))
    return Outcome.DONE


def _flush_reported(step: Step, record: Activation, event: FlushReported) -> Outcome:
    """Record the durability report, then dispose the handle (TEAR-2 steps 7-8)."""
    report = durability_report(record.child_id, event.outcome)
    if report is not None:
        step.effects.append(ReportDurabilityFailed(step.cause, report))
    step.put(attrs.evolve(record, phase=step.entering, durability=report))
    step.effects.append(DisposeHandle(step.cause, record.child_id))
    return Outcome.DONE


def _disposal_finished(step: Step, record: Activation, event: DisposalFinished) -> Outcome:
    """The notice, the ownership release and the end edge, in that order (TEAR-2 11-14)."""
    assert record.run_id is not None
    failed = bool(event.failures) or record.child_failures > 0
    outcome = notice_outcome(event.outcome, failed)
    owner = step.live(record.parent_session)
    if record.announced and record.parent_session is not None:
        if owner is not None:
            closing = owner.phase in DISPOSAL_OPEN or step.lineage_closing(owner.lineage)
            parent = ParentFacts(True, owner.status, closing, resident=True)
        else:
            closing = step.lineage_closing(record.lineage, besides=record.agent)
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
    return Outcome.DONE


# --------------------------------------------------------------------------- the table

_P = Phase
# WARNING: every edge is written out; keep this table in sync with
# ``spec.charts.ActivationChart`` (``tests/spec/test_charts.py`` compares them edge for edge).
# Each entry reads: (phase, event type): Edge(handler, target, phase when refused).
TRANSITIONS: Final[Mapping[tuple[Phase, type[ChildEvent]], Edge]] = {
    # A fresh start reserves the id; a live id is a duplicate (CONT-3).
    (_P.ABSENT, ChildIdReserved): Edge(_on(_reserve), _P.RESERVED, _P.ABSENT),
    (_P.RESERVED, ChildIdReserved): Edge(_on(_duplicate), None, _P.RESERVED),
    (_P.SNAPSHOTTED, ChildIdReserved): Edge(_on(_duplicate), None, _P.SNAPSHOTTED),
    (_P.PREPARED, ChildIdReserved): Edge(_on(_duplicate), None, _P.PREPARED),
    (_P.RESUMING, ChildIdReserved): Edge(_on(_duplicate), None, _P.RESUMING),
    (_P.MATERIALIZED, ChildIdReserved): Edge(_on(_duplicate), None, _P.MATERIALIZED),
    (_P.RESIDENT, ChildIdReserved): Edge(_on(_duplicate), None, _P.RESIDENT),
    (_P.DISPOSING, ChildIdReserved): Edge(_on(_duplicate), None, _P.DISPOSING),
    (_P.FLUSHING, ChildIdReserved): Edge(_on(_duplicate), None, _P.FLUSHING),
    (_P.RELEASING, ChildIdReserved): Edge(_on(_duplicate), None, _P.RELEASING),
    # The start phases; admission is checked again after each await (CONT-5, CONT-10).
    (_P.RESERVED, DescriptorSnapshotted): Edge(None, _P.SNAPSHOTTED),
    (_P.SNAPSHOTTED, ChildPrepared): Edge(_on(_prepared), _P.PREPARED, _P.ABSENT),
    (_P.ABSENT, ColdResumeStarted): Edge(_on(_resume_started), _P.RESUMING, _P.ABSENT),
    # A cold resume materializes only under the child's lease (LEASE-1, LEASE-2).
    (_P.RESUMING, LeaseAcquired): Edge(_on(_lease_acquired), _P.RESUMING),
    (_P.RESUMING, LeaseRefused): Edge(_on(_lease_refused), None, _P.ABSENT),
    (_P.PREPARED, ChildMaterialized): Edge(_on(_materialized), _P.MATERIALIZED, _P.ABSENT),
    (_P.RESUMING, ChildMaterialized): Edge(_on(_materialized), _P.MATERIALIZED, _P.ABSENT),
    # Rollback before acceptance: unpublished vanishes; published is disposed (CONT-9);
    # a rollback after a drain opened the disposal changes nothing (TEAR-13, ERR-7).
    (_P.RESERVED, StartRolledBack): Edge(_on(_drop_unpublished), _P.ABSENT),
    (_P.SNAPSHOTTED, StartRolledBack): Edge(_on(_drop_unpublished), _P.ABSENT),
    (_P.PREPARED, StartRolledBack): Edge(_on(_drop_unpublished), _P.ABSENT),
    (_P.RESUMING, StartRolledBack): Edge(_on(_drop_unpublished), _P.ABSENT),
    (_P.MATERIALIZED, StartRolledBack): Edge(None, _P.DISPOSING),
    (_P.DISPOSING, StartRolledBack): Edge(None, _P.DISPOSING),
    (_P.FLUSHING, StartRolledBack): Edge(None, _P.FLUSHING),
    (_P.RELEASING, StartRolledBack): Edge(None, _P.RELEASING),
    # Routing never changes the phase (CONT-14..CONT-17).
    (_P.ABSENT, FollowupRequested): Edge(_on(_route_absent), _P.ABSENT, _P.ABSENT),
    (_P.MATERIALIZED, FollowupRequested): Edge(_on(_route_live), _P.MATERIALIZED, _P.MATERIALIZED),
    (_P.RESIDENT, FollowupRequested): Edge(_on(_route_live), _P.RESIDENT, _P.RESIDENT),
    (_P.DISPOSING, FollowupRequested): Edge(_on(_route_disposing), _P.DISPOSING, _P.DISPOSING),
    (_P.FLUSHING, FollowupRequested): Edge(_on(_route_disposing), _P.FLUSHING, _P.FLUSHING),
    (_P.RELEASING, FollowupRequested): Edge(_on(_route_disposing), _P.RELEASING, _P.RELEASING),
    # Durable mailbox (DUR-22, DUR-23): delivered when live, a resume when absent; in the
    # other phases it stays pending in the store for the next Activation.
    (_P.ABSENT, MailboxArrived): Edge(_on(_mailbox_absent), _P.ABSENT),
    (_P.RESERVED, MailboxArrived): Edge(None, _P.RESERVED),
    (_P.SNAPSHOTTED, MailboxArrived): Edge(None, _P.SNAPSHOTTED),
    (_P.PREPARED, MailboxArrived): Edge(None, _P.PREPARED),
    (_P.RESUMING, MailboxArrived): Edge(None, _P.RESUMING),
    (_P.MATERIALIZED, MailboxArrived): Edge(_on(_mailbox_live), _P.MATERIALIZED),
    (_P.RESIDENT, MailboxArrived): Edge(_on(_mailbox_live), _P.RESIDENT),
    (_P.DISPOSING, MailboxArrived): Edge(None, _P.DISPOSING),
    (_P.FLUSHING, MailboxArrived): Edge(None, _P.FLUSHING),
    (_P.RELEASING, MailboxArrived): Edge(None, _P.RELEASING),
    # The first accepted delivery makes the child resident; facts follow (RES-1, RES-2).
    (_P.MATERIALIZED, MessageAccepted): Edge(_on(_accepted), _P.RESIDENT),
    (_P.RESIDENT, MessageAccepted): Edge(_on(_accepted), _P.RESIDENT),
    (_P.MATERIALIZED, MessageSendFailed): Edge(_on(_message_left), _P.MATERIALIZED),
    (_P.RESIDENT, MessageSendFailed): Edge(_on(_message_left), _P.RESIDENT),
    (_P.MATERIALIZED, MessageClaimed): Edge(_on(_message_left), _P.MATERIALIZED),
    (_P.RESIDENT, MessageClaimed): Edge(_on(_message_left), _P.RESIDENT),
    (_P.DISPOSING, MessageClaimed): Edge(_on(_message_left), _P.DISPOSING),
    (_P.FLUSHING, MessageClaimed): Edge(_on(_message_left), _P.FLUSHING),
    (_P.RELEASING, MessageClaimed): Edge(_on(_message_left), _P.RELEASING),
    (_P.MATERIALIZED, MessageDiscarded): Edge(_on(_message_left), _P.MATERIALIZED),
    (_P.RESIDENT, MessageDiscarded): Edge(_on(_message_left), _P.RESIDENT),
    (_P.DISPOSING, MessageDiscarded): Edge(_on(_message_left), _P.DISPOSING),
    (_P.FLUSHING, MessageDiscarded): Edge(_on(_message_left), _P.FLUSHING),
    (_P.RELEASING, MessageDiscarded): Edge(_on(_message_left), _P.RELEASING),
    (_P.MATERIALIZED, AgentBecameIdle): Edge(_on(_status), _P.MATERIALIZED),
    (_P.RESIDENT, AgentBecameIdle): Edge(_on(_status), _P.RESIDENT),
    (_P.DISPOSING, AgentBecameIdle): Edge(_on(_status), _P.DISPOSING),
    (_P.FLUSHING, AgentBecameIdle): Edge(_on(_status), _P.FLUSHING),
    (_P.RELEASING, AgentBecameIdle): Edge(_on(_status), _P.RELEASING),
    (_P.MATERIALIZED, AgentBecameBusy): Edge(_on(_status), _P.MATERIALIZED),
    (_P.RESIDENT, AgentBecameBusy): Edge(_on(_status), _P.RESIDENT),
    (_P.DISPOSING, AgentBecameBusy): Edge(_on(_status), _P.DISPOSING),
    (_P.FLUSHING, AgentBecameBusy): Edge(_on(_status), _P.FLUSHING),
    (_P.RELEASING, AgentBecameBusy): Edge(_on(_status), _P.RELEASING),
    # Teardown after the children are released (TEAR-2 steps 7-14).
    (_P.FLUSHING, FlushReported): Edge(_on(_flush_reported), _P.RELEASING),
    (_P.RELEASING, DisposalFinished): Edge(_on(_disposal_finished), _P.ABSENT),
}
"""Every legal ``(phase, event type)`` of a per-child event and what it does (rule 2)."""

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
    if not isinstance(event, _EVENT_TYPES):
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
        case _:  # the rest of the closed union: a per-child event (``_EVENT_TYPES``)
            _child_event(step, event)
    return step.result()


_ENTERED_BY_APPLY: Final = frozenset({Phase.ABSENT, Phase.DISPOSING})
"""Targets only ``_child_event`` applies: the drop and the disposal cutoff (rule 2)."""

# Module names for the per-event path: ``Phase.X`` pays EnumType's getattr hook each time.
_ABSENT: Final = Phase.ABSENT
_DISPOSING: Final = Phase.DISPOSING
_RESIDENT: Final = Phase.RESIDENT
_MATERIALIZED: Final = Phase.MATERIALIZED
_DONE: Final = Outcome.DONE


def _child_event(step: Step, event: ChildEvent) -> None:
    """Look the edge up, run its handler, apply its target to the event's record (ABSENT
    drops it, DISPOSING opens the disposal), derive residency (rule 2, rule 3)."""
    child_id = event.child_id
    record = step.get(child_id)
    phase = _ABSENT if record is None else record.phase
    edge = TRANSITIONS.get((phase, type(event)))
    if edge is None:
        raise not_accepted(event, phase.value)
    target = edge.target
    step.entering = phase if target is None or target in _ENTERED_BY_APPLY else target
    if edge.handler is not None:  # only a handler writes: without one, the record stands
        if edge.handler(step, record, event) is not _DONE:
            target = edge.refused
        record = step.get(child_id)
    assert target is not None, f"{phase}, {type(event)}: the outcome leads to no phase"
    if record is None:
        return  # no record and none created (ABSENT -> ABSENT)
    if record.phase is not target:
        if target is _ABSENT:
            step.drop(child_id)
            return
        if target is _DISPOSING:
            open_disposal(step, (child_id,))  # leaves the record disposing: it cannot settle
            return
        record = step.put(record.moved(target))
    if record.phase is _RESIDENT:  # the only phase that settles: no call for the others
        settle_if_quiet(step, record)
