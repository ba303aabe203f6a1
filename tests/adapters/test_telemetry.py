"""OpenTelemetry spans of the delegation tree, read back from the SDK's in-memory exporter
(issue 24, DESIGN decision 9, OBS-1..OBS-5).

Each test gives its harness's service a tracer provider of its own (never the global one), so
no other test in the process records anything.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the OpenTelemetry SDK is not installed")

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dsh_subagent import (
    AbortController,
    ContinuableStartSpec,
    NullModel,
    ParentAgent,
    ReferenceHarness,
    ScriptedModel,
    StartRequest,
    call_tool,
    create_user_message,
    reply,
)
from dsh_subagent.adapters.protocols import ModelStep
from dsh_subagent.adapters.reference.scripted_model import Gate, Gated
from dsh_subagent.adapters.service import SubagentService
from dsh_subagent.adapters.telemetry import TRACE_EVENT, use_tracer_provider
from dsh_subagent.core.values import JsonObject, SessionId

Spans = Callable[[], list[ReadableSpan]]


@pytest.fixture
def provider() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield tracer_provider, exporter
    tracer_provider.shutdown()


def traced(service: SubagentService, provider: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    use_tracer_provider(service, provider[0])


def named(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


def one(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    found = named(spans, name)
    assert len(found) == 1, [span.name for span in spans]
    return found[0]


def parent_of(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.span_id)


def links(span: ReadableSpan, kind: str) -> list[int]:
    return [
        link.context.span_id
        for link in span.links
        if link.attributes is not None and link.attributes.get("dsh.subagent.link") == kind
    ]


def by_depth(*scripts: Callable[[], object]) -> Callable[[object, object], object]:
    """A model factory: the script of each agent is chosen by its delegation depth."""

    def model_for(session: object, _options: object) -> object:
        depth = session.header.delegation_depth or 0  # type: ignore[attr-defined]
        return scripts[min(depth, len(scripts) - 1)]()

    return model_for


# --------------------------------------------------------------------------- one-shot


def test_obs_2_foreground_spawns_nest_invoke_agent_under_execute_tool(
    provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    def ask(text: str) -> ModelStep:
        return call_tool("subagent", {"description": text, "prompt": text})

    model_for = by_depth(
        lambda: ScriptedModel([ask("outer"), reply("done")]),
        lambda: ScriptedModel([ask("inner"), reply("42")]),
        lambda: ScriptedModel([reply("42")]),
    )

    async def main() -> None:
        async with ReferenceHarness.open(model_for) as harness:  # type: ignore[arg-type]
            traced(harness.service, provider)
            harness.install_tools()
            parent = await harness.create_agent("parent")
            parent.followup(create_user_message("delegate"))
            await parent.when_idle()

    asyncio.run(main())
    spans = provider[1].get_finished_spans()
    outer_call, inner_call = sorted(
        named(list(spans), "execute_tool subagent"), key=lambda s: s.start_time or 0
    )
    outer, inner = one(list(spans), "invoke_agent outer"), one(list(spans), "invoke_agent inner")
    assert parent_of(outer_call) is None
    assert parent_of(outer) == span_id(outer_call)
    assert parent_of(inner_call) == span_id(outer)  # the child's call hangs under its span
    assert parent_of(inner) == span_id(inner_call)
    assert outer.kind is trace.SpanKind.INTERNAL
    attributes = dict(outer.attributes or {})
    assert attributes["gen_ai.operation.name"] == "invoke_agent"
    assert attributes["gen_ai.agent.id"] == attributes["gen_ai.conversation.id"]
    assert attributes["gen_ai.agent.name"] == "outer"
    assert attributes["dsh.subagent.parent_id"] == "parent"
    assert attributes["dsh.subagent.provider"] == "spawn"
    assert attributes["dsh.subagent.mode"] == "one-shot"
    assert attributes["dsh.subagent.depth"] == 1
    assert attributes["dsh.subagent.stop_reason"] == "completed"
    assert attributes["dsh.subagent.durability_failed"] is False
    assert dict(inner.attributes or {})["dsh.subagent.depth"] == 2
    assert dict(outer_call.attributes or {})["gen_ai.tool.name"] == "subagent"


def test_obs_2_under_instrumented_pydantic_ai_our_spans_nest_under_its_execute_tool(
    provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent as PydanticAgent
    from pydantic_ai import InstrumentationSettings
    from pydantic_ai.capabilities import Instrumentation
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from dsh_subagent.adapters.reference.pydantic_ai import open_pydantic_ai_harness

    async def parent(messages: list[ModelMessage], _info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:  # the user's request: delegate in the foreground
            args = {"description": "research", "prompt": "find it"}
            return ModelResponse(parts=[ToolCallPart("subagent", args, tool_call_id="d1")])
        return ModelResponse(parts=[TextPart("done")])

    async def child(_messages: list[ModelMessage], _info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("42")])

    instrumentation = Instrumentation(settings=InstrumentationSettings(tracer_provider=provider[0]))

    def agent_for(session: object, _options: object) -> PydanticAgent[None, str]:
        root = session.header.parent_session is None  # type: ignore[attr-defined]
        model = FunctionModel(parent if root else child)
        return PydanticAgent(
            model, name="host" if root else "worker", capabilities=[instrumentation]
        )

    async def main() -> None:
        harness = await open_pydantic_ai_harness(agent_for)
        async with harness:
            traced(harness.service, provider)
            harness.install_tools()
            host = await harness.create_agent("parent")
            host.followup(create_user_message("delegate"))
            await host.when_idle()

    asyncio.run(main())
    spans = list(provider[1].get_finished_spans())
    ours = [
        s
        for s in spans
        if s.instrumentation_scope and s.instrumentation_scope.name == "dsh_subagent"
    ]
    theirs = [s for s in spans if s not in ours]
    their_call = one(theirs, "execute_tool subagent")
    our_call = one(ours, "execute_tool subagent")
    research = one(ours, "invoke_agent research")
    assert parent_of(their_call) == span_id(named(theirs, "invoke_agent host")[0])
    assert parent_of(our_call) == span_id(their_call)  # nested under pydantic-ai's tool span
    assert parent_of(research) == span_id(our_call)
    # one trace: pydantic-ai's run of the parent, our spans, the child's own pydantic-ai run
    worker = one(theirs, "invoke_agent worker")
    assert {s.context.trace_id for s in (their_call, our_call, research, worker)} == {
        their_call.context.trace_id
    }


def test_obs_2_a_background_one_shot_starts_a_trace_linked_to_its_call(
    provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    background: JsonObject = {"description": "bg", "prompt": "later", "run_in_background": True}
    model_for = by_depth(
        lambda: ScriptedModel([call_tool("subagent", background), reply("started")]),
        lambda: ScriptedModel([reply("bg done")]),
    )

    async def main() -> None:
        async with ReferenceHarness.open(model_for) as harness:  # type: ignore[arg-type]
            traced(harness.service, provider)
            ended = asyncio.Event()
            harness.service.on("subagent/end", lambda _payload: ended.set())
            harness.install_tools()
            parent = await harness.create_agent("parent")
            parent.followup(create_user_message("delegate"))
            await parent.when_idle()
            await ended.wait()

    asyncio.run(main())
    spans = list(provider[1].get_finished_spans())
    call, run = one(spans, "execute_tool subagent"), one(spans, "invoke_agent bg")
    assert run.parent is None
    assert run.context is not None
    assert call.context is not None
    assert run.context.trace_id != call.context.trace_id
    assert links(run, "started-by") == [span_id(call)]
    assert dict(run.attributes or {})["dsh.subagent.background"] is True


# --------------------------------------------------------------------------- continuable


def test_obs_3_continuable_epochs_link_across_a_cold_resume_and_a_restart(
    tmp_path: Path, provider: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    db = tmp_path / "sessions.db"
    host = provider[0].get_tracer("host")

    def model_for(_session: object, _options: object) -> NullModel:
        return NullModel("ok")

    async def main() -> None:
        async with ReferenceHarness.open(model_for, db=db) as harness:
            traced(harness.service, provider)
            parent = await harness.create_agent("parent")
            with host.start_as_current_span("host start"):
                spec = ContinuableStartSpec(
                    "spawn", "worker", parent, "work", child_id=SessionId("worker")
                )
                await harness.service.start_continuable(spec)
            child = harness.registry.get(SessionId("worker"))
            assert child is not None
            await child.when_idle()
            await harness.service.drain_continuable_children(parent, [SessionId("worker")])
            await harness.service.followup(SessionId("worker"), "again", ParentAgent(parent))
        async with ReferenceHarness.open(model_for, db=db) as restarted:  # a new process
            traced(restarted.service, provider)
            grant = restarted.service.user_authority()
            await restarted.service.followup(SessionId("worker"), "once more", grant)
            stored = await restarted.persistence.load(SessionId("worker"))
            records = [e.data for e in stored.events if e.type == TRACE_EVENT]
            # The first process's two epochs, then this epoch's own record: it was appended
            # when the epoch started, before the follow-up's acceptance was committed (DUR-1).
            epochs = [r["epoch"] for r in records]  # type: ignore[index,call-overload]
            assert epochs == [1, 2, 1]

    asyncio.run(main())
    spans = list(provider[1].get_finished_spans())
    first, second, third = sorted(
        named(spans, "invoke_agent worker"), key=lambda s: s.start_time or 0
    )
    started = one(spans, "host start")
    followups = sorted(named(spans, "dsh.subagent.followup"), key=lambda s: s.start_time or 0)
    assert all(span.parent is None for span in (first, second, third))
    assert len({span.context.trace_id for span in (first, second, third) if span.context}) == 3
    assert links(first, "started-by") == [span_id(started)]
    assert links(first, "previous-epoch") == []
    assert links(second, "previous-epoch") == [span_id(first)]
    assert links(second, "started-by") == [span_id(followups[0])]
    assert links(third, "previous-epoch") == [span_id(second)]  # from the store, not memory
    for span in (first, second, third):
        attributes = dict(span.attributes or {})
        assert attributes["dsh.subagent.mode"] == "continuable"
        assert attributes["gen_ai.agent.id"] == "worker"
    assert [dict(s.attributes or {})["dsh.subagent.epoch"] for s in (first, second)] == [1, 2]
    routed = [event.attributes for event in followups[0].events]
    assert {"dsh.subagent.route": "resume"} in routed


def test_obs_4_a_drain_shows_the_child_first_teardown_of_a_three_level_tree(
    provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    gates = {name: Gate() for name in ("a", "b", "c")}

    def model_for(session: object, _options: object) -> ScriptedModel:
        gate = gates.get(session.header.id)  # type: ignore[attr-defined]
        return ScriptedModel([Gated(gate, reply("ok"))] if gate else [reply("ok")])

    async def main() -> None:
        async with ReferenceHarness.open(model_for) as harness:
            traced(harness.service, provider)
            service = harness.service
            owner = await harness.create_agent("parent")
            for name in ("a", "b", "c"):  # each starts while its parent's turn is held open
                spec = ContinuableStartSpec("spawn", name, owner, "work", child_id=SessionId(name))
                await service.start_continuable(spec)
                await gates[name].reached()
                child = harness.registry.get(SessionId(name))
                assert child is not None
                owner = child
            await service.drain_continuable()

    asyncio.run(main())
    spans = list(provider[1].get_finished_spans())
    drain = min(named(spans, "dsh.subagent.drain"), key=lambda s: s.start_time or 0)
    teardowns = {
        dict(span.attributes or {})["gen_ai.agent.id"]: span
        for span in named(spans, "dsh.subagent.teardown")
    }
    a, b, c = teardowns["a"], teardowns["b"], teardowns["c"]
    assert parent_of(a) == parent_of(b) == parent_of(c) == span_id(drain)
    # child-first: each teardown ends before its owner's begins, all inside the drain
    assert (drain.start_time or 0) <= (c.start_time or 0) <= (c.end_time or 0)
    assert (c.end_time or 0) <= (b.start_time or 0) <= (b.end_time or 0)
    assert (b.end_time or 0) <= (a.start_time or 0) <= (a.end_time or 0) <= (drain.end_time or 0)
    assert dict(b.attributes or {})["dsh.subagent.parent_id"] == "a"
    notices = named(spans, "dsh.subagent.notice")
    routes = {dict(n.attributes or {})["gen_ai.agent.id"]: n for n in notices}
    assert set(routes) == {"a", "b", "c"}
    assert parent_of(routes["a"]) == span_id(a)
    for notice in notices:
        route = dict(notice.attributes or {})["dsh.subagent.notice.route"]
        assert route in ("new-turn", "steer", "inject", "dropped")


# --------------------------------------------------------------------------- ACP


def test_obs_2_an_acp_child_is_a_client_span(
    tmp_path: Path, provider: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    pytest.importorskip("acp", reason="the agent-client-protocol SDK is not installed")
    from dsh_subagent.adapters.providers.acp import AcpAgentConfig, AcpProvider
    from tests.adapters.service_world import World, ask

    agent = Path(__file__).resolve().parents[1] / "acp_agent" / "scripted_agent.py"
    host = provider[0].get_tracer("host")

    async def main() -> None:
        world = World()
        traced(world.service, provider)
        config = AcpAgentConfig((sys.executable, str(agent), "answer"), handshake_timeout=20.0)
        world.service.register_provider(AcpProvider(config))
        parent = await world.parent(cwd=str(tmp_path))
        with host.start_as_current_span("host call"):
            run = await world.service.start("acp", ask(parent, label="remote"))
        await asyncio.wait_for(run.result, 20.0)
        await run.dispose()

    asyncio.run(main())
    spans = list(provider[1].get_finished_spans())
    remote, call = one(spans, "invoke_agent remote"), one(spans, "host call")
    assert remote.kind is trace.SpanKind.CLIENT
    assert parent_of(remote) == span_id(call)
    assert dict(remote.attributes or {})["dsh.subagent.provider"] == "acp"


# --------------------------------------------------------------------------- API only, logs


def test_obs_1_with_the_api_only_nothing_is_recorded_or_written() -> None:
    def model_for(_session: object, _options: object) -> NullModel:
        return NullModel("ok")

    async def main() -> None:
        async with ReferenceHarness.open(model_for) as harness:  # the global no-op provider
            parent = await harness.create_agent("parent")
            spec = ContinuableStartSpec("spawn", "w", parent, "work", child_id=SessionId("w"))
            await harness.service.start_continuable(spec)
            child = harness.registry.get(SessionId("w"))
            assert child is not None
            await child.when_idle()
            assert [e for e in child.session.events if e.type == TRACE_EVENT] == []

    assert not isinstance(trace.get_tracer_provider(), TracerProvider)
    asyncio.run(main())


def test_obs_1_without_the_api_the_tracing_path_is_skipped_at_import() -> None:
    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "from dsh_subagent.adapters import telemetry\n"
        "assert telemetry.AVAILABLE is False\n"
        "assert type(telemetry.attach(None)) is telemetry.Lifecycle\n"
        "from dsh_subagent import ReferenceHarness\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_obs_5_lifecycle_logs_carry_child_parent_and_run_ids(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def model_for(_session: object, _options: object) -> NullModel:
        return NullModel("ok")

    async def main() -> None:
        async with ReferenceHarness.open(model_for) as harness:
            parent = await harness.create_agent("parent")
            request = StartRequest("go", parent, AbortController().signal, label="logged")
            async with await harness.service.start("spawn", request) as run:
                await run.result

    with caplog.at_level(logging.INFO, logger="dsh_subagent.lifecycle"):
        asyncio.run(main())
    records = [r for r in caplog.records if r.name == "dsh_subagent.lifecycle"]
    assert [r.getMessage().split()[2] for r in records] == ["started", "ended:"]
    for record in records:
        assert record.parent_id == "parent"  # type: ignore[attr-defined]
        assert record.child_id  # type: ignore[attr-defined]
        assert record.run_id  # type: ignore[attr-defined]
    assert records[0].run_id == records[1].run_id  # type: ignore[attr-defined]


def test_obs_5_a_failing_listener_warning_carries_the_runs_fields(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def model_for(_session: object, _options: object) -> NullModel:
        return NullModel("ok")

    def broken(_payload: object) -> None:
        raise RuntimeError("listener broke")

    async def main() -> None:
        async with ReferenceHarness.open(model_for) as harness:
            harness.service.on("subagent/start", broken)
            harness.service.on("subagent/end", broken)
            parent = await harness.create_agent("parent")
            request = StartRequest("go", parent, AbortController().signal, label="logged")
            async with await harness.service.start("spawn", request) as run:
                await run.result

    with caplog.at_level(logging.WARNING, logger="dsh_subagent.adapters.service"):
        asyncio.run(main())
    warned = [r for r in caplog.records if "listener failed" in r.getMessage()]
    assert [r.getMessage().split()[0] for r in warned] == ["subagent/start", "subagent/end"]
    for record in warned:
        assert record.parent_id == "parent"  # type: ignore[attr-defined]
        assert record.child_id  # type: ignore[attr-defined]
        assert record.run_id  # type: ignore[attr-defined]
        assert record.epoch is None  # type: ignore[attr-defined]
    assert warned[0].run_id == warned[1].run_id  # type: ignore[attr-defined]


def test_obs_2_demo_trace_prints_the_span_tree_from_the_sdk(tmp_path: Path) -> None:
    # In a subprocess: ``--trace`` installs the global tracer provider, which this
    # process's other tests must never see.
    db = tmp_path / "d.db"
    code = f"from dsh_subagent.cli.main import cli; cli(['demo', '--trace', '--db', {str(db)!r}])"
    shown = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    tree = shown.stdout.split("the span tree", 1)[1]
    assert "invoke_agent researcher  (id=researcher, mode=continuable, epoch=1" in tree
    assert "└── dsh.subagent.teardown  (id=checker)" in tree
    assert "route=new-turn" in tree
    assert "previous-epoch -> invoke_agent writer" in tree
