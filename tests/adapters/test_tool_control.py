"""The control tools and continuable background starts (CTRL-*, BG-20..28)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from dsh_subagent.adapters.protocols import CreateOptions, create_user_message
from dsh_subagent.adapters.reference.agent_loop import ReferenceAgent
from dsh_subagent.adapters.reference.scripted_model import Gate, Gated, call_tool, fail, reply
from dsh_subagent.adapters.reference.tool_registry import ToolRegistry
from dsh_subagent.adapters.service import SubagentService
from dsh_subagent.adapters.signals import AbortController, AbortSignal
from dsh_subagent.adapters.tools import BackgroundMode, ControlTools
from dsh_subagent.adapters.tools.calling import acting_as
from dsh_subagent.adapters.tools.control import render_entry
from dsh_subagent.core import wire
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.listing import ChildRow, DiagnosticKind, ListingDiagnostic
from dsh_subagent.core.values import (
    USER_MESSAGE,
    CoordinatorSource,
    JsonObject,
    MessageId,
    SessionEvent,
    SessionId,
    TextBlock,
    UserMessage,
    text_of,
)
from tests.adapters.continuation_harness import user_messages
from tests.adapters.tools_world import (
    ToolsWorld,
    as_caller,
    call,
    check_snapshot,
    run,
    started_id,
    text,
    transcript,
    without_caller,
)

CONTINUABLE = BackgroundMode.CONTINUABLE


def start_args(prompt: str, label: str = "worker") -> JsonObject:
    return {"description": label, "prompt": prompt}


async def continuable_world() -> tuple[ToolsWorld, ReferenceAgent]:
    world = ToolsWorld()
    world.tool("spawn", background_mode=CONTINUABLE)
    world.tool("spawn", tool_name="one_shot")
    return world, await world.parent()


def live(world: ToolsWorld, child_id: str) -> ReferenceAgent:
    agent = world.registry.get(SessionId(child_id))
    assert agent is not None
    return agent


# ----------------------------------------------------------------------------- packaging


def test_ctrl_1_the_three_tools_register_and_unregister_together() -> None:
    world = ToolsWorld()
    registry = ToolRegistry()
    remove = ControlTools(world.service).register(registry)
    assert registry.names() == ("send_message", "interrupt_agent", "list_agents")
    remove()
    assert registry.names() == ()


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("send_message", {"subagent_id": "x", "message": "hi"}),
        ("interrupt_agent", {"agent_id": "x"}),
        ("list_agents", {}),
    ],
)
def test_ctrl_2_each_tool_needs_a_calling_agent(name: str, arguments: JsonObject) -> None:
    async def main() -> None:
        world = ToolsWorld()
        outcome = await without_caller(world, name, arguments)
        assert text(outcome) == f"Error: {name} requires a calling agent (exec.agent was undefined)"

    run(main)


@pytest.mark.parametrize("name", ["send_message", "interrupt_agent", "list_agents"])
def test_ctrl_3_schema_and_description_snapshots(name: str) -> None:
    world = ToolsWorld()
    tool = world.globals.get(name)
    assert tool is not None
    check_snapshot(name, tool)


def test_ctrl_3_send_message_wording() -> None:
    world = ToolsWorld()
    tool = world.globals.get("send_message")
    assert tool is not None
    assert "next turn" in tool.description
    for absent in ("task_output", "job_output", "job id"):
        assert absent not in tool.description


# ----------------------------------------------------------------------------- send_message


def test_ctrl_4_the_message_is_relayed_with_coordinator_provenance() -> None:
    async def main() -> None:
        world, parent = await continuable_world()
        world.model.script("first", reply("one"), reply("two"))
        child_id = started_id(await call(parent, "subagent", start_args("first")))
        await world.settle()
        sent = await call(parent, "send_message", {"subagent_id": child_id, "message": "more"})
        assert text(sent) == f"message queued as the next turn for subagent {child_id}"
        await world.settle()
        child = world.registry.get(child_id)
        record = (
            child.session.events
            if child is not None
            else (await world.persistence.load(child_id)).events
        )
        relayed = [m for m in _messages(record) if isinstance(m.source, CoordinatorSource)]
        assert [(text_of(m.content), m.source) for m in relayed] == [
            ("more", CoordinatorSource(SessionId("parent")))
        ]

    run(main)


def _messages(events: Sequence[SessionEvent]) -> list[UserMessage]:
    return [
        wire.decode_message(event.data["message"], "m")  # type: ignore[index,call-overload]
        for event in events
        if event.type == USER_MESSAGE
    ]


def test_ctrl_5_absent_children_are_cold_resumed_or_refused() -> None:
    async def main() -> None:
        world, parent = await continuable_world()
        child_id = started_id(await call(parent, "subagent", start_args("first")))
        await world.settle()
        assert world.registry.get(child_id) is None  # settled and released
        world.model.script("first", reply("resumed answer"))
        sent = await call(parent, "send_message", {"subagent_id": child_id, "message": "again"})
        assert text(sent) == f"message queued as the next turn for subagent {child_id}"
        await world.settle()
        assert transcript(parent)[-2][1].endswith("Its closing message: | resumed answer")
        unknown = await call(parent, "send_message", {"subagent_id": "ghost", "message": "x"})
        assert text(unknown) == 'Error: subagent "ghost" is unavailable'

    run(main)


def test_ctrl_5_a_one_shot_child_cannot_be_resumed() -> None:
    async def main() -> None:
        world, parent = await continuable_world()
        await call(parent, "one_shot", start_args("once"))
        rows = await world.service.list_children(parent.id)
        assert len(rows) == 1
        row = rows[0]
        assert isinstance(row, ChildRow)
        sent = await call(parent, "send_message", {"subagent_id": row.id, "message": "x"})
        assert text(sent) == (
            f'Error: subagent "{row.id}" has no supported continuation state and cannot be '
            "resumed; do not retry send_message with this id"
        )

    run(main)


def test_ctrl_7_only_the_exact_live_parent_may_send() -> None:
    async def main() -> None:
        world, parent = await continuable_world()
        gate = Gate()
        world.model.script("first", Gated(gate, reply("one")))
        child_id = started_id(await call(parent, "subagent", start_args("first")))
        other = await world.parent("other")
        refused = await call(other, "send_message", {"subagent_id": child_id, "message": "x"})
        assert text(refused) == f'Error: subagent "{child_id}" belongs to another parent session'
        stale = ReferenceAgent(parent.session, model=world.model)
        refused = await as_caller(
            world, stale, "send_message", {"subagent_id": child_id, "message": "x"}
        )
        assert text(refused) == (
            f'Error: subagent "{child_id}" delivery requires the exact live parent agent'
        )
        gate.open()
        await world.settle()

    run(main)


# ----------------------------------------------------------------------------- interrupt_agent


def test_ctrl_9_interrupt_authority() -> None:
    async def main() -> None:
        world, parent = await continuable_world()
        gate = Gate()
        world.model.script("first", Gated(gate, reply("one")))
        child_id = started_id(await call(parent, "subagent", start_args("first")))
        assert text(await call(parent, "interrupt_agent", {"agent_id": "parent"})) == (
            'Error: agent "parent" cannot interrupt itself'
        )
        other = await world.parent("other")
        assert text(await call(other, "interrupt_agent", {"agent_id": child_id})) == (
            f'Error: subagent "{child_id}" is not a live descendant of agent "other"'
        )
        stale = ReferenceAgent(parent.session, model=world.model)
        refused = await as_caller(world, stale, "interrupt_agent", {"agent_id": "ghost"})
        assert text(refused) == 'Error: interrupting "ghost" requires the exact live ancestor agent'
        assert text(await call(parent, "interrupt_agent", {"agent_id": "ghost"})) == (
            "interrupt requested for agent ghost"
        )
        gate.open()
        await world.settle()

    run(main)


def test_ctrl_10_interrupt_stops_the_turn_and_parks_the_queue() -> None:
    async def main() -> None:
        world, parent = await continuable_world()
        gate = Gate()
        world.model.script("first", Gated(gate, reply("never")))
        child_id = started_id(await call(parent, "subagent", start_args("first")))
        await gate.reached()
        await call(parent, "send_message", {"subagent_id": child_id, "message": "queued"})
        child = live(world, child_id)
        outcome = await call(parent, "interrupt_agent", {"agent_id": child_id})
        assert text(outcome) == f"interrupt requested for agent {child_id}"
        await child.when_idle()
        assert [text_of(m.content) for m in child.next_turn] == ["queued"]
        assert world.registry.get(child_id) is child  # still available

    run(main)


# ----------------------------------------------------------------------------- list_agents


def test_ctrl_12_list_agents_wording() -> None:
    world = ToolsWorld()
    tool = world.globals.get("list_agents")
    assert tool is not None
    for pinned in (
        "send_message",
        "interrupt_agent",
        "you are told when one finishes",
        "resumable, not terminal",
    ):
        assert pinned in tool.description
    assert tool.schema.get("required") == []


def test_ctrl_13_children_and_descendants_with_live_statuses() -> None:
    async def main() -> None:
        world, parent = await continuable_world()
        assert text(await call(parent, "list_agents")) == "(no subagents)"
        await call(parent, "one_shot", start_args("once"))
        gate = Gate()
        world.model.script(
            "lead",
            call_tool("subagent", {"description": "helper", "prompt": "helper task"}),
            reply("waiting on my helper"),
        )
        world.model.script("helper task", Gated(gate, reply("helped")))
        lead = started_id(await call(parent, "subagent", start_args("lead", "lead")))
        await gate.reached()
        await live(world, lead).when_idle()
        helper = next(a.id for a in world.registry.list() if a.id not in (lead, "parent"))
        assert text(await call(parent, "list_agents")) == f"{lead} [idle] — lead"
        assert text(await call(parent, "list_agents", {"scope": "descendants"})) == (
            f"{lead} [idle] parent=parent depth=1 — lead\n"
            f"{helper} [running] parent={lead} depth=2 — helper"
        )
        gate.open()
        await world.settle()
        assert text(await call(parent, "list_agents")) == f"{lead} [ready] — lead"

    run(main)


class CancelledListing(SubagentService):
    async def list_children(
        self, parent_id: SessionId, *, signal: AbortSignal | None = None
    ) -> list[ChildRow | ListingDiagnostic]:
        raise SubagentError(ErrorCode.CANCELLED, "listing subagents was cancelled")


def test_ctrl_16_listing_errors() -> None:
    async def main() -> None:
        world = ToolsWorld()
        parent = await world.parent()
        tools = ControlTools(SubagentService(world.registry, world.store))
        outcome = await tools.list_agents({}, _signal())
        assert (
            text(outcome)
            == "Error: list_agents requires a calling agent (exec.agent was undefined)"
        )
        with acting_as(parent):
            outcome = await tools.list_agents({}, _signal())
            assert text(outcome) == (
                "Error: listing subagents requires the session projection registry"
            )
            cancelled = ControlTools(CancelledListing(world.registry, world.store))
            outcome = await cancelled.list_agents({}, _signal())
            assert text(outcome) == "Error: subagent listing was cancelled"

    run(main)


def _signal() -> AbortSignal:
    return AbortController().signal


def test_ctrl_15_diagnostics_are_kept() -> None:
    row = ListingDiagnostic(DiagnosticKind.CORRUPT, SessionId("c1"), "bad")
    assert render_entry(row, "") == "c1 [diagnostic: corrupt]"
    assert render_entry(row, "", SessionId("p"), 2) == "c1 [diagnostic: corrupt] parent=p depth=2"


# ----------------------------------------------------------------------------- continuable start


def test_bg_20_a_continuable_start_returns_only_the_child_id() -> None:
    async def main() -> None:
        world, parent = await continuable_world()
        outcome = await call(parent, "subagent", start_args("first"))
        child_id = started_id(outcome)
        assert world.jobs.list(parent) == []
        assert text(await call(parent, "task_kill", {"task_id": child_id})) == (
            f"Error: unknown task {child_id}"
        )
        await world.settle()

    run(main)


def test_bg_24_every_epoch_sends_its_own_settlement_notice() -> None:
    async def main() -> None:
        world, parent = await continuable_world()
        world.model.script("first", reply("first answer"))
        child_id = started_id(await call(parent, "subagent", start_args("first")))
        await world.settle()
        await call(parent, "send_message", {"subagent_id": child_id, "message": "again"})
        await world.settle()
        notices = [row for row in transcript(parent) if row[0] == "user"]
        summary = (
            f"Background subagent {child_id} finished and will do no further work unless you "
            "send it more."
        )
        assert notices == [
            ("user", f"{summary} | Its closing message: | first answer"),
            ("user", f"{summary} | Its closing message: | ok"),
        ]

    run(main)


def test_bg_26_a_failed_epoch_is_announced_as_failed() -> None:
    async def main() -> None:
        world, parent = await continuable_world()
        world.model.script("first", fail("model down"))
        child_id = started_id(await call(parent, "subagent", start_args("first")))
        await world.settle()
        notices = user_messages(parent)
        assert [text_of(m.content[:1]) for m in notices] == [
            f"Background subagent {child_id} failed before it finished."
        ]
        assert text_of(notices[0].content[1:]) == "It left no closing message."

    run(main)


def test_bg_27_an_idle_parent_gets_a_new_turn_for_the_notice() -> None:
    async def main() -> None:
        world, parent = await continuable_world()
        world.model.script("parent", reply("noted"))
        started_id(await call(parent, "subagent", start_args("first")))
        await world.settle()
        assert transcript(parent)[-1] == ("assistant", "noted")
        parent.followup(create_user_message((TextBlock("thanks"),)))
        await world.settle()

    run(main)


class BrokenFollowup(SubagentService):
    async def followup(self, *args: object, **kwargs: object) -> MessageId:
        raise RuntimeError("transport down")


def test_ctrl_7_other_failures_pass_through() -> None:
    async def main() -> None:
        world = ToolsWorld()
        parent = await world.parent()
        tools = ControlTools(BrokenFollowup(world.registry, world.store))
        with acting_as(parent):
            outcome = await tools.send_message({"subagent_id": "c", "message": "m"}, _signal())
        assert text(outcome) == "Error: transport down"

    run(main)


def test_bg_25_a_notice_for_a_parent_that_is_not_live_is_dropped() -> None:
    async def main() -> None:
        world = ToolsWorld()
        world.tool("spawn", background_mode=CONTINUABLE)
        handle = await world.registry.create(CreateOptions(SessionId("parent")))
        child_id = started_id(await call(handle.agent, "subagent", start_args("lead")))
        await world.settle()
        await handle.dispose()
        world.model.script("lead", reply("after the parent left"))
        grant = world.service.user_authority()
        await world.service.followup(SessionId(child_id), (TextBlock("again"),), grant)
        await world.settle()
        assert world.service.activation_state(child_id) is None
        assert world.registry.get(SessionId("parent")) is None
        child_log = (await world.persistence.load(child_id)).events
        assert any("after the parent left" in str(e.data) for e in child_log)

    run(main)
