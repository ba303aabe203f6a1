"""The registry, store and persistence half of the HARNESS contract, on the harness under test.

Each test names the catalog rule (section 17) it checks, through the seam's protocols only:
``harness.registry`` (an ``AgentRegistry``), ``harness.store`` (a ``SessionStore`` with
``session/disposed`` and flush listeners), the service's ``SessionPersistence`` and each
agent's tool layer and prompt composer.
"""

from __future__ import annotations

import asyncio

import pytest

from dsh_subagent.adapters.protocols import (
    Agent,
    AgentRegistry,
    CreateOptions,
    ResumeOptions,
    SessionMeta,
    SetupCommit,
    Tool,
    ToolCall,
    ToolOutcome,
)
from dsh_subagent.adapters.reference.scripted_model import call_tool, fail, reply
from dsh_subagent.adapters.signals import AbortController, AbortSignal, Scope
from dsh_subagent.conformance.probes import msg, reasons, turn_ends
from dsh_subagent.conformance.support import (
    HarnessFactory,
    HarnessUnderTest,
    ModelBook,
    harness_test,
    run,
)
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import (
    END_SEED,
    TOOL_RESULT,
    JsonObject,
    JsonValue,
    Origin,
    SessionEvent,
    SessionId,
    TextBlock,
    TurnEndReason,
)

A = SessionId("a")


# ------------------------------------------------------------------ HARNESS-14, -15, -16


