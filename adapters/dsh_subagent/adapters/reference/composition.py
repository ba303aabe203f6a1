"""Scoped prompt composition of the reference harness (the ``SystemPromptComposer``).

Theory of operation
-------------------
1. A ``PromptComposer`` holds named, ordered system-prompt sections and runtime-context
   contributions for one scope, over an optional parent scope. Reading merges the chain: the
   nearest scope wins per name (HARNESS-28), so a child's ``deployment:persona`` shadows the
   deployment persona for that child only, and nothing a child registers is visible to its
   parent or siblings. Parts come out sorted by ``(order, name)``.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from dsh_subagent.adapters.signals import Unsubscribe
from dsh_subagent.core.errors import invalid
from dsh_subagent.core.jsonvalue import require_int, require_str


@attrs.frozen
class PromptPart:
    """One named, ordered piece of a system prompt or of the runtime context."""

    name: str
    order: int
    text: str


class PromptComposer:
    """Scoped system-prompt sections and runtime-context parts (rule 1)."""

    def __init__(self, parent: PromptComposer | None = None) -> None:
        self.parent = parent
        self._sections: dict[str, PromptPart] = {}
        self._context: dict[str, PromptPart] = {}

    def section(self, name: str, order: int, text: str) -> Unsubscribe:
        """Register a system-prompt section in this scope; the disposer removes it."""
        return self._add(self._sections, name, order, text)

    def context(self, name: str, order: int, text: str) -> Unsubscribe:
        """Register a runtime-context contribution in this scope; the disposer removes it."""
        return self._add(self._context, name, order, text)

    def system_prompt(self) -> tuple[PromptPart, ...]:
        """The merged sections, nearest scope winning per name, by ``(order, name)``."""
        return self._merged(lambda composer: composer._sections)

    def runtime_context(self) -> tuple[PromptPart, ...]:
        """The merged runtime-context parts, nearest scope winning per name."""
        return self._merged(lambda composer: composer._context)

    def _add(self, parts: dict[str, PromptPart], name: str, order: int, text: str) -> Unsubscribe:
        require_str(name, "name", non_empty=True)
        require_int(order, "order")
        require_str(text, "text")
        if name in parts:
            raise invalid("name", f"{name!r} is already registered in this scope")
        part = PromptPart(name, order, text)
        parts[name] = part
        return _Removal(parts, part)

    def _merged(
        self, parts_of: Callable[[PromptComposer], dict[str, PromptPart]]
    ) -> tuple[PromptPart, ...]:
        merged: dict[str, PromptPart] = {}
        scope: PromptComposer | None = self
        while scope is not None:
            for name, part in parts_of(scope).items():
                merged.setdefault(name, part)
            scope = scope.parent
        return tuple(sorted(merged.values(), key=lambda part: (part.order, part.name)))


class _Removal:
    """The disposer of one registered part: removes it if it is still the registered one
    (one slotted object per part, no closure and cells)."""

    __slots__ = ("_part", "_parts")

    def __init__(self, parts: dict[str, PromptPart], part: PromptPart) -> None:
        self._parts = parts
        self._part = part

    def __call__(self) -> None:
        if self._parts.get(self._part.name) is self._part:
            del self._parts[self._part.name]


__all__ = ["PromptComposer", "PromptPart"]
