"""The tests' flat view of a start: intent fields and the start's own fields side by side.

``evolve_flat(request, max_depth=-1, label="x")`` puts ``max_depth`` into the request's
``SubagentIntent`` and ``label`` on the request itself, so a test names a field the way the
refusals name it (``request.max_depth``) without spelling out where it lives.
"""

from __future__ import annotations

from typing import Any, TypeVar

import attrs

from dsh_subagent.core.values import SubagentIntent

INTENT_FIELDS = frozenset(field.name for field in attrs.fields(SubagentIntent))

T = TypeVar("T")


def evolve_flat(value: T, **changes: object) -> T:
    """``value`` (anything with an ``intent``) with ``changes``, intent fields into the intent."""
    ours = {name: change for name, change in changes.items() if name in INTENT_FIELDS}
    rest: dict[str, Any] = {n: c for n, c in changes.items() if n not in INTENT_FIELDS}
    if ours:
        rest["intent"] = attrs.evolve(value.intent, **ours)  # type: ignore[attr-defined]
    return attrs.evolve(value, **rest)  # type: ignore[misc]