@harness_test
async def test_harness_14_get_list_and_the_same_id_collision(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    first = await h.registry.create(CreateOptions(A))
    second = await h.registry.create(CreateOptions(SessionId("b")))
    assert h.registry.get(A) is first.agent
    assert h.registry.get(SessionId("nobody")) is None
    assert list(h.registry.list()) == [first.agent, second.agent]
    with pytest.raises(SubagentError):
        await h.registry.create(CreateOptions(A))
    assert h.registry.get(A) is first.agent
    assert h.store.get(A) is first.agent.session


@harness_test
async def test_harness_14_a_created_veto_rolls_the_publication_back(
    h: HarnessUnderTest, book: ModelBook
) -> None:

    def veto(agent: Agent) -> None:
        raise PermissionError("no")

    stop = h.registry.created.subscribe(veto)
    with pytest.raises(PermissionError):
        await h.registry.create(CreateOptions(A))
    assert h.registry.get(A) is None
    assert h.store.get(A) is None
    stop()
    await h.registry.create(CreateOptions(A))  # the id is free again
    assert h.registry.get(A) is not None


@harness_test
async def test_harness_14_agent_disposed_listeners_are_contained(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    seen: list[str] = []

    def broken(agent: Agent) -> None:
        raise RuntimeError("listener failed")

    h.registry.disposed.subscribe(broken)
    h.registry.disposed.subscribe(lambda agent: seen.append(agent.id))
    handle = await h.registry.create(CreateOptions(A))
    await handle.dispose()
    assert seen == [A]
    assert h.registry.get(A) is None


@harness_test
async def test_harness_15_create_options_fill_the_header_seed_and_agent_options(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    meta = SessionMeta(
        cwd="/work/project",
        parent_session=SessionId("p"),
        seed_length=1,
        origin=Origin.SUBAGENT,
        delegation_depth=2,
        agent_preset="researcher",
    )
    seed = [SessionEvent("note", 0, 0.0, {"x": 1})]
    handle = await h.registry.create(CreateOptions(A, meta=meta, seed=seed))
    header = handle.agent.session.header
    assert header.id == A
    assert (header.cwd, header.parent_session, header.seed_length) == ("/work/project", "p", 1)
    assert (header.origin, header.delegation_depth) == (Origin.SUBAGENT, 2)
    assert header.agent_preset == "researcher"
    assert header.created_at > 0
    assert [e.type for e in handle.agent.session.events] == ["note", END_SEED]


@harness_test
async def test_harness_16_create_runs_setup_then_commit_then_publishes(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    trace: list[str] = []

    class Commit:
        def commit(self) -> None:
            trace.append("commit")

    async def setup(ctx: Scope) -> SetupCommit:
        assert h.registry.get(A) is None
        assert h.store.get(A) is None
        trace.append("setup")
        return Commit()

    def created(agent: Agent) -> None:
        assert h.store.get(agent.id) is agent.session  # the session entered first
        trace.append(f"agent/created {agent.id}")

    h.registry.created.subscribe(created)
    handle = await h.registry.create(CreateOptions(A, setup=setup))
    assert trace == ["setup", "commit", "agent/created a"]
    assert h.registry.get(A) is handle.agent


async def abort_in_setup(
    registry: AgentRegistry, session_id: SessionId
) -> tuple[AbortSignal, SubagentError]:
    """Create ``session_id`` with a setup that never returns and abort the caller's signal
    inside it: the create must raise exactly the abort's reason (HARNESS-16). Returns the
    aborted signal and that reason (a unit test of a registry reuses this)."""
    controller = AbortController()
    entered = asyncio.Event()

    async def setup(ctx: Scope) -> None:
        entered.set()
        await asyncio.Event().wait()

    creating = asyncio.ensure_future(
        registry.create(CreateOptions(session_id, setup=setup, signal=controller.signal))
    )
    await entered.wait()
    reason = SubagentError(ErrorCode.CANCELLED, "caller gave up")
    controller.abort(reason)
    with pytest.raises(SubagentError) as err:
        await creating
    assert err.value is reason
    return controller.signal, reason


@harness_test
async def test_harness_16_the_caller_signal_aborts_setup_with_its_reason(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    await abort_in_setup(h.registry, A)
    assert h.registry.get(A) is None
    assert h.store.get(A) is None


@harness_test
async def test_harness_16_an_invalid_seed_is_refused_before_anything_is_published(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    published: list[Agent] = []
    h.registry.created.subscribe(published.append)
    for seed in ([SessionEvent("note", 1, 0.0)], [SessionEvent("turn/end", 0, 0.0, {})]):
        with pytest.raises(SubagentError):
            await h.registry.create(CreateOptions(A, seed=seed))
    assert published == []
    assert h.store.get(A) is None


# ------------------------------------------------------------------ HARNESS-17, -18


@harness_test
async def test_harness_17_resuming_an_unknown_id_raises_and_publishes_nothing(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    with pytest.raises(SubagentError):
        await h.registry.resume(ResumeOptions(SessionId("ghost")))
    assert h.registry.get(SessionId("ghost")) is None
    assert h.store.get(SessionId("ghost")) is None


@harness_test
async def test_harness_18_dispose_aborts_a_running_turn_with_cause_disposed(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    gate = book.held("a", reply("never"))
    handle = await h.registry.create(CreateOptions(A))
    handle.agent.followup(msg("work"))
    await gate.reached()
    await handle.dispose()
    assert turn_ends(handle.agent) == [
        {"turn": 1, "reason": "aborted", "cause": {"kind": "disposed"}}
    ]
    assert h.registry.get(A) is None


# ------------------------------------------------------------------ HARNESS-19 (flush)


@harness_test
async def test_harness_19_get_and_list_follow_creation_order(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    ids = [SessionId(name) for name in ("c", "a", "b")]
    for session_id in ids:
        await h.registry.create(CreateOptions(session_id))
    assert [s.id for s in h.store.list() if s.id in ids] == ids
    session = h.store.get(A)
    assert session is not None
    assert session.id == A


@harness_test
async def test_harness_19_flush_is_true_when_one_participates_and_raises_after_all_settle(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    agent = await h.create_agent("a")
    assert await h.store.flush(agent.session) is True  # the harness's own persistence
    started, release = asyncio.Event(), asyncio.Event()
    settled: list[str] = []

    async def slow(session: object) -> None:
        started.set()
        await release.wait()
        settled.append("slow")

    async def failing(session: object) -> None:
        raise OSError("disk gone")

    stops = [h.store.on_flush(slow), h.store.on_flush(failing)]
    flushing = asyncio.ensure_future(h.store.flush(agent.session))
    await started.wait()
    assert not flushing.done()  # the failure waits for every listener to settle
    release.set()
    with pytest.raises(OSError, match="disk gone"):
        await flushing
    assert settled == ["slow"]
    for stop in stops:
        stop()
    assert await h.store.flush(agent.session) is True


@harness_test
async def test_harness_19_flushing_a_session_that_is_not_live_raises(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    handle = await h.registry.create(CreateOptions(A))
    session = handle.agent.session
    await handle.dispose()
    with pytest.raises(SubagentError):
        await h.store.flush(session)


# ------------------------------------------------------------------ HARNESS-20 .. -23 (logs)


@harness_test
async def test_harness_20_append_assigns_seq_and_time_freezes_data_and_notifies(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    session = (await h.create_agent("a")).session
    seen: list[int] = []

    def broken(event: SessionEvent) -> None:
        raise RuntimeError("observer failed")

    session.observe(broken)
    stop = session.observe(lambda event: seen.append(event.seq))
    source: dict[str, JsonValue] = {"items": [1]}
    start = session.seq
    event = session.append("note", source)
    assert (event.seq, session.seq, seen) == (start, start + 1, [start])
    assert session.events[-1] == event
    assert isinstance(event.time, float | int)
    assert event.time > 0
    source["items"] = [2]
    assert event.data == {"items": [1]}
    with pytest.raises(TypeError):
        event.data["x"] = 1  # type: ignore[index]
    stop()
    session.append("note", None)
    assert seen == [start]


@pytest.mark.parametrize(
    ("data", "field"), [(float("nan"), "data"), ({"k": object()}, "data.k"), ({1: "x"}, "data")]
)
def test_harness_20_lossy_json_is_refused_naming_the_field(
    dsh_harness: HarnessFactory, data: object, field: str
) -> None:
    async def main() -> None:
        h = await dsh_harness(ModelBook(), None)
        session = (await h.create_agent("a")).session
        before = session.seq
        with pytest.raises(SubagentError) as bad:
            session.append("note", data)  # type: ignore[arg-type]
        assert (bad.value.code, bad.value.field) == (ErrorCode.INVALID_ARGUMENT, field)
        assert session.seq == before
        await h.close()

    run(main)


@harness_test
async def test_harness_20_a_seed_gets_the_end_seed_marker_once(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    note = SessionEvent("note", 0, 0.0, None)
    ended = [note, SessionEvent(END_SEED, 1, 0.0, {})]
    grown = await h.registry.create(CreateOptions(SessionId("grown"), seed=[note]))
    kept = await h.registry.create(CreateOptions(SessionId("kept"), seed=ended))
    assert [e.type for e in grown.agent.session.events] == ["note", END_SEED]
    assert [e.type for e in kept.agent.session.events] == ["note", END_SEED]


@pytest.mark.parametrize(
    ("meta", "field"),
    [
        (SessionMeta(cwd="relative/dir"), "meta.cwd"),
        (SessionMeta(delegation_depth=-1), "meta.delegation_depth"),
        (SessionMeta(seed_length=3), "meta.seed_length"),
        (SessionMeta(parent_session=SessionId("")), "meta.parent_session"),
    ],
)
def test_harness_21_bad_header_fields_are_refused_by_name_before_publication(
    dsh_harness: HarnessFactory, meta: SessionMeta, field: str
) -> None:
    async def main() -> None:
        h = await dsh_harness(ModelBook(), None)
        with pytest.raises(SubagentError) as bad:
            await h.registry.create(CreateOptions(A, meta=meta))
        assert bad.value.field == field
        assert h.registry.get(A) is None
        assert h.store.get(A) is None
        await h.close()

    run(main)


def test_harness_22_events_are_contiguous_and_round_trip_through_persistence(
    dsh_harness: HarnessFactory, dsh_db: str
) -> None:
    async def main() -> None:
        book = ModelBook()
        book.script("a", reply("fine"), fail("boom"))
        first = await dsh_harness(book, dsh_db)
        agent = await first.create_agent("a")
        for text in ("one", "two"):
            agent.followup(msg(text))
            await agent.when_idle()
        await first.close()
        events = agent.session.events
        assert [e.seq for e in events] == list(range(len(events)))
        times = [e.time for e in events]
        assert times == sorted(times)
        assert reasons(agent) == [TurnEndReason.COMPLETED, TurnEndReason.ERROR]
        second = await dsh_harness(ModelBook(), dsh_db)
        resumed = await second.resume_agent("a")
        assert resumed.session.events[: len(events)] == events
        assert resumed.session.header == agent.session.header
        await second.close()

    run(main)


@harness_test
async def test_harness_23_inspect_lists_and_snapshots_match_the_flushed_log(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    persistence = h.service.persistence
    assert persistence is not None
    agent = await h.create_agent("a")
    agent.followup(msg("hi"))
    await agent.when_idle()
    assert await h.store.flush(agent.session)
    record = await persistence.inspect(A)
    assert record.header == agent.session.header
    assert record.events == agent.session.events
    assert await persistence.inspect(A) == record  # inspecting never mutates
    snapshots = {s.header.id: s.revision for s in await persistence.list_snapshots()}
    assert snapshots[A] == len(record.events)
    assert A in [header.id for header in await persistence.list()]
    with pytest.raises(SubagentError) as missing:
        await persistence.inspect(SessionId("ghost"))
    assert missing.value.code is ErrorCode.NOT_FOUND


# ------------------------------------------------------------------ HARNESS-28


@harness_test
async def test_harness_28_restrictions_validate_names_and_guards_refuse_before_execution(
    h: HarnessUnderTest, book: ModelBook
) -> None:
    book.script("a", call_tool("probe"), reply("done"))
    agent = await h.create_agent("a")
    ran: list[str] = []

    async def probe(args: JsonObject, signal: AbortSignal) -> ToolOutcome:
        ran.append("probe")
        return ToolOutcome((TextBlock("ran"),))

    agent.tools.register(Tool("probe", probe))
    assert "probe" in agent.tools.names()
    with pytest.raises(SubagentError):
        agent.tools.install_restriction(allow=["no-such-tool"])

    def refuse(call: ToolCall) -> str | None:
        return "not here" if call.name == "probe" else None

    agent.tools.add_guard(refuse)
    agent.prompt.section("house-rules", 1, "Be brief.")
    agent.followup(msg("go"))
    await agent.when_idle()
    assert ran == []
    results = [e.data for e in agent.session.events if e.type == TOOL_RESULT]
    assert len(results) == 1
    assert "not here" in str(results[0])
    assert ("house-rules", 1, "Be brief.") in book.model("a").requests[0].system_prompt
