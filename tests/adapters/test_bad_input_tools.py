"""Bad input through the model-facing tools: an errored result, and nothing changed."""

from __future__ import annotations

from dsh_subagent.adapters.tools import BackgroundMode
from dsh_subagent.core.values import SessionId
from tests.adapters.tools_world import ToolsWorld, call, run, started_id, text


async def _state(world: ToolsWorld, parent_id: SessionId) -> tuple[object, ...]:
    stored = tuple((s.header.id, s.revision) for s in await world.persistence.list_snapshots())
    agents = tuple(agent.id for agent in world.registry.list())
    return stored, agents, tuple(await world.service.list_children(parent_id))


def test_cont_14_send_message_blank_message_is_refused_without_a_cold_resume() -> None:
    async def main() -> None:
        world = ToolsWorld()
        world.tool("spawn", background_mode=BackgroundMode.CONTINUABLE)
        parent = await world.parent()
        child_id = started_id(await call(parent, "subagent", {"description": "w", "prompt": "go"}))
        await world.settle()
        assert world.registry.get(child_id) is None  # settled and released: cold
        before = await _state(world, parent.id)
        for message in ("", "   ", "\n"):
            sent = await call(parent, "send_message", {"subagent_id": child_id, "message": message})
            assert text(sent).startswith("Error")
        await world.settle()
        assert await _state(world, parent.id) == before

    run(main)


def test_cont_1_subagent_tool_refuses_a_multi_line_label_before_any_child() -> None:
    async def main() -> None:
        world = ToolsWorld()
        world.tool("spawn", background_mode=BackgroundMode.CONTINUABLE)
        parent = await world.parent()
        before = await _state(world, parent.id)
        for label in ("two\nlines", "\x1b[2Jclear", "x" * 2_000):
            started = await call(parent, "subagent", {"description": label, "prompt": "go"})
            assert text(started).startswith("Error")
        await world.settle()
        assert await _state(world, parent.id) == before

    run(main)
