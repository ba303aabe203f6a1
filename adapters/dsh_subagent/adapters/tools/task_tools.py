"""The task tools over a ``JobRegistry``: ``task_output``, ``task_status``, ``task_list``,
``task_kill``, and the ``tool:jobs`` guidance section.

Theory of operation
-------------------
1. Every tool needs its calling agent; the registry's access fence decides what it may see
   (BG-32). Failures reach the model as ``Error: <message>``.
2. ``task_output`` is non-blocking unless ``wait`` is true; a wait lasts ``timeout_ms``
   (default 30 s) capped at the maximum (600 s); a timed-out wait answers the live status.
   The answer is the final output or ``(no new output)``, then ``[status: ...]`` on its own
   line (BG-33). ``task_list`` answers ``<id> [<kind>] <status> — <label>`` rows or
   ``(no background tasks)`` (BG-34); ``task_kill`` answers ``requested cancellation of task
   <id>`` or ``task <id> had already finished [status: ...]`` (BG-35). ``task_status`` shows a
   task's status without collecting it.
3. ``register_task_tools`` registers the four tools and, given a prompt composer, the
   ``tool:jobs`` section at order 106 (BG-38).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Final

from dsh_subagent.adapters.protocols import SystemPromptComposer, Tool, ToolHost, ToolOutcome
from dsh_subagent.adapters.signals import AbortSignal
from dsh_subagent.adapters.tools.calling import require_caller
from dsh_subagent.adapters.tools.jobs import JobRegistry, JobSnapshot, status_line
from dsh_subagent.adapters.tools.schemas import ToolFailure, guarded, parameters
from dsh_subagent.core.errors import invalid
from dsh_subagent.core.values import JsonObject

NO_NEW_OUTPUT: Final = "(no new output)"
NO_TASKS: Final = "(no background tasks)"

JOBS_SECTION: Final = "tool:jobs"
JOBS_SECTION_ORDER: Final = 106
JOBS_GUIDANCE: Final = (
    "Track every background task id you start. You are notified in-session when a task "
    "finishes — do not busy-poll or sleep on one; keep working on independent steps and do "
    "not duplicate a running task's work. Before giving a final answer, collect every "
    "still-relevant task with task_output (set wait: true only when you are genuinely blocked "
    "on it), and task_kill tasks that stopped mattering."
)
_TASK_ID: Final[JsonObject] = {
    "type": "string",
    "description": "The id of the background task, as returned when it was started.",
}
OUTPUT_SCHEMA: Final = parameters(
    {
        "task_id": _TASK_ID,
        "wait": {
            "type": "boolean",
            "description": "Block until the task finishes or the wait times out. "
            "Defaults to false.",
        },
        "timeout_ms": {
            "type": "number",
            "description": "How long to wait, in milliseconds, when wait is true.",
        },
    },
    ["task_id"],
)
STATUS_SCHEMA: Final = parameters({"task_id": _TASK_ID}, ["task_id"])
LIST_SCHEMA: Final = parameters({})
KILL_SCHEMA: Final = parameters(
    {
        "task_id": _TASK_ID,
        "reason": {"type": "string", "description": "Why the task is being stopped."},
    },
    ["task_id"],
)
OUTPUT_DESCRIPTION: Final = (
    "Read a background task: its final output once it has finished (nothing while it runs). "
    "The result always ends with a [status: ...] line. Does not block unless wait is true."
)
STATUS_DESCRIPTION: Final = (
    "Show a background task's kind, label and status without collecting its output."
)
LIST_DESCRIPTION: Final = "List your background tasks with their ids, kinds and statuses."
KILL_DESCRIPTION: Final = (
    "Request cancellation of a background task. Returns immediately; the task settles as "
    "killed once its work actually stops."
)


def render_output(text: str, job: JobSnapshot) -> str:
    """``<text or (no new output)>`` then the status line on its own line (BG-33)."""
    body = text or NO_NEW_OUTPUT
    return f"{body}{'' if body.endswith(chr(10)) else chr(10)}{status_line(job)}"


def render_row(job: JobSnapshot) -> str:
    """``<id> [<kind>] <status> — <label>`` (BG-34)."""
    return f"{job.id} [{job.kind}] {job.status.value} — {job.label}"


def _timeout(arguments: JsonObject, default_ms: int, max_ms: int) -> float:
    raw = arguments.get("timeout_ms", default_ms)
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not raw > 0:
        raise ToolFailure(
            "invalid wait timeout: expected a positive number of milliseconds, "
            f"got {json.dumps(raw)}"
        )
    return min(float(raw), float(max_ms)) / 1000


def task_tools(
    jobs: JobRegistry, *, wait_timeout_ms: int = 30_000, max_wait_timeout_ms: int = 600_000
) -> tuple[Tool, ...]:
    """``task_output``, ``task_status``, ``task_list`` and ``task_kill`` over ``jobs``."""
    if wait_timeout_ms > max_wait_timeout_ms:
        raise invalid(
            "wait_timeout_ms",
            f"waitTimeoutMs ({wait_timeout_ms}) exceeds maxWaitTimeoutMs ({max_wait_timeout_ms})",
        )

    async def output(arguments: JsonObject, signal: AbortSignal) -> ToolOutcome:
        async def body(args: JsonObject) -> str:
            caller = require_caller("task_output")
            wait = args.get("wait") is True
            timeout = _timeout(args, wait_timeout_ms, max_wait_timeout_ms) if wait else None
            text, job = await jobs.read(
                args.get("task_id"), caller, wait=wait, timeout=timeout, signal=signal
            )
            return render_output(text, job)

        return await guarded(OUTPUT_SCHEMA, arguments, signal, body)

    async def status(arguments: JsonObject, signal: AbortSignal) -> ToolOutcome:
        async def body(args: JsonObject) -> str:
            job = jobs.status(args.get("task_id"), require_caller("task_status"))
            return f"task {job.id} ({job.kind}: {job.label}) {status_line(job)}"

        return await guarded(STATUS_SCHEMA, arguments, signal, body)

    async def listing(arguments: JsonObject, signal: AbortSignal) -> ToolOutcome:
        async def body(_args: JsonObject) -> str:
            rows = jobs.list(require_caller("task_list"))
            return "\n".join(render_row(job) for job in rows) or NO_TASKS

        return await guarded(LIST_SCHEMA, arguments, signal, body)

    async def kill(arguments: JsonObject, signal: AbortSignal) -> ToolOutcome:
        async def body(args: JsonObject) -> str:
            reason = args.get("reason")
            requested, job = jobs.kill(
                args.get("task_id"),
                require_caller("task_kill"),
                reason if isinstance(reason, str) and reason else None,
            )
            if requested:
                return f"requested cancellation of task {job.id}"
            return f"task {job.id} had already finished {status_line(job)}"

        return await guarded(KILL_SCHEMA, arguments, signal, body)

    return (
        Tool("task_output", output, OUTPUT_SCHEMA, OUTPUT_DESCRIPTION),
        Tool("task_status", status, STATUS_SCHEMA, STATUS_DESCRIPTION),
        Tool("task_list", listing, LIST_SCHEMA, LIST_DESCRIPTION),
        Tool("task_kill", kill, KILL_SCHEMA, KILL_DESCRIPTION),
    )


def register_task_tools(
    tools: ToolHost,
    jobs: JobRegistry,
    *,
    prompt: SystemPromptComposer | None = None,
    **timeouts: int,
) -> Callable[[], None]:
    """Register the task tools and the ``tool:jobs`` guidance (BG-38); the disposer removes
    all of them."""
    removers = [tools.register(tool) for tool in task_tools(jobs, **timeouts)]
    if prompt is not None:
        removers.append(prompt.section(JOBS_SECTION, JOBS_SECTION_ORDER, JOBS_GUIDANCE))

    def remove() -> None:
        for remover in reversed(removers):
            remover()

    return remove


__all__ = [
    "JOBS_GUIDANCE",
    "register_task_tools",
    "render_output",
    "render_row",
    "task_tools",
]
