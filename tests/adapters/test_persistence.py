"""Session persistence: one behaviour suite run over the in-memory and the SQLite backends."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import subprocess
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, TypeAlias, TypeVar

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh_subagent.adapters.frozen_json import is_certified
from dsh_subagent.adapters.protocols import CachedProjection, SessionRecord, SessionSnapshot
from dsh_subagent.adapters.reference.persistence import InMemoryPersistence, encode_header
from dsh_subagent.adapters.reference.sqlite_persistence import SqlitePersistence
from dsh_subagent.core import wire
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import (
    TURN_END,
    TURN_START,
    JsonValue,
    Origin,
    SessionEvent,
    SessionHeader,
    SessionId,
    TurnEndReason,
)

if TYPE_CHECKING:
    from dsh_subagent.adapters.reference.postgres_persistence import PostgresPersistence

Store: TypeAlias = "InMemoryPersistence | SqlitePersistence | PostgresPersistence"
Opener: TypeAlias = Callable[[], Awaitable[Store]]
T = TypeVar("T")

CLOCK_NOW = 5000.0
SID = SessionId("s1")
HEADER = SessionHeader(SID, created_at=1000.0)
FULL_HEADER = SessionHeader(
    SessionId("child"),
    created_at=1234.5,
    version=1,
    cwd="/work",
    parent_session=SessionId("parent"),
    seed_length=2,
    origin=Origin.SUBAGENT,
    delegation_depth=3,
    agent_preset="reviewer",
)


def run(coro: Coroutine[object, object, T]) -> T:
    return asyncio.run(coro)


def clock() -> float:
    return CLOCK_NOW


def note(seq: int, data: JsonValue = None, time: float | None = None) -> SessionEvent:
    return SessionEvent("note", seq, float(seq) if time is None else time, data)


def turn_start(seq: int, turn: int) -> SessionEvent:
    return SessionEvent(TURN_START, seq, float(seq), wire.turn_start_data(turn))


def turn_end(seq: int, turn: int) -> SessionEvent:
    return SessionEvent(
        TURN_END, seq, float(seq), wire.turn_end_data(turn, TurnEndReason.COMPLETED)
    )


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    """Opens the backend under test; SQLite and PostgreSQL open a fresh handle on one
    store each time."""
    memory = InMemoryPersistence(clock=clock)
    address = request.getfixturevalue("postgres_db") if request.param == "postgres" else ""

    async def open_store() -> Store:
        if request.param == "memory":
            return memory
        if request.param == "postgres":  # psycopg imported only here: the file collects without it
            from dsh_subagent.adapters.reference.postgres_persistence import PostgresPersistence

            return await PostgresPersistence.open(address, clock=clock)
        return await SqlitePersistence.open(tmp_path / "sessions.db", clock=clock)

    return open_store


async def stored_state(store: Store) -> list[SessionRecord]:
    return [await store.inspect(h.id) for h in await store.list()]


def raw_db(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def dump(path: Path) -> list[str]:
    with contextlib.closing(raw_db(path)) as conn:
        return list(conn.iterdump())


# --------------------------------------------------------------------------- headers


@pytest.mark.parametrize("header", [HEADER, FULL_HEADER])
def test_harness_21_header_round_trips(opener: Opener, header: SessionHeader) -> None:
    async def body() -> None:
        store = await opener()
        await store.create(header, [])
        assert await store.list() == [header]
        assert (await store.inspect(header.id)).header == header
        await store.close()

    run(body())


def test_harness_21_header_serializes_camel_case_without_absent_fields() -> None:
    import json

    assert json.loads(encode_header(FULL_HEADER)) == {
        "version": 1,
        "id": "child",
        "createdAt": 1234.5,
        "cwd": "/work",
        "parentSession": "parent",
        "seedLength": 2,
        "origin": "subagent",
        "delegationDepth": 3,
        "agentPreset": "reviewer",
    }
    assert json.loads(encode_header(SessionHeader(SID, created_at=7))) == {
        "version": 1,
        "id": "s1",
        "createdAt": 7.0,
    }


BAD_HEADERS = [
    ("header.id", {"id": ""}),
    ("header.id", {"id": 5}),
    ("header.created_at", {"created_at": True}),
    ("header.created_at", {"created_at": float("nan")}),
    ("header.created_at", {"created_at": "now"}),
    ("header.version", {"version": 0}),
    ("header.version", {"version": True}),
    ("header.cwd", {"cwd": 5}),
    ("header.cwd", {"cwd": "/tmp/\ud800"}),
    ("header.parent_session", {"parent_session": ""}),
    ("header.seed_length", {"seed_length": -1}),
    ("header.seed_length", {"seed_length": True}),
    ("header.origin", {"origin": "subagent"}),
    ("header.delegation_depth", {"delegation_depth": False}),
    ("header.delegation_depth", {"delegation_depth": 2**53}),
    ("header.agent_preset", {"agent_preset": 1.5}),
]


@pytest.mark.parametrize(("field", "change"), BAD_HEADERS)
def test_harness_21_bad_header_field_refused_before_write(
    opener: Opener, field: str, change: dict[str, object]
) -> None:
    async def body() -> None:
        store = await opener()
        bad = attrs.evolve(HEADER, **change)  # type: ignore[arg-type]  # deliberately bad
        with pytest.raises(SubagentError) as caught:
            await store.create(bad, [note(0)])
        assert (caught.value.code, caught.value.field) == (ErrorCode.INVALID_ARGUMENT, field)
        assert await store.list() == []
        await store.close()

    run(body())


def test_harness_21_non_header_refused(opener: Opener) -> None:
    async def body() -> None:
        store = await opener()
        with pytest.raises(SubagentError) as caught:
            await store.create("s1", [])  # type: ignore[arg-type]
        assert caught.value.field == "header"
        await store.close()

    run(body())


def test_harness_21_duplicate_create_refused_and_original_kept(opener: Opener) -> None:
    async def body() -> None:
        store = await opener()
        await store.create(HEADER, [note(0)])
        with pytest.raises(SubagentError) as caught:
            await store.create(attrs.evolve(HEADER, cwd="/other"), [note(0), note(1)])
        assert (caught.value.code, caught.value.field) == (ErrorCode.INVALID_ARGUMENT, "header.id")
        assert await stored_state(store) == [SessionRecord(HEADER, (note(0),))]
        await store.close()

    run(body())


# --------------------------------------------------------------------------- events


def test_harness_22_events_round_trip(opener: Opener) -> None:
    events = [
        note(0, None),
        SessionEvent("user/message", 1, 1.25, {"message": {"id": "m", "content": []}}),
        note(2, [1, -0.5, "\u00e9\U0001f600", True, {"k": [None]}], time=2e12),
    ]

    async def body() -> None:
        store = await opener()
        await store.create(HEADER, events[:1])
        await store.append(SID, events[1:])
        record = await store.inspect(SID)
        assert record == SessionRecord(HEADER, tuple(events))
        with pytest.raises(TypeError):  # read back deep-frozen, ready to seed a live session
            record.events[2].data.append(1)  # type: ignore[union-attr]
        await store.close()

    run(body())


def test_harness_22_a_repeated_payload_is_read_back_once_frozen(opener: Opener) -> None:
    nested: JsonValue = {"message": {"content": [{"type": "text", "text": "x"}], "n": [[1], []]}}
    events = [note(0, nested), note(1, nested), note(2, None), note(3, None)]

    async def body() -> None:
        store = await opener()
        await store.create(HEADER, events)
        first, again = await store.inspect(SID), await store.inspect(SID)
        assert first == again == SessionRecord(HEADER, tuple(events))
        data = [event.data for event in (*first.events, *again.events)]
        assert data[0] is data[1] is data[4] is data[5]  # one frozen value per short text
        assert is_certified(data[0])
        with pytest.raises(TypeError):
            data[0]["message"]["n"][0].append(2)  # type: ignore[call-overload,index,union-attr]
        assert data[2] is None
        await store.close()

    run(body())


def test_harness_22_any_mapping_or_sequence_is_stored_as_json(opener: Opener) -> None:
    data = {"proxy": MappingProxyType({"a": (1, 2)}), "range": range(3)}

    async def body() -> None:
        store = await opener()
        await store.create(HEADER, [note(0, data)])  # type: ignore[arg-type]
        stored = (await store.inspect(SID)).events[0].data
        assert stored == {"proxy": {"a": [1, 2]}, "range": [0, 1, 2]}
        await store.close()

    run(body())


def test_harness_20_revision_counts_persisted_events(opener: Opener) -> None:
    async def body() -> None:
        store = await opener()
        await store.create(HEADER, [note(0), note(1)])
        await store.create(FULL_HEADER, [])
        await store.append(SID, [note(2)])
        await store.append(SID, [])
        assert await store.list_snapshots() == [
            SessionSnapshot(HEADER, 3),
            SessionSnapshot(FULL_HEADER, 0),
        ]
        await store.close()

    run(body())


def test_harness_23_list_in_creation_order(opener: Opener) -> None:
    ids = ["m", "b", "z", "a"]

    async def body() -> None:
        store = await opener()
        for index, sid in enumerate(ids):
            await store.create(SessionHeader(SessionId(sid), created_at=float(-index)), [])
        assert [h.id for h in await store.list()] == ids
        await store.close()

    run(body())


def nested_lists(depth: int) -> JsonValue:
    value: JsonValue = []
    for _ in range(depth):
        value = [value]
    return value


BAD_EVENTS: list[tuple[str, object]] = [
    ("events", "not events"),
    ("events[1]", [note(0), {"type": "note"}]),
    ("events[0].type", [SessionEvent("", 0, 0.0)]),
    ("events[0].type", [SessionEvent(5, 0, 0.0)]),  # type: ignore[arg-type]
    ("events[0].seq", [SessionEvent("note", True, 0.0)]),
    ("events[0].seq", [SessionEvent("note", -1, 0.0)]),
    ("events[0].seq", [SessionEvent("note", "0", 0.0)]),  # type: ignore[arg-type]
    ("events[1].seq", [note(0), note(2)]),
    ("events[0].time", [SessionEvent("note", 0, True)]),
    ("events[0].time", [SessionEvent("note", 0, float("nan"))]),
    ("events[0].time", [SessionEvent("note", 0, float("inf"))]),
    ("events[0].time", [SessionEvent("note", 0, "now")]),  # type: ignore[arg-type]
    ("events[0].data", [note(0, float("nan"))]),
    ("events[0].data", [note(0, "\udc00")]),
    ("events[0].data", [note(0, {1: "x"})]),  # type: ignore[dict-item]
    ("events[0].data", [note(0, {"x"})]),  # type: ignore[arg-type]
    ("events[0].data", [note(0, 10**5000)]),
    ("events[1].data.x[1]", [note(0), note(1, {"x": [1, float("-inf")]})]),
    ("events[0].data", [note(0, nested_lists(100_000))]),
]


@pytest.mark.parametrize(("field", "events"), BAD_EVENTS)
def test_harness_22_bad_event_field_refused_on_create(
    opener: Opener, field: str, events: object
) -> None:
    async def body() -> None:
        store = await opener()
        with pytest.raises(SubagentError) as caught:
            await store.create(HEADER, events)  # type: ignore[arg-type]
        assert (caught.value.code, caught.value.field) == (ErrorCode.INVALID_ARGUMENT, field)
        assert await store.list() == []
        await store.close()

    run(body())


@pytest.mark.parametrize(("field", "events"), BAD_EVENTS)
def test_harness_22_bad_event_field_refused_on_append(
    opener: Opener, field: str, events: object
) -> None:
    async def body() -> None:
        store = await opener()
        await store.create(HEADER, [])
        with pytest.raises(SubagentError) as caught:
            await store.append(SID, events)  # type: ignore[arg-type]
        assert (caught.value.code, caught.value.field) == (ErrorCode.INVALID_ARGUMENT, field)
        assert await store.list_snapshots() == [SessionSnapshot(HEADER, 0)]
        await store.close()

    run(body())


@pytest.mark.parametrize(("first", "field"), [(1, "events[0].seq"), (3, "events[0].seq")])
def test_harness_20_append_must_continue_the_log(opener: Opener, first: int, field: str) -> None:
    async def body() -> None:
        store = await opener()
        await store.create(HEADER, [note(0), note(1)])
        with pytest.raises(SubagentError) as caught:
            await store.append(SID, [note(first), note(first + 1)])
        assert (caught.value.code, caught.value.field) == (ErrorCode.INVALID_ARGUMENT, field)
        assert await store.inspect(SID) == SessionRecord(HEADER, (note(0), note(1)))
        await store.close()

    run(body())


def test_harness_20_create_log_starts_at_seq_zero(opener: Opener) -> None:
    async def body() -> None:
        store = await opener()
        with pytest.raises(SubagentError) as caught:
            await store.create(HEADER, [note(1)])
        assert caught.value.field == "events[0].seq"
        assert await store.list() == []
        await store.close()

    run(body())


@pytest.mark.parametrize("method", ["inspect", "load", "append", "store_projection"])
def test_harness_23_unknown_id_is_not_found_naming_the_session(opener: Opener, method: str) -> None:
    async def body() -> None:
        store = await opener()
        await store.create(HEADER, [])
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "inspect": lambda: store.inspect(SessionId("nope")),
            "load": lambda: store.load(SessionId("nope")),
            "append": lambda: store.append(SessionId("nope"), [note(0)]),
            "store_projection": lambda: store.store_projection(SessionId("nope"), 0, {}),
        }
        with pytest.raises(SubagentError) as caught:
            await calls[method]()
        assert (caught.value.code, caught.value.field) == (ErrorCode.NOT_FOUND, "session_id")
        assert "'nope'" in str(caught.value)
        assert await stored_state(store) == [SessionRecord(HEADER, ())]
        await store.close()

    run(body())


@pytest.mark.parametrize("session_id", ["", 7, None])
def test_harness_23_bad_session_id_refused(opener: Opener, session_id: object) -> None:
    async def body() -> None:
        store = await opener()
        for call in (store.inspect, store.load):
            with pytest.raises(SubagentError) as caught:
                await call(session_id)  # type: ignore[arg-type]
            assert caught.value.field == "session_id"
        with pytest.raises(SubagentError) as caught:
            await store.append(session_id, [])  # type: ignore[arg-type]
        assert caught.value.field == "session_id"
        await store.close()

    run(body())


# --------------------------------------------------------------------------- inspect and repair


def open_turn_log() -> list[SessionEvent]:
    return [turn_start(0, 1), turn_end(1, 1), turn_start(2, 2), note(3)]


def test_harness_23_inspect_does_not_mutate(opener: Opener) -> None:
    async def body() -> None:
        store = await opener()
        await store.create(HEADER, open_turn_log())
        first = await store.inspect(SID)
        assert first == SessionRecord(HEADER, tuple(open_turn_log()))
        assert await store.inspect(SID) == first
        assert await store.list_snapshots() == [SessionSnapshot(HEADER, 4)]
        await store.close()

    run(body())


def test_list_16_read_paths_never_write(tmp_path: Path) -> None:
    path = tmp_path / "reads.db"

    async def body() -> None:
        store = await SqlitePersistence.open(path, clock=clock)
        await store.create(HEADER, open_turn_log())
        await store.store_projection(SID, 2, {"v": 1})
        before = dump(path)
        await store.inspect(SID)
        await store.list()
        await store.list_snapshots()
        await store.cached_snapshot(HEADER)
        assert dump(path) == before
        await store.close()

    run(body())


def test_harness_17_load_closes_interrupted_tail_durably(opener: Opener) -> None:
    repair = SessionEvent(TURN_END, 4, CLOCK_NOW, wire.turn_end_data(2, TurnEndReason.INTERRUPTED))
    repaired = SessionRecord(HEADER, (*open_turn_log(), repair))

    async def body() -> None:
        store = await opener()
        await store.create(HEADER, open_turn_log())
        assert await store.load(SID) == repaired
        assert await store.load(SID) == repaired  # balanced now: no second repair
        other = await opener()  # SQLite: a second connection to the same file
        assert await other.inspect(SID) == repaired
        await other.append(SID, [note(5)])
        await other.close()
        await store.close()

    run(body())


def test_harness_22_repair_writes_interrupted_reason(opener: Opener) -> None:
    async def body() -> None:
        store = await opener()
        await store.create(HEADER, [turn_start(0, 7)])
        tail = (await store.load(SID)).events[-1]
        assert wire.turn_end_reason(tail.data) is TurnEndReason.INTERRUPTED
        assert tail.data == {"turn": 7, "reason": "interrupted"}
        await store.close()

    run(body())


def test_harness_17_repair_time_never_precedes_the_log(opener: Opener) -> None:
    async def body() -> None:
        store = await opener()
        await store.create(HEADER, [turn_start(0, 1), note(1, time=9e12)])
        assert (await store.load(SID)).events[-1].time == 9e12
        await store.close()

    run(body())


@pytest.mark.parametrize(
    "events",
    [
        [],
        [note(0)],
        [turn_start(0, 1), note(1), turn_end(2, 1)],
        [turn_start(0, 1), turn_end(1, 1), note(2)],
    ],
)
def test_harness_17_load_leaves_balanced_log_unchanged(
    opener: Opener, events: list[SessionEvent]
) -> None:
    async def body() -> None:
        store = await opener()
        await store.create(HEADER, events)
        assert await store.load(SID) == SessionRecord(HEADER, tuple(events))
        assert await store.list_snapshots() == [SessionSnapshot(HEADER, len(events))]
        await store.close()

    run(body())


def test_harness_17_default_clock_stamps_repair_in_epoch_milliseconds() -> None:
    async def body() -> None:
        store = InMemoryPersistence()
        await store.create(HEADER, [turn_start(0, 1)])
        assert (await store.load(SID)).events[-1].time > 1.5e12  # after 2017, in ms
        await store.close()

    run(body())


def test_harness_17_end_of_another_turn_does_not_close_the_open_turn(opener: Opener) -> None:
    async def body() -> None:
        store = await opener()
        await store.create(HEADER, [turn_start(0, 2), turn_end(1, 1)])
        assert (await store.load(SID)).events[-1].data == {"turn": 2, "reason": "interrupted"}
        await store.close()

    run(body())


@pytest.mark.parametrize("data", [{}, {"turn": True}, [], None])
def test_harness_17_malformed_turn_is_corrupt(opener: Opener, data: JsonValue) -> None:
    async def body() -> None:
        store = await opener()
        await store.create(HEADER, [note(0), SessionEvent(TURN_START, 1, 1.0, data)])
        with pytest.raises(SubagentError) as caught:
            await store.load(SID)
        assert (caught.value.code, caught.value.field) == (
            ErrorCode.CORRUPT_SESSION,
            "events[1].data.turn",
        )
        assert "s1" in str(caught.value)
        assert len((await store.inspect(SID)).events) == 2
        await store.close()

    run(body())


# --------------------------------------------------------------------------- projection cache


def test_harness_26_projection_cache_round_trip(opener: Opener) -> None:
    values: Mapping[str, JsonValue] = {"subagent": {"mode": "continuable", "seq": 1}}

    async def body() -> None:
        store = await opener()
        await store.create(FULL_HEADER, [note(0), note(1)])
        assert await store.cached_snapshot(FULL_HEADER) is None
        await store.store_projection(FULL_HEADER.id, 2, values)
        assert await store.cached_snapshot(FULL_HEADER) == CachedProjection(2, values)
        await store.close()

    run(body())


def test_harness_26_newer_watermark_wins(opener: Opener) -> None:
    async def body() -> None:
        store = await opener()
        await store.create(HEADER, [note(0), note(1)])
        await store.store_projection(SID, 1, {"v": 1})
        await store.store_projection(SID, 2, {"v": 2})
        await store.store_projection(SID, 1, {"v": "stale"})
        assert await store.cached_snapshot(HEADER) == CachedProjection(2, {"v": 2})
        await store.store_projection(SID, 2, {"v": 3})
        assert await store.cached_snapshot(HEADER) == CachedProjection(2, {"v": 3})
        await store.close()

    run(body())


def test_harness_26_other_lifecycle_or_unknown_session_has_no_row(opener: Opener) -> None:
    async def body() -> None:
        store = await opener()
        await store.create(HEADER, [note(0)])
        await store.store_projection(SID, 1, {"v": 1})
        assert await store.cached_snapshot(attrs.evolve(HEADER, created_at=2.0)) is None
        assert await store.cached_snapshot(SessionHeader(SessionId("other"))) is None
        await store.close()

    run(body())


@pytest.mark.parametrize(
    ("field", "as_of_seq", "values"),
    [
        ("as_of_seq", True, {}),
        ("as_of_seq", -1, {}),
        ("as_of_seq", 2, {}),
        ("values", 0, [1]),
        ("values.v", 0, {"v": float("nan")}),
    ],
)
def test_harness_26_bad_projection_write_refused(
    opener: Opener, field: str, as_of_seq: object, values: object
) -> None:
    async def body() -> None:
        store = await opener()
        await store.create(HEADER, [note(0)])
        with pytest.raises(SubagentError) as caught:
            await store.store_projection(SID, as_of_seq, values)  # type: ignore[arg-type]
        assert (caught.value.code, caught.value.field) == (ErrorCode.INVALID_ARGUMENT, field)
        assert await store.cached_snapshot(HEADER) is None
        with pytest.raises(SubagentError) as caught:
            await store.cached_snapshot("s1")  # type: ignore[arg-type]
        assert caught.value.field == "header"
        await store.close()

    run(body())


# --------------------------------------------------------------------------- close


def test_closed_backend_is_unavailable(opener: Opener) -> None:
    async def body() -> None:
        store = await opener()
        await store.create(HEADER, [])
        await store.close()
        await store.close()
        calls: list[Callable[[], Awaitable[object]]] = [
            store.list,
            store.list_snapshots,
            lambda: store.inspect(SID),
            lambda: store.load(SID),
            lambda: store.create(FULL_HEADER, []),
            lambda: store.append(SID, []),
            lambda: store.cached_snapshot(HEADER),
            lambda: store.store_projection(SID, 0, {}),
        ]
        for call in calls:
            with pytest.raises(SubagentError) as caught:
                await call()
            assert caught.value.code is ErrorCode.PERSISTENCE_UNAVAILABLE

    run(body())


# --------------------------------------------------------------------------- property

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
event_specs = st.lists(
    st.tuples(
        st.sampled_from(["note", TURN_START, TURN_END, "assistant/chunk"]),
        st.floats(allow_nan=False, allow_infinity=False),
        json_values,
        st.integers(min_value=1, max_value=3),
    ),
    max_size=12,
)


def build_events(specs: list[tuple[str, float, JsonValue, int]]) -> list[SessionEvent]:
    events = []
    for seq, (kind, moment, data, turn) in enumerate(specs):
        payload: JsonValue = {"turn": turn, "reason": "completed"} if kind == TURN_END else data
        events.append(
            SessionEvent(kind, seq, moment, {"turn": turn} if kind == TURN_START else payload)
        )
    return events


@given(specs=event_specs, split=st.integers(min_value=0, max_value=12))
def test_harness_22_event_streams_round_trip_identically_through_both_backends(
    specs: list[tuple[str, float, JsonValue, int]], split: int
) -> None:
    events = build_events(specs)

    async def round_trip(store: Store) -> tuple[SessionRecord, SessionRecord, SessionRecord]:
        await store.create(FULL_HEADER, events[:split])
        await store.append(FULL_HEADER.id, events[split:])
        inspected = await store.inspect(FULL_HEADER.id)
        loaded = await store.load(FULL_HEADER.id)
        after = await store.inspect(FULL_HEADER.id)
        await store.close()
        return inspected, loaded, after

    async def body() -> None:
        memory = await round_trip(InMemoryPersistence(clock=clock))
        sqlite = await round_trip(await SqlitePersistence.open(":memory:", clock=clock))
        assert memory == sqlite
        assert memory[0] == SessionRecord(FULL_HEADER, tuple(events))
        assert memory[1] == memory[2]
        assert memory[1].events[: len(events)] == tuple(events)

    run(body())


# --------------------------------------------------------------------------- SQLite storage


def sqlite_file(tmp_path: Path, events: list[SessionEvent]) -> Path:
    """A closed database holding ``HEADER`` with ``events``."""
    path = tmp_path / "damaged.db"

    async def body() -> None:
        store = await SqlitePersistence.open(path, clock=clock)
        await store.create(HEADER, events)
        await store.store_projection(SID, len(events), {"v": 1})
        await store.close()

    run(body())
    return path


def damage(path: Path, statement: str) -> None:
    conn = raw_db(path)
    conn.execute(statement)
    conn.close()


async def corrupt_field(path: Path, read: str) -> str | None:
    store = await SqlitePersistence.open(path, clock=clock)
    try:
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "inspect": lambda: store.inspect(SID),
            "load": lambda: store.load(SID),
            "list": store.list,
            "cache": lambda: store.cached_snapshot(HEADER),
            "append": lambda: store.append(SID, [note(2)]),
        }
        with pytest.raises(SubagentError) as caught:
            await calls[read]()
        assert caught.value.code is ErrorCode.CORRUPT_SESSION
        assert "'s1'" in str(caught.value)
        return caught.value.field
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("statement", "field"),
    [
        ("UPDATE events SET data = '{' WHERE seq = 1", "events[1].data"),
        ("UPDATE events SET data = 'NaN' WHERE seq = 1", "events[1].data"),
        ('UPDATE events SET data = \'{"a":1,"a":2}\' WHERE seq = 1', "events[1].data"),
        ("UPDATE events SET data = '\"\\ud800\"' WHERE seq = 1", "events[1].data"),
        ("UPDATE events SET time = 1e999 WHERE seq = 2", "events[2].time"),
        (f"UPDATE events SET data = '{'[' * 100_000}' WHERE seq = 1", "events[1].data"),
        ("UPDATE events SET data = '1e400' WHERE seq = 1", "events[1].data"),
        ("UPDATE events SET data = '{} {}' WHERE seq = 1", "events[1].data"),
        ("DELETE FROM events WHERE seq = 1", "events[1]"),
    ],
)
@pytest.mark.parametrize("read", ["inspect", "load"])
def test_harness_23_damaged_event_row_is_corrupt_naming_the_seq(
    tmp_path: Path, statement: str, field: str, read: str
) -> None:
    path = sqlite_file(tmp_path, [note(0), note(1), turn_start(2, 1)])
    damage(path, statement)
    assert run(corrupt_field(path, read)) == field


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{ "a" : [1, 2.5] }', {"a": [1, 2.5]}),  # spacing another writer may use
        ('"\\u00e9"', "é"),  # an escape this codec would not write
        ("-0.0", -0.0),
    ],
)
def test_harness_22_valid_json_from_another_writer_still_decodes(
    tmp_path: Path, text: str, value: JsonValue
) -> None:
    path = sqlite_file(tmp_path, [note(0), note(1)])
    damage(path, f"UPDATE events SET data = '{text}' WHERE seq = 1")

    async def main() -> JsonValue:
        store = await SqlitePersistence.open(path, clock=clock)
        try:
            return (await store.inspect(SID)).events[1].data
        finally:
            await store.close()

    assert run(main()) == value


@pytest.mark.parametrize(
    ("header", "field"),
    [
        ("{", "header"),
        ("[]", "header"),
        ('{"version":1,"id":"s1","createdAt":1.0,"extra":1}', "header"),
        ('{"version":1,"id":"s2","createdAt":1.0}', "header.id"),
        ('{"version":1,"id":"s1","createdAt":1.0,"origin":"fork"}', "header.origin"),
        ('{"version":1,"id":"s1","createdAt":1.0,"origin":[]}', "header.origin"),
        ('{"version":1,"id":"s1","createdAt":1.0,"seedLength":true}', "header.seed_length"),
        ('{"version":1,"id":"s1"}', "header.created_at"),
    ],
)
@pytest.mark.parametrize("read", ["inspect", "list"])
def test_harness_21_damaged_header_is_corrupt(
    tmp_path: Path, header: str, field: str, read: str
) -> None:
    path = sqlite_file(tmp_path, [note(0)])
    damage(path, f"UPDATE sessions SET header = '{header}'")
    assert run(corrupt_field(path, read)) == field


@pytest.mark.parametrize(
    ("statement", "field"),
    [
        ("UPDATE projection_cache SET projection = 'nope'", "projection.values"),
        ("UPDATE projection_cache SET projection = '[1]'", "projection.values"),
        ("UPDATE projection_cache SET as_of_seq = 9", "projection.as_of_seq"),
        ("UPDATE projection_cache SET as_of_seq = -1", "projection.as_of_seq"),
    ],
)
def test_harness_26_damaged_cache_row_raises(tmp_path: Path, statement: str, field: str) -> None:
    path = sqlite_file(tmp_path, [note(0)])
    damage(path, statement)
    assert run(corrupt_field(path, "cache")) == field


UNDECODABLE = "CAST(x'ff7b' AS TEXT)"  # a TEXT value whose bytes are not UTF-8


@pytest.mark.parametrize(
    ("statement", "field", "reads"),
    [
        (
            f"UPDATE events SET data = {UNDECODABLE} WHERE seq = 1",
            "events[1].data",
            ("inspect", "load"),
        ),
        (
            f"UPDATE events SET type = {UNDECODABLE} WHERE seq = 0",
            "events[0].type",
            ("inspect", "load"),
        ),
        (
            f"UPDATE sessions SET header = {UNDECODABLE}",
            "header",
            ("inspect", "load", "list", "append", "cache"),
        ),
        (
            f"UPDATE projection_cache SET projection = {UNDECODABLE}",
            "projection.values",
            ("cache",),
        ),
    ],
)
def test_harness_23_undecodable_text_is_corrupt_naming_the_field(
    tmp_path: Path, statement: str, field: str, reads: tuple[str, ...]
) -> None:
    """Issue 18: text that is not UTF-8 is damage, not a raw ``sqlite3`` error."""
    path = sqlite_file(tmp_path, [note(0), note(1)])
    damage(path, statement)
    for read in reads:
        assert run(corrupt_field(path, read)) == field


def test_harness_23_undecodable_session_id_is_corrupt_in_the_listing(tmp_path: Path) -> None:
    path = sqlite_file(tmp_path, [note(0)])
    damage(path, f"INSERT INTO sessions VALUES ({UNDECODABLE}, '{{}}', 7)")

    async def main() -> SubagentError:
        store = await SqlitePersistence.open(path, clock=clock)
        try:
            with pytest.raises(SubagentError) as caught:
                await store.list_snapshots()
            return caught.value
        finally:
            await store.close()

    error = run(main())
    assert (error.code, error.field) == (ErrorCode.CORRUPT_SESSION, "id")


ALL = {"list", "inspect", "load", "revision", "append", "create", "cache", "store_projection"}


@pytest.mark.parametrize("table", ["events", "sessions", "projection_cache"])
def test_harness_23_a_store_missing_a_table_is_unavailable_not_a_raw_sqlite_error(
    tmp_path: Path, table: str
) -> None:
    """Issue 18: every call that touches the missing table raises ``PERSISTENCE_UNAVAILABLE``
    naming the session, with the SQLite error as its cause."""
    path = sqlite_file(tmp_path, [note(0)])
    damage(path, f"DROP TABLE {table}")

    async def main() -> dict[str, SubagentError]:
        store = await SqlitePersistence.open(path, clock=clock)
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "list": store.list,
            "inspect": lambda: store.inspect(SID),
            "load": lambda: store.load(SID),
            "revision": lambda: store.revision(SID),
            "append": lambda: store.append(SID, [note(1)]),
            "create": lambda: store.create(FULL_HEADER, [note(0)]),
            "cache": lambda: store.cached_snapshot(HEADER),
            "store_projection": lambda: store.store_projection(SID, 0, {}),
        }
        errors = {}
        for name, call in calls.items():
            try:
                await call()
            except SubagentError as error:
                errors[name] = error
        await store.close()
        return errors

    errors = run(main())
    assert set(errors) == ({"cache", "store_projection"} if table == "projection_cache" else ALL)
    for name, error in errors.items():
        assert error.code is ErrorCode.PERSISTENCE_UNAVAILABLE
        assert isinstance(error.cause, sqlite3.OperationalError)
        assert f"no such table: {table}" in str(error)
        assert ("'s1'" in str(error)) is (name not in ("list", "create"))


def test_harness_23_sqlite_schema_wal_and_version(tmp_path: Path) -> None:
    path = sqlite_file(tmp_path, [note(0)])
    conn = raw_db(path)
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert conn.execute("PRAGMA user_version").fetchone() == (1,)
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    # sqlite_sequence is SQLite's own: the mailbox's seq is AUTOINCREMENT (never reused).
    assert tables == {
        "sessions",
        "events",
        "projection_cache",
        "leases",
        "mailbox",
        "sqlite_sequence",
    }
    header = conn.execute("SELECT header FROM sessions").fetchone()[0]
    assert header == '{"version":1,"id":"s1","createdAt":1000.0}'
    assert conn.execute("SELECT type, seq, time, data FROM events").fetchall() == [
        ("note", 0, 0.0, "null")
    ]
    conn.close()


def test_sqlite_unknown_schema_version_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    damage(path, "PRAGMA user_version = 7")
    with pytest.raises(SubagentError) as caught:
        run(SqlitePersistence.open(path))
    assert caught.value.code is ErrorCode.PERSISTENCE_UNAVAILABLE


@pytest.mark.parametrize("level", ["FULL", "normal", "OFF", "EXTRA"])
def test_sqlite_synchronous_levels_accepted(tmp_path: Path, level: str) -> None:
    async def body() -> None:
        store = await SqlitePersistence.open(tmp_path / "s.db", synchronous=level)
        await store.create(HEADER, [note(0)])
        await store.close()

    run(body())


@pytest.mark.parametrize("level", ["PARANOID", 2, ""])
def test_sqlite_bad_synchronous_refused(tmp_path: Path, level: object) -> None:
    with pytest.raises(SubagentError) as caught:
        run(SqlitePersistence.open(tmp_path / "s.db", synchronous=level))  # type: ignore[arg-type]
    assert (caught.value.code, caught.value.field) == (ErrorCode.INVALID_ARGUMENT, "synchronous")
    assert not (tmp_path / "s.db").exists()


def test_sqlite_open_refuses_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "not-a.db"
    path.write_text("garbage, not SQLite")

    async def main() -> None:
        with pytest.raises(SubagentError) as info:
            await SqlitePersistence.open(path)
        assert info.value.code is ErrorCode.PERSISTENCE_UNAVAILABLE
        assert info.value.field == "path"

    asyncio.run(main())


# --------------------------------------------------------------------------- open modes (issue 19)


def files_beside(path: Path) -> dict[str, bytes]:
    """Every file of the store's directory, byte for byte."""
    return {entry.name: entry.read_bytes() for entry in sorted(path.parent.iterdir())}


