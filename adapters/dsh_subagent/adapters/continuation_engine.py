"""The continuation manager's effect loop: feed the pure core, carry out what it returns.

Theory of operation
-------------------
1. ``Engine.dispatch(event)`` applies one event to ``core.manager.apply``, stores the new
   state first, then performs the effects in order, synchronously (HARNESS-32); the match
   over effects is exhaustive. A ``Reject`` is raised only after every other effect of the
   same event ran (a refused materialization still disposes its handle). Harness
   notifications raised while effects run (inbox claimed/discarded, status) re-enter
   ``dispatch``; they build on the stored state. A ``SubmitFollowup`` whose send returned
   is reported ``MessageAccepted`` only where the core asks (``report_accepted``: a child's
   first acceptance); a delivery to a resident child is one dispatch.
2. The effects that need the requester's awaiting are handed back as ``dispatch``'s result:
   a routing pass answers ``Routed`` (delivered, resume, await the release; CONT-14), a
   drain answers its ``AwaitBranches`` (TEAR-12), a refused lease its ``PostToMailbox``
   (DUR-20).
3. The engine decides nothing: residency, routing, ownership, notice routes and texts,
   durability reports and teardown order are the core's. The engine holds only what the core
   cannot: agent handles, epoch boundaries, pending messages, release futures, failures.
4. Teardown runs as tasks started by effects: ``FlushSession`` awaits the child's idle and
   the final flush and reports ``FlushReported`` (a False or raising flush is a durability
   report, DESIGN decision 1); ``DisposeHandle`` after a flush captures the epoch facts
   (EVT-10, EVT-11) while the child is registered, disposes the handle and reports
   ``DisposalFinished`` with the failed boundaries (TEAR-5); the flush's own task carries
   that release on, so one task serves a child's whole teardown. At most ``TEARDOWN_WINDOW``
   teardown tasks run at once; the other flushes wait in the order the core asked for them
   and start as earlier teardowns end (the core's child-first order is kept: a parent's
   flush is asked for only after its children's releases). In a wide drain, what each child
   holds across an ``await`` then lives through a window's worth of allocations, not through
   every sibling's, and is not promoted to the collector's oldest generation (a wave of all
   N at once ran several full collections of the whole tree per drain at 10,000 children).
   A cancelled teardown task (the loop's end) cancels the queued ones with it. A
   ``DisposeHandle`` from a rollback only disposes (TEAR-7). The release future of a child
   resolves with its combined teardown failure (or None) when its end edge is performed.
   After the handle's disposal the child's store lease is given up (``release_lease``,
   LEASE-6): an Activation holds it from its grant to its release; a release that fails is
   logged and the lease expires.
   The disposal's cancel splice (whatever the idle child's inbox still holds, such as a
   settlement notice) is made right before the final flush, as ``FlushSession`` orders, so
   the flush's one commit carries the log tail and its discards (DUR-4). A write that raises
   is tried again (``WRITE_ATTEMPTS`` in all); and before the lease is given up, whatever
   the store does not hold yet (a failed flush's tail, or the cancel of a message that
   arrived during the flush, made by the handle's disposal) is committed the same way, so
   the next taker never finds a discarded message pending.
5. Notices and reports never stall teardown: a failing notice send is logged and dropped
   (NOTICE-14); a failing accounted send withdraws its id (RES-2). A sent notice is
   committed with its parent's session in the send's span (DUR-1); the child's release
   future resolves once that commit did (a failed one is logged), so a drain returns with
   every notice it caused in the store.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeAlias, assert_never

import attrs

from dsh_subagent.adapters.durability import Accepted, DurabilityFailed, accepted
from dsh_subagent.adapters.protocols import (
    Agent,
    AgentHandle,
    AgentRegistry,
    CancelCause,
    InboxNotification,
    Session,
    SessionStore,
    StatusNotification,
)
from dsh_subagent.adapters.telemetry import Lifecycle, fields
from dsh_subagent.core import wire
from dsh_subagent.core.authority import FollowupAuthority
from dsh_subagent.core.budget_log import exhausted_limit
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.lifecycle import (
    SUBAGENT_END,
    SUBAGENT_START,
    RunEndInfo,
    RunStartInfo,
    end_info_for,
)
from dsh_subagent.core.manager import ManagerState, apply
from dsh_subagent.core.manager.effects import (
    AwaitBranches,
    AwaitRelease,
    CancelAgent,
    DeliverReport,
    DisposeHandle,
    EmitEnd,
    EmitStart,
    FlushSession,
    PostToMailbox,
    Reject,
    ReleaseOwnership,
    ReportDurabilityFailed,
    ResumeAgent,
    SendNotice,
    SubmitFollowup,
)
from dsh_subagent.core.manager.events import (
    AgentBecameBusy,
    AgentBecameIdle,
    DisposalFinished,
    DrainRequested,
    Event,
    FlushReported,
    FollowupRequested,
    MailboxArrived,
    MessageAccepted,
    MessageClaimed,
    MessageDiscarded,
    MessageSendFailed,
)
from dsh_subagent.core.notices import EpochOutcome, NoticeRoute
from dsh_subagent.core.output import epoch_stop_reason, final_assistant_output, fold_consumed_work
from dsh_subagent.core.residency import AgentStatus
from dsh_subagent.core.teardown import Boundary, FlushOutcome, boundary_failure, combine_failures
from dsh_subagent.core.values import (
    CancelKind,
    Content,
    EventId,
    KnownStop,
    MessageId,
    MessageSource,
    Mode,
    SessionId,
    UserMessage,
)

_log = logging.getLogger("dsh_subagent.adapters.continuation")
_CAUSES = {kind: CancelCause(kind) for kind in CancelKind}
"""One frozen cause per kind, shared by every child cancelled for it."""
_DISPOSED = _CAUSES[CancelKind.DISPOSED]
WRITE_ATTEMPTS = 3
"""How often a teardown write of a child's log (the final flush, the disposal's tail) is
tried before its failure stands (rule 4, DUR-4)."""

TEARDOWN_WINDOW = 32
"""How many children's teardowns run at once; the rest wait in the core's order (rule 4).

