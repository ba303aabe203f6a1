"""Restart: one process builds continuable children on SQLite and exits; this one resumes.

The child process builds ``root -> a -> b`` (``a`` with a persona and a tool filter, ``b``
started while ``a`` is working), drains child-first and exits. This process opens the same
database, resumes the root through the registry, and follows up the grandchild ``b``: it is
cold-resumed from its own log with its depth, delegated policy, persona and tool filter
intact (CONT-13, CONT-17, CONT-19, DEPTH-7, POLICY-6, TEAR-17).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from dsh_subagent.adapters.continuation import ParentAgent
from dsh_subagent.adapters.protocols import ResumeOptions
from dsh_subagent.adapters.reference.sqlite_persistence import SqlitePersistence
from dsh_subagent.core.policy import DELEGATION_STATEMENT, effective_policy
from dsh_subagent.core.values import CoordinatorSource, KnownStop, SessionId
from tests.adapters.continuation_harness import Harness, run, text

HERE = Path(__file__).parent

BUILD = """
import asyncio, sys
sys.path.insert(0, {root!r})
from tests.adapters.continuation_harness import Harness
from dsh_subagent.adapters.reference.scripted_model import Gate, Gated, reply
from dsh_subagent.adapters.reference.sqlite_persistence import SqlitePersistence
from dsh_subagent.core.values import ToolFilter

async def main():
    db = await SqlitePersistence.open({path!r})
    h = Harness(db, approval=object(), sandbox=None)
    root = await h.root()
    working = Gate()
    h.script("a", Gated(working, reply("delegated")))
    spec = h.spec(root, "plan", child_id="a", persona="terse",
                  tool_filter=ToolFilter(allow=("read",)))
    await h.manager.start_continuable(spec)
    await working.reached()
    b_spec = h.spec(h.agents.get("a"), "dig", child_id="b", persona="digger",
                    tool_filter=ToolFilter(deny=("write",)))
    await h.manager.start_continuable(b_spec)
    working.open()
    await h.quiet()
    await h.manager.drain()
    await h.store.flush(root.session)
    await db.close()

asyncio.run(main())
"""


def test_restart_cold_resumes_a_grandchild_with_its_composition_intact(tmp_path: Path) -> None:
    path = str(tmp_path / "sessions.db")
    script = BUILD.format(root=str(HERE.parent.parent), path=path)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)

    async def main() -> None:
        db = await SqlitePersistence.open(path)
        try:
            headers = {header.id: header for header in await db.list()}
            assert set(headers) == {"root", "a", "b"}
            assert headers[SessionId("b")].parent_session == "a"
            h = Harness(db)
            await h.agents.resume(ResumeOptions(SessionId("root")))
            root = h.agents.get(SessionId("root"))
            assert root is not None
            grant = h.manager.user_authority()
            await h.manager.followup(
                SessionId("b"), text("again"), grant, source=CoordinatorSource(SessionId("a"))
            )
            b = h.agents.get(SessionId("b"))
            assert b is not None
            assert b.session.header.delegation_depth == 2
            assert b.options.subagent_depth is None
            assert effective_policy(b.session.events).approval_policy == "never"
            await h.quiet()
            request = h.model("b").requests[-1]
            assert ("deployment:persona", 0, "digger") in request.system_prompt
            assert request.tools == ("read",)
            assert any(part[2] == DELEGATION_STATEMENT for part in request.runtime_context)
            assert h.ends()[-1].stop_reason is KnownStop.COMPLETED
            # The parent-authority path works across the restart too.
            await h.manager.followup(
                SessionId("a"), text("more"), ParentAgent(root), source=CoordinatorSource(root.id)
            )
            await h.quiet()
            assert h.model("a").requests[-1].tools == ("read",)
        finally:
            await db.close()

    run(main)
