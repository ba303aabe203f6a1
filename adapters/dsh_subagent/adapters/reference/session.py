"""The live session log and the in-memory session store of the reference harness.

Theory of operation
-------------------
1. A ``LiveSession`` has an immutable header and an append-only log; ``seq`` is the log
   length. ``append(type, data)`` validates lossless JSON (naming the field) and deep-freezes
   the data in one pass (``freeze_checked``) before any change, assigns ``seq`` and ``time``
   (from an injected clock) and notifies observers synchronously, each one contained
   (HARNESS-20). Appends do not nest: an observer that appends raises ``ILLEGAL_TRANSITION``.
2. ``adopt_seed`` validates a seed (contiguous seqs from 0, lossless JSON, balanced: steps
   only inside turns, no open turn at the end; a ``turn/end`` also closes an open step, as a
   repairing load may write) and freezes its data; data already frozen is walked, not copied.
   A seeded session then appends ``session/end-seed`` unless the seed already ends with one
   (HARNESS-20). ``LiveSession.detached`` builds one for staging.
3. ``SessionStore.prepare`` builds a session without entering it, filling the header
   (HARNESS-19/21); ``enter`` is the collision point; ``announce`` emits ``session/created``
   (vetoable); ``leave`` emits ``session/disposed`` for announced entries, contained.
4. ``flush(session)`` awaits every flush listener concurrently, then returns whether any
   participated, or raises the first failure (in listener order) once all settled
   (HARNESS-19). ``commit(session)`` is the same for a session that may have left the store
   (a disposal's tail, DUR-4), started at the call and returned as a future. A lone
   listener returning a future (the binding's shared write) is joined directly: all the
   commits of one write are resolved by one callback on it (DUR-3).
5. ``LogOverride`` reads a log-only policy override: the value of the last ``sandbox/mode`` or
   ``approval/policy`` event (HARNESS-27).
6. ``bind_persistence`` returns a ``PersistenceBinding``, the flush listener that writes the
   not-yet-persisted suffix, creating the stored row on the first write. Per session, at
   most one write is in flight and one queued behind it; a flush or commit joins the queued
   one (it starts when the one in flight ends and takes every event the log has then), so
   concurrent commits of one session share a write. The stored length is known without a
   read when the binding wrote the log or it was restored from this persistence; a failed
   write forgets it (the next write asks). An announced session whose stored length is
   known is also written as it grows: an append makes the session due (unless it is due or
   a write is queued already), and the binding's one timer, armed by the first due session
   for ``interval`` seconds (default 5 ms; ``0`` the next tick), writes every due session
   when it fires, so each append is written within ``interval`` and the writes of one firing
   share one commit in a batching backend (DUR-2, DUR-3). A write that starts leaves its
   session due (no timer cancelled and armed again per commit): the firing asks for a write
   only if the log may hold events no write took (``_Log.taken``); a growth write that
   fails is not reported, the next flush (a barrier: it awaits what is queued, then writes
   the rest) finds whether the log is stored. The binding holds sessions weakly: a finished
   child's log is not kept alive by it, yet a commit after it left the store still knows
   what is stored.
"""

from __future__ import annotations

import asyncio
import math
import posixpath
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Final

import attrs

from dsh_subagent.adapters.clock import epoch_ms
from dsh_subagent.adapters.frozen_json import freeze_checked, is_certified
from dsh_subagent.adapters.protocols import Session, SessionMeta, SessionPersistence
from dsh_subagent.adapters.signals import Emitter, Unsubscribe
from dsh_subagent.core.errors import ErrorCode, SubagentError, invalid
from dsh_subagent.core.jsonvalue import check_json, require_int, require_str
from dsh_subagent.core.values import (
    END_SEED,
    STEP_END,
    STEP_START,
    TURN_END,
    TURN_START,
    JsonValue,
    Origin,
    SessionEvent,
    SessionHeader,
    SessionId,
    new_header,
)
from dsh_subagent.core.wire import needs_end_seed

Clock = Callable[[], float]
DEFAULT_WRITE_INTERVAL: Final = 0.005
"""Seconds a growing log waits before its new events are written (rule 6, DUR-2)."""
_CHECKED_TYPES: set[str] = set()  # event types already accepted by ``require_str``
Observer = Callable[["LiveSession", SessionEvent], object]
FlushListener = Callable[["LiveSession"], Awaitable[None] | None]


