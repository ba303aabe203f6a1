"""Authority that is neither a genuine grant nor an agent object, through the public service.

DESIGN decision 10: whatever is offered as authority and is not a valid grant or live agent
is ``UNAUTHORIZED`` on every call, and nothing happens before the refusal.
"""

from __future__ import annotations

from collections.abc import Awaitable

import pytest

from dsh_subagent.adapters.continuation_types import (
    AncestorAuthority,
    ContinuableStartSpec,
    ParentAgent,
    UserGrant,
    UserInterruptAuthority,
)
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.lifecycle import SUBAGENT_START
from dsh_subagent.core.values import Content, SessionId, TextBlock
from tests.adapters.tools_world import ToolsWorld, run

C = SessionId("c")
PARENT = SessionId("parent")


class ForgedGrant(UserGrant):
    """A subclass that skips the minting key: a ``UserGrant`` the service never minted."""

    def __init__(self) -> None:
        pass


class NotWeaklyReferenceable:
    __slots__ = ("id",)

    def __init__(self) -> None:
        self.id = "parent"


def text(value: str) -> Content:
    return (TextBlock(value),)


async def cold_child(world: ToolsWorld) -> list[object]:
    """Child ``c`` of ``parent``, started, settled and released; returns its start records."""
    starts: list[object] = []
    world.service.on(SUBAGENT_START, starts.append)
    parent = await world.parent()
    await world.service.start_continuable(
        ContinuableStartSpec("spawn", "worker", parent, text("first"), child_id=C)
    )
    await world.settle()
    assert world.registry.get(C) is None
    return starts


async def refused(call: Awaitable[object]) -> SubagentError:
    with pytest.raises(SubagentError) as raised:
        await call
    return raised.value


def interrupt_refusal(world: ToolsWorld, authority: object) -> SubagentError:
    with pytest.raises(SubagentError) as raised:
        world.service.interrupt(C, authority)  # type: ignore[arg-type]
    return raised.value


def test_auth_4_a_forged_or_wrong_typed_grant_is_unauthorized_on_every_call() -> None:
    async def main() -> None:
        world = ToolsWorld()
        starts = await cold_child(world)
        for claim in (ForgedGrant(), "user", object(), None, {"kind": "user"}):
            error = await refused(world.service.followup(C, text("x"), claim))  # type: ignore[arg-type]
            assert error.code is ErrorCode.UNAUTHORIZED, claim
            as_interrupt = UserInterruptAuthority(claim, PARENT)  # type: ignore[arg-type]
            assert interrupt_refusal(world, as_interrupt).code is ErrorCode.UNAUTHORIZED
            assert interrupt_refusal(world, claim).code is ErrorCode.UNAUTHORIZED
        assert (await refused(world.service.followup(C, text("x"), "user"))).field == "authority"  # type: ignore[arg-type]
        assert world.registry.get(C) is None  # never cold-resumed
        assert len(starts) == 1

    run(main)


def test_auth_1_a_parent_authority_around_no_agent_is_unauthorized() -> None:
    async def main() -> None:
        world = ToolsWorld()
        starts = await cold_child(world)
        for agent in (None, "parent", NotWeaklyReferenceable(), object()):
            authority = ParentAgent(agent)  # type: ignore[arg-type]
            error = await refused(world.service.followup(C, text("x"), authority))
            assert error.code is ErrorCode.UNAUTHORIZED, agent
        assert world.registry.get(C) is None
        assert len(starts) == 1

    run(main)


def test_auth_6_an_ancestor_authority_around_no_agent_is_unauthorized() -> None:
    async def main() -> None:
        world = ToolsWorld()
        await cold_child(world)
        for agent in (None, "parent", NotWeaklyReferenceable()):
            authority = AncestorAuthority(agent)  # type: ignore[arg-type]
            assert interrupt_refusal(world, authority).code is ErrorCode.UNAUTHORIZED, agent

    run(main)


def test_auth_10_auth_11_drains_presented_no_agent() -> None:
    async def main() -> None:
        world = ToolsWorld()
        await cold_child(world)
        error = await refused(world.service.drain_continuable_children(None, [C]))  # type: ignore[arg-type]
        assert error.code is ErrorCode.UNAUTHORIZED
        await world.service.drain_continuable_descendants([None, "parent"])  # type: ignore[list-item]

    run(main)
