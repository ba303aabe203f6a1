"""The durable mailbox of continuable children held by another harness (DUR-20..29).

Theory of operation
-------------------
1. Posting (DUR-20, DUR-21). A follow-up whose cold resume the store refuses (another live
   harness holds the child's lease) gets the core's ``PostToMailbox``: ``post`` writes the
   message, with its id and source, to the child's mailbox and returns once it is
   committed, so accepted means durable. Admission, authorization and bad input were
   checked before (the follow-up's validation and the cold resume's authorization). When
   the store finds no other live holder any more, nothing is written and the follow-up
   routes again (it takes the lease itself).
2. Delivery (DUR-22). The holder's persistence tells it (``watch_mailbox``) that rows may be
   pending; a pass, under the child's lock, reads the rows and hands each one not yet in
   the child's log to the core as ``MailboxArrived``, whose ``SubmitFollowup`` is performed
   as for a local follow-up (same inbox path, original id and source, waking a waiting
   child). Passes of one child are serialised by the per-child lock.
3. Exactly once (DUR-24, DUR-25): delivery is idempotent by message id. An id already
   spliced into the child's log (``agent/inbox/spliced``) is never delivered again, and
   rows stay in the store until a later taker prunes the ids its loaded log holds (a fenced
   write). A crash between the log write and the prune therefore duplicates nothing, and a
   crash before the log write loses nothing: the row is still there.
4. Taking over (DUR-23). A cold resume reads the rows after it took the lease, prunes the
   ones its stored log already holds and delivers the rest first, in acceptance order,
   right after materialization (no await between), then its own message. A grant whose
   own transaction saw no row (``Lease.mail`` False) skips the read. A row posted after
   the grant (or after the read) needs no pass of the resume's own: the child is held here
   from the grant on and the store is watched from then (``watch``), so the watch names
   the child for that row, and its pass waits for the child's lock, which the resume holds
   until the child is resident. After an Activation is released, a pass runs again:
   rows that arrived while it was being torn down make the core resume the child for
   them (``MailboxArrived`` on an absent child).
   A store whose release saw no row for the child in its own transaction says so
   (``release`` returns False) and the pass is skipped: a post to a free child writes
   nothing, so no row can come after it.
5. A persistence without the mailbox (not a ``SessionMailbox``) keeps the old refusal,
   ``ACTIVATION_HELD``.
6. Orphans (DUR-26). A harness watches from its open (``watch_store``), not only once it
   holds a lease. The persistence also names children with rows whose lease is free (its
   holder released it, let it expire, or died on this host); the pass finds such a child
   absent, the core asks for a resume, and the resume takes the lease, delivers the rows
   (rule 4) and prunes the ones already logged. A pruned row still unclaimed in the log
   (the holder spliced it in and died) is pending in the restored inbox: the resume goes
   ahead for it and wakes the child, which a delivery would have done. Harnesses racing
   for one orphan are refused by the lease but one; the rest leave it.
7. A whole drain closes the mailbox: no pass starts after it begins, and the drain waits
   for the passes already running, so none reads the store after the harness closed it
   (the core would leave the mail pending anyway; the next taker delivers it).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence

from dsh_subagent.adapters.continuation_engine import Engine, LiveChild, Routed
from dsh_subagent.adapters.continuation_support import ChildLocks
from dsh_subagent.adapters.durability import Accepted, spliced_ids, stored, unclaimed_ids
from dsh_subagent.adapters.protocols import (
    Session,
    SessionMailbox,
    SessionPersistence,
    SessionRecord,
)
from dsh_subagent.adapters.signals import Unsubscribe
from dsh_subagent.adapters.telemetry import fields
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.manager.events import MailboxArrived
from dsh_subagent.core.values import (
    Content,
    MessageId,
    MessageSource,
    SessionId,
    UserMessage,
)

_log = logging.getLogger("dsh_subagent.adapters.continuation")


def mailbox_of(persistence: SessionPersistence | None) -> SessionMailbox | None:
    """The persistence's durable mailbox, if it has one (rule 5)."""
    if persistence is None:
        return None
    if _mailbox_class(type(persistence)) or isinstance(persistence, SessionMailbox):
        return persistence  # type: ignore[return-value]  # the class implements it
    return None


@functools.lru_cache(maxsize=64)
def _mailbox_class(cls: type) -> bool:
    """Whether the class implements ``SessionMailbox``: a runtime protocol's ``isinstance``
    walks the protocol's members on every call (a cold resume asks twice)."""
    return issubclass(cls, SessionMailbox)


