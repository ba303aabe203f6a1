"""Session persistence: the shared row codec and an in-memory backend (the protocol and its
records are in ``protocols``).

Theory of operation
-------------------
1. A backend keeps, per session, one immutable header and an append-only event log
   (HARNESS-20..23). Nothing committed is ever rewritten: an append must continue the log
   exactly (its first ``seq`` is the current length) and the only write a read path makes is
   the one ``turn/end`` that ``load`` appends to close an interrupted tail.
2. Input is validated and encoded to rows (JSON text) before anything is written. Bad input
   raises ``SubagentError(INVALID_ARGUMENT)`` naming the field (``header.seed_length``,
   ``events[2].data.x``, ``events[0].seq``); bool is refused where an int is required, NaN,
   infinities, lone surrogates and ints too long for ``json`` are refused.
3. Both backends store the same rows and read them through the same decoder, so they behave
   identically; the in-memory backend exists for fast tests. Damage found on read (JSON that
   does not parse or is not UTF-8, a seq gap, a header that does not validate, a non-finite
   time) raises ``SubagentError(CORRUPT_SESSION)`` naming the session and the seq.
4. ``inspect`` never writes (HARNESS-23, LIST-16). ``load`` repairs: if the last ``turn/start``
   has no later ``turn/end`` for that turn, it durably appends ``turn/end`` with reason
   ``interrupted`` (the only writer of that reason, HARNESS-22) and returns the repaired log
   (HARNESS-17). The repair's ``time`` is ``max(clock(), last event time)``.
5. Headers are JSON objects with camelCase keys; optional fields that are ``None`` are omitted.
   Events are ``{type, seq, time, data}`` with ``data`` as JSON text.
6. The projection cache (HARNESS-26) is derived data keyed by session id: a row holds the
   watermark ``as_of_seq`` (how many events the values fold, ``0 <= as_of_seq <= revision``) and
   the values. A newer watermark replaces an older one, never the reverse. A damaged row raises
   ``CORRUPT_SESSION``; a header that is not the stored lifecycle's header gets no row.
7. Every failure a caller sees is a ``SubagentError`` (issue 18): an unknown id raises
   ``NOT_FOUND`` naming it (field ``session_id``); any call after ``close``, or a store that
   cannot be read at all (a missing table, a failing disk), raises ``PERSISTENCE_UNAVAILABLE``
   with the backend's error as the cause; stored text that does not decode is damage
   (``CORRUPT_SESSION``, rule 3).
8. Leases (LEASE-1..6, ``docs/durability.md``): a per-child row ``(owner, host, pid, epoch,
   expires_at)``. ``grant`` is the one decision both backends take inside their atomic
   step: a lease is free when released, expired, or owned by a pid that is gone on this
   host; a grant bumps the epoch. ``fence`` runs in every write's transaction: the holder's
   epoch must still be the stored one (else ``LEASE_LOST``), and a writer without a lease may
   not write a child another live holder has (``ACTIVATION_HELD``). A holder's write renews
   its expiry; a backend's ``heartbeat`` renews all it holds; ``close`` releases them.
9. The durable mailbox (DUR-20..29, ``docs/durability.md``): ``post`` writes a message for a
   child whose lease another live holder has (``held_elsewhere``, decided inside the same
   atomic step as the insert) and returns once it is committed; when no other live holder
   has it, nothing is written and the caller takes the lease itself. Rows keep the
   message's id, sender and content and an acceptance order; ``mailbox`` reads a child's
   rows in that order. Releasing a child's lease removes, in the same atomic step, the
   rows this backend read and then logged (``ReadMail``): the mailbox outlives an
   Activation only by the mail it never logged, or by the whole of a holder that died;
   ``prune`` (a fenced write) removes rows whose ids a taker's loaded log already holds.
   ``watch_mailbox`` tells the holder that rows may be pending (in memory: at once, from
   ``post``; SQLite: a ``PRAGMA data_version`` poll). Exactly once is the reader's: an id
   already spliced into the child's log is skipped (``continuation_mailbox``).
"""

from __future__ import annotations

import builtins
import contextlib
import json
import math
import os
import socket
import urllib.parse
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Final, NoReturn, TypeAlias

import attrs

from dsh_subagent.adapters.clock import epoch_ms
from dsh_subagent.adapters.durability import spliced_ids
from dsh_subagent.adapters.frozen_json import freeze_checked, freeze_decoded, is_certified
from dsh_subagent.adapters.protocols import (
    CachedProjection,
    Lease,
    SessionRecord,
    SessionSnapshot,
)
from dsh_subagent.adapters.signals import Unsubscribe
from dsh_subagent.core import wire
from dsh_subagent.core.errors import ErrorCode, SubagentError, invalid
from dsh_subagent.core.jsonvalue import check_json, require_int, require_str
from dsh_subagent.core.values import (
    TURN_END,
    TURN_START,
    JsonValue,
    MessageId,
    Origin,
    SessionEvent,
    SessionHeader,
    SessionId,
    TurnEndReason,
    UserMessage,
)
from dsh_subagent.core.wire import turn_end_data

