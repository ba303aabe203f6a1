"""``dsh-subagent demo``: the seam doing real work on the reference harness and SQLite.

Theory of operation
-------------------
1. A parent agent on the reference loop delegates through the real ``SubagentService``:
   a foreground spawn, a fork that reads its inherited history, a background one-shot run it
   collects later, and a tree of continuable children (depth 2) that it follows up while one
   is running (queued) and one is waiting (woken), interrupts, and finally drains.
2. A "restart" then closes the harness, reopens the SQLite store in a fresh harness (in the
   same process; nothing of the first harness is reused), lists the children from the
   durable catalog and cold-resumes one with a host's user grant.
3. Every printed line comes from the service: run results, lifecycle events, residency
   (``activation_state``), the settlement notices as the parent's log holds them, and the
   catalog rows. The model is ``DemoModel``: deterministic, offline, with per-agent gates so
   the demo can hold a turn open without sleeping.
4. Generated ids (UUIDs) print in full at their first mention and as their first 8
   characters after that (``ShortIds``), so lines stay within 80 columns. A closing summary
   line counts the child runs and says where the store is.
5. ``--step`` pauses between phases only on a terminal; otherwise the demo says so and runs
   without pauses.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import attrs

from dsh_subagent.adapters.continuation_types import (
    AncestorAuthority,
    ContinuableStartSpec,
    ParentAgent,
)
from dsh_subagent.adapters.protocols import Agent, ModelRequest, ModelStep
from dsh_subagent.adapters.providers.base import StartRequest
from dsh_subagent.adapters.reference.harness import ReferenceHarness
from dsh_subagent.adapters.reference.persistence import redact
from dsh_subagent.adapters.reference.session import LiveSession
from dsh_subagent.adapters.service import LifecyclePayload
from dsh_subagent.adapters.signals import AbortController, race_abort
from dsh_subagent.core.lifecycle import RunEndInfo, RunStartInfo
from dsh_subagent.core.listing import ChildRow, DescendantRow, ListingDiagnostic
from dsh_subagent.core.values import (
    TURN_END,
    USER_MESSAGE,
    AgentOptions,
    CoordinatorSource,
    MessageId,
    SessionId,
    SubagentSettledSource,
    TextBlock,
    UserMessage,
    stop_reason_text,
)
from dsh_subagent.core.wire import decode_message, turn_end_reason

Say = Callable[[str], None]
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@attrs.define
class ShortIds:
    """A UUID in full at its first mention, then its first 8 characters; other ids as they are."""

    seen: set[str] = attrs.field(factory=set)

    def __call__(self, ident: str) -> str:
        if not _UUID.fullmatch(ident) or ident not in self.seen:
            self.seen.add(ident)
            return ident
        return ident[:8]


def _user_messages(events: Sequence[object]) -> list[UserMessage]:
    found = []
    for event in events:
        if getattr(event, "type", None) == USER_MESSAGE:
            data = getattr(event, "data", None)
            if isinstance(data, Mapping):
                found.append(decode_message(data.get("message"), "message"))
    return found


def _plain(message: UserMessage) -> str:
    return " ".join(block.text for block in message.content if isinstance(block, TextBlock))


class DemoModel:
    """Answers each turn from the agent's own log; a gate holds an agent's next step."""

    def __init__(self) -> None:
        self.gates: dict[SessionId, asyncio.Event] = {}
        self.reached: dict[SessionId, asyncio.Event] = {}

    def hold(self, agent: SessionId) -> None:
        """Make ``agent``'s next model step wait until ``release``."""
        self.gates[agent] = asyncio.Event()
        self.reached[agent] = asyncio.Event()

    def release(self, agent: SessionId) -> None:
        """Let a held step finish."""
        self.gates.pop(agent).set()

    async def step(self, request: ModelRequest) -> ModelStep:
        gate = self.gates.get(request.agent)
        if gate is not None:
            self.reached[request.agent].set()
            await race_abort(gate.wait(), request.signal)
        messages = _user_messages(request.events)
        last = _plain(messages[-1]) if messages else ""
        context = f" (context: {_plain(messages[0])})" if len(messages) > 1 else ""
        return ModelStep(content=(TextBlock(f"done: {last}{context}"),))


