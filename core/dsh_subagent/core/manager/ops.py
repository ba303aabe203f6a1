"""The continuation manager's manager-wide operations: interrupt, report and drain.

Theory of operation
-------------------
1. These handlers act on a ``Step`` of ``apply`` but change no child's phase directly:
   interrupt only cancels (keeping the inbox), report only delivers, drain only opens
   disposal through ``open_disposal`` (memoized, top-down).
2. Authority is decided first, by the pure functions of ``authority``; a denial becomes a
   ``Reject`` effect and nothing else happens (AUTH-6, AUTH-9, AUTH-10).
3. Drain scopes (TEAR-8, TEAR-11, TEAR-13): the whole manager closes admission for good and
   opens every forest root; a scoped drain records its exact live roots as closing and opens
   the top-most Activations below them; a selected drain validates every target before any
   is opened and never closes admission. Targets are opened in sorted order, so effects are
   reproducible whatever the hash seed.
4. A drain ends with ``AwaitBranches``: the top-most live Activations it covers (a live root
   of the forest, a descendant no other covered one owns, a selected child), whose releases
   the caller awaits (TEAR-12). The adapter never recomputes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import assert_never

import attrs

from dsh_subagent.core.authority import (
    AgentRef,
    Denied,
    TargetFacts,
    authorize_drain_children,
    authorize_interrupt,
    authorize_report,
    interrupt_cause,
    live_roots,
)
from dsh_subagent.core.errors import ErrorCode
from dsh_subagent.core.manager.effects import AwaitBranches, CancelAgent, DeliverReport
from dsh_subagent.core.manager.events import (
    DISPOSAL_OPEN,
    LIVE,
    DescendantsOf,
    DrainRequested,
    InterruptRequested,
    ReportDelivery,
    ReportRequested,
    SelectedChildren,
    WholeManager,
)
from dsh_subagent.core.manager.state import OPENABLE, Activation, Forest, Step, open_disposal
from dsh_subagent.core.notices import NoticeRoute
from dsh_subagent.core.residency import admit
from dsh_subagent.core.teardown import forest_roots
from dsh_subagent.core.values import SessionId


def interrupt(step: Step, event: InterruptRequested) -> None:
    """Authorize, then cancel the current turn keeping the inbox (CONT-23, TEAR-18)."""
    record = step.live(event.target_id)
    target = None if record is None else TargetFacts(record.parent_session, record.lineage)
    decision = authorize_interrupt(event.target_id, event.authority, target)
    if isinstance(decision, Denied):
        step.reject(decision.code, decision.reason)
    elif record is not None and record.phase in OPENABLE:
        kind = interrupt_cause(event.authority)
        step.effects.append(CancelAgent(step.cause, record.child_id, kind, keep_inbox=True))


def report(step: Step, event: ReportRequested) -> None:
    """A child's report to its durable parent (CONT-30, CONT-31, AUTH-9)."""
    record = step.live(event.sender.session_id)
    if step.lineage_closing(frozenset() if record is None else record.lineage):
        step.reject(ErrorCode.DRAINING, "admission is closed")
        return
    closing = record is not None and record.phase in DISPOSAL_OPEN
    decision = authorize_report(event.sender, None if record is None else record.agent, closing)
    if isinstance(decision, Denied):
        step.reject(decision.code, decision.reason)
        return
    assert record is not None
    owner = step.live(record.parent_session)
    if record.parent_session is None or (owner is None and not event.parent_registered):
        step.reject(ErrorCode.PARENT_UNAVAILABLE, "the child's parent is not registered")
        return
    quiet = event.delivery is ReportDelivery.QUIET
    accounted = owner is not None and not quiet
    if accounted:
        assert owner is not None
        step.put(attrs.evolve(owner, accepted=admit(owner.accepted, event.message_id)))
    route = NoticeRoute.INJECT if quiet else NoticeRoute.STEER
    step.effects.append(
        DeliverReport(
            step.cause, record.child_id, record.parent_session, event.message_id, route, accounted
        )
    )


def descendants(
    records: Mapping[SessionId, Activation], roots: frozenset[AgentRef]
) -> frozenset[SessionId]:
    """The live Activations below these roots, excluding the roots' own (TEAR-8).

    A scoped drain opens those not yet disposing; its caller awaits all of them.
    """
    return frozenset(
        child_id
        for child_id, record in records.items()
        if record.phase in LIVE
        and record.agent not in roots
        and not record.lineage.isdisjoint(roots)
    )


def drain(step: Step, event: DrainRequested) -> None:
    """Open disposal on a drain's targets in one step, top-down (TEAR-8, TEAR-11, TEAR-13)."""
    scope = event.scope
    match scope:
        case WholeManager():
            step.draining = True
            targets = covered = tuple(sorted(forest_roots(Forest(step.records))))
        case DescendantsOf():
            roots = frozenset(live_roots(scope.roots))
            step.closing_roots = step.closing_roots | roots
            covered = tuple(sorted(descendants(step.records, roots)))
            chosen = {child for child in covered if step.records[child].phase in OPENABLE}
            owners = {child: step.records[child].parent_session for child in chosen}
            targets = tuple(sorted(child for child in chosen if owners[child] not in chosen))
        case SelectedChildren():
            targets = covered = tuple(dict.fromkeys(scope.child_ids))
            facts = []
            for child_id in targets:
                record = step.live(child_id)
                facts.append(
                    None if record is None else TargetFacts(record.parent_session, record.lineage)
                )
            decision = authorize_drain_children(scope.parent, facts)
            if isinstance(decision, Denied):
                step.reject(decision.code, decision.reason)
                return
        case _:  # pragma: no cover - the union is closed (``assert_never``)
            assert_never(scope)
    open_disposal(step, targets)
    step.effects.append(AwaitBranches(step.cause, _topmost(step, covered)))


def _topmost(step: Step, covered: tuple[SessionId, ...]) -> tuple[SessionId, ...]:
    """The live covered Activations that no other covered one owns, in ``covered`` order."""
    live = [node for node in covered if step.live(node) is not None]
    owned = {child for node in live for child in step.records[node].owned}
    return tuple(node for node in live if node not in owned)