Clock: TypeAlias = Callable[[], float]
EventRow: TypeAlias = tuple[int, str, float, str]
"""One stored event: ``(seq, type, time, data as JSON text)``."""

MAX_SAFE_INTEGER: Final = 2**53 - 1


# --------------------------------------------------------------------------- errors


def unknown_session(session_id: str) -> SubagentError:
    """The error for an id no session is stored under."""
    return SubagentError(
        ErrorCode.NOT_FOUND, f"no session is stored under {session_id!r}", field="session_id"
    )


def closed_error() -> SubagentError:
    """The error for a call on a closed backend."""
    return SubagentError(ErrorCode.PERSISTENCE_UNAVAILABLE, "session persistence is closed")


def corrupt(session_id: str, field: str, why: str) -> SubagentError:
    """A ``CORRUPT_SESSION`` error naming the session and the damaged field."""
    return SubagentError(
        ErrorCode.CORRUPT_SESSION, f"session {session_id!r} {field}: {why}", field=field
    )


# --------------------------------------------------------------------------- JSON text


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise ValueError("duplicate object key")
    return result


def _plain(value: object) -> object:
    """``json.dumps`` fallback for validated mappings and sequences that are not dict/list."""
    return dict(value) if isinstance(value, Mapping) else list(value)  # type: ignore[call-overload]


def to_json_text(value: object, field: str) -> str:
    """Encode a lossless JSON value, or raise ``INVALID_ARGUMENT`` naming ``field``."""
    if not is_certified(value):  # a frozen session payload was checked when it was frozen
        check_json(value, field)
    try:
        return _dumps(value)
    except (ValueError, RecursionError) as error:  # an over-long int; nesting too deep
        raise invalid(field, f"not encodable as JSON ({error})") from error


# One encoder and one scanner, built once: ``json.dumps``/``loads`` rebuild them per call,
# which costs more than the work itself on a log of small payloads.
_ENCODER: Final = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=_plain
)
_Chunks: TypeAlias = Callable[[object, int], Iterable[str]]
_make_c_encoder: Callable[..., _Chunks] | None = getattr(json.encoder, "c_make_encoder", None)
_C_ENCODE: Final = (
    None
    if _make_c_encoder is None
    else _make_c_encoder(
        None, _plain, json.encoder.encode_basestring, None, ":", ",", False, False, False
    )
)
# The decoder's C scanner, an instance attribute that typeshed does not declare.
_SCAN: Final[Callable[[str, int], tuple[JsonValue, int]]] = vars(
    json.JSONDecoder(parse_constant=_refuse_constant)
)["scan_once"]


def _dumps(value: object) -> str:
    return _ENCODER.encode(value) if _C_ENCODE is None else "".join(_C_ENCODE(value, 0))


def from_json_text(text: str, session_id: str, field: str) -> JsonValue:
    """Decode stored JSON text, or raise ``CORRUPT_SESSION`` naming ``field``.

    Text this codec wrote re-encodes to itself, which proves it lossless at C speed; any
    other text (duplicate keys, escapes, spacing, damage) takes the strict per-value path.
    """
    fast = _round_trip(text)
    return _strict(text, session_id, field) if fast is None else fast


def _frozen_payload(text: str, session_id: str, field: str) -> JsonValue:
    """``from_json_text``, deep-frozen: a round-tripped value is certified without the
    checks its round trip already made (``freeze_decoded``)."""
    fast = _round_trip(text)
    if fast is None:
        return freeze_checked(_strict(text, session_id, field), field)
    return freeze_decoded(fast)


def _round_trip(text: str) -> JsonValue:
    """The value of text this codec wrote, else None (``null`` too: the strict path
    decodes it)."""
    try:
        fast, end = _SCAN(text, 0)
        if end == len(text) and _dumps(fast) == text:
            return fast
    except (ValueError, RecursionError, StopIteration):
        pass  # reported with its reason by the strict path
    return None


def _strict(text: str, session_id: str, field: str) -> JsonValue:
    try:
        value: JsonValue = json.loads(
            text, parse_constant=_refuse_constant, object_pairs_hook=_unique_keys
        )
        check_json(value, field)
    except (ValueError, RecursionError, SubagentError) as error:
        raise corrupt(session_id, field, f"not lossless JSON ({error})") from error
    return value


# --------------------------------------------------------------------------- headers


