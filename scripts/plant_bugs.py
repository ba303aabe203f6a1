"""Plant adapter bugs one at a time (by monkeypatching, never in the source) and show that
``ServiceMachine`` finds each; prints the shrunk failing sequence's length per bug.

Run: ``.venv/bin/python scripts/plant_bugs.py`` (about a minute). Exits 1 if a bug survives.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable, Iterator

import attrs
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from dsh_subagent.adapters.continuation import ContinuationManager
from dsh_subagent.adapters.reference import agent_loop, sqlite_persistence
from dsh_subagent.adapters.service import SubagentService
from dsh_subagent.core.lifecycle import RunEndInfo
from dsh_subagent.testing.service_machine import ServiceMachine

Patch = Callable[[], Iterator[None]]


@contextlib.contextmanager
def _swap(owner: object, name: str, value: object) -> Iterator[None]:
    original = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, original)


_emit = SubagentService._emit


def _hide_durability(self: SubagentService, event_name: str, payload: object) -> None:
    if isinstance(payload, RunEndInfo):
        payload = attrs.evolve(payload, durability_failed=False)
    _emit(self, event_name, payload)  # type: ignore[arg-type]


def _end_twice(self: SubagentService, event_name: str, payload: object) -> None:
    _emit(self, event_name, payload)  # type: ignore[arg-type]
    if event_name == "subagent/end":
        _emit(self, event_name, payload)  # type: ignore[arg-type]


_decode = sqlite_persistence.decode_header  # type: ignore[attr-defined]


def _lower_depth(session_id: str, text: str) -> object:
    header = _decode(session_id, text)
    depth = header.delegation_depth
    return attrs.evolve(header, delegation_depth=depth - 1) if depth else header


async def _skip_drain(self: ContinuationManager) -> None:
    return None


_notify_of = agent_loop.ReferenceAgent._notify


def _forget_discards(self: agent_loop.ReferenceAgent, kind: str, *rest: object) -> None:
    if kind != "discarded":
        _notify_of(self, kind, *rest)  # type: ignore[arg-type]


BUGS: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
    "subagent/end hides DURABILITY_FAILED": lambda: _swap(
        SubagentService, "_emit", _hide_durability
    ),
    "subagent/end emitted twice": lambda: _swap(SubagentService, "_emit", _end_twice),
    "delegation depth lowered on resume": lambda: _swap(
        sqlite_persistence, "decode_header", _lower_depth
    ),
    "whole drain forgets live Activations": lambda: _swap(
        ContinuationManager, "drain", _skip_drain
    ),
    "discarded inbox messages not notified": lambda: _swap(
        agent_loop.ReferenceAgent, "_notify", _forget_discards
    ),
}


def find(plant: Callable[[], contextlib.AbstractContextManager[None]]) -> int | None:
    """The shrunk failing sequence's step count, or None when the machine passes."""
    config = settings(
        max_examples=300,
        stateful_step_count=30,
        deadline=None,
        derandomize=True,
        database=None,
    )
    with plant():
        try:
            run_state_machine_as_test(ServiceMachine, settings=config)
        except Exception as error:  # any failure is the machine biting
            notes = getattr(error, "__notes__", [])
            lines = "\n".join(notes).splitlines()
            return sum(
                1
                for line in lines
                if line.startswith("state.")
                and not line.startswith(("state.service_invariants_hold", "state.teardown"))
            )
    return None


def main() -> int:
    logging.disable(logging.CRITICAL)
    survived = 0
    for name, plant in BUGS.items():
        steps = find(plant)
        survived += steps is None
        verdict = "SURVIVED" if steps is None else f"found, shrunk to {steps} steps"
        print(f"{name:45} {verdict}", flush=True)
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