32 rather than 64: at 10,000 held children a window of 64 kept enough teardown state alive
to run a full collection of the whole heap in the drain (W4: 278/25/1 collections, about
1.6 s of 6.5 s CPU), 32 none (151/13/0); a durable drain of 1,000 children on a
``synchronous=FULL`` SQLite store took the same time with either (bench/RESULTS.md)."""

LifecycleInfo: TypeAlias = RunStartInfo | RunEndInfo
Emit = Callable[[str, LifecycleInfo], None]


class Routed(enum.Enum):
    """A routing pass's outcome: delivered, or what the requester does next (CONT-14)."""

    DELIVERED = "delivered"
    RESUME = "resume"
    AWAIT_RELEASE = "await-release"


Handback: TypeAlias = Routed | AwaitBranches | PostToMailbox | None
"""What ``dispatch`` hands back to the requester: a routing outcome, a drain's targets, a
post to the durable mailbox."""


_NO_OUTCOME: Final = EpochOutcome(KnownStop.ERROR)


@attrs.define(eq=False)
class LiveChild:
    """What the adapter holds for one Activation besides the core record (RES-8)."""

    child_id: SessionId
    handle: AgentHandle
    provider: str
    label: str | None
    parent_session: SessionId | None
    released: asyncio.Future[SubagentError | None]
    boundary: int = 0
    start_info: RunStartInfo | None = None
    watch: _Watch | None = None
    # Tuples, and one shared initial outcome: a held child keeps no empty list or outcome
    # of its own for the cyclic GC to track.
    failures: tuple[SubagentError, ...] = ()
    child_failures: tuple[SubagentError, ...] = ()
    outcome: EpochOutcome = _NO_OUTCOME
    rollback: asyncio.Future[None] | None = None
    release_lease: Callable[[], Awaitable[bool | None]] | None = None
    #: False once the lease's release saw no mailbox row: no after-release look (DUR-23).
    mail_at_release: bool = True

    def fields(self) -> dict[str, object]:
        """The structured log fields of this Activation (OBS-5)."""
        run_id = None if self.start_info is None else self.start_info.run_id
        return fields(self.child_id, self.parent_session, None, run_id)

    def warn(self, message: str, *args: object, failed: bool | BaseException = True) -> None:
        """Log a warning about this Activation with its fields (OBS-5): ``message`` formats
        the child id, then ``args``; ``failed`` attaches the exception being handled (True)
        or the one given."""
        _log.warning(message, self.child_id, *args, exc_info=failed, extra=self.fields())

    def released_failure(self) -> SubagentError | None:
        """The combined teardown failure of this Activation (TEAR-5)."""
        errors = list(self.failures)
        if self.child_failures:
            summary = "; ".join(str(error) for error in self.child_failures)
            errors.insert(0, boundary_failure(Boundary.CHILDREN, summary))
        return combine_failures(errors)


