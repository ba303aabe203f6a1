"""Tools for the reference agent loop: registration, scoped restriction and execution.

Theory of operation
-------------------
1. A ``Tool`` has a unique name, a description, a JSON-schema object for its arguments and an
   async handler ``(arguments, signal) -> ToolOutcome``. The schema is validated as lossless
   JSON at registration; registering a taken name raises ``INVALID_ARGUMENT``.
2. ``restrict(allow=, deny=)`` returns a *scoped view* (HARNESS-28): it validates every name
   against the tools known now (an unknown name raises ``INVALID_ARGUMENT`` naming
   ``allow[i]``/``deny[i]``), then filters lazily, so it hides and refuses tools alike. A
   deny-only view shows tools registered later (catalog L-20); an allow list never does.
3. ``execute(call, signal)`` refuses hidden or unknown tools and contains handler failures as
   an error result the model can read. An aborted signal is refused before dispatch (C-4);
   a handler's own outcome stands even if the signal aborted meanwhile (a cancelled
   ``subagent`` call is its errored result, TOOL-24), so every call of a step gets a result;
   only a handler *raising* under the turn's abort propagates the reason (HARNESS-31).
4. ``ScopedTools`` is one agent's layer over a global registry (DRIVER-7/8): its own tools are
   child-local (registered here, added after filtering and never filtered); ``install_restriction``
   adds a scoped, removable restriction over the global tools (allow before deny; several
   intersect; live, so a deny-only restriction admits later globals); unknown names and the
   reserved ``run_code`` are rejected loudly. Guards may refuse a call before it runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, TypeVar

import attrs

from dsh_subagent.adapters.protocols import (
    ABORTED_BEFORE_DISPATCH,
    Tool,
    ToolCall,
    ToolGuard,
    ToolOutcome,
)
from dsh_subagent.adapters.signals import AbortSignal, Unsubscribe
from dsh_subagent.core.errors import ErrorCode, SubagentError, invalid
from dsh_subagent.core.jsonvalue import check_json, require_str
from dsh_subagent.core.values import TextBlock

"""The refusal of a call whose signal aborted before its handler ran (C-4)."""

T = TypeVar("T")


def _error(text: str) -> ToolOutcome:
    return ToolOutcome((TextBlock(text),), is_error=True)


def _add(tools: dict[str, Tool], tool: Tool) -> Unsubscribe:
    """Validate ``tool`` and add it to ``tools`` under its unique name; the disposer removes
    it once (and not a later tool of the same name)."""
    if not isinstance(tool, Tool):
        raise invalid("tool", "must be a Tool")
    require_str(tool.name, "tool.name", non_empty=True)
    check_json(tool.schema, "tool.schema")
    if tool.name in tools:
        raise invalid("tool.name", f"tool {tool.name!r} is already registered")
    tools[tool.name] = tool

    def unregister() -> None:
        if tools.get(tool.name) is tool:
            del tools[tool.name]

    return unregister


class ToolRegistry:
    """A set of tools, or a restricted view over a parent registry."""

    def __init__(
        self,
        *,
        parent: ToolRegistry | None = None,
        allow: frozenset[str] | None = None,
        deny: frozenset[str] = frozenset(),
    ) -> None:
        self._parent = parent
        self._allow = allow
        self._deny = deny
        self._tools: dict[str, Tool] = {}

    def register(self, tool: Tool) -> Unsubscribe:
        """Add ``tool`` to the root registry; the disposer removes it once."""
        if self._parent is not None:
            return self._parent.register(tool)
        return _add(self._tools, tool)

    def _visible(self, name: str) -> bool:
        return name not in self._deny and (self._allow is None or name in self._allow)

    def tools(self) -> tuple[Tool, ...]:
        """The tools this view shows, in registration order."""
        base = self._parent.tools() if self._parent is not None else tuple(self._tools.values())
        return tuple(tool for tool in base if self._visible(tool.name))

    def names(self) -> tuple[str, ...]:
        return tuple(tool.name for tool in self.tools())

    def get(self, name: str) -> Tool | None:
        """The visible tool called ``name``, or ``None``."""
        return next((tool for tool in self.tools() if tool.name == name), None)

    def restrict(
        self, *, allow: Sequence[str] | None = None, deny: Sequence[str] | None = None
    ) -> ToolRegistry:
        """A scoped view that hides and refuses tools outside ``allow`` or inside ``deny``."""
        known = set(self.names())
        for field, names in (("allow", allow), ("deny", deny)):
            if names is None:
                continue
            if isinstance(names, str):
                raise invalid(field, "must be a sequence of tool names, not a string")
            for index, name in enumerate(names):
                if require_str(name, f"{field}[{index}]") not in known:
                    raise invalid(f"{field}[{index}]", f"unknown tool {name!r}")
        return ToolRegistry(
            parent=self,
            allow=None if allow is None else frozenset(allow),
            deny=frozenset(deny or ()),
        )

    async def execute(self, call: ToolCall, signal: AbortSignal) -> ToolOutcome:
        """Run ``call``; refusals and handler failures become error outcomes."""
        tool = self.get(call.name)
        if tool is None:
            return _error(f"tool {call.name!r} is not available")
        if signal.aborted:
            return _error(f"Error: {ABORTED_BEFORE_DISPATCH}")
        try:
            outcome = await tool.handler(call.arguments, signal)
        except Exception as exc:
            signal.throw_if_aborted()
            return _error(f"tool {call.name!r} failed: {exc}")
        return outcome  # the handler's answer, also after an abort (rule 3, TOOL-24)


RESERVED_TOOL: Final = "run_code"


@attrs.frozen
class _Restriction:
    allow: frozenset[str] | None
    deny: frozenset[str]

    def admits(self, name: str) -> bool:
        return (self.allow is None or name in self.allow) and name not in self.deny


def _without(items: tuple[T, ...], item: T) -> tuple[T, ...]:
    """``items`` without the first one equal to ``item`` (``list.remove``), if any."""
    if item not in items:
        return items
    index = items.index(item)
    return items[:index] + items[index + 1 :]


def _quoted(names: Sequence[str]) -> str:
    return ", ".join(f'"{name}"' for name in names)


class ScopedTools(ToolRegistry):
    """One agent's tool layer: restricted global tools, then its own child-local tools."""

    def __init__(self, base: ToolRegistry | None = None) -> None:
        super().__init__()
        self._base = base or ToolRegistry()
        # Tuples, replaced on change (rare): an agent without any keeps no list of its own.
        self._restrictions: tuple[_Restriction, ...] = ()
        self._guards: tuple[ToolGuard, ...] = ()

    def global_layer(self) -> ToolRegistry:
        """The global registry this layer filters (what a child of this agent starts from)."""
        return self._base

    def register(self, tool: Tool) -> Unsubscribe:
        """Register a child-local tool: visible here only, never filtered."""
        return _add(self._tools, tool)

    def tools(self) -> tuple[Tool, ...]:
        visible = tuple(
            tool
            for tool in self._base.tools()
            if tool.name not in self._tools and all(r.admits(tool.name) for r in self._restrictions)
        )
        return visible + tuple(self._tools.values())

    def install_restriction(
        self, *, allow: Sequence[str] | None = None, deny: Sequence[str] | None = None
    ) -> Unsubscribe:
        """Restrict the global tools this layer shows; the disposer lifts it (DRIVER-8)."""
        if allow is None and deny is None:
            raise invalid("tool_filter", "must name allow and/or deny")
        named = [*(allow or ()), *(deny or ())]
        if RESERVED_TOOL in named:
            raise invalid(
                "tool_filter",
                f"tools.restrict() cannot name reserved Code Mode presentation transport "
                f'"{RESERVED_TOOL}"; restrict end-capability tools instead',
            )
        known = sorted(self._base.names())
        unknown = [name for name in dict.fromkeys(named) if name not in known]
        if unknown:
            noun = "tool" if len(unknown) == 1 else "tools"
            listing = ", ".join(known) or "(none)"
            raise SubagentError(
                ErrorCode.INVALID_ARGUMENT,
                f"tools.restrict() names unknown global {noun} {_quoted(unknown)}; "
                f"known global tools: {listing}",
                field="tool_filter",
            )
        restriction = _Restriction(
            None if allow is None else frozenset(allow), frozenset(deny or ())
        )
        self._restrictions += (restriction,)

        def lift() -> None:
            self._restrictions = _without(self._restrictions, restriction)

        return lift

    def add_guard(self, guard: ToolGuard) -> Unsubscribe:
        """Refuse calls for which ``guard`` returns a reason (checked before execution)."""
        self._guards += (guard,)

        def remove() -> None:
            self._guards = _without(self._guards, guard)

        return remove

    async def execute(self, call: ToolCall, signal: AbortSignal) -> ToolOutcome:
        for guard in self._guards:
            refusal = guard(call)
            if refusal is not None:
                return _error(refusal)
        return await super().execute(call, signal)
