"""The one call that composes an in-process child under its parent.

Theory of operation
-------------------
1. ``apply_child_composition(child, parent, ...)`` is the only way an in-process child is
   composed (seed 000, "Capabilities"; POLICY-7, DRIVER-7). It takes the parent as a
   parameter so that composing a child without joining the parent's preset composition cannot
   be written. It carries out the core's ``child_composition`` steps in order: join the
   parent's preset (when a roster exists), the delegation-scope statement as runtime context
   (never a system-prompt section, so system prompts stay identical for parents and
   children), the persona as a scoped section, then the tool filter as a scoped restriction.
2. Every registration is deferred on the child's scope, so it unwinds with the child; a
   failing step (an unknown tool name) raises before the child is published, and the
   creation rollback disposes the scope.
3. It reaches the harness only through the ``Agent`` protocol (its ``prompt`` composer and
   ``tools`` layer).
"""

from __future__ import annotations

from dsh_subagent.adapters.protocols import Agent, PresetRoster
from dsh_subagent.core.policy import (
    AddPromptSection,
    AddRuntimeContext,
    JoinParentPreset,
    RestrictTools,
    child_composition,
)
from dsh_subagent.core.values import ToolFilter


def apply_child_composition(
    child: Agent,
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


__all__ = ["apply_child_composition"]