@contextlib.contextmanager
def write_protected(path: Path, how: str) -> Iterator[None]:
    """Make ``path`` read-only in a way that holds for the current user (root included)."""
    if how == "format":  # a write version above 2 in the header: SQLite opens it read-only
        data = bytearray(path.read_bytes())
        data[18] = 3
        path.write_bytes(bytes(data))
        yield
    elif os.geteuid() != 0:
        path.chmod(0o444)
        try:
            yield
        finally:
            path.chmod(0o644)
    else:  # root writes through a file mode: the immutable attribute stops it
        if subprocess.run(["chattr", "+i", str(path)], check=False).returncode != 0:
            pytest.skip("running as root without chattr +i: no way to write-protect the file")
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(path)], check=True)


@pytest.mark.parametrize("how", ["file", "format"])
def test_err_5_issue_19_a_writer_refuses_a_read_only_store_at_open(
    tmp_path: Path, how: str
) -> None:
    path = sqlite_file(tmp_path, [note(0)])
    with write_protected(path, how):
        before = path.read_bytes()
        with pytest.raises(SubagentError) as caught:
            run(SqlitePersistence.open(path))
        error = caught.value
        assert (error.code, error.field) == (ErrorCode.PERSISTENCE_UNAVAILABLE, "path")
        assert f"{path} is read-only" in str(error)
        assert path.read_bytes() == before

        async def listing() -> list[SessionSnapshot]:
            store = await SqlitePersistence.open(path, readonly=True)
            try:
                return await store.list_snapshots()
            finally:
                await store.close()

        assert run(listing()) == [SessionSnapshot(HEADER, 1)]


