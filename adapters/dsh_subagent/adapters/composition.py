"""Scoped prompt composition and the one call that composes an in-process child.

Theory of operation
-------------------
1. A ``PromptComposer`` holds named, ordered system-prompt sections and runtime-context
   contributions for one scope, over an optional parent scope. Reading merges the chain: the
   nearest scope wins per name (HARNESS-28), so a child's ``deployment:persona`` shadows the
   deployment persona for that child only, and nothing a child registers is visible to its
   parent or siblings. Parts come out sorted by ``(order, name)``.
2. ``apply_child_composition(child, parent, ...)`` is the only way an in-process child is
   composed (seed 000, "Capabilities"; POLICY-7, DRIVER-7). It takes the parent as a
   parameter so that composing a child without joining the parent's preset composition cannot
   be written. It carries out the core's ``child_composition`` steps in order: join the
   parent's preset (when a roster exists), the delegation-scope statement as runtime context
   (never a system-prompt section, so system prompts stay identical for parents and
   children), the persona as a scoped section, then the tool filter as a scoped restriction.
3. Every registration is deferred on the child's scope, so it unwinds with the child; a
   failing step (an unknown tool name) raises before the child is published, and the
   creation rollback disposes the scope.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import attrs

from dsh_subagent.adapters.protocols import Agent, PresetRoster
from dsh_subagent.adapters.signals import Scope, Unsubscribe
from dsh_subagent.adapters.tool_registry import ScopedTools
from dsh_subagent.core.errors import invalid
from dsh_subagent.core.jsonvalue import require_int, require_str
from dsh_subagent.core.policy import (
    AddPromptSection,
    AddRuntimeContext,
    JoinParentPreset,
    RestrictTools,
    child_composition,
)
from dsh_subagent.core.values import ToolFilter


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

        def remove() -> None:
            if parts.get(name) is part:
                del parts[name]

        return remove

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


class ComposableAgent(Protocol):
    """What child composition needs of an agent: its scope, prompt composer and tools."""

    @property
    def ctx(self) -> Scope: ...

    @property
    def prompt(self) -> PromptComposer: ...

    @property
    def tools(self) -> ScopedTools: ...


def apply_child_composition(
    child: ComposableAgent,
    parent: Agent,
    *,
    persona: str | None,
    tool_filter: ToolFilter | None,
    roster: PresetRoster | None = None,
) -> None:
    """Compose ``child`` under ``parent``: preset join, delegation statement, persona, filter.

    Raises ``SubagentError`` (e.g. an unknown tool name); what was registered before the
    failure is on the child's scope, which the creation rollback disposes.
    """
    steps = child_composition(
        preset_roster=roster is not None, persona=persona, tool_filter=tool_filter
    )
    for step in steps:
        match step:
            case JoinParentPreset():
                assert roster is not None  # the core adds this step only when a roster exists
                roster.compose_from(child.ctx, parent.ctx)
            case AddRuntimeContext(name=name, order=order, text=text):
                child.ctx.defer(child.prompt.context(name, order, text))
            case AddPromptSection(name=name, order=order, text=text):
                child.ctx.defer(child.prompt.section(name, order, text))
            case RestrictTools(tool_filter=ToolFilter(allow=allow, deny=deny)):
                child.ctx.defer(child.tools.install_restriction(allow=allow, deny=deny))


__all__ = ["ComposableAgent", "PromptComposer", "PromptPart", "apply_child_composition"]