def _check_seed_event(event: object, index: int, where: str) -> None:
    """The per-event checks of ``adopt_seed``, each naming its field."""
    if not isinstance(event, SessionEvent):
        raise invalid(where, "not a SessionEvent")
    _check_type(event.type, f"{where}.type")
    if require_int(event.seq, f"{where}.seq") != index:
        raise invalid(f"{where}.seq", f"expected {index}, got {event.seq}; seqs are contiguous")
    check_json(event.time, f"{where}.time")


def _check_type(type: object, field: str) -> None:
    if type not in _CHECKED_TYPES:
        require_str(type, field, non_empty=True)
        if len(_CHECKED_TYPES) < 256:
            _CHECKED_TYPES.add(type)  # type: ignore[arg-type]  # require_str proved it a str


def adopt_seed(seed: Sequence[SessionEvent], field: str = "seed") -> list[SessionEvent]:
    """The seed with deep-frozen data, or ``INVALID_ARGUMENT`` unless it is contiguous from 0,
    lossless JSON and balanced. Events whose data is already frozen are kept as they are."""
    adopted: list[SessionEvent] = []
    open_turn = open_step = False
    for index, event in enumerate(seed):
        if not (
            type(event) is SessionEvent
            and event.type in _CHECKED_TYPES
            and type(event.seq) is int
            and event.seq == index
            and type(event.time) is float
            and math.isfinite(event.time)
        ):
            _check_seed_event(event, index, f"{field}[{index}]")
        if is_certified(event.data):
            adopted.append(event)
        else:
            data = freeze_checked(event.data, f"{field}[{index}].data")
            adopted.append(SessionEvent(event.type, event.seq, event.time, data))
        kind = event.type
        if kind == TURN_START:
            if open_turn:
                raise invalid(f"{field}[{index}]", "turn/start inside an open turn")
            open_turn = True
        elif kind == TURN_END:
            if not open_turn:
                raise invalid(f"{field}[{index}]", "turn/end without an open turn")
            open_turn = open_step = False  # a repaired tail may close its turn mid-step
        elif kind == STEP_START:
            if not open_turn or open_step:
                raise invalid(f"{field}[{index}]", "step/start outside a turn or inside a step")
            open_step = True
        elif kind == STEP_END:
            if not open_step:
                raise invalid(f"{field}[{index}]", "step/end without an open step")
            open_step = False
    if open_turn:
        raise invalid(field, "seed ends inside an open turn")
    return adopted


class LiveSession:
    """An append-only session log (HARNESS-20)."""

    def __init__(
        self,
        header: SessionHeader,
        seed: Sequence[SessionEvent] | None = None,
        *,
        clock: Clock = epoch_ms,
    ) -> None:
        self._log: list[SessionEvent] = [] if seed is None else adopt_seed(seed)
        self._header = header
        self._clock = clock
        self._snapshot: tuple[SessionEvent, ...] | None = None
        self._observers: Emitter[SessionEvent] = Emitter("session/event")
        self._appending = False
        self.first_live_seq: Final = len(self._log)
        #: The persistence this session was restored from, and its stored log length then.
        self.restored_from: tuple[SessionPersistence, int] | None = None
        if needs_end_seed(seed):
            self.append(END_SEED, {})

    @classmethod
    def detached(
        cls,
        session_id: SessionId,
        seed: Sequence[SessionEvent] | None = None,
        *,
        clock: Clock = epoch_ms,
    ) -> LiveSession:
        """A session outside any store, for staging (HARNESS-20)."""
        require_str(session_id, "session_id", non_empty=True)
        return cls(SessionHeader(id=session_id, created_at=clock()), seed, clock=clock)

    @property
    def header(self) -> SessionHeader:
        return self._header

    if TYPE_CHECKING:

        @property
        def id(self) -> SessionId: ...

    else:
        # A property whose getter is C (``attrgetter``): no Python frame per read, and an
        # acceptance reads it several times (issue 19).
        id = property(attrgetter("_header.id"), doc="The session's id (its header's).")

    @property
    def events(self) -> tuple[SessionEvent, ...]:
        if self._snapshot is None:
            self._snapshot = tuple(self._log)
        return self._snapshot

    @property
    def seq(self) -> int:
        return len(self._log)

    def events_after(self, count: int) -> tuple[SessionEvent, ...]:
        """The events after the first ``count``, copying only them (a write's new tail)."""
        return tuple(self._log[count:])

    def observe(self, observer: Callable[[SessionEvent], object]) -> Unsubscribe:
        """Call ``observer(event)`` synchronously after each append, contained."""
        return self._observers.subscribe(observer)

    def append(self, type: str, data: JsonValue) -> SessionEvent:
        """Validate, record and publish one event; returns it (HARNESS-20)."""
        _check_type(type, "type")
        frozen = freeze_checked(data, "data")
        if self._appending:
            raise SubagentError(ErrorCode.ILLEGAL_TRANSITION, "session appends cannot nest")
        event = SessionEvent(type=type, seq=len(self._log), time=self._clock(), data=frozen)
        self._appending = True
        try:
            self._log.append(event)
            self._snapshot = None
            self._observers.emit(event)
        finally:
            self._appending = False
        return event


