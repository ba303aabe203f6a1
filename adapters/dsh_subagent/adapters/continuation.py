"""The continuation manager: continuable children, follow-ups, reports, interrupts, drains.

Theory of operation
-------------------
1. Every decision is the pure core's (``core.manager``): this module turns calls into core
   events and dispatches them through ``Engine``, which performs the returned effects in
   order. It does only the awaiting the core cannot (provider preparation, registry
   create/resume, persistence reads, waiting for a release) and never inspects a phase or a
   residency.
2. ``start_continuable`` (CONT-1..CONT-12) and cold resume (CONT-17..CONT-19) live in
   ``continuation_create``; both resolve at inbox acceptance and roll back silently before
   it (CONT-8, CONT-9, NOTICE-2).
3. ``followup`` (CONT-14..CONT-21): under the per-child lock (CONT-22) routing passes that
   the core answers with a delivery (running: queued; waiting: the same agent woken), a cold
   resume (absent), or a wait for the release followed by another pass (disposal open). The
   final admission, authorization and send are one no-await span (CONT-16, HARNESS-32). The
   caller's signal is consulted only until acceptance (CONT-20).
   One per-child order (RES-6, CONT-22): a follow-up takes its place in ``_queued`` when
   called and keeps it (it holds the lock while awaiting a release, so a later caller never
   overtakes it). In the span of every acceptance (a start's prompt, a cold resume, a live
   delivery) the follow-ups queued behind are delivered too, in call order, so the child
   cannot settle between them: the ones that arrived while it was live, resuming or being
   torn down join that Activation's inbox, or the next single one.
   A child held by another harness: the cold resume hands back the core's ``PostToMailbox``
   and the follow-up is accepted into the child's durable mailbox (``continuation_mailbox``,
   DUR-20); if the store finds the child free by then, the follow-up routes again.
4. ``interrupt`` and ``report_from`` are synchronous single dispatches (CONT-23, CONT-30);
   ``report_from_durably`` is the report's durable form (rule 8), which the ``report`` tool
   awaits.
5. Drains dispatch one drain event (the disposal cutoff, cancelling top-down in one step),
   which hands back the targets to await (the core's ``AwaitBranches``), wait for in-flight
   materializations in their scope, then await those targets and raise one aggregate
   ``ACTIVATION_TEARDOWN_FAILED`` if any branch failed (TEAR-8, TEAR-11, TEAR-12, TEAR-13).
6. ``persistence()`` is resolved on each operation that needs it (CONT-2).
7. Every public call validates its arguments first, against the manager's ``Limits``
   (``core.limits``: child ids, content, the start spec), and works on the validated,
   deep-frozen content from then on (DESIGN decision 10).
8. Write-ahead acceptance (``durability``, DESIGN decision 5): each acceptance starts the
   commit of the session it went into in its own span (the engine's ``submit``); a start or
   follow-up returns its message id only once that commit resolved, awaited after the
   admission and outside the per-child lock, so the commits of many callers share writes.
   A failed commit raises ``DurabilityFailed`` carrying the id (DUR-1).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import os
from collections.abc import Callable, Sequence
from typing import Final

import attrs

from dsh_subagent.adapters.budgets import BudgetBook
from dsh_subagent.adapters.child_composition import apply_child_composition
from dsh_subagent.adapters.continuation_create import Creator, Services
from dsh_subagent.adapters.continuation_engine import Emit, Engine, Routed
from dsh_subagent.adapters.continuation_mailbox import Mailbox
from dsh_subagent.adapters.continuation_support import (
    Barrier,
    ChildLocks,
    await_branches,
    check_aborted,
    check_signal,
    quietly,
    status_of,
)
from dsh_subagent.adapters.continuation_types import (
    FOLLOWUP_AUTHORITIES,
    AncestorAuthority,
    ContinuableStart,
    ContinuableStartSpec,
    Identities,
    ParentAgent,
    UserGrant,
    UserInterruptAuthority,
    check_start_spec,
    refuse_authority,
)
from dsh_subagent.adapters.durability import Accepted, accepted, confirm
from dsh_subagent.adapters.frozen_json import freeze_content
from dsh_subagent.adapters.protocols import (
    Agent,
    AgentRegistry,
    ApprovalPolicyService,
    SandboxPolicyService,
    SessionPersistence,
    SessionStore,
)
from dsh_subagent.adapters.setup_registry import ContinuableSetupRegistry
from dsh_subagent.adapters.signals import AbortSignal
from dsh_subagent.adapters.telemetry import Lifecycle
from dsh_subagent.core.authority import AncestorInterrupt, UserInterrupt
from dsh_subagent.core.errors import SubagentError, invalid
from dsh_subagent.core.jsonvalue import require_str
from dsh_subagent.core.limits import DEFAULT_LIMITS, Limits, check_child_id, check_content
from dsh_subagent.core.manager import activation_state_of
from dsh_subagent.core.manager.effects import PostToMailbox
from dsh_subagent.core.manager.events import (
    AgentDisposed,
    DescendantsOf,
    DrainRequested,
    DrainScope,
    InterruptRequested,
    ReportDelivery,
    ReportRequested,
    SelectedChildren,
    WholeManager,
)
from dsh_subagent.core.residency import ActivationState
from dsh_subagent.core.values import (
    USER_SOURCE,
    BaseSource,
    Content,
    CoordinatorSource,
    MessageId,
    MessageSource,
    SessionId,
    SubagentReportSource,
    SubagentSettledSource,
    TextBlock,
    UserMessage,
)

REPORT_FRAME: Final = "Background subagent {child_id} reported:"
"""The first text block of a child's report (CONT-34, verbatim)."""

