"""End to end on the reference loop with a scripted model (issue #8, "Done means").

The parent model delegates in the foreground, in the background (then collects the task),
starts a continuable child, sends it a follow-up and lists its agents; the child reports,
then settles; the parent's transcript is checked message by message.
"""

from __future__ import annotations

from collections.abc import Mapping

from dsh_subagent.adapters.protocols import (
    AgentStatus,
    ModelRequest,
    ModelStep,
    create_user_message,
)
from dsh_subagent.adapters.reference.scripted_model import Gate, Gated, call_tool, reply
from dsh_subagent.adapters.tools import BackgroundMode
from dsh_subagent.core import wire
from dsh_subagent.core.values import TOOL_RESULT, SessionId, TextBlock, text_of
from tests.adapters.tools_world import ToolsWorld, run, transcript, until

PREFIX = "started subagent "


def continuable_id(request: ModelRequest) -> str:
    """The child id from the parent's last ``delegate`` tool result."""
    for event in reversed(request.events):
        data = event.data
        if event.type == TOOL_RESULT and isinstance(data, Mapping) and data["tool"] == "delegate":
            return text_of(wire.decode_content(data["content"], "c"))[len(PREFIX) :]
    raise AssertionError("no delegate result yet")


def send_follow_up(request: ModelRequest) -> ModelStep:
    return call_tool(
        "send_message", {"subagent_id": continuable_id(request), "message": "follow up"}
    )


def test_tools_e2e_parent_transcript() -> None:
    async def main() -> None:
        world = ToolsWorld()
        world.tool("spawn")
        world.tool("spawn", tool_name="delegate", background_mode=BackgroundMode.CONTINUABLE)
        parent = await world.parent()
        background, first_step, second_turn = Gate(), Gate(), Gate()
        world.model.script(
            "parent",
            call_tool("subagent", {"description": "research", "prompt": "fg task"}),
            call_tool(
                "subagent",
                {"description": "scan", "prompt": "bg task", "run_in_background": True},
            ),
            call_tool("delegate", {"description": "worker", "prompt": "cont task"}),
            call_tool("task_output", {"task_id": "subagent-1", "wait": True}),
            send_follow_up,
            call_tool("list_agents"),
            reply("waiting for the worker"),
            reply("noted report"),
            reply("all done"),
        )
        world.model.script("fg task", reply("fg result"))
        world.model.script("bg task", Gated(background, reply("bg result")))
        world.model.script(
            "cont task",
            Gated(first_step, call_tool("report", {"output": "interim finding"})),
            Gated(second_turn, reply("first answer")),
            reply("second answer"),
        )

        parent.followup(create_user_message((TextBlock("go"),)))
        await background.reached()
        await until(lambda: world.jobs.status("subagent-1", parent).status.value == "running")
        await until(lambda: world.jobs._jobs["subagent-1"].waiters)  # the parent is collecting
        background.open()
        await parent.when_idle()
        await first_step.reached()
        first_step.open()
        await second_turn.reached()
        await until(lambda: ("assistant", "noted report") in transcript(parent))
        await parent.when_idle()
        second_turn.open()
        await world.settle()

        child = next(event for event in transcript(parent) if event[1].startswith(PREFIX))[1][
            len(PREFIX) :
        ]
        settled = (
            f"Background subagent {child} finished and will do no further work unless you send "
            "it more."
        )
        assert transcript(parent) == [
            ("user", "go"),
            ("assistant", "call subagent"),
            ("tool subagent", "fg result"),
            ("assistant", "call subagent"),
            ("tool subagent", "started background subagent task subagent-1"),
            ("assistant", "call delegate"),
            ("tool delegate", f"started subagent {child}"),
            ("assistant", "call task_output"),
            ("tool task_output", "bg result\n[status: completed]"),
            ("assistant", "call send_message"),
            ("tool send_message", f"message queued as the next turn for subagent {child}"),
            ("assistant", "call list_agents"),
            ("tool list_agents", f"{child} [running] — worker"),
            ("assistant", "waiting for the worker"),
            ("user", f"Background subagent {child} reported: | interim finding"),
            ("assistant", "noted report"),
            ("user", f"{settled} | Its closing message: | second answer"),
            ("assistant", "all done"),
        ]
        assert parent.status is AgentStatus.IDLE
        assert world.service.activation_state(SessionId(child)) is None
        assert world.jobs.list(parent)[0].status.value == "completed"

    run(main)
