"""The service machine under the ``ci`` profile: the real seam, with faults, keeps its invariants.

About 20 s on 2 cores (200 examples of up to 30 steps). ``scripts/plant_bugs.py`` shows the
same machine finding planted adapter bugs.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import settings

from dsh_subagent.adapters.reference.harness import ReferenceHarness
from dsh_subagent.core.values import MessageId, TextBlock, UserMessage
from dsh_subagent.testing.service_faults import GatedModel
from dsh_subagent.testing.service_machine import ROOT, ServiceMachine

ServiceMachine.TestCase.settings = settings(
    parent=settings.get_profile("ci"), max_examples=200, stateful_step_count=30, deadline=None
)
TestServiceMachine = ServiceMachine.TestCase


def test_notice_15_harness_close_keeps_the_roots_disposal_cancel_durable(tmp_path: Path) -> None:
    """Found by the service machine: ``ReferenceHarness.close`` flushes before it disposes the
    agents, so the root's disposal cancel (HARNESS-5, NOTICE-15) never reaches the store and a
    resumed root sees the cancelled messages as pending again."""
    model = GatedModel()

    async def main() -> tuple[MessageId, ...]:
        harness = await ReferenceHarness.open(lambda _s, _o: model, db=tmp_path / "s.db")
        root = await harness.create_agent("root")
        model.hold(ROOT)
        root.followup(UserMessage(MessageId("u0"), (TextBlock("work"),)))
        root.followup(UserMessage(MessageId("u1"), (TextBlock("queued"),)))
        await harness.close()
        harness = await ReferenceHarness.open(lambda _s, _o: model, db=tmp_path / "s.db")
        resumed = await harness.resume_agent("root")
        pending = resumed.pending()
        await harness.close()
        return pending

    pending = asyncio.run(main())
    if pending:
        pytest.fail(f"{pending} pending after resume: the disposal cancel was not persisted")
    assert pending == ()
