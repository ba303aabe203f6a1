"""Deep chains and wide trees through the continuation manager: no recursion over depth,
no limit raised, a bounded teardown window.

A chain of continuable children, each started while its parent's model step is held (as a
delegating tool would), is built at 2,000 deep in the default suite and at 10,000 in the
``soak`` run (``DSH_SOAK=1``). The leaf runs a follow-up; the whole drain releases the chain
child-first. A wide tree wider than the teardown window drains child-first with at most
``TEARDOWN_WINDOW`` children between their final flush and their release at once. Nothing
here times anything.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys

import pytest

from dsh_subagent.adapters.continuation_engine import TEARDOWN_WINDOW
from dsh_subagent.adapters.continuation_types import Identities, LineageView
from dsh_subagent.adapters.protocols import ModelRequest, ModelStep
from dsh_subagent.adapters.reference.scripted_model import reply
from dsh_subagent.adapters.signals import race_abort
from dsh_subagent.core.authority import live_lineage
from dsh_subagent.core.values import SessionId
from tests.adapters.continuation_harness import FallbackModel, Harness, run, user_texts

LEAF_FOLLOWUP = "one more at the leaf"


class ChainModel(FallbackModel):
    """Every step is held until its turn is aborted, except the leaf's first, which waits
    for ``leaf_go``; the step that sees the follow-up sets ``followup_seen``."""

    def __init__(self, leaf: str) -> None:
        super().__init__()
        self.leaf = leaf
        self.leaf_go = asyncio.Event()
        self.followup_seen = asyncio.Event()
        self.held = 0
        self.all_held = asyncio.Event()
        self.expected = 0

    async def step(self, request: ModelRequest) -> ModelStep:
        if request.agent == self.leaf and not self.leaf_go.is_set():
            self._arrive()
            await self.leaf_go.wait()
            return reply("first epoch done")
        if request.agent == self.leaf and request.turn > 1:  # the follow-up's turn
            self.followup_seen.set()
        else:
            self._arrive()
        await race_abort(asyncio.Event().wait(), request.signal)
        return reply("never")

    def _arrive(self) -> None:
        self.held += 1
        if self.held >= self.expected:
            self.all_held.set()


class ChainHarness(Harness):
    def __init__(self, leaf: str) -> None:
        self.chain_model = ChainModel(leaf)
        super().__init__()

    def model(self, agent_id: str) -> FallbackModel:
        return self.chain_model


def _deep_chain_starts_follows_up_at_the_leaf_and_drains_child_first(depth: int) -> None:
    ids = [f"c{n}" for n in range(depth)]

    async def main() -> None:
        h = ChainHarness(ids[-1])
        h.chain_model.expected = depth
        parent = await h.root()
        for child_id in ids:
            parent = await h.start(parent, child_id)
        await h.chain_model.all_held.wait()
        assert all(h.manager.activation_state(SessionId(c)) is not None for c in ids)

        leaf_parent = h.agents.get(SessionId(ids[-2]))
        assert leaf_parent is not None
        await h.followup(leaf_parent, ids[-1], LEAF_FOLLOWUP)
        h.chain_model.leaf_go.set()
        await h.chain_model.followup_seen.wait()
        leaf = h.agents.get(SessionId(ids[-1]))
        assert leaf is not None
        assert user_texts(leaf)[-1] == LEAF_FOLLOWUP

        disposed: list[str] = []
        h.agents.disposed.subscribe(lambda agent: disposed.append(agent.id))
        await h.manager.drain()
        assert disposed == ids[::-1]
        assert [end.start.child_id for end in h.ends()] == ids[::-1]
        assert all(h.manager.activation_state(SessionId(c)) is None for c in ids)

    limit = sys.getrecursionlimit()
    run(main)
    assert sys.getrecursionlimit() == limit


def test_tear_3_2000_deep_chain_starts_follows_up_at_the_leaf_and_drains_child_first() -> None:
    _deep_chain_starts_follows_up_at_the_leaf_and_drains_child_first(2_000)


@pytest.mark.soak
@pytest.mark.skipif(os.environ.get("DSH_SOAK") != "1", reason="soak: set DSH_SOAK=1")
def test_tear_3_soak_10000_deep_chain_starts_follows_up_at_the_leaf_and_drains_child_first() -> (
    None
):
    _deep_chain_starts_follows_up_at_the_leaf_and_drains_child_first(10_000)


def test_tear_3_wide_drain_releases_child_first_through_a_bounded_window() -> None:
    width = 2 * TEARDOWN_WINDOW + 5
    ids = [f"c{n}" for n in range(width)]

    async def main() -> None:
        h = ChainHarness("no leaf")
        h.chain_model.expected = width + 1
        parent = await h.start(await h.root(), "p")
        for child_id in ids:
            await h.start(parent, child_id)
        await h.chain_model.all_held.wait()

        flushing: set[str] = set()
        peak = 0
        disposed: list[str] = []

        def flushed(session: object) -> None:
            nonlocal peak
            child_id = getattr(session, "id", "")
            if child_id in ids and child_id not in disposed:
                flushing.add(child_id)
                peak = max(peak, len(flushing))

        def released(agent: object) -> None:
            child_id = getattr(agent, "id", "")
            flushing.discard(child_id)
            disposed.append(child_id)

        h.store.on_flush(flushed)
        h.agents.disposed.subscribe(released)
        await h.manager.drain()
        assert sorted(disposed[:-1]) == sorted(ids)
        assert disposed[-1] == "p"
        assert [end.start.child_id for end in h.ends()][-1] == "p"
        assert len(h.ends()) == width + 1
        assert 1 < peak <= TEARDOWN_WINDOW

    run(main)


class _Header:
    def __init__(self, parent: str | None) -> None:
        self.parent_session = parent


class _Session:
    def __init__(self, parent: str | None) -> None:
        self.header = _Header(parent)


class _Agent:
    """Just what a lineage walk reads: an id and a header parent."""

    def __init__(self, agent_id: str, parent: str | None) -> None:
        self.id = agent_id
        self.session = _Session(parent)


class _Registry:
    def __init__(self) -> None:
        self.agents: dict[str, _Agent] = {}

    def get(self, agent_id: str) -> _Agent | None:
        return self.agents.get(agent_id)


def test_auth_7_remembered_lineage_walks_equal_the_whole_walk_after_any_departures() -> None:
    """The remembered walks (invalidated per departed agent, not wholesale) always give the
    lineage a whole walk through the registry gives, header-parent cycles included."""
    for seed in range(200):
        rnd = random.Random(seed)
        registry = _Registry()
        identities = Identities(registry)  # type: ignore[arg-type]
        seen: list[_Agent] = []
        for _ in range(120):
            roll = rnd.random()
            if roll < 0.45 or not registry.agents:
                agent_id = f"a{rnd.randrange(25)}"
                parent = rnd.choice([None, *(f"a{rnd.randrange(25)}" for _ in range(3))])
                if agent_id not in registry.agents:
                    registry.agents[agent_id] = agent = _Agent(agent_id, parent)
                    seen.append(agent)
            elif roll < 0.65:
                gone = registry.agents.pop(rnd.choice(list(registry.agents)))
                identities.departed(gone)  # type: ignore[arg-type]
            else:
                agent = rnd.choice(seen)
                view = LineageView(registry, identities)  # type: ignore[arg-type]
                whole = live_lineage(identities.ref(agent), view.header_parents, view)  # type: ignore[arg-type]
                assert set(identities.lineage(agent)) == set(whole), seed  # type: ignore[arg-type]