@attrs.define
class Recorder:
    """Lifecycle events and settlement waits, fed by ``service.on``."""

    say: Say
    name: ShortIds
    lines: list[dict[str, object]] = attrs.field(factory=list)
    ended: dict[SessionId, asyncio.Event] = attrs.field(factory=dict)

    def __call__(self, payload: LifecyclePayload) -> None:
        if isinstance(payload, RunStartInfo):
            self.lines.append({"event": "subagent/start", "child": payload.child_id})
            self.say(
                f"  [event] subagent/start  {self.name(payload.child_id)} ({payload.provider})"
            )
        elif isinstance(payload, RunEndInfo):
            reason = stop_reason_text(payload.stop_reason)
            child = payload.start.child_id
            self.lines.append({"event": "subagent/end", "child": child, "stop": reason})
            extra = "  DURABILITY_FAILED" if payload.durability_failed else ""
            self.say(f"  [event] subagent/end    {self.name(child)} -> {reason}{extra}")
            self.ended.setdefault(SessionId(child), asyncio.Event()).set()

    async def end_of(self, child: SessionId) -> None:
        await self.ended.setdefault(child, asyncio.Event()).wait()


def _notices(agent: Agent) -> list[str]:
    return [
        " / ".join(block.text for block in m.content if isinstance(block, TextBlock))
        for m in _user_messages(agent.session.events)
        if isinstance(m.source, SubagentSettledSource)
    ]


def _catalog_line(row: ChildRow | ListingDiagnostic | DescendantRow, name: ShortIds) -> str:
    if isinstance(row, DescendantRow):
        return f"{'  ' * row.depth}{_catalog_line(row.row, name)}"
    if isinstance(row, ListingDiagnostic):
        return f"{name(row.child_id)}: {row.kind.value} ({row.reason})"
    label = f" '{row.label}'" if row.label else ""
    kids = ", has children" if row.has_children else ""
    return f"{name(row.id)}: {row.mode.value}{label}, {row.activity.value}{kids}"


async def run_demo(
    say: Say, *, db: Path | str, step: Callable[[str], None]
) -> list[dict[str, object]]:
    """Run the whole demo; returns the lifecycle event log."""
    model = DemoModel()
    name = ShortIds()
    recorder = Recorder(say, name)

    def model_for(_session: LiveSession, _options: AgentOptions) -> DemoModel:
        return model

    harness = await ReferenceHarness.open(model_for, db=db)
    service = harness.service
    for event in ("subagent/start", "subagent/end"):
        service.on(event, recorder)
    earlier = [h.id for h in await harness.persistence.list() if h.parent_session is None]
    suffix = f"-{len(earlier) + 1}" if earlier else ""
    for previous in earlier:
        say(f"this store already holds an earlier run's parent {previous}; its children:")
        for earlier_row in await service.list_children(previous):
            say(f"  catalog: {_catalog_line(earlier_row, name)}")
    parent_id = SessionId(f"parent{suffix}")
    cwd = str(db.parent) if isinstance(db, Path) else os.getcwd()
    parent = await harness.create_agent(parent_id, cwd=cwd)
    brief = UserMessage(MessageId("brief"), (TextBlock("we audit the v2 release notes"),))
    parent.followup(brief)
    await parent.when_idle()

    def ask(prompt: str, label: str) -> StartRequest:
        return StartRequest((TextBlock(prompt),), parent, AbortController().signal, label=label)

    step("1. one-shot delegation")
    run = await service.start("spawn", ask("list three release risks", "risks"))
    result = await run.result
    await run.dispose()
    say(f"  spawn (foreground) {name(run.id)}: {result.text}")
    run = await service.start("fork", ask("what are we auditing?", "recall"))
    result = await run.result
    await run.dispose()
    say(f"  fork  (inherits history) {name(run.id)}: {result.text}")
    background = await service.start("spawn", ask("draft the changelog", "changelog"))
    say(f"  spawn (background) started {name(background.id)}; the parent keeps working")

    step("2. continuable children, a tree of depth 2")
    researcher, writer, checker = (
        SessionId(f"{n}{suffix}") for n in ("researcher", "writer", "checker")
    )
    for child in (researcher, writer, checker):
        model.hold(child)
    for child, prompt in ((researcher, "survey open bugs"), (writer, "write the summary")):
        label = child.removesuffix(suffix) if suffix else child
        spec = ContinuableStartSpec("spawn", label, parent, (TextBlock(prompt),), child_id=child)
        started = await service.start_continuable(spec)
        say(f"  started {started.child_id} (accepted message {name(started.message_id)})")
    await model.reached[writer].wait()
    writer_agent = harness.registry.get(writer)
    assert writer_agent is not None
    spec = ContinuableStartSpec(
        "spawn", "checker", writer_agent, (TextBlock("check the facts"),), child_id=checker
    )  # the label is the durable display name; the id is unique per run
    await service.start_continuable(spec)
    say(f"  the writer delegated again: {checker} (depth 2)")
    model.release(writer)
    await writer_agent.when_idle()
    await model.reached[researcher].wait()
    for child in (researcher, writer, checker):
        say(f"  {child} is {_state(service.activation_state(child))}")

    step("3. follow-ups: queued while running, woken while waiting, and an interrupt")
    await service.followup(researcher, (TextBlock("also check security"),), ParentAgent(parent))
    say("  follow-up to the running researcher: queued behind its current turn")
    model.hold(writer)  # its woken turn runs on while we look (the call returns once stored)
    await service.followup(writer, (TextBlock("tighten the summary"),), ParentAgent(parent))
    say(f"  follow-up to the waiting writer woke it: {_state(service.activation_state(writer))}")
    model.release(writer)
    service.interrupt(researcher, AncestorAuthority(parent))
    model.gates.pop(researcher, None)
    researcher_agent = harness.registry.get(researcher)
    assert researcher_agent is not None
    await researcher_agent.when_idle()
    ended = [e for e in researcher_agent.session.events if e.type == TURN_END]
    say(f"  interrupted the researcher: its turn ended {turn_end_reason(ended[-1].data).value}")
    say(
        "  its queued follow-up stays parked, so it stays resident: "
        f"{_state(service.activation_state(researcher))}"
    )
    await service.followup(researcher, (TextBlock("resume"),), ParentAgent(parent))
    say("  a waking follow-up runs the parked message first, then the new one")
    model.release(checker)

    step("4. settlement notices reach the parent")
    for child in (checker, writer, researcher):
        await recorder.end_of(child)
    result = await background.result
    await background.dispose()
    say(f"  collected background run {name(background.id)}: {result.text}")
    await parent.when_idle()
    for notice in _notices(parent):
        say(f"  notice: {notice}")
    await harness.flush(parent)

    step("5. restart: close the harness, reopen the store in a fresh one")
    await harness.close()
    harness = await ReferenceHarness.open(model_for, db=db)
    service = harness.service
    for event in ("subagent/start", "subagent/end"):
        service.on(event, recorder)
    for row in await service.list_descendants(parent_id):
        say(f"  catalog: {_catalog_line(row, name)}")
    grant = service.user_authority()
    source = CoordinatorSource(SessionId("host"))
    recorder.ended.pop(writer, None)
    say(f"  {writer} before the follow-up: {_state(service.activation_state(writer))}")
    model.hold(writer)
    await service.followup(writer, (TextBlock("one more pass"),), grant, source=source)
    say(f"  cold-resumed {writer} with a user grant: {_state(service.activation_state(writer))}")
    model.release(writer)
    await recorder.end_of(writer)
    say("  (its parent is not live in this harness, so the settlement notice is dropped;")
    say("   the child's own session keeps the outcome)")
    step("6. drain, reopen, and the final catalog")
    await harness.close()
    harness = await ReferenceHarness.open(model_for, db=db)
    for child_row in await harness.service.list_children(parent_id):
        say(f"  catalog: {_catalog_line(child_row, name)}")
    await harness.close()
    return recorder.lines


