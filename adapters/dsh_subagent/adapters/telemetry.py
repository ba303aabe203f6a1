"""OpenTelemetry spans and structured logs for the delegation tree (DESIGN decision 9).

Theory of operation
-------------------
1. One module-level flag, ``AVAILABLE``, is decided at import: without ``opentelemetry-api``
   (the ``otel`` extra) ``attach`` hands out ``Lifecycle``, which only logs, and no tracing
   code runs again. With the API but no tracer provider (none set globally, none given to the
   service with ``use_tracer_provider``) no span can record: each hook that would start a
   span sees that first (``Tracing._off``) and does nothing more (no span, no link looked up
   in the child's log, nothing written to a session). With a provider whose spans do not
   record (sampled out, the API's no-op provider) each hook starts a non-recording span,
   sees ``is_recording()`` false and stops there.
2. The adapter decides nothing about the lifecycle. Its inputs are the seam's own events:
   ``subagent/start`` and ``subagent/end`` (a one-shot run, or one continuable Activation
   epoch) open and close ``invoke_agent {name}``; the continuation engine reports the epoch
   of an ``EmitStart``, the start and end of each teardown (``FlushSession`` ..
   ``EmitEnd``), each settlement notice it performs and each routing pass; the
   continuation manager wraps follow-ups and drains; the ``subagent`` tool wraps its call
   in ``execute_tool {tool}``. Spans follow the OpenTelemetry GenAI semantic conventions
   v1.37.0 (``gen_ai.*``, status: development); the seam's facts are ``dsh.subagent.*``.
3. Where a span hangs (OBS-2): a one-shot run started in a foreground call is a child of the
   current span (the ``execute_tool`` span, or the host's own, e.g. pydantic-ai's). A
   background one-shot run (started under ``background()``) and every continuable epoch
   start a new trace *linked* to the span that started them, since that span ends first.
   A tool call of an agent whose own ``invoke_agent`` span is live hangs under that span
   (the agent's task was created before its span existed, so context alone cannot say).
4. Cold resume (OBS-3): each continuable epoch's span context is appended to the child's
   own session as a ``subagent/trace`` event (only when recording), so it is durable with
   the child's log; the next epoch, in this process or after a restart, links to the last
   one it finds there.
5. Teardown (OBS-4): ``dsh.subagent.teardown`` runs from the child's flush to its end edge.
   Inside a drain it hangs under ``dsh.subagent.drain`` (the teardown tasks inherit the
   drain's context), so the core's child-first order shows as siblings in time: a child's
   teardown ends before its owner's begins. Outside a drain it hangs under the child's epoch
   span. A settlement notice is ``dsh.subagent.notice`` under the child's teardown, with its
   route (``new-turn``, ``steer``, ``inject``, ``dropped``).
6. A host's tool span (OBS-2): a harness whose model runs inside an instrumented framework
   (pydantic-ai) defers our tools out of the framework's run, so the framework's
   ``execute_tool`` span has ended before the loop runs the call. The model captures the
   framework's context inside that span (``current_context``) and the loop runs the call
   under it (``within``): ``execute_tool subagent`` is then a child of the host's span,
   in its trace, rather than of the calling agent's own span (rule 3).
7. Logs (OBS-5): ``subagent/start`` is logged at INFO and ``subagent/end`` at INFO, with the
   ``extra`` fields of ``fields()`` (``child_id``, ``parent_id``, ``epoch``, ``run_id``); the
   seam's warnings about a child carry the same fields.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Final

from dsh_subagent.core.depth import delegation_depth_of
from dsh_subagent.core.errors import SubagentError
from dsh_subagent.core.lifecycle import RunEndInfo, RunStartInfo
from dsh_subagent.core.notices import NoticeRoute
from dsh_subagent.core.values import (
    JsonValue,
    KnownStop,
    Mode,
    SessionEvent,
    SessionId,
    stop_reason_text,
)

if TYPE_CHECKING:
    from dsh_subagent.adapters.protocols import Agent, AgentRegistry

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
except ImportError:  # pragma: no cover - exercised by the "unavailable" test in a subprocess
    AVAILABLE = False
else:
    AVAILABLE = True

_log = logging.getLogger("dsh_subagent.lifecycle")

SEMCONV_VERSION: Final = "1.37.0"
"""The OpenTelemetry GenAI semantic conventions these spans follow."""

TRACE_EVENT: Final = "subagent/trace"
"""The child-session event holding one epoch's span context (rule 4)."""