class Mailbox:
    """Posting, noticing and delivering a child's durable mailbox (rules 1-4)."""

    def __init__(
        self,
        engine: Engine,
        locks: ChildLocks,
        persistence: Callable[[], SessionPersistence | None],
    ) -> None:
        self._engine = engine
        self._locks = locks
        self._persistence = persistence
        #: Resumes an absent child for its pending mail (set by the manager).
        self.resume: Callable[[SessionId], Awaitable[object]] | None = None
        self._watching: dict[int, tuple[SessionMailbox, Unsubscribe]] = {}
        #: Per child: the session last read and the ids spliced into it up to ``seq``.
        self._logged: dict[SessionId, tuple[Session, int, set[MessageId]]] = {}
        self._scheduled: set[SessionId] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    def available(self) -> bool:
        return mailbox_of(self._persistence()) is not None

    # ------------------------------------------------------------------ posting (rule 1)

    async def post(
        self, child_id: SessionId, message_id: MessageId, content: Content, source: MessageSource
    ) -> Accepted | None:
        """Accept into the child's mailbox, committed before it returns; None when no other
        harness holds the child any more."""
        store = mailbox_of(self._persistence())
        if store is None:
            raise SubagentError(ErrorCode.ACTIVATION_HELD, f"{child_id} is held elsewhere")
        posted = await store.post(child_id, UserMessage(message_id, content, source))
        return stored(message_id, child_id) if posted else None

    # ------------------------------------------------------------------ noticing (rule 2)

    def watch_store(self) -> None:
        """Watch the current persistence's mailbox from now on (rule 6)."""
        persistence = self._persistence()
        if persistence is not None:
            self.watch(persistence)

    def watch(self, persistence: SessionPersistence) -> None:
        """Listen to this persistence's mailbox notifications (once per persistence)."""
        store = mailbox_of(persistence)
        if store is not None and id(store) not in self._watching:
            self._watching[id(store)] = (store, store.watch_mailbox(self.notice))

    def notice(self, child_id: SessionId) -> None:
        """Rows may be pending for ``child_id``: schedule one delivery pass (coalesced)."""
        if child_id in self._scheduled or self._closed:
            return
        self._scheduled.add(child_id)
        task = asyncio.get_running_loop().create_task(self._pass(child_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def after_release(self, live: LiveChild) -> None:
        """Once ``live`` is released, look again: mail that came during its teardown, unless
        the release saw no row for it (none can come to a free child)."""
        live.released.add_done_callback(_LookAfterRelease(self, live))

    async def _pass(self, child_id: SessionId) -> None:
        try:
            async with self._locks.locked(child_id):
                self._scheduled.discard(child_id)
                store = mailbox_of(self._persistence())
                if store is None:
                    return
                routed = self.deliver(child_id, await store.mailbox(child_id))
                if routed is Routed.RESUME and self.resume is not None:
                    await self.resume(child_id)
        except Exception:
            _log.warning(
                "mailbox delivery to %s failed; it stays pending",
                child_id,
                exc_info=True,
                extra=fields(child_id),
            )

    # ------------------------------------------------------------------ delivery (rules 2-4)

    async def take_over(
        self, child_id: SessionId, record: SessionRecord
    ) -> tuple[list[UserMessage], bool]:
        """After taking the lease: prune the rows ``record`` holds, return the rest, and
        whether a pruned row is still unclaimed in ``record``: its holder logged it and died
        before claiming it, so the resume must wake the child for it (rules 4, 6)."""
        store = mailbox_of(self._persistence())
        if store is None:
            return [], False
        messages = await store.mailbox(child_id)
        logged = spliced_ids(record.events)
        done = [message.id for message in messages if message.id in logged]
        if done:
            await store.prune(child_id, done)
        own = record.events[record.header.seed_length or 0 :]
        parked = bool(done) and not unclaimed_ids(own).isdisjoint(done)
        return [message for message in messages if message.id not in logged], parked

    def deliver(self, child_id: SessionId, messages: Sequence[UserMessage]) -> Routed | None:
        """Hand every message not yet in the child's log to the core, in order; no await.

        Returns ``Routed.RESUME`` when the core asks for the child to be resumed first.
        No message (a cold resume whose grant saw no row): the log is not read.
        """
        if not messages:
            return None
        logged = self._spliced(child_id)
        for message in messages:
            if message.id in logged:
                continue
            engine = self._engine
            event = MailboxArrived(engine.event_id(), child_id, message.id)
            routed = engine.route(message, event)
            if routed is Routed.DELIVERED:
                logged.add(message.id)
            elif routed is Routed.RESUME:
                return routed
        return None

    def _spliced(self, child_id: SessionId) -> set[MessageId]:
        """The ids in the child's log: the live one, else the last one seen (rule 3)."""
        live = self._engine.children.get(child_id)
        known = self._logged.get(child_id)
        if live is None:
            return set() if known is None else known[2]
        session = live.handle.agent.session
        if known is None or known[0] is not session:
            known = (session, 0, set())
        events = session.events
        ids = known[2] | spliced_ids(events[known[1] :])
        self._logged[child_id] = (session, len(events), ids)
        return ids

    def close(self) -> None:
        """No pass starts from now on (a whole drain closed admission for good, rule 7)."""
        self._closed = True

    async def settled(self) -> None:
        """Wait until no delivery pass is pending (drains and tests)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


__all__ = ["Mailbox", "mailbox_of"]


class _LookAfterRelease:
    """``after_release``'s done callback: one slotted object per child, not a closure and
    its cells (each is kept while the child lives, and walked by the collector)."""

    __slots__ = ("_live", "_mailbox")

    def __init__(self, mailbox: Mailbox, live: LiveChild) -> None:
        self._mailbox = mailbox
        self._live = live

    def __call__(self, _released: object) -> None:
        if self._live.mail_at_release:
            self._mailbox.notice(self._live.child_id)