def require_finite(value: object, field: str) -> float:
    """Return ``value`` as a finite float, refusing bools, non-numbers, NaN and infinities."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise invalid(field, f"expected a number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise invalid(field, f"{value!r} is not a finite number")
    return float(value)


def _optional_str(value: object, field: str) -> str | None:
    return None if value is None else require_str(value, field)


def _optional_id(value: object, field: str) -> SessionId | None:
    return None if value is None else SessionId(require_str(value, field, non_empty=True))


def _optional_count(value: object, field: str, *, maximum: int | None = None) -> int | None:
    if value is None:
        return None
    count = require_int(value, field, minimum=0)
    if maximum is not None and count > maximum:
        raise invalid(field, f"must be <= {maximum}, got {count}")
    return count


def _build_header(get: Callable[[str], object], origin: Origin | None) -> SessionHeader:
    """A header from validated fields (``get`` reads one by attribute name)."""
    return SessionHeader(
        id=SessionId(require_str(get("id"), "header.id", non_empty=True)),
        created_at=require_finite(get("created_at"), "header.created_at"),
        version=require_int(get("version"), "header.version", minimum=1),
        cwd=_optional_str(get("cwd"), "header.cwd"),
        parent_session=_optional_id(get("parent_session"), "header.parent_session"),
        seed_length=_optional_count(get("seed_length"), "header.seed_length"),
        origin=origin,
        delegation_depth=_optional_count(
            get("delegation_depth"), "header.delegation_depth", maximum=MAX_SAFE_INTEGER
        ),
        agent_preset=_optional_str(get("agent_preset"), "header.agent_preset"),
    )


def check_header(header: object) -> SessionHeader:
    """Validate ``header``; return it normalised (``created_at`` as float).

    Raises ``INVALID_ARGUMENT`` naming the first bad field (``header.seed_length``).
    """
    if not isinstance(header, SessionHeader):
        raise invalid("header", f"expected a SessionHeader, got {type(header).__name__}")
    if header.origin is not None and not isinstance(header.origin, Origin):
        raise invalid("header.origin", f"expected an Origin, got {header.origin!r}")
    return _build_header(lambda name: getattr(header, name), header.origin)


_JSON_KEY: Final = {
    "version": "version",
    "id": "id",
    "created_at": "createdAt",
    "cwd": "cwd",
    "parent_session": "parentSession",
    "seed_length": "seedLength",
    "origin": "origin",
    "delegation_depth": "delegationDepth",
    "agent_preset": "agentPreset",
}


def encode_header(header: SessionHeader) -> str:
    """Validate ``header`` and encode it as a camelCase JSON object without ``None`` fields."""
    normal = check_header(header)
    obj: dict[str, JsonValue] = {}
    for attribute, key in _JSON_KEY.items():
        value = getattr(normal, attribute)
        if value is not None:
            obj[key] = value.value if isinstance(value, Origin) else value
    return to_json_text(obj, "header")


def decode_header(session_id: str, text: str) -> SessionHeader:
    """Decode a stored header, or raise ``CORRUPT_SESSION`` naming the bad field."""
    obj = from_json_text(text, session_id, "header")
    if not isinstance(obj, dict):
        raise corrupt(session_id, "header", "not a JSON object")
    extra = sorted(set(obj) - set(_JSON_KEY.values()))
    if extra:
        raise corrupt(session_id, "header", f"unknown keys {extra}")
    origin_text = obj.get("origin")
    origin = None
    if origin_text is not None:
        known = {o.value: o for o in Origin}
        if not isinstance(origin_text, str) or origin_text not in known:
            raise corrupt(session_id, "header.origin", f"unknown origin {origin_text!r}")
        origin = known[origin_text]
    try:
        header = _build_header(lambda name: obj.get(_JSON_KEY[name]), origin)
    except SubagentError as error:
        raise corrupt(session_id, error.field or "header", error.message) from error
    if header.id != session_id:
        raise corrupt(session_id, "header.id", f"names another session {header.id!r}")
    return header


# --------------------------------------------------------------------------- events


def encode_events(events: object) -> builtins.list[EventRow]:
    """Validate events and encode them as rows; their seqs must be consecutive.

    Continuation of the stored log is checked separately by ``require_continues``.
    """
    if type(events) is not tuple and (
        not isinstance(events, Sequence) or isinstance(events, str | bytes)
    ):
        raise invalid("events", f"expected a sequence of SessionEvent, got {type(events).__name__}")
    rows: builtins.list[EventRow] = []
    for index, event in enumerate(events):
        if type(event) is SessionEvent:
            # The common event, decided inline (no field name built, no helper called): an
            # ASCII type, an exact int seq in order, a finite float time, a payload the
            # freezer certified. Anything else takes the checks below, which name the field.
            kind, seq, moment, data = event.type, event.seq, event.time, event.data
            if (
                type(kind) is str
                and kind.isascii()
                and kind.strip()
                and type(seq) is int
                and seq >= 0
                and (not rows or seq == rows[0][0] + index)
                and type(moment) is float
                and math.isfinite(moment)
                and is_certified(data)
            ):
                try:
                    rows.append((seq, kind, moment, _dumps(data)))
                    continue
                except (ValueError, RecursionError):
                    pass  # not encodable: the general path raises, naming the field
        field = f"events[{index}]"
        if not isinstance(event, SessionEvent):
            raise invalid(field, f"expected a SessionEvent, got {type(event).__name__}")
        kind = require_str(event.type, f"{field}.type", non_empty=True)
        seq = require_int(event.seq, f"{field}.seq", minimum=0)
        if rows and seq != rows[0][0] + index:
            raise invalid(f"{field}.seq", f"expected {rows[0][0] + index}, got {seq}")
        moment = require_finite(event.time, f"{field}.time")
        rows.append((seq, kind, moment, to_json_text(event.data, f"{field}.data")))
    return rows


def require_continues(rows: Sequence[EventRow], length: int) -> None:
    """Raise ``INVALID_ARGUMENT`` on ``events[0].seq`` unless ``rows`` start at ``length``."""
    if rows and rows[0][0] != length:
        raise invalid("events[0].seq", f"the log has {length} events; expected seq {length}")


def encode_new_log(
    header: SessionHeader, events: Sequence[SessionEvent]
) -> tuple[str, builtins.list[EventRow]]:
    """``create``'s input, validated and encoded: the header text and rows from seq 0."""
    text = encode_header(header)
    rows = encode_events(events)
    require_continues(rows, 0)
    return text, rows