NOTICE_ROUTES: Final = {
    NoticeRoute.FOLLOWUP: "new-turn",
    NoticeRoute.STEER: "steer",
    NoticeRoute.INJECT: "inject",
    NoticeRoute.DROP: "dropped",
}


def fields(
    child_id: str | None = None,
    parent_id: str | None = None,
    epoch: int | None = None,
    run_id: str | None = None,
) -> dict[str, object]:
    """The ``extra=`` fields of a lifecycle log line (rule 6)."""
    return {"child_id": child_id, "parent_id": parent_id, "epoch": epoch, "run_id": run_id}


class Lifecycle:
    """The hooks, logging only: what ``attach`` returns without the API (rule 1)."""

    def use(self, tracer_provider: object) -> None:
        """Trace through ``tracer_provider`` instead of the global one (no-op here)."""

    def observe(self, payload: object) -> None:
        """The service's ``subagent/start`` and ``subagent/end`` listener (rule 2)."""
        if isinstance(payload, RunStartInfo):
            self.on_start(payload)
        elif isinstance(payload, RunEndInfo):
            self.on_end(payload)

    def on_start(self, info: RunStartInfo) -> None:
        if not _log.isEnabledFor(logging.INFO):
            return  # nothing to log: skip building the fields (W1 pays this per delegation)
        _log.info(
            "subagent %s started (%s, %s)",
            info.child_id,
            info.provider,
            info.mode.value,
            extra=fields(info.child_id, info.parent_session, None, info.run_id),
        )

    def on_end(self, info: RunEndInfo) -> None:
        if not _log.isEnabledFor(logging.INFO):
            return
        start = info.start
        _log.info(
            "subagent %s ended: %s",
            start.child_id,
            stop_reason_text(info.stop_reason),
            extra=fields(start.child_id, start.parent_session, None, start.run_id),
        )

    def epoch(self, child_id: SessionId, epoch: int) -> None:
        """The engine is about to publish ``child_id``'s epoch ``epoch``."""

    def teardown_begin(self, child_id: SessionId, owner: SessionId | None) -> None:
        """The engine starts tearing ``child_id`` (owned by ``owner``) down: its flush."""

    def teardown_end(self, child_id: SessionId) -> None:
        """``child_id``'s end edge was performed."""

    def routed(self, child_id: SessionId, route: str) -> None:
        """One routing pass of a follow-up for ``child_id`` answered ``route``."""

    def notice(
        self, child_id: SessionId, parent_id: SessionId, route: NoticeRoute, *, dropped: bool
    ) -> contextlib.AbstractContextManager[None]:
        """Wrap the delivery of ``child_id``'s settlement notice."""
        return contextlib.nullcontext()

    def followup(self, child_id: SessionId) -> contextlib.AbstractContextManager[None]:
        """Wrap one follow-up's admission."""
        return _NO_SPAN

    def drain(self, scope: str) -> contextlib.AbstractContextManager[None]:
        """Wrap one drain."""
        return contextlib.nullcontext()

    def tool_call(
        self, tool_name: str, caller_id: SessionId
    ) -> contextlib.AbstractContextManager[None]:
        """Wrap one call of a ``subagent`` tool by ``caller_id``."""
        return contextlib.nullcontext()

    def background(self) -> contextlib.AbstractContextManager[None]:
        """Runs started inside are background runs: linked, not nested (rule 3)."""
        return contextlib.nullcontext()


