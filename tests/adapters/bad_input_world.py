"""A service world with one parent, a resident child and a cold child, for bad-input tests.

``snapshot()`` captures everything a refused call must leave unchanged: the registry's
agents, the store's sessions and their lengths, the persisted headers and revisions, the
lifecycle events, each child's residency and the one-shot provider's requests (the
children listing reads exactly the store and the persisted headers).
"""

from __future__ import annotations

from dsh_subagent.adapters.continuation_types import ContinuableStartSpec
from dsh_subagent.adapters.reference.agent_loop import ReferenceAgent
from dsh_subagent.adapters.reference.persistence import InMemoryPersistence
from dsh_subagent.adapters.reference.scripted_model import Gate, Gated, reply
from dsh_subagent.adapters.reference.session import bind_persistence
from dsh_subagent.core.values import Content, SessionId, TextBlock
from tests.adapters.continuation_harness import FallbackModel
from tests.adapters.service_world import FakeProvider, World
from tests.flat_intent import evolve_flat

Snapshot = tuple[object, ...]


class BadInputWorld:
    """``World`` with persistence bound, a ``fake`` one-shot provider and two children."""

    def __init__(self) -> None:
        self.persistence = InMemoryPersistence()
        self.world = World(persistence=self.persistence)
        self.world.model = FallbackModel()
        self.gate = Gate()
        bind_persistence(self.world.store, self.persistence)
        self.service = self.world.service
        self.fake = FakeProvider()
        self.service.register_provider(self.fake)
        self.parent: ReferenceAgent
        self.resident: ReferenceAgent

    async def open(self) -> BadInputWorld:
        """Create the parent, a child ``warm`` held running at a gate, a cold child ``cold``."""
        self.parent = await self.world.parent()
        self.world.model.extend([Gated(self.gate, reply("done"))])
        await self.service.start_continuable(self.spec(child_id="warm"))
        await self.gate.reached()
        await self.service.start_continuable(self.spec(child_id="cold"))
        cold = self.world.registry.get(SessionId("cold"))
        assert cold is not None
        await cold.when_idle()
        await self.service.drain_continuable_children(self.parent, [SessionId("cold")])
        resident = self.world.registry.get(SessionId("warm"))
        assert isinstance(resident, ReferenceAgent)
        self.resident = resident
        return self

    async def close(self) -> None:
        """Release the gate and let the resident child finish."""
        self.gate.open()
        await self.service.drain_continuable()

    def spec(self, prompt: object = None, **fields: object) -> ContinuableStartSpec:
        content = (TextBlock("go"),) if prompt is None else prompt
        spec = ContinuableStartSpec("spawn", "worker", self.parent, content)  # type: ignore[arg-type]
        return evolve_flat(spec, **fields)

    async def snapshot(self) -> Snapshot:
        store = tuple((s.id, s.seq) for s in self.world.store.list())
        stored = tuple((s.header.id, s.revision) for s in await self.persistence.list_snapshots())
        agents = tuple(agent.id for agent in self.world.registry.list())
        residency = tuple(
            self.service.activation_state(SessionId(child)) for child in ("warm", "cold", "c")
        )
        events = tuple(self.world.events)
        return store, stored, agents, events, residency, len(self.fake.requests)


def text(value: str) -> Content:
    return (TextBlock(value),)
