"""The conformance suite's support: harness factories, the model hook, and a loop runner.

Theory of operation
-------------------
1. A harness under test is a ``HarnessFactory``: an async callable taking the suite's model
   hook (``model_for(session, options) -> Model``) and an optional SQLite path, and returning
   an opened ``ReferenceHarness`` (store, registry, persistence, service, ``create_agent``,
   ``resume_agent``, ``close``) whose agents answer from that hook. The service, registry and
   store are the seam's own; what a port supplies is the agent loop behind them.
2. The suite scripts every agent through the hook with our ``ModelStep`` vocabulary; a
   harness on another framework translates those steps (see ``adapters.pydantic_ai.bridge``).
3. ``--dsh-harness=module:factory`` selects a factory by import path; a conftest may instead
   override the ``dsh_harness`` fixture. Without either, the reference harness is checked.
4. ``ModelBook`` is the hook the suite passes: one scripted model per agent id, answering a
   plain "ok" once an agent's script is exhausted.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

from dsh_subagent.adapters.protocols import Model, ModelRequest, ModelStep
from dsh_subagent.adapters.reference.harness import ReferenceHarness
from dsh_subagent.adapters.reference.scripted_model import ScriptedModel, ScriptItem, reply
from dsh_subagent.adapters.reference.session import LiveSession
from dsh_subagent.core.errors import invalid
from dsh_subagent.core.values import AgentOptions, SessionId

T = TypeVar("T")
ModelFor = Callable[[LiveSession, AgentOptions], Model]
HarnessFactory = Callable[[ModelFor, "str | None"], Awaitable[ReferenceHarness]]
"""``factory(model_for, db) -> opened harness`` (``db`` is a SQLite path or ``None``)."""


class _FallbackModel(ScriptedModel):
    async def step(self, request: ModelRequest) -> ModelStep:
        if not self.remaining:
            self.requests.append(request)
            return reply("ok")
        return await super().step(request)


class ModelBook:
    """The suite's model hook: a scripted model per agent id, "ok" when unscripted."""

    def __init__(self) -> None:
        self._models: dict[SessionId, _FallbackModel] = {}

    def model(self, agent: str) -> ScriptedModel:
        """The (shared, created on demand) scripted model of ``agent``."""
        return self._models.setdefault(SessionId(agent), _FallbackModel())

    def script(self, agent: str, *items: ScriptItem) -> None:
        """Append steps to ``agent``'s script."""
        self.model(agent).extend(items)

    def __call__(self, session: LiveSession, _options: AgentOptions) -> Model:
        return self.model(session.id)


async def reference_harness(model_for: ModelFor, db: str | None = None) -> ReferenceHarness:
    """The default factory: the reference asyncio loop."""
    return await ReferenceHarness.open(model_for, db=db)


def load_factory(path: str) -> HarnessFactory:
    """Resolve ``module:attribute`` to a harness factory; bad input raises before import."""
    module, sep, name = path.partition(":")
    if not sep or not module or not name:
        raise invalid("dsh_harness", f"expected module:factory, got {path!r}")
    factory: HarnessFactory = getattr(importlib.import_module(module), name)
    return factory


def run(main: Callable[[], Awaitable[T]]) -> T:
    """Run one test body on a fresh event loop."""

    async def body() -> T:
        return await main()

    return asyncio.run(body())


__all__ = ["HarnessFactory", "ModelBook", "load_factory", "reference_harness", "run"]