def session_exists(session_id: str) -> SubagentError:
    """The error for a ``create`` under an id a session is already stored under."""
    return invalid("header.id", f"session {session_id!r} already exists")


def require_folded(seq: int, revision: int) -> None:
    """Raise ``INVALID_ARGUMENT`` on ``as_of_seq`` for a watermark past the log (rule 6)."""
    if seq > revision:
        raise invalid("as_of_seq", f"{seq} is past the log's {revision} events")


class ListsHeaders:
    """A backend's ``list``, read from its ``list_snapshots``."""

    async def list_snapshots(self) -> builtins.list[SessionSnapshot]:
        raise NotImplementedError

    async def list(self) -> builtins.list[SessionHeader]:
        """Every stored header, in creation order."""
        return [snapshot.header for snapshot in await self.list_snapshots()]


_DECODED_TEXTS: Final = 1024
"""Short payload texts whose frozen values ``decode_events`` keeps (then it starts over)."""
_DECODED_LENGTH: Final = 160
"""The longest text kept: a log's repeated payloads are short (``{}``, a turn's start and
end, a step's, a splice that takes the inbox); messages and their ids rarely repeat."""
_decoded: dict[str, JsonValue] = {}


def decode_events(session_id: str, rows: Sequence[EventRow]) -> tuple[SessionEvent, ...]:
    """Decode stored rows (ordered by seq), or raise ``CORRUPT_SESSION`` naming the seq.

    Each payload is frozen here, once: a live session adopting these events then has
    nothing to copy. A short text decoded before gives the frozen value it gave then
    (deeply immutable, so shared safely; the same text decodes to an equal value), so the
    payloads a log repeats are neither parsed nor frozen again."""
    events: builtins.list[SessionEvent] = []
    decoded = _decoded
    for index, (seq, kind, moment, data) in enumerate(rows):
        if seq != index:
            raise corrupt(session_id, f"events[{index}]", f"seq {index} missing (found {seq})")
        if not math.isfinite(moment):
            raise corrupt(session_id, f"events[{seq}].time", f"{moment!r} is not finite")
        value = decoded.get(data)
        if value is None:  # not kept (a ``null`` payload never is)
            value = _frozen_payload(data, session_id, f"events[{seq}].data")
            if len(data) <= _DECODED_LENGTH and value is not None:
                if len(decoded) >= _DECODED_TEXTS:
                    decoded.clear()
                decoded[data] = value
        events.append(SessionEvent(kind, seq, moment, value))
    return tuple(events)


def _turn_of(session_id: str, event: SessionEvent) -> int:
    turn = event.data.get("turn") if isinstance(event.data, Mapping) else None
    if isinstance(turn, bool) or not isinstance(turn, int):
        raise corrupt(session_id, f"events[{event.seq}].data.turn", "not an integer turn")
    return turn


