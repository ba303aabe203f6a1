"""Issue 20, a harness author's first hour, through the public import only.

Resource safety (``async with`` on a harness and on a run, the unclosed-harness warning,
``agent(id)``, a stored id refused by ``create_agent``), the delegating model wired in one
call (``install_tools``), plain strings wherever content blocks are, and ``result.text``.
"""

from __future__ import annotations

import asyncio
import gc
import json
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh_subagent import (
    AbortController,
    ContinuableStartSpec,
    ErrorCode,
    KnownStop,
    NullModel,
    ParentAgent,
    ReferenceHarness,
    ReportDelivery,
    ScriptedModel,
    StartRequest,
    SubagentError,
    SubagentResult,
    SubagentToolConfig,
    TextBlock,
    call_tool,
    create_user_message,
    reply,
)
from dsh_subagent.adapters.reference.scripted_model import Gate, Gated


def null_model(_session: object, _options: object) -> NullModel:
    return NullModel("done")


def texts(events: object) -> str:
    """Every event payload of a log as JSON (to find a text in it)."""
    return json.dumps([event.data for event in events])  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- resource safety


def test_issue20_harness_async_with_closes_and_keeps_the_store(tmp_path: Path) -> None:
    db = tmp_path / "sessions.db"

    async def main() -> None:
        async with ReferenceHarness.open(null_model, db=db) as harness:
            parent = await harness.create_agent("parent")
            parent.followup(create_user_message("hello"))
            await parent.when_idle()
        with pytest.raises(SubagentError) as closed:
            await harness.persistence.list()
        assert closed.value.code is ErrorCode.PERSISTENCE_UNAVAILABLE
        # An awaited harness is its own context manager too.
        async with await ReferenceHarness.open(null_model, db=db) as again:
            assert [h.id for h in await again.persistence.list()] == ["parent"]

    asyncio.run(main())


def test_issue20_async_with_closes_the_harness_when_the_block_raises(tmp_path: Path) -> None:
    opened: list[ReferenceHarness] = []

    async def main() -> None:
        async with ReferenceHarness.open(null_model, db=tmp_path / "s.db") as harness:
            opened.append(harness)
            await harness.create_agent("parent")
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        asyncio.run(main())
    assert opened[0].registry.list() == []
    with pytest.raises(SubagentError, match="closed"):
        asyncio.run(opened[0].persistence.list())


def test_issue20_unclosed_harness_warns_with_a_resource_warning() -> None:
    async def main() -> None:
        harness = await ReferenceHarness.open(null_model)
        await harness.create_agent("parent")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        asyncio.run(main())
        gc.collect()
    unclosed = [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert any("unclosed" in str(w.message) and "close()" in str(w.message) for w in unclosed)


def test_issue20_closed_harness_does_not_warn() -> None:
    async def main() -> None:
        harness = await ReferenceHarness.open(null_model)
        await harness.create_agent("parent")
        await harness.close()

    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        asyncio.run(main())
        gc.collect()


def test_issue20_one09_async_with_on_a_run_disposes_it() -> None:
    async def main() -> None:
        async with ReferenceHarness.open(null_model) as harness:
            parent = await harness.create_agent("parent")
            request = StartRequest("summarise", parent, AbortController().signal)
            async with await harness.service.start("spawn", request) as run:
                result = await run.result
                assert result.text == "done"
                child = run.local_agent
                assert child is not None
                assert child in harness.registry.list()
            assert harness.registry.get(child.id) is None  # released on exit

    asyncio.run(main())


def test_issue20_harness17_create_agent_refuses_a_stored_id_naming_resume(tmp_path: Path) -> None:
    db = tmp_path / "sessions.db"

    async def main() -> None:
        async with ReferenceHarness.open(null_model, db=db) as harness:
            await harness.create_agent("parent")
        async with ReferenceHarness.open(null_model, db=db) as harness:
            with pytest.raises(SubagentError) as refused:
                await harness.create_agent("parent")
            assert refused.value.code is ErrorCode.INVALID_ARGUMENT
            assert refused.value.field == "session_id"
            assert "resume_agent('parent')" in refused.value.message
            assert "agent('parent')" in refused.value.message
            assert harness.registry.list() == []  # refused before anything was created
        # The store is intact: the refusal did not poison the close.
        async with ReferenceHarness.open(null_model, db=db) as harness:
            assert [h.id for h in await harness.persistence.list()] == ["parent"]

    asyncio.run(main())


def test_issue20_harness17_agent_returns_live_resumes_stored_or_creates(tmp_path: Path) -> None:
    db = tmp_path / "sessions.db"

    async def main() -> None:
        async with ReferenceHarness.open(null_model, db=db) as harness:
            created = await harness.agent("parent", cwd="/work")
            assert await harness.agent("parent") is created
            created.followup(create_user_message("remember me"))
            await created.when_idle()
        async with ReferenceHarness.open(null_model, db=db) as harness:
            resumed = await harness.agent("parent")
            assert resumed.session.header.cwd == "/work"
            assert "remember me" in texts(resumed.session.events)

    asyncio.run(main())


# --------------------------------------------------------------------------- install_tools


def delegating_model(session: object, _options: object) -> ScriptedModel:
    if session.header.parent_session is None:  # type: ignore[attr-defined]
        ask = {"description": "multiply", "prompt": "What is 6 x 7?"}
        return ScriptedModel([call_tool("subagent", ask), reply("It is 42.")])
    return ScriptedModel([reply("42")])


def test_issue20_tool16_install_tools_wires_the_calling_agent_in_one_call() -> None:
    async def main() -> None:
        async with ReferenceHarness.open(delegating_model) as harness:
            harness.install_tools()
            parent = await harness.create_agent("parent")
            parent.followup(create_user_message("Ask a helper."))
            await parent.when_idle()
            results = [e.data for e in parent.session.events if e.type == "tool/result"]
            assert len(results) == 1
            assert results[0]["isError"] is False  # type: ignore[index,call-overload]
            assert results[0]["content"][0]["text"] == "42"  # type: ignore[index,call-overload]
            for name in ("task_output", "task_status", "task_list", "task_kill"):
                assert harness.tools.get(name) is not None  # background one-shot needs them

    asyncio.run(main())


def test_issue20_install_tools_control_report_and_its_disposer() -> None:
    async def main() -> None:
        async with ReferenceHarness.open(null_model) as harness:
            config = SubagentToolConfig(
                "spawn", tool_name="delegate", enable_run_in_background=False
            )
            uninstall = harness.install_tools(subagent=config, control=True, report=True)
            names = ("delegate", "send_message", "interrupt_agent", "list_agents")
            assert all(harness.tools.get(name) is not None for name in names)
            assert harness.tools.get("task_output") is None
            uninstall()
            assert all(harness.tools.get(name) is None for name in names)
            again = harness.install_tools(subagent=False, control=True)
            assert harness.tools.get("subagent") is None
            assert harness.tools.get("send_message") is not None
            again()

    asyncio.run(main())


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"subagent": "spawn"}, "subagent"),
        ({"control": 1}, "control"),
        ({"report": None}, "report"),
    ],
)
def test_issue20_install_tools_refuses_bad_arguments_before_installing(
    arguments: dict[str, object], field: str
) -> None:
    async def main() -> None:
        async with ReferenceHarness.open(null_model) as harness:
            with pytest.raises(SubagentError) as refused:
                harness.install_tools(**arguments)  # type: ignore[arg-type]
            assert (refused.value.code, refused.value.field) == (ErrorCode.INVALID_ARGUMENT, field)
            assert harness.tools.get("subagent") is None

    asyncio.run(main())