def test_list_16_issue_19_a_read_only_open_reads_a_store_the_current_code_writes(
    tmp_path: Path,
) -> None:
    path = sqlite_file(tmp_path, [note(0), note(1)])
    before = files_beside(path)

    async def body() -> None:
        store = await SqlitePersistence.open(path, readonly=True)
        assert await store.list_snapshots() == [SessionSnapshot(HEADER, 2)]
        assert await store.inspect(SID) == SessionRecord(HEADER, (note(0), note(1)))
        assert await store.revision(SID) == 2
        assert await store.cached_snapshot(HEADER) == CachedProjection(2, {"v": 1})
        with pytest.raises(SubagentError) as caught:
            await store.append(SID, [note(2)])
        assert caught.value.code is ErrorCode.PERSISTENCE_UNAVAILABLE
        assert "readonly" in str(caught.value)
        await store.close()

    run(body())
    assert path.read_bytes() == before[path.name]
    with contextlib.closing(raw_db(path)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert run(reopened_revision(path)) == 2  # and a writer still opens it


async def reopened_revision(path: Path) -> int | None:
    store = await SqlitePersistence.open(path)
    try:
        return await store.revision(SID)
    finally:
        await store.close()


def foreign_or_empty(path: Path, kind: str) -> None:
    if kind == "empty":
        path.write_bytes(b"")
        return
    with contextlib.closing(raw_db(path)) as conn:  # another application's database
        conn.execute("CREATE TABLE notes (body TEXT)")
        conn.execute("INSERT INTO notes VALUES ('keep me')")


@pytest.mark.parametrize(
    ("kind", "readonly"), [("foreign", True), ("foreign", False), ("empty", True)]
)
def test_list_16_issue_19_a_foreign_or_empty_file_is_not_a_store_and_stays_unchanged(
    tmp_path: Path, kind: str, readonly: bool
) -> None:
    path = tmp_path / "other.db"
    foreign_or_empty(path, kind)
    before = files_beside(path)
    with pytest.raises(SubagentError) as caught:
        run(SqlitePersistence.open(path, readonly=readonly))
    assert (caught.value.code, caught.value.field) == (ErrorCode.PERSISTENCE_UNAVAILABLE, "path")
    assert str(caught.value).endswith(f"{path} is not a dsh-subagent store")
    assert files_beside(path) == before


def test_harness_23_issue_19_a_writer_makes_a_store_of_an_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.write_bytes(b"")
    assert run(reopened_revision(path)) is None
    with contextlib.closing(raw_db(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (1,)
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_harness_23_issue_19_a_writer_proves_the_store_writable_without_writing(
    tmp_path: Path,
) -> None:
    path = sqlite_file(tmp_path, [note(0)])
    before = files_beside(path)

    async def body() -> None:
        store = await SqlitePersistence.open(path)
        assert (tmp_path / f"{path.name}-wal").stat().st_size == 0  # not one page written
        await store.close()

    run(body())
    assert files_beside(path) == before


def test_sqlite_readonly_must_be_a_bool(tmp_path: Path) -> None:
    with pytest.raises(SubagentError) as caught:
        run(SqlitePersistence.open(tmp_path / "s.db", readonly="yes"))  # type: ignore[arg-type]
    assert (caught.value.code, caught.value.field) == (ErrorCode.INVALID_ARGUMENT, "readonly")
    assert not (tmp_path / "s.db").exists()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_harness_19_revision_counts_stored_events_without_reading_them(
    kind: str, tmp_path: Path
) -> None:
    async def main() -> None:
        store: InMemoryPersistence | SqlitePersistence = (
            InMemoryPersistence()
            if kind == "memory"
            else await SqlitePersistence.open(tmp_path / "r.db")
        )
        sid = SessionId("s")
        assert await store.revision(sid) is None
        await store.create(SessionHeader(sid), [SessionEvent("turn/start", 0, 1.0, {"turn": 1})])
        assert await store.revision(sid) == 1
        await store.close()

    asyncio.run(main())