_NO_SPAN: Final[contextlib.AbstractContextManager[None]] = contextlib.nullcontext()
"""One shared no-op context (stateless, so reusable and re-entrant): a follow-up that starts
no span makes no context object either (rule 1)."""

_BACKGROUND: Final[contextvars.ContextVar[bool]] = contextvars.ContextVar(
    "dsh_subagent_background", default=False
)
_DRAINING: Final[contextvars.ContextVar[bool]] = contextvars.ContextVar(
    "dsh_subagent_draining", default=False
)
_HOST: Final[contextvars.ContextVar[object | None]] = contextvars.ContextVar(
    "dsh_subagent_host_span", default=None
)
"""The host span ``within`` made current (rule 6); a tool call hangs under it while it is
still the current span (not in a task that merely inherited it under a span of ours)."""


def trace_record(events: Sequence[SessionEvent]) -> Mapping[str, JsonValue] | None:
    """The last ``subagent/trace`` record in a session's events (rule 4)."""
    for event in reversed(events):
        if event.type == TRACE_EVENT and isinstance(event.data, Mapping):
            return event.data
    return None


if AVAILABLE:
    _INTERNAL = trace.SpanKind.INTERNAL
    _CLIENT = trace.SpanKind.CLIENT

    def _linked_to(record: Mapping[str, JsonValue] | None) -> trace.Link | None:
        if record is None:
            return None
        try:
            trace_id = int(str(record["traceId"]), 16)
            span_id = int(str(record["spanId"]), 16)
        except (KeyError, ValueError):
            return None
        context = trace.SpanContext(
            trace_id,
            span_id,
            is_remote=True,
            trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
        )
        return trace.Link(context, {"dsh.subagent.link": "previous-epoch"})

    class Tracing(Lifecycle):
        """The hooks with spans (rules 2-5)."""

        def __init__(self, agents: AgentRegistry | None) -> None:
            self._agents = agents
            self._tracer = trace.get_tracer("dsh_subagent", schema_url=_SCHEMA_URL)
            self._global = True  # the tracer is the global provider's (rule 1)
            self._runs: dict[str, trace.Span] = {}
            self._live: dict[str, trace.Span] = {}
            self._teardowns: dict[str, trace.Span] = {}
            self._epochs: dict[str, int] = {}

        def use(self, tracer_provider: object) -> None:
            assert isinstance(tracer_provider, trace.TracerProvider)
            self._tracer = tracer_provider.get_tracer("dsh_subagent", schema_url=_SCHEMA_URL)
            self._global = False

        def _off(self) -> bool:
            """No span of ours can record: the tracer is the global provider's and none is set
            (the API's proxy stands in; ``get_tracer_provider`` also loads one an environment
            variable names), so a hook need not start one (rule 1)."""
            return self._global and isinstance(
                trace.get_tracer_provider(), trace.ProxyTracerProvider
            )

        # -------------------------------------------------------------- invoke_agent

        def on_start(self, info: RunStartInfo) -> None:
            super().on_start(info)
            epoch = self._epochs.pop(info.child_id, None)
            if self._off():
                return
            name = info.label or info.provider
            current = trace.get_current_span()
            linked = info.mode is Mode.CONTINUABLE or _BACKGROUND.get()
            links: list[trace.Link] = []
            if linked and current.get_span_context().is_valid:
                links.append(
                    trace.Link(current.get_span_context(), {"dsh.subagent.link": "started-by"})
                )
            agent = None if self._agents is None else self._agents.get(SessionId(info.child_id))
            previous = None
            if info.mode is Mode.CONTINUABLE and agent is not None:
                previous = _linked_to(trace_record(agent.session.events))
                if previous is not None:
                    links.append(previous)
            span = self._tracer.start_span(
                f"invoke_agent {name}",
                context=otel_context.Context() if linked else None,
                kind=_INTERNAL if info.local else _CLIENT,
                links=links,
                attributes={
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.id": info.child_id,
                    "gen_ai.conversation.id": info.child_id,
                    "gen_ai.agent.name": name,
                },
            )
            if not span.is_recording():
                return
            span.set_attributes(
                {
                    "dsh.subagent.provider": info.provider,
                    "dsh.subagent.parent_id": info.parent_session,
                    "dsh.subagent.mode": info.mode.value,
                    "dsh.subagent.run_id": info.run_id,
                    "dsh.subagent.background": bool(linked),
                }
            )
            if epoch is not None:
                span.set_attribute("dsh.subagent.epoch", epoch)
            if agent is not None:
                _describe(span, agent)
                if info.mode is Mode.CONTINUABLE:
                    _record(span, agent, epoch)
            self._runs[info.run_id] = span
            self._live[info.child_id] = span

        def on_end(self, info: RunEndInfo) -> None:
            super().on_end(info)
            span = self._runs.pop(info.start.run_id, None)
            if span is None:
                return
            if self._live.get(info.start.child_id) is span:
                del self._live[info.start.child_id]
            span.set_attribute("dsh.subagent.stop_reason", stop_reason_text(info.stop_reason))
            span.set_attribute("dsh.subagent.durability_failed", info.durability_failed)
            if info.stop_reason is KnownStop.ERROR:
                span.set_status(trace.StatusCode.ERROR, "the child ended with an error")
            span.end()

        def epoch(self, child_id: SessionId, epoch: int) -> None:
            self._epochs[child_id] = epoch

        # -------------------------------------------------------------- calls

        @contextlib.contextmanager
        def tool_call(self, tool_name: str, caller_id: SessionId) -> Iterator[None]:
            if self._off():
                yield
                return
            hosted = _HOST.get() is not None and _HOST.get() is trace.get_current_span()
            caller = None if hosted else self._live.get(caller_id)
            parent = None if caller is None else trace.set_span_in_context(caller)
            with self._tracer.start_as_current_span(
                f"execute_tool {tool_name}",
                context=parent,
                kind=_INTERNAL,
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": tool_name,
                    "gen_ai.tool.type": "function",
                    "dsh.subagent.parent_id": caller_id,
                },
            ):
                yield

        @contextlib.contextmanager
        def background(self) -> Iterator[None]:
            token = _BACKGROUND.set(True)
            try:
                yield
            finally:
                _BACKGROUND.reset(token)

        def followup(self, child_id: SessionId) -> contextlib.AbstractContextManager[None]:
            # Off: one shared no-op context, no generator nor span made (rule 1).
            return _NO_SPAN if self._off() else self._followup(child_id)

        @contextlib.contextmanager
        def _followup(self, child_id: SessionId) -> Iterator[None]:
            with self._tracer.start_as_current_span(
                "dsh.subagent.followup",
                kind=_INTERNAL,
                attributes={"gen_ai.agent.id": child_id},
            ):
                yield

        def routed(self, child_id: SessionId, route: str) -> None:
            span = trace.get_current_span()
            if span.is_recording():
                span.add_event("dsh.subagent.routed", {"dsh.subagent.route": route})

        @contextlib.contextmanager
        def drain(self, scope: str) -> Iterator[None]:
            token = _DRAINING.set(True)
            try:
                if self._off():
                    yield
                    return
                with self._tracer.start_as_current_span(
                    "dsh.subagent.drain",
                    kind=_INTERNAL,
                    attributes={"dsh.subagent.drain.scope": scope},
                ):
                    yield
            finally:
                _DRAINING.reset(token)

        # -------------------------------------------------------------- teardown

        def teardown_begin(self, child_id: SessionId, owner: SessionId | None) -> None:
            if self._off():
                return
            parent = None if _DRAINING.get() else self._live.get(child_id)
            span = self._tracer.start_span(
                "dsh.subagent.teardown",
                context=None if parent is None else trace.set_span_in_context(parent),
                kind=_INTERNAL,
                attributes={"gen_ai.agent.id": child_id},
            )
            if span.is_recording():
                span.set_attribute("dsh.subagent.parent_id", owner or "")
                self._teardowns[child_id] = span

        def teardown_end(self, child_id: SessionId) -> None:
            span = self._teardowns.pop(child_id, None)
            if span is not None:
                span.end()

        @contextlib.contextmanager
        def notice(
            self, child_id: SessionId, parent_id: SessionId, route: NoticeRoute, *, dropped: bool
        ) -> Iterator[None]:
            if self._off():
                yield
                return
            owner = self._teardowns.get(child_id) or self._live.get(child_id)
            with self._tracer.start_as_current_span(
                "dsh.subagent.notice",
                context=None if owner is None else trace.set_span_in_context(owner),
                kind=_INTERNAL,
                attributes={
                    "gen_ai.agent.id": child_id,
                    "dsh.subagent.parent_id": parent_id,
                    "dsh.subagent.notice.route": "dropped" if dropped else NOTICE_ROUTES[route],
                },
            ):
                yield

    _SCHEMA_URL: Final = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"

    def _describe(span: trace.Span, agent: Agent) -> None:
        """Depth and model provider of a local child, when its agent says (rule 2)."""
        with contextlib.suppress(SubagentError):  # an unreadable depth stays unknown
            span.set_attribute(
                "dsh.subagent.depth", delegation_depth_of(agent.session.header, agent.options)
            )
        if agent.options.provider is not None:
            span.set_attribute("gen_ai.provider.name", agent.options.provider)

    def _record(span: trace.Span, agent: Agent, epoch: int | None) -> None:
        """Append this epoch's span context to the child's session (rule 4)."""
        context = span.get_span_context()
        data: dict[str, JsonValue] = {
            "traceId": trace.format_trace_id(context.trace_id),
            "spanId": trace.format_span_id(context.span_id),
            "epoch": epoch,
        }
        try:
            agent.session.append(TRACE_EVENT, data)
        except Exception:
            _log.warning(
                "the trace context of %s was not recorded; its next epoch starts unlinked",
                agent.id,
                exc_info=True,
                extra=fields(agent.id, agent.session.header.parent_session, epoch),
            )