def _validate_meta(meta: SessionMeta, seed_len: int | None) -> None:
    if meta.cwd is not None and not posixpath.isabs(require_str(meta.cwd, "meta.cwd")):
        raise invalid("meta.cwd", "must be an absolute path")
    if meta.parent_session is not None:
        require_str(meta.parent_session, "meta.parent_session", non_empty=True)
    if meta.seed_length is not None:
        length = require_int(meta.seed_length, "meta.seed_length", minimum=0)
        if length > (seed_len or 0):
            raise invalid("meta.seed_length", "exceeds the seed")
    if meta.origin is not None and not isinstance(meta.origin, Origin):
        raise invalid("meta.origin", "must be Origin.SUBAGENT")
    if meta.delegation_depth is not None:
        require_int(meta.delegation_depth, "meta.delegation_depth", minimum=0)
    if meta.agent_preset is not None:
        require_str(meta.agent_preset, "meta.agent_preset")
    if meta.created_at is not None:
        check_json(meta.created_at, "meta.created_at")


@attrs.define
class _Entry:
    session: LiveSession
    announced: bool = False


class SessionStore:
    """Live sessions by id, in creation order, with lifecycle and flush listeners."""

    def __init__(self, *, clock: Clock = epoch_ms) -> None:
        self._clock = clock
        self._entries: dict[SessionId, _Entry] = {}
        self.created: Emitter[LiveSession] = Emitter("session/created")
        self.disposed: Emitter[LiveSession] = Emitter("session/disposed")
        self._flush: Emitter[LiveSession] = Emitter("session/flush")
        #: The commits waiting on each shared write of a lone flush listener (``_join``).
        self._joined: dict[asyncio.Future[object], list[asyncio.Future[bool]]] = {}

    def prepare(
        self,
        session_id: SessionId,
        *,
        seed: Sequence[SessionEvent] | None = None,
        meta: SessionMeta | None = None,
    ) -> LiveSession:
        """Build a session (not entered) with a validated seed and header (HARNESS-19)."""
        require_str(session_id, "session_id", non_empty=True)
        meta = meta or SessionMeta()
        if not isinstance(meta, SessionMeta):
            raise invalid("meta", "must be a SessionMeta")
        _validate_meta(meta, None if seed is None else len(seed))
        if session_id in self._entries:
            raise invalid("session_id", f"session {session_id!r} is already live")
        header = new_header(session_id, meta, self._clock())
        return LiveSession(header, seed, clock=self._clock)

    def restore(
        self,
        header: SessionHeader,
        events: Sequence[SessionEvent],
        *,
        source: SessionPersistence | None = None,
    ) -> LiveSession:
        """Build a session (not entered) from a stored header and log, header kept exactly.

        ``source`` is the persistence ``events`` were just read from, whole: a flush to that
        same persistence then knows the stored length without asking.
        """
        if not isinstance(header, SessionHeader):
            raise invalid("header", "must be a SessionHeader")
        if header.id in self._entries:
            raise invalid("session_id", f"session {header.id!r} is already live")
        session = LiveSession(header, events, clock=self._clock)
        if source is not None:
            session.restored_from = (source, len(events))
        return session

    def enter(self, session: LiveSession) -> None:
        """Make ``session`` live; the authoritative same-id collision point (HARNESS-14)."""
        if session.id in self._entries:
            raise invalid("session_id", f"session {session.id!r} is already live")
        self._entries[session.id] = _Entry(session)

    def announce(self, session: LiveSession) -> None:
        """Emit ``session/created``; a raising listener vetoes (the caller rolls back)."""
        entry = self._live_entry(session)
        if entry.announced:
            raise SubagentError(ErrorCode.ILLEGAL_TRANSITION, "session already announced")
        entry.announced = True
        self.created.emit_vetoable(session)

    def leave(self, session: Session) -> bool:
        """Remove ``session``; emits ``session/disposed`` if it was announced."""
        entry = self._entries.get(session.id)
        if entry is None or entry.session is not session:
            return False
        del self._entries[session.id]
        if entry.announced:
            self.disposed.emit(session)
        return True

    def get(self, session_id: SessionId) -> LiveSession | None:
        entry = self._entries.get(session_id)
        return None if entry is None else entry.session

    def list(self) -> list[LiveSession]:
        """Live sessions in creation (entry) order (HARNESS-19)."""
        return [entry.session for entry in self._entries.values()]

    def on_flush(self, listener: FlushListener) -> Unsubscribe:
        """Register a flush listener (sync or async)."""
        return self._flush.subscribe(listener)

    async def flush(self, session: Session) -> bool:
        """Await every flush listener; True iff any participated (HARNESS-19)."""
        return await self.commit(self._live_entry(session).session)

    def commit(self, session: Session) -> asyncio.Future[bool]:
        """``flush`` for a session that may have left the store already (rule 4): the
        listeners are called now, and every event the session holds now is durable once the
        future resolves True."""
        if not isinstance(session, LiveSession):
            raise invalid("session", "must be a session of this store")
        listeners = self._flush.listeners
        loop = asyncio.get_running_loop()
        outcome: asyncio.Future[bool] = loop.create_future()
        if not listeners:
            outcome.set_result(False)
            return outcome
        if len(listeners) == 1:
            try:
                shared = listeners[0](session)
            except Exception as error:
                outcome.set_exception(error)
                return outcome
            if isinstance(shared, asyncio.Future):
                self._join(shared, outcome)
                return outcome
            waits = [asyncio.ensure_future(_awaitable(shared, loop))]
        else:
            waits = [asyncio.ensure_future(_listened(each, session)) for each in listeners]
        # Callbacks, not ``gather``: one acceptance is one commit, so a hop saved here is
        # saved per accepted message (DUR-3).
        unsettled = len(waits)

        def settle(_done: asyncio.Future[object]) -> None:
            nonlocal unsettled
            unsettled -= 1
            if unsettled or outcome.done():
                return
            for wait in waits:  # the first failure, in listener order (as ``flush``)
                failure = asyncio.CancelledError() if wait.cancelled() else wait.exception()
                if failure is not None:
                    outcome.set_exception(failure)
                    return
            outcome.set_result(True)

        for wait in waits:
            wait.add_done_callback(settle)
        return outcome

    def _join(self, shared: asyncio.Future[object], outcome: asyncio.Future[bool]) -> None:
        """Resolve ``outcome`` with the lone listener's shared write (rule 4): the commits
        joining one write are resolved by one callback, not one hop each (DUR-3)."""
        joined = self._joined.get(shared)
        if joined is None:
            joined = self._joined[shared] = []
            shared.add_done_callback(self._resolve_joined)
        joined.append(outcome)

    def _resolve_joined(self, shared: asyncio.Future[object]) -> None:
        failure = asyncio.CancelledError() if shared.cancelled() else shared.exception()
        for outcome in self._joined.pop(shared):
            if outcome.done():  # its awaiter was cancelled and left
                continue
            if failure is None:
                outcome.set_result(True)
            else:
                outcome.set_exception(failure)

    def _live_entry(self, session: Session) -> _Entry:
        entry = self._entries.get(session.id)
        if entry is None or entry.session is not session:
            raise invalid("session", f"session {session.id!r} is not live in this store")
        return entry