class Engine:
    """One core state, its effect performer and the adapter-side facts (rules 1-4)."""

    def __init__(
        self,
        agents: AgentRegistry,
        sessions: SessionStore,
        emit: Emit,
        ids: Callable[[], str],
        tracing: Lifecycle | None = None,
    ) -> None:
        self.agents = agents
        self.tracing = tracing or Lifecycle()
        self.sessions = sessions
        self.state = ManagerState()
        self.children: dict[SessionId, LiveChild] = {}
        self.outbox: dict[MessageId, UserMessage] = {}
        self._emit = emit
        self._ids = ids
        self._event_ids = itertools.count()
        #: Teardown tasks, and the commits of sent notices a release waits for (rule 4).
        self._tasks: set[asyncio.Future[Any]] = set()
        #: Settlement notices sent and not yet stored, by the child that settled (rule 5).
        self._notices: dict[SessionId, Accepted] = {}
        #: Flushes the core asked for that wait for a place in the teardown window (rule 4).
        self._queued: deque[LiveChild] = deque()
        self._flushing = 0

    def event_id(self) -> EventId:
        return EventId(f"ev-{next(self._event_ids)}")

    def message_id(self) -> MessageId:
        return MessageId(self._ids())

    def dispatch(self, event: Event) -> Handback:
        """Apply ``event``, perform its effects in order, then raise its refusal, if any."""
        self.state, effects = apply(self.state, event)
        refusal: Reject | None = None
        handback: Handback = None
        first: SubmitFollowup | None = None
        for effect in effects:
            match effect:
                case Reject():
                    refusal = refusal or effect
                case SubmitFollowup():
                    self._submit_followup(effect)
                    handback = Routed.DELIVERED
                    if effect.report_accepted:
                        first = effect
                case ResumeAgent():
                    handback = Routed.RESUME
                case AwaitRelease():
                    handback = Routed.AWAIT_RELEASE
                case AwaitBranches() | PostToMailbox():
                    handback = effect
                case EmitStart(child_id=child_id, epoch=epoch):
                    self.tracing.epoch(child_id, epoch)
                    self._publish(effect)
                case CancelAgent(child_id=child_id, kind=kind, keep_inbox=keep):
                    self.children[child_id].handle.agent.cancel(_CAUSES[kind], keep_inbox=keep)
                case FlushSession(child_id=child_id):
                    live = self.children[child_id]
                    self.tracing.teardown_begin(child_id, live.parent_session)
                    self._queued.append(live)
                    self._start_flushes()
                case ReportDurabilityFailed(report=report):
                    extra = self.children[report.child_id].fields()
                    _log.warning("%s: %s", report.code.value, report.message, extra=extra)
                case DisposeHandle(child_id=child_id):
                    self._dispose(child_id, after_flush=isinstance(event, FlushReported))
                case SendNotice():
                    self._send_notice(effect)
                case ReleaseOwnership(child_id=child_id, owner=owner):
                    failure = self.children[child_id].released_failure()
                    if failure is not None and owner is not None and owner in self.children:
                        self.children[owner].child_failures += (failure,)
                case EmitEnd():
                    self._finish(effect)
                case DeliverReport():
                    self._deliver_report(effect)
                case _:
                    assert_never(effect)
        if refusal is not None:
            raise SubagentError(refusal.code, refusal.reason)
        if first is not None:  # a first acceptance is the core's to record (rule 1)
            self.dispatch(MessageAccepted(self.event_id(), first.child_id, first.message_id))
        return handback

    def submit(
        self,
        child_id: SessionId,
        content: Content,
        source: MessageSource,
        authority: Callable[[], FollowupAuthority],
    ) -> Accepted | Routed:
        """One routing pass, a no-await span: admit, authorize, account, send (CONT-16),
        and start committing the child's session (DUR-1).

        Returns the acceptance, or what the requester must do instead (CONT-14, CONT-15).
        """
        message = UserMessage(self.message_id(), content, source)
        event = FollowupRequested(self.event_id(), child_id, message.id, authority())
        routed = self.route(message, event)
        assert isinstance(routed, Routed)
        self.tracing.routed(child_id, routed._value_)  # not ``.value``: no Python frame
        if routed is Routed.DELIVERED:
            session = self.children[child_id].handle.agent.session
            return accepted(self.sessions, session, message.id)
        return routed

    def route(self, message: UserMessage, event: FollowupRequested | MailboxArrived) -> Handback:
        """Offer ``message`` to the core (a follow-up, or durable mail arrived): it waits in
        the outbox for the dispatch alone (CONT-16, DUR-22). No await."""
        self.outbox[message.id] = message
        try:
            return self.dispatch(event)
        finally:
            self.outbox.pop(message.id, None)

    def drain(self, event: DrainRequested) -> list[asyncio.Future[SubagentError | None]]:
        """Dispatch a drain; return the release futures of the targets it hands back."""
        branches = self.dispatch(event)
        assert isinstance(branches, AwaitBranches)
        return [self.children[child_id].released for child_id in branches.child_ids]

    # ------------------------------------------------------------------ sends

    def _submit_followup(self, effect: SubmitFollowup) -> None:
        agent = self.children[effect.child_id].handle.agent
        self._send_accounted(effect.child_id, effect.message_id, agent.followup)

    def _take(self, message_id: MessageId) -> UserMessage:
        return self.outbox.pop(message_id)

    def _send_accounted(
        self,
        agent_id: SessionId,
        message_id: MessageId,
        send: Callable[[UserMessage], None],
        message: UserMessage | None = None,
    ) -> None:
        """Perform an accounted waking send of ``message`` (None: the outbox's, taken now);
        withdraw the id if it raises (RES-2)."""
        try:
            send(self._take(message_id) if message is None else message)
        except BaseException:
            self.dispatch(MessageSendFailed(self.event_id(), agent_id, message_id))
            raise

    def _send_notice(self, effect: SendNotice) -> None:
        """Deliver by the core's route; never let a failure reach teardown (NOTICE-14)."""
        message = UserMessage(effect.message_id, effect.content, effect.source)
        parent = self.agents.get(effect.parent_session)
        child_id = effect.source.sender_session_id
        dropped = effect.route is NoticeRoute.DROP or parent is None
        with self.tracing.notice(child_id, effect.parent_session, effect.route, dropped=dropped):
            if parent is None or dropped:
                _log.info(
                    "settlement notice for %s dropped: no parent",
                    child_id,
                    extra=fields(child_id, effect.parent_session),
                )
                return
            self._deliver_notice(effect, message, parent)

    def _deliver_notice(self, effect: SendNotice, message: UserMessage, parent: Agent) -> None:
        sends = {
            NoticeRoute.FOLLOWUP: parent.followup,
            NoticeRoute.STEER: parent.steer,
            NoticeRoute.INJECT: parent.inject,
        }
        try:
            if effect.accounted:
                self._send_accounted(
                    effect.parent_session, message.id, sends[effect.route], message
                )
            else:
                sends[effect.route](message)
        except Exception:
            _log.warning(
                "settlement notice was not delivered to %s",
                parent.id,
                exc_info=True,
                extra=fields(effect.source.sender_session_id, parent.id),
            )
            return
        sender = effect.source.sender_session_id
        self._notices[sender] = accepted(self.sessions, parent.session, message.id)

    def _deliver_report(self, effect: DeliverReport) -> None:
        """Send a framed report; a failing send is PARENT_UNAVAILABLE (CONT-31)."""
        message = self._take(effect.message_id)
        parent = self.agents.get(effect.parent_session)
        try:
            if parent is None:
                raise LookupError(f"parent {effect.parent_session!r} is not registered")
            send = parent.inject if effect.route is NoticeRoute.INJECT else parent.steer
            if effect.accounted:
                self._send_accounted(effect.parent_session, message.id, send, message)
            else:
                send(message)
        except Exception as exc:
            raise SubagentError(
                ErrorCode.PARENT_UNAVAILABLE, "the report could not be delivered", cause=exc
            ) from exc

    # ------------------------------------------------------------------ epochs

    def _publish(self, effect: EmitStart) -> None:
        """Subscribe to the child's inbox and status, fix the boundary, emit start (CONT-10)."""
        live = self.children[effect.child_id]
        agent = live.handle.agent
        cid = live.child_id
        live.watch = _Watch(self, cid, agent)
        live.boundary = agent.session.seq
        assert live.parent_session is not None
        info = RunStartInfo(
            effect.run_id,
            live.provider,
            cid,
            True,
            live.parent_session,
            Mode.CONTINUABLE,
            live.label,
        )
        self._emit(SUBAGENT_START, info)
        live.start_info = info

    def _finish(self, effect: EmitEnd) -> None:
        """The end edge closes the epoch; the release future resolves (TEAR-2 step 14)."""
        self.tracing.teardown_end(effect.child_id)
        live = self.children.pop(effect.child_id)
        if live.watch is not None:
            live.watch.close()
        failure = live.released_failure()
        if live.start_info is not None:
            output = wire.encode_content(live.outcome.output) if failure is None else []
            end = end_info_for(
                live.start_info,
                effect.stop_reason,
                tuple(output),
                durability_failed=effect.durability is not None,
            )
            try:
                self._emit(SUBAGENT_END, end)
            except Exception:
                live.warn("subagent/end for %s was not published")
        notice = self._notices.pop(live.child_id, None)
        if notice is None:
            if not live.released.done():
                live.released.set_result(failure)
            return
        # A done callback, not a task: a drain's wave of releases allocates no task,
        # coroutine or shield per child (rule 5).
        durable = asyncio.ensure_future(notice.durable)
        self._tasks.add(durable)
        durable.add_done_callback(_ReleaseWhenStored(self._tasks, live, notice, failure))

    # ------------------------------------------------------------------ teardown tasks

    def _spawn(self, work: object) -> None:
        assert asyncio.iscoroutine(work)
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _start_flushes(self) -> None:
        """Start the queued teardowns, in the core's order, while the window has room."""
        while self._queued and self._flushing < TEARDOWN_WINDOW:
            self._flushing += 1
            self._spawn(self._flush(self._queued.popleft()))

    async def _flush(self, live: LiveChild) -> None:
        """One child's teardown; its place in the window then goes to the next (rule 4)."""
        try:
            await self._teardown(live)
        except asyncio.CancelledError:
            # Only the loop's end or ``settle_tasks``' cancelled awaiter cancels a teardown,
            # and either cancels them all: the queued ones are cancelled with it.
            self._queued.clear()
            raise
        finally:
            self._flushing -= 1
            self._start_flushes()

    async def _teardown(self, live: LiveChild) -> None:
        """Quiesce, the disposal's cancel, the final flush, then the release (TEAR-2 steps
        6-9, rule 4)."""
        agent = live.handle.agent
        try:
            await agent.when_idle()
            # The disposal's cancel splice, made now: the final flush carries it (DUR-4).
            agent.cancel(_DISPOSED, keep_inbox=False)
        except Exception as exc:
            live.failures += (boundary_failure(Boundary.ACTIVATION, repr(exc)),)
        flushed = agent.session.seq
        outcome = await self._write_log(live, self.sessions.flush)
        # The core answers with ``DisposeHandle``; this task carries the release on, so a
        # child's teardown never needs a second task.
        self.dispatch(FlushReported(self.event_id(), live.child_id, outcome))
        await self._release(live, flushed if outcome is FlushOutcome.OK else None)

    async def _write_log(
        self, live: LiveChild, write: Callable[[Session], Awaitable[bool]]
    ) -> FlushOutcome:
        """``write`` the child's log; one that raises is tried again, ``WRITE_ATTEMPTS`` in
        all (rule 4); False (nothing persists) and a fenced refusal are final."""
        session = live.handle.agent.session
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            try:
                confirmed = await write(session)
            except Exception as exc:
                final = attempt == WRITE_ATTEMPTS or _refused(exc)
                live.warn(
                    "final flush of %s failed%s",
                    "; persisted state may be unavailable or stale on resume"
                    if final
                    else f" (attempt {attempt}); trying again",
                )
                if final:
                    break
                continue
            return FlushOutcome.OK if confirmed else FlushOutcome.UNCONFIRMED
        return FlushOutcome.FAILED

    def _dispose(self, child_id: SessionId, *, after_flush: bool) -> None:
        if after_flush:
            return  # ``_flush``, which reported the flush, releases in the same task
        live = self.children.pop(child_id)
        live.rollback = asyncio.ensure_future(live.handle.dispose())

    async def _release(self, live: LiveChild, stored: int | None) -> None:
        """Capture the epoch, dispose the handle, report (TEAR-2 steps 8-9, TEAR-5);
        ``stored`` is the log length the final flush confirmed (None: not confirmed)."""
        boundaries: set[Boundary] = {Boundary.ACTIVATION} if live.failures else set()
        agent = live.handle.agent
        try:
            events = agent.session.events[live.boundary :]
            output = final_assistant_output(events)
            stop = epoch_stop_reason(fold_consumed_work(events))
            limit = exhausted_limit(events)
            live.outcome = EpochOutcome(
                stop,
                wire.decode_content(list(output), "output"),
                None if limit is None else limit.value,
            )
        except Exception as exc:
            if not boundaries:  # one error for the shared idle/flush/capture guard (TEAR-5)
                live.failures += (boundary_failure(Boundary.ACTIVATION, repr(exc)),)
            boundaries.add(Boundary.ACTIVATION)
        try:
            await live.handle.dispose()
        except Exception as exc:
            live.failures += (boundary_failure(Boundary.HANDLE, repr(exc)),)
            boundaries.add(Boundary.HANDLE)
        if stored is None or agent.session.seq > stored:
            await self._commit_tail(live)
        await release_lease(live)
        parent = None if live.parent_session is None else self.agents.get(live.parent_session)
        status = AgentStatus.IDLE
        if parent is not None and parent.status is AgentStatus.RUNNING:
            status = AgentStatus.RUNNING
        self.dispatch(
            DisposalFinished(
                self.event_id(),
                live.child_id,
                live.outcome,
                self.message_id(),
                frozenset(boundaries),
                parent_registered=parent is not None,
                parent_status=status,
            )
        )

    async def _commit_tail(self, live: LiveChild) -> None:
        """What the store may not hold yet (a failed flush's tail, the cancel splice of a
        message that arrived during the flush) is committed under the lease, before it is
        given up (rule 4, DUR-4): a discarded notice stays discarded after a restart."""
        if await self._write_log(live, self.sessions.commit) is FlushOutcome.FAILED:
            live.warn("the disposal of %s was not persisted", failed=False)

    async def settle_tasks(self) -> None:
        """Wait until no teardown task is pending (tests and drains)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


class _ReleaseWhenStored:
    """Resolves a child's release once its settlement notice is in the parent's stored log
    (rule 5, DUR-1); a failed commit is logged, the notice stays delivered in memory."""

    __slots__ = ("_failure", "_live", "_notice", "_pending")

    def __init__(
        self,
        pending: set[asyncio.Future[Any]],
        live: LiveChild,
        notice: Accepted,
        failure: SubagentError | None,
    ) -> None:
        self._pending = pending
        self._live = live
        self._notice = notice
        self._failure = failure

    def __call__(self, durable: asyncio.Future[Any]) -> None:
        self._pending.discard(durable)
        live = self._live
        error = None if durable.cancelled() else durable.exception()
        if error is not None or durable.cancelled():
            notice = self._notice
            failed = DurabilityFailed(notice.message_id, notice.session_id, error)
            failed.__cause__ = error
            live.warn("settlement notice of %s is not durable", failed=failed)
        if not live.released.done():
            live.released.set_result(self._failure)


class _Watch:
    """The engine's listeners on one child's inbox and status (rule 1): one slotted object
    holding its bound methods' three subscriptions, no closures, cells or list per child."""

    __slots__ = ("_agent", "_child_id", "_engine", "_off_claimed", "_off_discarded", "_off_status")

    def __init__(self, engine: Engine, child_id: SessionId, agent: Agent) -> None:
        self._engine = engine
        self._child_id = child_id
        self._agent = agent
        self._off_claimed = agent.claimed.subscribe(self.claimed)
        self._off_discarded = agent.discarded.subscribe(self.discarded)
        self._off_status = agent.status_changed.subscribe(self.status)

    def close(self) -> None:
        """Unsubscribe all three (each disposer is single-shot)."""
        self._off_claimed()
        self._off_discarded()
        self._off_status()

    def claimed(self, note: InboxNotification) -> None:
        engine = self._engine
        engine.dispatch(MessageClaimed(engine.event_id(), self._child_id, note.message.id))

    def discarded(self, note: InboxNotification) -> None:
        engine = self._engine
        engine.dispatch(MessageDiscarded(engine.event_id(), self._child_id, note.message.id))

    def status(self, _note: StatusNotification) -> None:
        engine = self._engine
        busy = self._agent.status is AgentStatus.RUNNING
        kind = AgentBecameBusy if busy else AgentBecameIdle
        engine.dispatch(kind(engine.event_id(), self._child_id))


def _refused(error: Exception) -> bool:
    """A write the store's fence refused (the lease is another's): trying it again changes
    nothing."""
    return isinstance(error, SubagentError) and error.code in _FINAL


_FINAL = frozenset({ErrorCode.LEASE_LOST, ErrorCode.ACTIVATION_HELD})


async def release_lease(live: LiveChild) -> None:
    """Give the child's store lease up once; a failure is logged, the lease expires (rule 4)."""
    release, live.release_lease = live.release_lease, None
    if release is None:
        return
    try:
        live.mail_at_release = await release() is not False
    except Exception:
        live.warn("the lease of %s was not released; it expires")


def new_release() -> asyncio.Future[SubagentError | None]:
    return asyncio.get_running_loop().create_future()


__all__ = [
    "Emit",
    "Engine",
    "Handback",
    "LifecycleInfo",
    "LiveChild",
    "Routed",
    "new_release",
    "release_lease",
]