# --------------------------------------------------------------------------- str content


def test_issue20_a_string_is_one_text_block_in_every_content_position() -> None:
    gate = Gate()
    children: Iterator[ScriptedModel | NullModel] = iter(
        [NullModel("one-shot ok"), ScriptedModel([Gated(gate, reply("ok")), reply("")])]
    )

    def model_for(session: object, _options: object) -> ScriptedModel | NullModel:
        if session.header.parent_session is None:  # type: ignore[attr-defined]
            return NullModel("parent ok")
        return next(children)  # the one-shot child, then the continuable one

    async def main() -> None:
        async with ReferenceHarness.open(model_for) as harness:
            parent = await harness.create_agent("parent")
            signal = AbortController().signal
            assert StartRequest("go", parent, signal) == StartRequest(
                (TextBlock("go"),), parent, signal
            )
            run = await harness.service.start("spawn", StartRequest("go", parent, signal))
            async with run:
                assert (await run.result).text == "one-shot ok"
            spec = ContinuableStartSpec("spawn", "helper", parent, "survey")
            assert spec.intent.prompt == (TextBlock("survey"),)
            child = await harness.service.start_continuable(spec)
            await gate.reached()
            child_agent = harness.registry.get(child.child_id)
            assert child_agent is not None
            assert "survey" in texts(child_agent.session.events)
            harness.service.report_from(child_agent, "half way", delivery=ReportDelivery.QUIET)
            await harness.service.followup(child.child_id, "and the docs", ParentAgent(parent))
            gate.open()
            await child_agent.when_idle()
            assert "and the docs" in texts(child_agent.session.events)
            assert "half way" in texts(parent.session.events)
            assert create_user_message("hi").content == (TextBlock("hi"),)

    asyncio.run(main())


def test_issue20_a_string_prompt_keeps_the_blank_refusal() -> None:
    async def main() -> None:
        async with ReferenceHarness.open(null_model) as harness:
            parent = await harness.create_agent("parent")
            with pytest.raises(SubagentError) as refused:
                await harness.service.start(
                    "spawn", StartRequest("  ", parent, AbortController().signal)
                )
            assert refused.value.field == "request.prompt"
            assert refused.value.message == "request.prompt: must not be blank"

    asyncio.run(main())


def test_issue20_result_text_joins_the_text_blocks_only() -> None:
    result = SubagentResult(
        (
            {"type": "text", "text": "a"},
            {"type": "data", "value": 1},
            {"type": "text", "text": "b"},
        ),
        KnownStop.COMPLETED,
    )
    assert result.text == "ab"
    assert SubagentResult((), KnownStop.ERROR).text == ""