class LogOverride:
    """``override_of(session)``: the last ``event_type`` event's ``key`` string (HARNESS-27).

    ``LogOverride(SANDBOX_MODE, "mode")`` and ``LogOverride(APPROVAL_POLICY, "policy")`` are
    the log-only sandbox and approval overrides.
    """

    def __init__(self, event_type: str, key: str) -> None:
        self.event_type = event_type
        self.key = key

    def override_of(self, session: Session) -> str | None:
        for event in reversed(session.events):
            if event.type == self.event_type:
                data = event.data
                value = data.get(self.key) if isinstance(data, Mapping) else None
                return value if isinstance(value, str) else None
        return None


def _listened(listener: Callable[[LiveSession], object], session: LiveSession) -> Awaitable[object]:
    """Call ``listener`` now; what it returned (or raised) as something to await."""
    loop = asyncio.get_running_loop()
    try:
        result = listener(session)
    except Exception as error:
        failed: asyncio.Future[object] = loop.create_future()
        failed.set_exception(error)
        return failed
    return _awaitable(result, loop)


def _awaitable(result: object, loop: asyncio.AbstractEventLoop) -> Awaitable[object]:
    """A listener's result as something to await (a plain value: a done future)."""
    if isinstance(result, Awaitable):
        return result
    done: asyncio.Future[object] = loop.create_future()
    done.set_result(result)
    return done