def current_context() -> object | None:
    """The OpenTelemetry context now, e.g. inside a host's tool span (rule 6); None without
    the API."""
    return otel_context.get_current() if AVAILABLE else None


@contextlib.contextmanager
def within(context: object | None) -> Iterator[None]:
    """Run the block under ``context`` (from ``current_context``): a host's tool span (rule 6)."""
    if context is None or not AVAILABLE:
        yield
        return
    assert isinstance(context, otel_context.Context)
    token = otel_context.attach(context)
    host = _HOST.set(trace.get_current_span())
    try:
        yield
    finally:
        _HOST.reset(host)
        otel_context.detach(token)


def attach(agents: AgentRegistry | None) -> Lifecycle:
    """The hooks for one service: with spans when the API is importable (rule 1)."""
    return Tracing(agents) if AVAILABLE else Lifecycle()


def use_tracer_provider(service: object, tracer_provider: object) -> None:
    """Trace ``service`` through ``tracer_provider`` rather than the global provider."""
    tracing = getattr(service, "tracing", None)
    if not isinstance(tracing, Lifecycle):
        raise TypeError("not a SubagentService")
    tracing.use(tracer_provider)


__all__ = [
    "AVAILABLE",
    "NOTICE_ROUTES",
    "SEMCONV_VERSION",
    "TRACE_EVENT",
    "Lifecycle",
    "attach",
    "current_context",
    "fields",
    "trace_record",
    "use_tracer_provider",
    "within",
]