def _state(state: object) -> str:
    return "absent" if state is None else str(getattr(state, "value", state))


def summary(lines: Sequence[Mapping[str, object]], db: Path | str | None) -> str:
    """The closing line: how many child runs started and ended, and where the store is."""
    starts = sum(1 for line in lines if line["event"] == "subagent/start")
    ends = sum(1 for line in lines if line["event"] == "subagent/end")
    where = redact(db) if isinstance(db, str) else db
    kept = f"the store is kept at {where}" if db else "the store was temporary (--db PATH keeps it)"
    return f"summary: {starts} child runs started, {ends} ended; {kept}"


def main(
    *, db: Path | str | None, as_json: bool, step_through: bool, show_trace: bool = False
) -> None:
    """Entry point for the CLI: run the demo on ``db`` (a temporary store by default).

    ``show_trace`` records the demo's spans with the OpenTelemetry SDK and prints their tree.
    """
    from rich.console import Console

    console = Console(highlight=False, soft_wrap=True)
    if step_through and not as_json and not sys.stdin.isatty():
        print(
            "note: --step needs a terminal (stdin is not one); running without pauses",
            file=sys.stderr,
        )
        step_through = False
    exporter = None
    if show_trace:
        from dsh_subagent.cli import trace_tree

        exporter = trace_tree.recording()

    def say(line: str) -> None:
        if not as_json:
            console.print(line, markup=False)

    def step(title: str) -> None:
        if as_json:
            return
        if step_through:
            console.input("[dim]press Enter to continue[/]")
        console.rule(title)

    with tempfile.TemporaryDirectory() as scratch:
        path = db or Path(scratch) / "demo.db"
        lines = asyncio.run(run_demo(say, db=path, step=step))
    if as_json:
        print(json.dumps(lines, indent=2))
    else:
        say(summary(lines, db))
    if exporter is not None:
        console.rule("the span tree (OpenTelemetry SDK, in-memory exporter)")
        for tree in trace_tree.render(exporter.get_finished_spans()):
            console.print(tree)
