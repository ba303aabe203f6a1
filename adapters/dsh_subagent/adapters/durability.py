"""Write-ahead acceptance: an accepted message is in the store before its id is returned.

Theory of operation
-------------------
1. Admission stays one no-await span (AUTH-2, CONT-16): it decides and sends. In that same
   span the message's session (the child's inbox for a start's prompt or a follow-up, the
   parent's for a report or a settlement notice) is committed with ``SessionStore.commit``,
   which starts the write at once and returns its future: an ``Accepted`` pairs the id with
   it (DUR-1). A harness shares one write among the commits of one session and one loop
   tick (group commit, DUR-3), so acceptance costs no fsync of its own.
2. ``confirm`` awaits that future. The caller's signal is no longer consulted (an abort
   while durability is awaited withdraws nothing), and cancelling the awaiting task never
   cancels the shared write (DUR-5): each commit's future is its caller's own
   (``SessionStore.commit``), so it is awaited as it is, with no shield (one hop less
   per acknowledgement).
3. A failed commit raises ``DurabilityFailed`` (``DURABILITY_FAILED``, a ``SubagentError``)
   carrying the message id: the message was accepted by this process and may still be
   delivered, but it is not known to be in the store. Never a silent success. A store that
   persists nothing (``commit`` answers False) promises nothing (DESIGN decision 1).
4. ``spliced_ids`` reads which messages a log holds (every id an ``agent/inbox/spliced``
   inserted): delivery of durable mail is idempotent by it, and a holder's release removes
   the mailbox rows it read and logged (DUR-24, DUR-25). ``unclaimed_ids`` reads
   which of them are still pending there (a holder died after logging mail it had not
   claimed yet, DUR-26).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping, Sequence

import attrs

from dsh_subagent.adapters.protocols import Session, SessionStore
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import INBOX_SPLICED, MessageId, SessionEvent, SessionId


class DurabilityFailed(SubagentError):
    """``DURABILITY_FAILED`` for an accepted message whose commit failed (rule 3)."""

    message_id: MessageId
    session_id: SessionId

    def __init__(
        self, message_id: MessageId, session_id: SessionId, cause: BaseException | None = None
    ) -> None:
        super().__init__(
            ErrorCode.DURABILITY_FAILED,
            f"message {message_id} was accepted into {session_id!r} but is not durable"
            + ("" if cause is None else f": {cause}"),
            field="message_id",
            cause=cause,
        )
        self.message_id = message_id
        self.session_id = session_id

    def __reduce__(  # type: ignore[override]
        self,
    ) -> tuple[type[DurabilityFailed], tuple[MessageId, SessionId], dict[str, object]]:
        return (type(self), (self.message_id, self.session_id), {"cause": self.cause})


@attrs.frozen(eq=False)
class Accepted:
    """An accepted message and the commit of the session it went into (rule 1)."""

    message_id: MessageId
    session_id: SessionId
    durable: Awaitable[bool]


def accepted(sessions: SessionStore, session: Session, message_id: MessageId) -> Accepted:
    """Start committing ``session`` now, inside the acceptance's span (rule 1)."""
    return Accepted(message_id, session.id, sessions.commit(session))


def stored(message_id: MessageId, session_id: SessionId) -> Accepted:
    """An acceptance whose message is already committed (a mailbox row, DUR-20)."""
    done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    done.set_result(True)
    return Accepted(message_id, session_id, done)


async def confirm(acceptance: Accepted) -> MessageId:
    """The message id, once its session is committed; ``DurabilityFailed`` if not (rules 2-3)."""
    try:
        await acceptance.durable  # the caller's own future (rule 2)
    except Exception as error:
        raise DurabilityFailed(acceptance.message_id, acceptance.session_id, error) from error
    return acceptance.message_id


def _inserted_ids(data: Mapping[str, object]) -> list[MessageId]:
    """The ids one ``agent/inbox/spliced`` payload inserts, in order."""
    inserted = data.get("inserted")
    ids: list[MessageId] = []
    for message in inserted if isinstance(inserted, Sequence) else ():
        mid = message.get("id") if isinstance(message, Mapping) else None
        if isinstance(mid, str):
            ids.append(MessageId(mid))
    return ids


def spliced_ids(events: Sequence[SessionEvent]) -> set[MessageId]:
    """The ids of every message ever inserted into the inbox of this log (rule 4)."""
    ids: set[MessageId] = set()
    for event in events:
        data = event.data
        if event.type == INBOX_SPLICED and isinstance(data, Mapping):
            ids.update(_inserted_ids(data))
    return ids


def unclaimed_ids(events: Sequence[SessionEvent]) -> set[MessageId]:
    """The ids still pending in the inbox at the end of this own suffix of a log: inserted
    and neither claimed nor cancelled since (rule 4). Only ids; the log was validated when
    it was stored, and a resume checks it again."""
    lists: dict[object, list[MessageId]] = {}
    for event in events:
        data = event.data
        if event.type != INBOX_SPLICED or not isinstance(data, Mapping):
            continue
        start, removed = data.get("start"), data.get("removedCount", 0)
        if isinstance(start, int) and isinstance(removed, int):
            pending = lists.setdefault(data.get("target"), [])
            pending[start : start + removed] = _inserted_ids(data)
    return {mid for pending in lists.values() for mid in pending}


__all__ = [
    "Accepted",
    "DurabilityFailed",
    "accepted",
    "confirm",
    "spliced_ids",
    "stored",
    "unclaimed_ids",
]
