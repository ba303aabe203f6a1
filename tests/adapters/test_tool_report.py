"""The child-scoped ``report`` tool (REPORT-*)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from dsh_subagent.adapters.protocols import CreateOptions
from dsh_subagent.adapters.reference.agent_loop import ReferenceAgent
from dsh_subagent.adapters.reference.scripted_model import Gate, Gated, call_tool, reply
from dsh_subagent.adapters.signals import AbortController
from dsh_subagent.adapters.tools import BackgroundMode, ReportTool
from dsh_subagent.adapters.tools.report import REPORT_GUIDANCE
from dsh_subagent.core import wire
from dsh_subagent.core.errors import SubagentError
from dsh_subagent.core.manager.events import ReportDelivery
from dsh_subagent.core.values import (
    Content,
    JsonValue,
    SessionId,
    SubagentReportSource,
    TextBlock,
    ToolFilter,
    text_of,
)
from tests.adapters.continuation_harness import user_messages
from tests.adapters.tools_world import (
    ToolsWorld,
    call,
    check_snapshot,
    run,
    started_id,
    text,
    transcript,
)

CONTINUABLE = BackgroundMode.CONTINUABLE


async def reporting_world(
    delivery: ReportDelivery = ReportDelivery.NEXT_STEP, **fields: object
) -> tuple[ToolsWorld, ReferenceAgent]:
    world = ToolsWorld(report_delivery=delivery)
    world.tool("spawn", background_mode=CONTINUABLE, **fields)
    world.tool("spawn", tool_name="one_shot")
    return world, await world.parent()


def seen_by(world: ToolsWorld, agent_id: str) -> tuple[tuple[str, ...], set[str]]:
    """The tools and system-prompt sections of the agent's last model request."""
    request = [r for r in world.model.requests if r.agent == agent_id][-1]
    return request.tools, {name for name, _, _ in request.system_prompt}


def test_report_1_only_continuable_children_get_report() -> None:
    async def main() -> None:
        world, parent = await reporting_world(tool_filter=ToolFilter(allow=("task_list",)))
        world.model.script("parent", reply("hello"))
        await call(parent, "one_shot", {"description": "once", "prompt": "once"})
        gate = Gate()
        world.model.script("lead", Gated(gate, reply("done")))
        child_id = started_id(
            await call(parent, "subagent", {"description": "l", "prompt": "lead"})
        )
        await gate.reached()
        tools, sections = seen_by(world, child_id)
        assert tools == ("task_list", "report")  # the allow-list cannot remove it
        assert "tool:report" in sections
        one_shot = next(r.agent for r in world.model.requests if r.agent not in (child_id,))
        assert "report" not in seen_by(world, one_shot)[0]
        child = world.registry.get(child_id)
        assert child is not None
        world.uninstall_report()
        assert child.tools.get("report") is None
        assert "tool:report" not in {part.name for part in child.prompt.system_prompt()}
        gate.open()
        await world.settle()
        assert "report" not in parent.tools.names()

    run(main)


def test_report_2_delivery_is_validated() -> None:
    world = ToolsWorld()
    with pytest.raises(SubagentError) as caught:
        ReportTool(world.service, world.registry, "wakeup")  # type: ignore[arg-type]
    assert caught.value.field == "delivery"


def test_report_3_schema_and_description_snapshot() -> None:
    async def main() -> None:
        world = ToolsWorld()
        parent = await world.parent()
        tool = world.report.tool_for(parent)
        assert tool.schema["required"] == ["output"]
        check_snapshot("report", tool)

    run(main)


def test_report_4_only_a_resident_child_may_report() -> None:
    async def main() -> None:
        world = ToolsWorld()
        parent = await world.parent()
        tool = world.report.tool_for(parent)
        outcome = await tool.handler({"output": "x"}, AbortController().signal)
        assert text(outcome) == (
            'Error: agent "parent" is not a live continuable subagent and cannot report'
        )
        aborted = AbortController()
        aborted.abort("gone")
        outcome = await tool.handler({"output": "x"}, aborted.signal)
        assert text(outcome) == "Error: tool call aborted before dispatch"

    run(main)


