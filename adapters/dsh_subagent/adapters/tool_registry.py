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
   an error result the model can read; only the turn's abort propagates (HARNESS-31).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import attrs

from dsh_subagent.adapters.protocols import ToolCall
from dsh_subagent.adapters.signals import AbortSignal, Unsubscribe
from dsh_subagent.core.errors import invalid
from dsh_subagent.core.jsonvalue import check_json, require_str
from dsh_subagent.core.values import Content, JsonObject, TextBlock


@attrs.frozen
class ToolOutcome:
    """A tool's result; ``concludes`` ends the turn after this step."""

    content: Content
    is_error: bool = False
    concludes: bool = False


ToolHandler = Callable[[JsonObject, AbortSignal], Awaitable[ToolOutcome]]


@attrs.frozen
class Tool:
    """A named tool with an argument schema and an async handler."""

    name: str
    handler: ToolHandler = attrs.field(eq=False)
    schema: JsonObject = attrs.field(factory=lambda: {"type": "object"})
    description: str = ""


def _error(text: str) -> ToolOutcome:
    return ToolOutcome((TextBlock(text),), is_error=True)


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
        if not isinstance(tool, Tool):
            raise invalid("tool", "must be a Tool")
        require_str(tool.name, "tool.name", non_empty=True)
        check_json(tool.schema, "tool.schema")
        if tool.name in self._tools:
            raise invalid("tool.name", f"tool {tool.name!r} is already registered")
        self._tools[tool.name] = tool

        def unregister() -> None:
            if self._tools.get(tool.name) is tool:
                del self._tools[tool.name]

        return unregister

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
        try:
            outcome = await tool.handler(call.arguments, signal)
        except Exception as exc:
            signal.throw_if_aborted()
            return _error(f"tool {call.name!r} failed: {exc}")
        signal.throw_if_aborted()
        return outcome
