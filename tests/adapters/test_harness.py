"""The reference harness: assembly and the host teardown order (TEAR-16)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from dsh_subagent.adapters.continuation_types import ContinuableStartSpec
from dsh_subagent.adapters.reference.harness import ReferenceHarness
from dsh_subagent.adapters.reference.session import LiveSession
from dsh_subagent.cli.demo import DemoModel
from dsh_subagent.core.lifecycle import RunEndInfo
from dsh_subagent.core.values import AgentOptions, SessionId, TextBlock


def test_tear_16_close_drains_children_before_disposing_their_parent(tmp_path: Path) -> None:
    model = DemoModel()
    order: list[str] = []

    def model_for(_session: LiveSession, _options: AgentOptions) -> DemoModel:
        return model

    async def main() -> None:
        harness = await ReferenceHarness.open(model_for, db=tmp_path / "h.db")
        harness.service.on(
            "subagent/end",
            lambda info: (
                order.append(f"end {info.start.child_id}") if isinstance(info, RunEndInfo) else None
            ),
        )
        harness.registry.disposed.subscribe(lambda agent: order.append(f"disposed {agent.id}"))
        parent = await harness.create_agent("parent")
        child = SessionId("child")
        model.hold(child)
        spec = ContinuableStartSpec("spawn", "c", parent, (TextBlock("work"),), child_id=child)
        await harness.service.start_continuable(spec)
        await model.reached[child].wait()
        await harness.close()

    asyncio.run(main())
    assert order.index("end child") < order.index("disposed parent")
    assert order.index("disposed child") < order.index("disposed parent")