def open_turn(session_id: str, events: Sequence[SessionEvent]) -> int | None:
    """The turn of the last ``turn/start`` when no later ``turn/end`` closes it."""
    current: int | None = None
    for event in events:
        if event.type == TURN_START:
            current = _turn_of(session_id, event)
        elif event.type == TURN_END and _turn_of(session_id, event) == current:
            current = None
    return current


def repair_event(
    session_id: str, events: Sequence[SessionEvent], clock: Clock
) -> SessionEvent | None:
    """The ``turn/end interrupted`` event that closes an open tail turn, if there is one."""
    turn = open_turn(session_id, events)
    if turn is None:
        return None
    moment = max(clock(), events[-1].time)
    return SessionEvent(
        TURN_END, len(events), moment, turn_end_data(turn, TurnEndReason.INTERRUPTED)
    )


# --------------------------------------------------------------------------- projection cache


def encode_projection(as_of_seq: object, values: object) -> tuple[int, str]:
    """Validate a projection-cache write and encode its values."""
    seq = require_int(as_of_seq, "as_of_seq", minimum=0)
    if not isinstance(values, Mapping):
        raise invalid("values", f"expected a mapping, got {type(values).__name__}")
    return seq, to_json_text(values, "values")


def decode_projection(
    session_id: str, as_of_seq: int, values: str, revision: int
) -> CachedProjection:
    """Decode a projection-cache row, or raise ``CORRUPT_SESSION`` (HARNESS-26)."""
    if not 0 <= as_of_seq <= revision:
        raise corrupt(session_id, "projection.as_of_seq", f"{as_of_seq} outside 0..{revision}")
    decoded = from_json_text(values, session_id, "projection.values")
    if not isinstance(decoded, dict):
        raise corrupt(session_id, "projection.values", "not a JSON object")
    return CachedProjection(as_of_seq, decoded)


def is_postgres_address(db: object) -> bool:
    """Whether a store address names a PostgreSQL server, not a SQLite path."""
    return isinstance(db, str) and db.startswith(("postgresql://", "postgres://"))


def redact(address: str) -> str:
    """A PostgreSQL address without its password (and query), for messages."""
    parts = urllib.parse.urlsplit(address)
    netloc = parts.netloc.rpartition("@")
    user = netloc[0].partition(":")[0]
    where = f"{user}@{netloc[2]}" if user else netloc[2]
    return f"{parts.scheme}://{where}{parts.path}"


def require_session_id(session_id: object) -> SessionId:
    """Return ``session_id`` if it is a non-empty string, else raise ``INVALID_ARGUMENT``."""
    return SessionId(require_str(session_id, "session_id", non_empty=True))


# --------------------------------------------------------------------------- leases

DEFAULT_LEASE_TTL: Final = 30.0
"""Seconds a lease outlives its holder's last heartbeat or write (configurable per backend)."""


@attrs.frozen
class LeaseOwner:
    """Who holds a lease: this host, this process, and a token unique to one backend."""

    host: str
    pid: int
    token: str

    @classmethod
    def here(cls) -> LeaseOwner:
        host, pid = socket.gethostname(), os.getpid()
        return cls(host, pid, f"{host}:{pid}:{uuid.uuid4().hex[:12]}")


@attrs.frozen
class LeaseRow:
    """A stored lease; ``owner`` None once released. ``expires_at`` is in clock ms."""

    owner: str | None
    host: str
    pid: int
    epoch: int
    expires_at: float


def require_ttl(lease_ttl: object, field: str = "lease_ttl") -> float:
    """A positive, finite number of seconds (a lease lifetime), or ``INVALID_ARGUMENT``."""
    ttl = require_finite(lease_ttl, field)
    if ttl <= 0:
        raise invalid(field, f"must be > 0, got {ttl}")
    return ttl


