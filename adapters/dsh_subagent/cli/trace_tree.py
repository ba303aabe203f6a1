"""``dsh-subagent demo --trace``: the demo's spans, from a real SDK exporter, as a rich tree.

Theory of operation
-------------------
1. ``recording()`` installs an SDK ``TracerProvider`` with an in-memory exporter as the global
   provider (this is a CLI process: nothing else owns it); the seam's tracing resolves its
   tracer through the global provider, so every span of the demo reaches the exporter.
2. ``render(spans)`` prints one tree per trace, roots first in start order, each span's
   children in start order. A span shows its name, the facts that tell the story (mode,
   epoch, stop reason, notice route, drain scope) and its links by the linked span's name.
   Nothing is kept besides what the exporter finished: no second bookkeeping path.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from rich.text import Text
from rich.tree import Tree

from dsh_subagent.core.extras import MissingExtra

try:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
except ImportError as missing:  # pragma: no cover - exercised without the otel extra
    raise MissingExtra("dsh-subagent demo --trace", "opentelemetry-sdk", "otel") from missing

_SHOWN = (
    ("gen_ai.agent.id", "id"),
    ("dsh.subagent.mode", "mode"),
    ("dsh.subagent.epoch", "epoch"),
    ("dsh.subagent.stop_reason", "stop"),
    ("dsh.subagent.notice.route", "route"),
    ("dsh.subagent.drain.scope", "scope"),
)


def recording() -> InMemorySpanExporter:
    """Install an SDK provider exporting into memory as the global provider (rule 1)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return exporter


def _label(span: ReadableSpan, names: dict[int, str]) -> Text:
    attributes = dict(span.attributes or {})
    facts = [f"{short}={attributes[key]}" for key, short in _SHOWN if key in attributes]
    routes = [event.attributes for event in span.events if event.attributes]
    facts += [f"routed={dict(each).get('dsh.subagent.route')}" for each in routes]
    for link in span.links:
        kind = dict(link.attributes or {}).get("dsh.subagent.link", "link")
        facts.append(f"{kind} -> {names.get(link.context.span_id, 'an earlier trace')}")
    return Text(f"{span.name}  ({', '.join(facts)})" if facts else span.name)


def render(spans: Sequence[ReadableSpan]) -> list[Tree]:
    """One rich tree per trace, in start order (rule 2)."""
    ordered = sorted(spans, key=lambda span: span.start_time or 0)
    ids = {span.context.span_id for span in ordered if span.context is not None}
    names = {span.context.span_id: span.name for span in ordered if span.context is not None}
    children: defaultdict[int | None, list[ReadableSpan]] = defaultdict(list)
    for span in ordered:
        parent = span.parent.span_id if span.parent is not None else None
        children[parent if parent in ids else None].append(span)

    def grow(node: Tree, span: ReadableSpan) -> None:
        branch = node.add(_label(span, names))
        if span.context is not None:
            for child in children.get(span.context.span_id, []):
                grow(branch, child)

    trees = []
    for root in children[None]:
        tree = Tree(_label(root, names))
        if root.context is not None:
            for child in children.get(root.context.span_id, []):
                grow(tree, child)
        trees.append(tree)
    return trees


__all__ = ["recording", "render"]
