"""A deliberately broken harness for the conformance suite's time bound (a test fixture).

Its model ignores the suite's scripts: every step answers "ok" at once, so a scripted gate is
never reached. Run against it, the conformance suite must fail within ``--dsh-timeout`` and
name the await that was not reached, never hang.
"""

from __future__ import annotations

from dsh_subagent.adapters.protocols import Model, ModelRequest, ModelStep, Session
from dsh_subagent.adapters.reference.harness import ReferenceHarness
from dsh_subagent.adapters.reference.scripted_model import reply
from dsh_subagent.conformance.support import ModelFor
from dsh_subagent.core.values import AgentOptions


class ScriptIgnoringModel:
    """Answers every request with "ok", whatever the suite scripted."""

    async def step(self, request: ModelRequest) -> ModelStep:
        return reply("ok")


def _ignore_the_book(_session: Session, _options: AgentOptions) -> Model:
    return ScriptIgnoringModel()


async def open_broken(_model_for: ModelFor, db: str | None = None) -> ReferenceHarness:
    """A harness factory whose agents never consult the suite's model hook."""
    return await ReferenceHarness.open(_ignore_the_book, db=db)