_SOURCES: Final = (BaseSource, CoordinatorSource, SubagentReportSource, SubagentSettledSource)
_AUTHORITIES: Final = (ParentAgent, UserGrant)


def _none() -> None:
    return None


class _FreshIds:
    """Random (version 4) UUID strings, as ``str(uuid.uuid4())`` spells them, cut from one
    read of the OS's randomness per 256 ids: a message id costs no syscall and no ``UUID``
    object of its own. A forked child starts a fresh pool, never its parent's."""

    _POOL: Final = 4096

    def __init__(self) -> None:
        self._pool = b""
        self._at = 0
        os.register_at_fork(after_in_child=self._drop)

    def _drop(self) -> None:
        self._pool, self._at = b"", 0

    def __call__(self) -> str:
        if self._at == len(self._pool):
            self._pool, self._at = os.urandom(self._POOL), 0
        at = self._at
        self._at = at + 16
        h = self._pool[at : at + 16].hex()
        variant = "89ab"[int(h[16], 16) & 3]
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{variant}{h[17:20]}-{h[20:]}"


_fresh_id: Final = _FreshIds()


@attrs.define(eq=False)
class _Queued:
    """One follow-up in its child's order; ``outcome`` is set once it is decided (rule 3)."""

    content: Content
    source: MessageSource
    authority: ParentAgent | UserGrant
    signal: AbortSignal | None
    outcome: Accepted | Exception | None = None