class PersistenceBinding:
    """Writes a store's sessions to one persistence (rule 6); calling it unbinds it."""

    def __init__(
        self, store: SessionStore, persistence: SessionPersistence, interval: float | None
    ) -> None:
        self._persistence = persistence
        self._interval = interval
        # Weak: a finished session's log is not kept alive by the binding (HARNESS-19), yet a
        # commit after it left the store still knows what is stored (DUR-4).
        self._logs: weakref.WeakKeyDictionary[LiveSession, _Log] = weakref.WeakKeyDictionary()
        # The sessions due for a growth write (a disposed one leaves at once), and the one
        # timer that writes them (rule 6).
        self._due_logs: dict[_Log, LiveSession] = {}
        self._timer: asyncio.TimerHandle | asyncio.Handle | None = None
        self._detachers = (
            store.on_flush(self._request),
            store.created.subscribe(self._observe),
            store.disposed.subscribe(self._retire),
        )

    def __call__(self) -> None:
        for detach in self._detachers:
            detach()
        for log in list(self._logs.values()):
            log.quiet()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._due_logs = {}

    def _request(self, session: LiveSession) -> asyncio.Future[None]:
        """The flush listener: the write queued behind the one in flight (it starts when
        that ends, and takes every event the log has then), or a new one started now. It
        resolves once every event ``session`` holds now is stored; it is shared, so the
        store only adds callbacks to it (a cancelled awaiter never cancels it)."""
        log = self._log_of(session)
        pending = log.queued
        if pending is None:
            pending = log.queued = asyncio.get_running_loop().create_future()
            if log.running is None:
                self._start(session, log)
        return pending

    def _log_of(self, session: LiveSession) -> _Log:
        log = self._logs.get(session)
        if log is None:
            restored, known = session.restored_from, None
            if restored is not None and restored[0] is self._persistence:
                known = restored[1]
            log = self._logs[session] = _Log(known)
        return log

    def _start(self, session: LiveSession, log: _Log) -> None:
        done, log.queued = log.queued, None
        assert done is not None
        # This write takes at least every event the log has now; a due session stays due
        # (``_due`` then finds whether anything is left for it), so a commit per append
        # costs no timer cancelled and armed again (rule 6).
        log.taken = session.seq
        log.running = done
        asyncio.get_running_loop().create_task(self._write(session, log, done))

    async def _write(self, session: LiveSession, log: _Log, done: asyncio.Future[None]) -> None:
        try:
            if log.stored is None:
                log.stored = await _stored_length(self._persistence, session)
            if log.stored > session.seq:
                raise SubagentError(
                    ErrorCode.CORRUPT_SESSION,
                    f"stored log of {session.id!r} is longer than the live log",
                    field="session",
                )
            # The events after the stored ones (the whole row when none is stored yet); the
            # tail alone is copied: a write costs its new events.
            count, length = log.stored, session.seq
            if count < 0:
                await self._persistence.create(session.header, session.events)
            elif count < length:
                await self._persistence.append(session.id, session.events_after(count))
            log.stored = length
        except BaseException as error:  # the awaiters learn it; the next write asks again
            log.stored = None
            done.set_exception(error)
            done.exception()  # retrieved: a write nobody awaits must not warn
        else:
            done.set_result(None)
        finally:
            log.running = None
            if log.queued is not None:
                self._start(session, log)

    def _observe(self, session: LiveSession) -> None:
        """An announced session is written as it grows (rule 6, DUR-2)."""
        if self._interval is None:
            return
        log = self._log_of(session)
        if log.unobserve is None:
            log.unobserve = session.observe(_Grew(self, session, log))

    def _grew(self, session: LiveSession, log: _Log) -> None:
        # (due or queued already is checked by the observer, ``_Grew``, the only caller)
        if log.stored is None:
            return  # the stored length is not known
        timer = self._timer
        if timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop: the next flush writes it
                return
            interval = self._interval
            assert interval is not None
            if interval == 0:
                timer = loop.call_soon(self._due)
            else:
                timer = loop.call_later(interval, self._due)
            self._timer = timer
        log.due = True
        self._due_logs[log] = session

    def _due(self) -> None:
        self._timer = None
        due, self._due_logs = self._due_logs, {}
        for log, session in due.items():
            log.due = False
            if log.unobserve is None:
                continue  # quiet since: disposed, or the store unbound
            seq = session.seq
            if log.queued is not None or (log.stored if log.running is None else log.taken) == seq:
                continue  # the queued or running write takes every event, or all are stored
            self._request(session)  # a failure is kept for the next flush to find

    def _retire(self, session: LiveSession) -> None:
        log = self._logs.get(session)
        if log is not None:
            log.quiet()
            if self._due_logs.pop(log, None) is not None:  # not kept until the timer fires
                log.due = False