def test_report_5_the_parent_receives_a_framed_relay() -> None:
    async def main() -> None:
        world, parent = await reporting_world()
        world.model.script("lead", call_tool("report", {"output": "the finding"}), reply("done"))
        child_id = started_id(
            await call(parent, "subagent", {"description": "l", "prompt": "lead"})
        )
        await world.settle()
        reports = [m for m in user_messages(parent) if isinstance(m.source, SubagentReportSource)]
        assert len(reports) == 1
        assert [text_of((block,)) for block in reports[0].content] == [
            f"Background subagent {child_id} reported:",
            "the finding",
        ]
        assert reports[0].source == SubagentReportSource(SessionId(child_id))

    run(main)


def test_report_6_quiet_reports_wait_for_something_else_to_wake_the_parent() -> None:
    async def main() -> None:
        world, parent = await reporting_world(ReportDelivery.QUIET)
        gate = Gate()
        world.model.script(
            "lead", call_tool("report", {"output": "quiet finding"}), Gated(gate, reply("done"))
        )
        child_id = started_id(
            await call(parent, "subagent", {"description": "l", "prompt": "lead"})
        )
        await gate.reached()
        await parent.when_idle()
        assert transcript(parent) == []  # injected, no turn
        assert len(parent.next_step) == 1
        gate.open()
        await world.settle()
        rows = transcript(parent)
        assert rows[0] == ("user", f"Background subagent {child_id} reported: | quiet finding")
        assert rows[1][1].startswith(f"Background subagent {child_id} finished")
        assert rows[2] == ("assistant", "ok")  # one step took both

    run(main)


def test_report_7_the_answer_names_the_accepted_message() -> None:
    async def main() -> None:
        world, parent = await reporting_world()
        world.model.script(
            "lead",
            call_tool("report", {"output": "one"}),
            call_tool("report", {"output": "two"}),
            reply("done"),
        )
        child_id = started_id(
            await call(parent, "subagent", {"description": "l", "prompt": "lead"})
        )
        await world.settle()
        child_log = (await world.persistence.load(SessionId(child_id))).events
        answers = [
            text_of(_content(event.data)) for event in child_log if event.type == "tool/result"
        ]
        reports = [m for m in user_messages(parent) if isinstance(m.source, SubagentReportSource)]
        assert answers == [
            f"report accepted by the agent that started you as message {m.id}" for m in reports
        ]
        assert [text_of(m.content[1:]) for m in reports] == ["one", "two"]

    run(main)


def _content(data: JsonValue) -> Content:
    assert isinstance(data, Mapping)
    return wire.decode_content(data["content"], "c")


def test_report_8_a_report_precedes_the_settlement_notice() -> None:
    async def main() -> None:
        world, parent = await reporting_world()
        world.model.script("lead", call_tool("report", {"output": "finding"}), reply("done"))
        child_id = started_id(
            await call(parent, "subagent", {"description": "l", "prompt": "lead"})
        )
        await world.settle()
        users = [row[1] for row in transcript(parent) if row[0] == "user"]
        assert users[0] == f"Background subagent {child_id} reported: | finding"
        assert users[1].startswith(f"Background subagent {child_id} finished")

    run(main)


def test_report_9_a_report_stays_delivered_after_settlement() -> None:
    async def main() -> None:
        world, parent = await reporting_world()
        world.model.script("lead", call_tool("report", {"output": "kept"}), reply("done"))
        child_id = started_id(
            await call(parent, "subagent", {"description": "l", "prompt": "lead"})
        )
        await world.settle()
        assert world.service.activation_state(child_id) is None
        assert any(
            isinstance(m.source, SubagentReportSource) and text_of(m.content[1:]) == "kept"
            for m in user_messages(parent)
        )

    run(main)


def test_report_1_the_guidance_section_text() -> None:
    assert REPORT_GUIDANCE.startswith("Deliver your result with the report tool before you finish")


def test_report_4_a_report_without_a_live_parent_is_refused() -> None:
    async def main() -> None:
        world = ToolsWorld()
        world.tool("spawn", background_mode=CONTINUABLE)
        handle = await world.registry.create(CreateOptions(SessionId("parent")))
        parent = handle.agent
        child_id = started_id(
            await call(parent, "subagent", {"description": "l", "prompt": "lead"})
        )
        await world.settle()
        await handle.dispose()
        world.model.script("lead", call_tool("report", {"output": "late"}), reply("done"))
        grant = world.service.user_authority()
        await world.service.followup(SessionId(child_id), (TextBlock("again"),), grant)
        await world.settle()
        events = (await world.persistence.load(SessionId(child_id))).events
        answers = [text_of(_content(e.data)) for e in events if e.type == "tool/result"]
        assert answers == ["Error: direct parent is not live; report was not delivered"]

    run(main)