class ContinuationManager:
    """Continuable children over the pure continuation-manager core (rules 1-6)."""

    def __init__(
        self,
        *,
        agents: AgentRegistry,
        sessions: SessionStore,
        persistence: Callable[[], SessionPersistence | None],
        providers: Callable[[str], object],
        emit: Emit,
        setups: ContinuableSetupRegistry | None = None,
        sandbox: Callable[[], SandboxPolicyService | None] = _none,
        approval: Callable[[], ApprovalPolicyService | None] = _none,
        compose: Callable[..., object] | None = None,
        ids: Callable[[], str] = _fresh_id,
        limits: Limits = DEFAULT_LIMITS,
        tracing: Lifecycle | None = None,
        budgets: BudgetBook | None = None,
    ) -> None:
        self._budgets = budgets or BudgetBook()
        services = Services(
            agents,
            sessions,
            persistence,
            providers,
            setups,
            sandbox,
            approval,
            compose or apply_child_composition,
            ids,
            self._budgets,
        )
        self._agents = agents
        self._limits = limits
        self._tracing = tracing or Lifecycle()
        self._engine = Engine(agents, sessions, emit, ids, self._tracing)
        self._identities = Identities(agents)
        self._locks = ChildLocks()
        self._barrier = Barrier()
        self._queued: dict[SessionId, collections.deque[_Queued]] = {}
        self._mailbox = Mailbox(self._engine, self._locks, persistence)
        self._mailbox.resume = self._resume_for_mail
        self._creator = Creator(
            services,
            self._engine,
            self._identities,
            self._locks,
            self._barrier,
            mailbox=self._mailbox,
        )
        agents.disposed.subscribe(self._on_agent_disposed)

    # ------------------------------------------------------------------ queries

    def activation_state(self, child_id: SessionId) -> ActivationState | None:
        """``running``, ``waiting``, or None when no Activation is live (DESIGN decision 3)."""
        return activation_state_of(self._engine.state, child_id)

    def user_authority(self) -> UserGrant:
        """Mint an unforgeable user grant (DESIGN decision 2)."""
        return self._identities.mint_grant()

    # ------------------------------------------------------------------ delivery

    async def start_continuable(self, spec: ContinuableStartSpec) -> ContinuableStart:
        """Create a continuable child; resolve once its prompt is accepted (CONT-1..CONT-12)."""
        checked = check_start_spec(spec, self._limits)
        check_aborted(checked.signal, "spec.signal")
        acceptance = await self._creator.start(checked)
        self._deliver_queued(acceptance.session_id)  # still the acceptance's span (rule 3)
        return ContinuableStart(acceptance.session_id, await confirm(acceptance))

    async def followup(
        self,
        child_id: SessionId,
        content: Content,
        authority: ParentAgent | UserGrant,
        *,
        source: MessageSource,
        signal: AbortSignal | None = None,
    ) -> MessageId:
        """Deliver to a continuable child, routed by residency; returns the message id."""
        child_id = SessionId(check_child_id(child_id, "child_id", self._limits))
        content = freeze_content(check_content(content, "content", self._limits))
        if not isinstance(source, _SOURCES):
            raise invalid("source", "must be a MessageSource")
        if not isinstance(authority, _AUTHORITIES):  # the routing span computes it (AUTH-2)
            raise refuse_authority(FOLLOWUP_AUTHORITIES)
        check_aborted(check_signal(signal), "signal")
        self._budgets.refuse_exhausted(child_id)  # until the host raises it (BUDGET-14)
        queued = _Queued(content, source, authority, signal)
        queue = self._queued.get(child_id)
        if queue is None:
            queue = self._queued[child_id] = collections.deque()
        queue.append(queued)
        try:
            with self._tracing.followup(child_id):
                async with self._locks.locked(child_id):
                    acceptance = await self._route(child_id, queued)
        finally:
            queue.remove(queued)
            if not queue:
                del self._queued[child_id]
        return await confirm(acceptance)  # outside the lock: commits share writes (rule 8)

    async def _route(self, child_id: SessionId, queued: _Queued) -> Accepted:
        """Routing passes under the held lock, until this follow-up is accepted (rule 3)."""
        while queued.outcome is None:
            check_aborted(queued.signal)
            routed = self._submit(child_id, queued)
            if routed is Routed.RESUME:
                resumed = await self._creator.cold_resume(
                    child_id, queued.content, queued.source, queued.authority, queued.signal
                )
                if isinstance(resumed, PostToMailbox):  # held elsewhere (DUR-20)
                    check_aborted(queued.signal)
                    resumed = await self._mailbox.post(
                        child_id, resumed.message_id, queued.content, queued.source
                    )
                queued.outcome = resumed  # None: the child is free now; route again
            elif isinstance(routed, Routed):
                live = self._engine.children.get(child_id)
                if live is not None:
                    await quietly(live.released)
            else:
                queued.outcome = routed
        self._deliver_queued(child_id)
        if isinstance(queued.outcome, Exception):
            raise queued.outcome
        return queued.outcome

    def _submit(self, child_id: SessionId, queued: _Queued) -> Accepted | Routed:
        return self._engine.submit(
            child_id,
            queued.content,
            queued.source,
            functools.partial(self._identities.followup_authority, queued.authority),
        )

    def _deliver_queued(self, child_id: SessionId) -> None:
        """Right after an acceptance, deliver the follow-ups queued behind it, in order.

        No await: the child is live and cannot settle inside this span. A refusal is kept
        for its caller; a caller whose signal aborted is skipped (it raises its reason when
        its turn comes, CONT-20); a pass the core routes elsewhere stops the batch, and the
        rest route themselves in order (rule 3).
        """
        for queued in tuple(self._queued.get(child_id, ())):
            if queued.outcome is not None or (queued.signal is not None and queued.signal.aborted):
                continue
            try:
                routed = self._submit(child_id, queued)
            except Exception as error:  # that caller's refusal, not this one's
                queued.outcome = error
                continue
            if isinstance(routed, Routed):
                return
            queued.outcome = routed

    def interrupt(
        self, child_id: SessionId, authority: AncestorAuthority | UserInterruptAuthority
    ) -> None:
        """Stop the child's current turn, keeping its inbox; fire and return (CONT-23)."""
        child_id = SessionId(check_child_id(child_id, "child_id", self._limits))
        if isinstance(authority, AncestorAuthority):
            core: AncestorInterrupt | UserInterrupt = AncestorInterrupt(
                self._identities.presented(authority.agent)
            )
        elif isinstance(authority, UserInterruptAuthority):
            parent_id = require_str(authority.parent_session_id, "authority.parent_session_id")
            core = UserInterrupt(SessionId(parent_id), self._identities.genuine(authority.grant))
        else:
            raise refuse_authority("AncestorAuthority or UserInterruptAuthority")
        self._engine.dispatch(InterruptRequested(self._engine.event_id(), child_id, core))

    def report_from(
        self,
        child: Agent,
        content: Content,
        *,
        delivery: ReportDelivery,
        signal: AbortSignal | None = None,
    ) -> MessageId:
        """A resident child's report to its durable parent, in one no-await span (CONT-30)."""
        return self._report(child, content, delivery, signal)[0]

    async def report_from_durably(
        self,
        child: Agent,
        content: Content,
        *,
        delivery: ReportDelivery,
        signal: AbortSignal | None = None,
    ) -> MessageId:
        """``report_from``, returning once the report is in the parent's stored log (rule 8,
        DUR-1); the ``report`` tool awaits this form."""
        message_id, parent = self._report(child, content, delivery, signal)
        if parent is None:
            return message_id
        return await confirm(accepted(self._engine.sessions, parent.session, message_id))

    def _report(
        self,
        child: Agent,
        content: Content,
        delivery: ReportDelivery,
        signal: AbortSignal | None,
    ) -> tuple[MessageId, Agent | None]:
        """The report's admission and send (one no-await span); the id and the parent."""
        content = freeze_content(check_content(content, "content", self._limits, non_blank=False))
        if not isinstance(delivery, ReportDelivery):
            raise invalid("delivery", "must be a ReportDelivery")
        if not hasattr(child, "session"):
            raise refuse_authority("the reporting child Agent", "child")
        check_aborted(check_signal(signal))
        parent_id = child.session.header.parent_session
        parent = None if parent_id is None else self._agents.get(parent_id)
        frame = TextBlock(REPORT_FRAME.format(child_id=child.id))
        message = UserMessage(
            self._engine.message_id(), (frame, *content), SubagentReportSource(child.id)
        )
        self._engine.outbox[message.id] = message
        try:
            self._engine.dispatch(
                ReportRequested(
                    self._engine.event_id(),
                    self._identities.ref(child),
                    message.id,
                    delivery,
                    parent_registered=parent is not None,
                    parent_status=status_of(parent),
                )
            )
        finally:
            self._engine.outbox.pop(message.id, None)
        return message.id, parent

    def watch_mailbox(self) -> None:
        """Watch the store's durable mailbox from now on: deliver mail for children held
        here, and take over children with mail whose holder is gone (DUR-23, DUR-26)."""
        self._mailbox.watch_store()

    async def _resume_for_mail(self, child_id: SessionId) -> None:
        """Resume an absent child for its pending mail alone (DUR-23); the caller holds
        the child's lock."""
        grant = self._identities.mint_grant()
        await self._creator.cold_resume(child_id, None, USER_SOURCE, grant, None)

    # ------------------------------------------------------------------ drains

    async def drain(self) -> None:
        """Close admission for good and release every Activation child-first (TEAR-13).

        No mailbox pass starts from now on or outlives the drain: the core would leave the
        mail pending anyway (DUR-23), and a pass after it would read a closed store."""
        with self._tracing.drain("whole manager"):
            self._mailbox.close()
            targets = self._dispatch_drain(WholeManager())
            await self._barrier.wait(lambda _lineage: True)
            await await_branches(targets, "whole manager")
            await self._mailbox.settled()

    async def drain_descendants(self, parents: Sequence[Agent]) -> None:
        """Release the live descendants of these exact live roots (TEAR-8, AUTH-11)."""
        presented = tuple(self._identities.presented(parent) for parent in parents)
        with self._tracing.drain("scoped"):
            targets = self._dispatch_drain(DescendantsOf(presented))
            roots = frozenset(each.agent for each in presented if each.is_exact_live)
            await self._barrier.wait(lambda lineage: not lineage.isdisjoint(roots))
            await await_branches(targets, "scoped")

    async def drain_children(self, parent: Agent, ids: Sequence[SessionId]) -> None:
        """Release selected children of a live parent; admission stays open (TEAR-11)."""
        child_ids = tuple(
            SessionId(require_str(each, f"ids[{index}]", non_empty=True))
            for index, each in enumerate(ids)
        )
        presented = self._identities.presented(parent)
        with self._tracing.drain("selected"):
            await await_branches(
                self._dispatch_drain(SelectedChildren(presented, child_ids)), "selected"
            )

    def _dispatch_drain(self, scope: DrainScope) -> list[asyncio.Future[SubagentError | None]]:
        return self._engine.drain(DrainRequested(self._engine.event_id(), scope))

    # ------------------------------------------------------------------ harness events

    def _on_agent_disposed(self, agent: Agent) -> None:
        """A closing root lasts until that exact agent is disposed (TEAR-9); remembered
        lineage walks are stale from now on."""
        self._identities.departed(agent)
        ref = self._identities.known(agent)
        if ref is not None:
            self._engine.dispatch(AgentDisposed(self._engine.event_id(), ref))

    async def settled(self) -> None:
        """Wait until no teardown or mailbox work is pending (for tests and benchmarks)."""
        await self._engine.settle_tasks()
        await self._mailbox.settled()


__all__ = [
    "REPORT_FRAME",
    "AncestorAuthority",
    "ContinuableStart",
    "ContinuableStartSpec",
    "ContinuationManager",
    "ParentAgent",
    "ReportDelivery",
    "UserGrant",
    "UserInterruptAuthority",
]