class _Grew:
    """The observer of one announced session: ``_grew`` on each append (one slotted object
    per session, no closure and cells)."""

    __slots__ = ("_binding", "_log", "_session")

    def __init__(self, binding: PersistenceBinding, session: LiveSession, log: _Log) -> None:
        self._binding = binding
        self._session = session
        self._log = log

    def __call__(self, _event: SessionEvent) -> None:
        log = self._log
        if not log.due and log.queued is None:  # else a write is due or queued already
            self._binding._grew(self._session, log)


@attrs.define(eq=False)
class _Log:
    """What the binding knows of one session: the stored length (None: ask), the write in
    flight and the one queued behind it, the log's length when the last write started (that
    write takes at least those events), and whether it waits for the binding's growth timer."""

    stored: int | None
    taken: int = 0
    running: asyncio.Future[None] | None = None
    queued: asyncio.Future[None] | None = None
    due: bool = False
    unobserve: Unsubscribe | None = None

    def quiet(self) -> None:
        """Stop writing as the log grows (a disposed session, an unbound store)."""
        if self.unobserve is not None:
            self.unobserve()
            self.unobserve = None  # a due write of it is skipped (``_due``)


def bind_persistence(
    store: SessionStore,
    persistence: SessionPersistence,
    *,
    interval: float | None = DEFAULT_WRITE_INTERVAL,
) -> PersistenceBinding:
    """Write each session's not-yet-persisted events to ``persistence`` (HARNESS-19/23,
    rule 6): at every flush and commit, and, for announced sessions, as the log grows, at
    most ``interval`` seconds after an append (``0``: the next loop tick; ``None``: only at
    flushes and commits). The result unbinds when called."""
    if interval is not None and (
        isinstance(interval, bool)
        or not isinstance(interval, int | float)
        or not math.isfinite(interval)
        or interval < 0
    ):
        raise invalid("interval", "must be a number of seconds >= 0, or None")
    return PersistenceBinding(store, persistence, interval)


async def _stored_length(persistence: SessionPersistence, session: LiveSession) -> int:
    """The stored event count, or -1 when no row exists yet (never reads the log itself)."""
    count = await persistence.revision(session.id)
    return -1 if count is None else count