def _process_gone(row: LeaseRow, host: str) -> bool:
    """Whether the holder's process is known dead: only decidable on the same host."""
    if row.host != host:
        return False
    try:
        os.kill(row.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, another user's
    return False


def _live_holder(row: LeaseRow | None, now: float, host: str) -> str | None:
    """The owner of a lease nobody may take now, or None when it is free (rule 8)."""
    if row is None or row.owner is None or row.expires_at <= now or _process_gone(row, host):
        return None
    return row.owner


def grant(
    session_id: SessionId,
    row: LeaseRow | None,
    me: LeaseOwner,
    now: float,
    ttl: float,
    *,
    reserve: bool,
    stored: bool,
) -> LeaseRow:
    """The row a successful acquire (or a reservation of a new id) writes, or the refusal."""
    holder = _live_holder(row, now, me.host)
    if reserve and (stored or holder is not None):
        why = "is already persisted" if stored else f"is reserved by {holder}"
        raise SubagentError(ErrorCode.DUPLICATE_CHILD, f"{session_id} {why}", field="child_id")
    if holder is not None and holder != me.token:
        raise SubagentError(ErrorCode.ACTIVATION_HELD, f"{session_id} is held by {holder}")
    epoch = (0 if row is None else row.epoch) + 1
    return LeaseRow(me.token, me.host, me.pid, epoch, now + ttl * 1000)


def fence(
    session_id: SessionId, row: LeaseRow | None, held: Lease | None, me: LeaseOwner, now: float
) -> None:
    """Refuse a write that its lease no longer covers; runs before any insert (rule 8)."""
    if held is not None:
        if row is None or row.owner != held.owner or row.epoch != held.epoch:
            current = "none" if row is None else f"{row.epoch} held by {row.owner}"
            raise SubagentError(
                ErrorCode.LEASE_LOST,
                f"session {session_id!r}: lease epoch {held.epoch} is stale (now {current})",
            )
        return
    holder = _live_holder(row, now, me.host)
    if holder is not None:
        raise SubagentError(ErrorCode.ACTIVATION_HELD, f"{session_id} is held by {holder}")


def held_elsewhere(row: LeaseRow | None, me: LeaseOwner, now: float) -> bool:
    """Whether another live holder has the lease, so a follow-up goes to the mailbox (rule 9)."""
    holder = _live_holder(row, now, me.host)
    return holder is not None and holder != me.token


def lease_of(session_id: SessionId, row: LeaseRow) -> Lease:
    assert row.owner is not None
    return Lease(session_id, row.owner, row.epoch)


def require_lease(lease: object) -> Lease:
    if not isinstance(lease, Lease):
        raise invalid("lease", f"expected a Lease, got {type(lease).__name__}")
    return lease


# --------------------------------------------------------------------------- mailbox rows

MailRow: TypeAlias = tuple[int, str, str, str]
"""One stored mailbox message: ``(acceptance order, message id, sender, content)``, the
sender and the content as JSON text."""
MailboxListener: TypeAlias = Callable[[SessionId], object]


def encode_mail(message: object) -> tuple[str, str, str]:
    """Validate a message for the mailbox: ``(id, sender JSON, content JSON)``."""
    if not isinstance(message, UserMessage):
        raise invalid("message", f"expected a UserMessage, got {type(message).__name__}")
    message_id = require_str(message.id, "message.id", non_empty=True)
    sender = to_json_text(wire.encode_source(message.source), "message.source")
    return message_id, sender, to_json_text(wire.encode_content(message.content), "message")


def decode_mail(session_id: str, rows: Sequence[MailRow]) -> builtins.list[UserMessage]:
    """Decode stored mailbox rows (in acceptance order), or ``CORRUPT_SESSION``."""
    messages = []
    for order, message_id, sender, content in rows:
        field = f"mailbox[{order}]"
        try:
            source = wire.decode_source(from_json_text(sender, session_id, field), field)
            blocks = wire.decode_content(from_json_text(content, session_id, field), field)
        except SubagentError as error:
            raise corrupt(session_id, error.field or field, error.message) from error
        messages.append(UserMessage(MessageId(message_id), blocks, source))
    return messages


def require_ids(message_ids: object) -> builtins.list[str]:
    if not isinstance(message_ids, Sequence) or isinstance(message_ids, str | bytes):
        raise invalid("message_ids", "expected a sequence of message ids")
    return [
        require_str(each, f"message_ids[{index}]", non_empty=True)
        for index, each in enumerate(message_ids)
    ]


class ReadMail:
    """Per child, the mailbox ids a backend read and, of those, the ids its writes logged
    (spliced into the child's log). Releasing the child's lease removes the logged rows in
    the release's own atomic step (rule 9): by then the Activation claimed them or
    discarded them durably (DUR-4), while a holder that dies first leaves them for the
    orphan scan (DUR-26). Only mail read here costs a delete."""

    def __init__(self) -> None:
        self._read: dict[SessionId, set[str]] = {}
        self._logged: dict[SessionId, set[str]] = {}

    def saw(self, session_id: SessionId, messages: Sequence[UserMessage]) -> None:
        """``messages`` are the child's rows now."""
        if messages:
            self._read[session_id] = {message.id for message in messages}
        else:
            self._read.pop(session_id, None)

    def wrote(self, session_id: SessionId, events: Sequence[SessionEvent]) -> None:
        """These events are stored: the read ids they splice in are logged."""
        read = self._read.get(session_id)
        if read:
            logged = [mid for mid in spliced_ids(events) if mid in read]
            if logged:
                self._logged.setdefault(session_id, set()).update(logged)

    def logged(self, session_id: SessionId) -> builtins.list[str]:
        """The rows a release of the child's lease removes."""
        return sorted(self._logged.get(session_id, ()))

    def removed(self, session_id: SessionId, message_ids: Sequence[str]) -> None:
        """These rows are gone (or another holder has the child): forget them."""
        for ids in (self._read, self._logged):
            kept = ids.get(session_id)
            if kept is not None and message_ids:
                kept.difference_update(message_ids)
                if not kept:
                    del ids[session_id]


# --------------------------------------------------------------------------- in-memory backend


@attrs.define
class _Stored:
    header: str
    rows: builtins.list[EventRow]
    projection: tuple[int, str] | None = None


class InMemoryPersistence(ListsHeaders):
    """A process-local backend with exactly the SQLite backend's behaviour, for fast tests.

    ``peer()`` opens another backend (another lease owner) over the same storage, as a
    second process opens the same SQLite file.
    """

    def __init__(self, *, clock: Clock = epoch_ms, lease_ttl: float = DEFAULT_LEASE_TTL) -> None:
        self._sessions: dict[SessionId, _Stored] = {}
        self._leases: dict[SessionId, LeaseRow] = {}
        self._clock = clock
        self._ttl = require_ttl(lease_ttl)
        self._me = LeaseOwner.here()
        self._held: dict[SessionId, Lease] = {}
        self._closed = False
        self._mail: dict[SessionId, builtins.list[MailRow]] = {}
        self._order = [0]  # the acceptance counter, shared with peers
        #: Mailbox listeners by lease owner, shared with peers: ``post`` tells the holder.
        self._watchers: dict[str, builtins.list[MailboxListener]] = {}
        self._read = ReadMail()  # releasing a lease removes the rows logged here

    def peer(self) -> InMemoryPersistence:
        """Another backend, with its own lease owner, over this one's storage."""
        other = InMemoryPersistence(clock=self._clock, lease_ttl=self._ttl)
        other._sessions, other._leases = self._sessions, self._leases
        other._mail, other._order, other._watchers = self._mail, self._order, self._watchers
        return other

    async def post(self, session_id: SessionId, message: UserMessage) -> bool:
        """Accept ``message`` into the mailbox iff another live holder has the lease (rule 9)."""
        self._open()
        sid = require_session_id(session_id)
        message_id, sender, content = encode_mail(message)
        row = self._leases.get(sid)
        if not held_elsewhere(row, self._me, self._clock()):
            return False
        assert row is not None
        assert row.owner is not None
        self._order[0] += 1
        self._mail.setdefault(sid, []).append((self._order[0], message_id, sender, content))
        for listener in tuple(self._watchers.get(row.owner, ())):
            listener(sid)
        return True

    async def mailbox(self, session_id: SessionId) -> builtins.list[UserMessage]:
        """The child's mailbox messages, in acceptance order (rule 9)."""
        self._open()
        sid = require_session_id(session_id)
        messages = decode_mail(sid, self._mail.get(sid, ()))
        self._read.saw(sid, messages)
        return messages

    async def prune(self, session_id: SessionId, message_ids: Sequence[MessageId]) -> None:
        """Remove these mailbox rows (their messages are in the log); a fenced write."""
        self._open()
        sid = require_session_id(session_id)
        gone = set(require_ids(message_ids))
        if not gone or sid not in self._mail:
            return
        self._fence(sid)
        self._remove_mail(sid, gone)

    def _remove_mail(self, session_id: SessionId, gone: Collection[str]) -> None:
        self._read.removed(session_id, builtins.list(gone))
        rows = self._mail.get(session_id, ())
        kept = [row for row in rows if row[1] not in gone]
        if kept:
            self._mail[session_id] = kept
        else:
            self._mail.pop(session_id, None)

    def watch_mailbox(self, listener: MailboxListener) -> Unsubscribe:
        """Call ``listener(child_id)`` when a message is posted for a child held here."""
        listeners = self._watchers.setdefault(self._me.token, [])
        listeners.append(listener)

        def stop() -> None:
            if listener in listeners:
                listeners.remove(listener)

        return stop

    def _fence(self, session_id: SessionId) -> None:
        now = self._clock()
        row = self._leases.get(session_id)
        held = self._held.get(session_id)
        fence(session_id, row, held, self._me, now)
        if held is not None and row is not None:
            self._leases[session_id] = attrs.evolve(row, expires_at=now + self._ttl * 1000)

    def _grant(self, session_id: object, *, reserve: bool) -> Lease:
        self._open()
        sid = require_session_id(session_id)
        stored = sid in self._sessions
        row = grant(
            sid,
            self._leases.get(sid),
            self._me,
            self._clock(),
            self._ttl,
            reserve=reserve,
            stored=stored,
        )
        self._leases[sid] = row
        self._held[sid] = lease = lease_of(sid, row)
        return lease

    async def reserve(self, session_id: SessionId) -> Lease:
        """Durably reserve a new id and hold its lease (LEASE-4)."""
        return self._grant(session_id, reserve=True)

    async def acquire(self, session_id: SessionId) -> Lease:
        """Take the child's lease at a new epoch, or ``ACTIVATION_HELD`` (LEASE-1, LEASE-2)."""
        return self._grant(session_id, reserve=False)

    async def release(self, lease: Lease) -> None:
        """Give the lease up; a lease another holder took meanwhile is left alone."""
        self._open()
        lease = require_lease(lease)
        if self._held.get(lease.session_id) == lease:
            del self._held[lease.session_id]
        row = self._leases.get(lease.session_id)
        logged = self._read.logged(lease.session_id)
        if row is not None and row.owner == lease.owner and row.epoch == lease.epoch:
            self._leases[lease.session_id] = attrs.evolve(row, owner=None)
            self._remove_mail(lease.session_id, logged)
        self._read.removed(lease.session_id, logged)

    async def heartbeat(self) -> None:
        """Renew every lease this backend holds (LEASE-5)."""
        self._open()
        for sid in list(self._held):
            if self._leases.get(sid) is not None:
                with contextlib.suppress(SubagentError):
                    self._fence(sid)

    def _get(self, session_id: object) -> tuple[SessionId, _Stored]:
        if self._closed:
            raise closed_error()
        checked = require_session_id(session_id)
        stored = self._sessions.get(checked)
        if stored is None:
            raise unknown_session(checked)
        return checked, stored

    def _open(self) -> None:
        if self._closed:
            raise closed_error()

    async def revision(self, session_id: SessionId) -> int | None:
        """How many events are stored for ``session_id``; None when no row exists."""
        self._open()
        stored = self._sessions.get(require_session_id(session_id))
        return None if stored is None else len(stored.rows)

    async def list_snapshots(self) -> builtins.list[SessionSnapshot]:
        """Every stored header with its revision, in creation order."""
        self._open()
        return [
            SessionSnapshot(decode_header(sid, stored.header), len(stored.rows))
            for sid, stored in self._sessions.items()
        ]

    async def inspect(self, session_id: SessionId) -> SessionRecord:
        """The stored session as it is; never mutates storage."""
        sid, stored = self._get(session_id)
        return SessionRecord(decode_header(sid, stored.header), decode_events(sid, stored.rows))

    async def load(self, session_id: SessionId) -> SessionRecord:
        """The stored session, after durably closing an interrupted tail turn."""
        record = await self.inspect(session_id)
        repair = repair_event(record.header.id, record.events, self._clock)
        if repair is None:
            return record
        self._fence(record.header.id)
        self._sessions[record.header.id].rows.extend(encode_events([repair]))
        return SessionRecord(record.header, (*record.events, repair))

    async def create(self, header: SessionHeader, events: Sequence[SessionEvent]) -> None:
        """Store a new session whose log starts at seq 0."""
        self._open()
        text, rows = encode_new_log(header, events)
        if header.id in self._sessions:
            raise session_exists(header.id)
        self._fence(header.id)
        self._sessions[header.id] = _Stored(text, rows)
        self._read.wrote(header.id, events)

    async def append(self, session_id: SessionId, events: Sequence[SessionEvent]) -> None:
        """Append events that continue the stored log exactly."""
        self._open()
        require_session_id(session_id)
        rows = encode_events(events)
        sid, stored = self._get(session_id)
        require_continues(rows, len(stored.rows))
        self._fence(sid)
        stored.rows.extend(rows)
        self._read.wrote(sid, events)

    async def close(self) -> None:
        """Release every held lease and the backend; later calls raise
        ``PERSISTENCE_UNAVAILABLE``."""
        if not self._closed:
            for lease in list(self._held.values()):
                await self.release(lease)
        self._closed = True

    async def cached_snapshot(self, header: SessionHeader) -> CachedProjection | None:
        """The cached values for this exact session lifecycle, or ``None``."""
        self._open()
        header = check_header(header)
        stored = self._sessions.get(header.id)
        if stored is None or stored.projection is None:
            return None
        if decode_header(header.id, stored.header) != header:
            return None
        as_of_seq, values = stored.projection
        return decode_projection(header.id, as_of_seq, values, len(stored.rows))

    async def store_projection(
        self, session_id: SessionId, as_of_seq: int, values: Mapping[str, JsonValue]
    ) -> None:
        """Record values folded from the first ``as_of_seq`` events of the session."""
        self._open()
        require_session_id(session_id)
        seq, text = encode_projection(as_of_seq, values)
        _, stored = self._get(session_id)
        require_folded(seq, len(stored.rows))
        if stored.projection is None or stored.projection[0] <= seq:
            stored.projection = (seq, text)
