"""The ``acp`` provider: one-shot children in another process, over the Agent Client Protocol.

Theory of operation
-------------------
1. Configuration is validated at load (``AcpAgentConfig``, ACP-1/2): a non-empty ``argv``
   (the command and its arguments), string ``env`` values, a ``permission`` policy (default
   ``reject``), positive finite timing bounds (OOP-2) and an optional working directory
   resolved against the launch directory and checked (OOP-4). Every bound is finite, the
   prompt's too (``prompt_timeout``, default 600 s: a wedged or offline agent must not hold a
   run forever; a longer task configures more). The child's environment is the SDK's minimal
   inherited set (no ambient credentials, no ambient ``DSH_*``) plus ``env`` (ACP-7).
2. As an out-of-process provider it advertises no start capabilities, has no
   ``prepare_continuable`` and ``inherits_parent_context`` is false (OOP-1): the service refuses
   a schema, depth cap, tool filter or persona before anything is spawned.
3. Unpublished setup (``launch``) resolves the child's working directory (the configured one,
   else the parent session's, OOP-5) and spawns the command in its own session, so it leads
   a process group holding everything it starts. The run is published once the process
   exists; an abort during setup reaps it before the start rejects (ONE-7).
4. The published attempt (``run``) speaks ACP over the child's stdio: ``initialize`` and
   ``session/new`` within ``handshake_timeout``, then ``session/prompt`` within
   ``prompt_timeout``. ``agent_message_chunk`` text streams into the output fold (ONE-12).
   Permission requests are answered by the policy, never by a human (ACP-14, ASK): ``allow``
   selects the first offered allow option, else a reject option; ``reject`` selects the
   first offered reject option; ``cancelled`` (which the protocol reserves for a cancelled
   turn) only when no fitting option is offered or the attempt is already cancelled. The
   prompt's stop reason maps to ours by ``STOP_REASONS`` (an unclean or unknown stop is
   ``error``).
5. Every failure of the child settles ``error`` (never a hang): a crash or early exit (the
   process exit is watched beside the pipe, so a grandchild still holding stdout open cannot
   keep the run alive; what was written before the exit is still read, for ``EXIT_DRAIN``), a
   line on stdout that is not a JSON-RPC object (the connection is ended at once), a
   malformed or refused answer, or a missed bound. ``diagnostic_for`` renders it as one
   fixed-format line, ``acp <phase>: <fact>``: no raw error, payload or stderr (OOP-10).
6. Shutting the child down is one memoized ladder, begun when the attempt ends (settled,
   failed or cancelled) and awaited by ``teardown`` (dispose): while a prompt is outstanding
   send ``session/cancel`` and wait up to ``cancel_grace`` for its answer; close stdin (EOF)
   and wait up to ``eof_grace`` for the whole process group to exit; then SIGTERM the group and
   wait up to ``term_grace``; then SIGKILL it. A leader that exits first does not end the
   ladder while its group has members (ACP-15). The process is always reaped; the connection
   is closed after it exits.
7. An optional progress listener hears the stages ``spawned``, ``session``, ``prompting``,
   ``update`` (each message chunk), ``cancel-sent`` and ``cancel-answered``; its failures are
   logged, never propagated.

Using a real agent: install the ``acp`` extra (without it, importing this module raises
``MissingExtra`` naming that extra) and an ACP agent command, then register e.g.
``AcpProvider(AcpAgentConfig(["npx", "@zed-industries/claude-code-acp"],
env={"ANTHROPIC_API_KEY": key}))``. Only the SDK's minimal environment is inherited, so the
agent's own credentials and any ``PATH`` additions go in ``env``. POSIX only (process groups).
Limitations (ACP-16): a fresh process for every run (no pooling), local workspaces only, no
start capabilities, only committed ``agent_message_chunk`` text is collected, and permission
requests are answered automatically.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Literal, cast

import attrs

from dsh_subagent.core.extras import MissingExtra

try:
    from acp import PROTOCOL_VERSION, Client, RequestError, connect_to_agent
    from acp.client.connection import ClientSideConnection
    from acp.helpers import ContentBlock as AcpBlock
    from acp.schema import (
        AgentMessageChunk,
        AllowedOutcome,
        ClientCapabilities,
        DeniedOutcome,
        Implementation,
        PermissionOption,
        PromptResponse,
        RequestPermissionResponse,
        TextContentBlock,
    )
    from acp.transports import default_environment
    from pydantic import ValidationError
except ModuleNotFoundError as err:  # the base install has no ACP SDK
    raise MissingExtra("the acp provider", "agent-client-protocol", "acp") from err

from dsh_subagent.adapters.providers.base import ResolvedStartRequest
from dsh_subagent.adapters.providers.out_of_process import (
    Attempt,
    OutOfProcessProvider,
    require_positive_finite,
    resolve_child_cwd,
    validate_configured_cwd,
)
from dsh_subagent.adapters.signals import race_abort
from dsh_subagent.core.errors import invalid
from dsh_subagent.core.values import KnownStop, StopReason, SubagentResult, TextBlock

_log = logging.getLogger(__name__)

PREFIX: Final = "acp"
LINE_LIMIT: Final = 32 * 1024 * 1024
EXIT_DRAIN: Final = 0.5  # seconds to read what an exited child wrote before calling it gone
POLL: Final = 0.05  # seconds between looks at an exit status or a process group
ALLOW_KINDS: Final = ("allow_once", "allow_always")
REJECT_KINDS: Final = ("reject_once", "reject_always")
CLIENT_INFO: Final = Implementation(name="dsh-subagent", version="0.1.0")
STOP_REASONS: Final[Mapping[str, StopReason]] = {
    "end_turn": KnownStop.COMPLETED,
    "max_tokens": KnownStop.MAX_TOKENS,
    "refusal": KnownStop.REFUSAL,
    "cancelled": KnownStop.ABORTED,
    "max_turn_requests": KnownStop.ERROR,
}
Permission = Literal["reject", "allow"]
Process = asyncio.subprocess.Process


def _env_pairs(value: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise invalid("env", f"{PREFIX}: env must map strings to strings")
    return tuple(sorted(value.items()))


def _argv(value: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    if (
        not isinstance(value, tuple | list)
        or not value
        or not all(isinstance(part, str) and part for part in value)
    ):
        raise invalid("argv", f"{PREFIX}: argv must be a non-empty list of non-empty strings")
    return tuple(value)


def _cwd(value: str | None) -> str | None:
    return validate_configured_cwd(value, prefix=PREFIX)


def _positive(_instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    require_positive_finite(value, attribute.name, PREFIX)


def _permission(_instance: object, _attribute: attrs.Attribute[str], value: str) -> None:
    if value not in ("reject", "allow"):
        raise invalid("permission", f"{PREFIX}: permission must be 'reject' or 'allow'")


@attrs.frozen
class AcpAgentConfig:
    """How to launch and drive one ACP agent command (validated at load, rule 1)."""

    argv: tuple[str, ...] = attrs.field(converter=_argv)
    env: tuple[tuple[str, str], ...] = attrs.field(factory=dict, converter=_env_pairs)
    cwd: str | None = attrs.field(default=None, converter=_cwd)
    permission: Permission = attrs.field(default="reject", validator=_permission)
    handshake_timeout: float = attrs.field(default=60.0, validator=_positive)
    prompt_timeout: float = attrs.field(default=600.0, validator=_positive)
    cancel_grace: float = attrs.field(default=5.0, validator=_positive)
    eof_grace: float = attrs.field(default=6.0, validator=_positive)
    term_grace: float = attrs.field(default=3.0, validator=_positive)


@attrs.frozen
class LaunchSpec:
    """What a spawner starts: the command, its full environment and working directory."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str


Spawner = Callable[[LaunchSpec], Awaitable[Process]]
ProgressListener = Callable[[str], object]


async def spawn_agent(spec: LaunchSpec) -> Process:
    """Start the agent with piped stdin/stdout, inherited stderr, leading a new session."""
    return await asyncio.create_subprocess_exec(
        *spec.argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env=dict(spec.env),
        cwd=spec.cwd,
        limit=LINE_LIMIT,
        start_new_session=True,
    )


class AcpFailure(Exception):
    """A sanitized fact about a failed child: ``acp <phase>: <fact>`` (rule 5)."""

    def __init__(self, phase: str, fact: str) -> None:
        super().__init__(f"{PREFIX} {phase}: {fact}")
        self.line = f"{PREFIX} {phase}: {fact}"


def _decode(line: bytes) -> dict[str, Any] | str:
    """A JSON-RPC object, or what the line was instead."""
    try:
        message = json.loads(line)
    except ValueError:
        return "a line that is not JSON"
    if not isinstance(message, dict):
        return "a JSON value that is not a JSON-RPC object"
    return cast(dict[str, Any], message)


class StdioTransport:
    """Newline-delimited JSON-RPC over the child's pipes; a non-protocol line ends it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._lock = asyncio.Lock()
        self.violation: str | None = None

    async def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message, separators=(",", ":")).encode("utf-8") + b"\n"
        async with self._lock:
            self._writer.write(data)
            await self._writer.drain()

    async def receive(self) -> dict[str, Any] | None:
        """The next message; ``None`` at EOF or, recording ``violation``, at a bad line."""
        while self.violation is None:
            try:
                line = await self._reader.readline()
            except ValueError:
                self.violation = "child wrote an over-long line on stdout"
                break
            if not line:
                break
            if line.strip():
                message = _decode(line)
                if not isinstance(message, str):
                    return message
                self.violation = f"child wrote {message} on stdout"
        return None

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            self._writer.close()


class _Child:
    """The per-attempt process, connection and shutdown ladder."""

    def __init__(self, cwd: str, spawning: asyncio.Future[Process]) -> None:
        self.cwd = cwd
        self.spawning = spawning
        self.process: Process | None = None
        self.transport: StdioTransport | None = None
        self.connection: ClientSideConnection | None = None
        self.session_id: str | None = None
        self.phase = "spawn"
        self.prompt: asyncio.Future[PromptResponse] | None = None
        self.shutdown: asyncio.Task[None] | None = None


class _Collector:
    """The client side the child talks to: collects message text, answers permissions."""

    def __init__(self, provider: AcpProvider, attempt: Attempt, child: _Child) -> None:
        self._provider = provider
        self._attempt = attempt
        self._child = child

    async def session_update(self, session_id: str, update: object, **_meta: object) -> None:
        if session_id != self._child.session_id or not isinstance(update, AgentMessageChunk):
            return
        if isinstance(update.content, TextContentBlock):
            self._attempt.push_text(update.content.text)
            self._provider.progress("update")

    async def request_permission(
        self, session_id: str, tool_call: object, options: list[PermissionOption], **_meta: object
    ) -> RequestPermissionResponse:
        """The policy's answer; nothing reaches a human (rule 4, ACP-14, ASK)."""
        allow = self._provider.config.permission == "allow"
        preference = (ALLOW_KINDS, REJECT_KINDS) if allow else (REJECT_KINDS,)
        for kinds in preference if not self._attempt.cancelled else ():
            for option in options:
                if option.kind in kinds:
                    chosen = AllowedOutcome(outcome="selected", option_id=option.option_id)
                    return RequestPermissionResponse(outcome=chosen)
        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))


def _prompt_blocks(request: ResolvedStartRequest) -> list[AcpBlock]:
    """The prompt's text blocks as ACP text blocks (other blocks cannot cross, rule 4)."""
    return [
        TextContentBlock(type="text", text=block.text)
        for block in request.request.intent.prompt
        if isinstance(block, TextBlock)
    ]


def _consume(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()  # retrieved: an abandoned operation's failure is expected


async def _finishes(work: Awaitable[object], timeout: float) -> bool:
    """Whether ``work`` completes cleanly within ``timeout``; its failures never propagate."""
    task = asyncio.ensure_future(work)
    task.add_done_callback(_consume)
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        task.cancel()
    return bool(done) and not task.cancelled() and task.exception() is None


class AcpProvider(OutOfProcessProvider):
    """Runs each one-shot child as a fresh ACP agent process (rules 2-6)."""

    def __init__(
        self,
        config: AcpAgentConfig,
        *,
        name: str = "acp",
        spawner: Spawner = spawn_agent,
        on_progress: ProgressListener | None = None,
    ) -> None:
        super().__init__(name)
        if not isinstance(config, AcpAgentConfig):
            raise invalid("config", f"{PREFIX}: config must be an AcpAgentConfig")
        self.config: Final = config
        self._spawner = spawner
        self._on_progress = on_progress
        self._children: dict[Attempt, _Child] = {}

    def progress(self, stage: str) -> None:
        """Tell the progress listener (tests, telemetry) that a child reached ``stage``."""
        if self._on_progress is not None:
            try:
                self._on_progress(stage)
            except Exception:  # an observer cannot break the run
                _log.warning("acp progress listener failed at %r", stage, exc_info=True)

    # ------------------------------------------------------------------ setup (rule 3)

    async def launch(self, request: ResolvedStartRequest, attempt: Attempt) -> None:
        cwd = resolve_child_cwd(self.config.cwd, request.request.parent.cwd, prefix=PREFIX)
        env = {**default_environment(), **dict(self.config.env)}
        spawning = asyncio.ensure_future(self._spawner(LaunchSpec(self.config.argv, env, cwd)))
        child = self._children[attempt] = _Child(cwd, spawning)
        child.process = await asyncio.shield(spawning)  # an abort here still reaps it
        self.progress("spawned")

    # ------------------------------------------------------------------ the attempt (rules 4-5)

    async def run(self, request: ResolvedStartRequest, attempt: Attempt) -> SubagentResult:
        child = self._children[attempt]
        try:
            return await race_abort(self._converse(request, attempt, child), attempt.signal)
        finally:
            self._begin_shutdown(child)

    async def _converse(
        self, request: ResolvedStartRequest, attempt: Attempt, child: _Child
    ) -> SubagentResult:
        process = child.process
        assert process is not None
        assert process.stdout is not None
        assert process.stdin is not None
        child.transport = StdioTransport(process.stdout, process.stdin)
        collector = _Collector(self, attempt, child)
        # The SDK routes by method name; the collector implements the two methods it needs and
        # every other client method answers "method not found" (no fs or terminal offered).
        conn = connect_to_agent(cast(Client, collector), child.transport)
        child.connection = conn
        conversation = asyncio.ensure_future(self._exchange(conn, child, request))
        try:
            response = await self._before_exit(conversation, child, process)
        except AcpFailure:
            raise
        except RequestError as error:
            raise AcpFailure(child.phase, f"child answered JSON-RPC error {error.code}") from None
        except ValidationError:
            raise AcpFailure(child.phase, "child sent a malformed message") from None
        except OSError:  # ConnectionError (closed), BrokenPipeError, ... (rule 5)
            raise AcpFailure(child.phase, await self._loss_fact(child)) from None
        finally:
            conversation.cancel()  # a no-op once done; the prompt itself is shielded
        stop = STOP_REASONS.get(response.stop_reason, KnownStop.ERROR)
        diagnostic = None
        if stop is KnownStop.ERROR:
            diagnostic = f"{PREFIX} session/prompt: child stopped with {response.stop_reason}"
        return SubagentResult(attempt.collected(), stop, diagnostic=diagnostic)

    async def _exchange(
        self, conn: ClientSideConnection, child: _Child, request: ResolvedStartRequest
    ) -> PromptResponse:
        await self._handshake(conn, child)
        return await self._prompt(conn, child, request)

    async def _before_exit(
        self, conversation: asyncio.Future[PromptResponse], child: _Child, process: Process
    ) -> PromptResponse:
        """The conversation's outcome, or the process's exit if it comes first (rule 5).

        A grandchild may hold stdout open after the process exits, so EOF alone cannot be
        trusted to end the conversation; what the process wrote before exiting is still read.
        """
        exited = asyncio.ensure_future(_exit_status(process))
        either: set[asyncio.Future[Any]] = {conversation, exited}
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            if not conversation.done():
                await asyncio.wait({conversation}, timeout=EXIT_DRAIN)
        finally:
            exited.cancel()
        if not conversation.done():  # so the process exited
            raise AcpFailure(child.phase, _exit_fact(exited.result()))
        return conversation.result()

    async def _handshake(self, conn: ClientSideConnection, child: _Child) -> None:
        bound = self.config.handshake_timeout
        try:
            async with asyncio.timeout(bound):
                child.phase = "initialize"
                init = await conn.initialize(
                    protocol_version=PROTOCOL_VERSION,
                    client_capabilities=ClientCapabilities(),
                    client_info=CLIENT_INFO,
                )
                if init.protocol_version != PROTOCOL_VERSION:
                    version = init.protocol_version
                    raise AcpFailure("initialize", f"unsupported protocol version {version}")
                child.phase = "session/new"
                session = await conn.new_session(cwd=child.cwd, mcp_servers=[])
        except TimeoutError:
            raise AcpFailure(child.phase, f"no answer within {bound:g}s") from None
        child.session_id = session.session_id
        self.progress("session")

    async def _prompt(
        self, conn: ClientSideConnection, child: _Child, request: ResolvedStartRequest
    ) -> PromptResponse:
        child.phase = "session/prompt"
        assert child.session_id is not None
        prompt = asyncio.ensure_future(
            conn.prompt(session_id=child.session_id, prompt=_prompt_blocks(request))
        )
        prompt.add_done_callback(_consume)
        child.prompt = prompt
        self.progress("prompting")
        bound = self.config.prompt_timeout
        try:
            return await asyncio.wait_for(asyncio.shield(prompt), bound)
        except TimeoutError:
            raise AcpFailure(child.phase, f"no answer within {bound:g}s") from None

    async def _loss_fact(self, child: _Child) -> str:
        """Why the connection was lost: a protocol violation, an exit status, or a close."""
        if child.transport is not None and child.transport.violation is not None:
            return child.transport.violation
        assert child.process is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(_exit_status(child.process), self.config.eof_grace)
        code = child.process.returncode
        return "child closed the connection" if code is None else _exit_fact(code)

    def diagnostic_for(self, error: BaseException) -> str | None:
        """The fixed-format line of an ``AcpFailure``; nothing raw for anything else (OOP-10)."""
        if isinstance(error, AcpFailure):
            return error.line
        return f"{PREFIX}: the child run failed unexpectedly"

    # ------------------------------------------------------------------ shutdown (rule 6)

    def _begin_shutdown(self, child: _Child) -> asyncio.Task[None]:
        if child.shutdown is None:
            child.shutdown = asyncio.get_running_loop().create_task(self._shut_down(child))
        return child.shutdown

    async def teardown(self, attempt: Attempt) -> None:
        child = self._children.get(attempt)
        if child is None:
            return
        try:
            await self._begin_shutdown(child)
        finally:
            self._children.pop(attempt, None)

    async def _shut_down(self, child: _Child) -> None:
        await asyncio.wait({child.spawning})  # a failed spawn leaves nothing to reap
        if not child.spawning.cancelled() and child.spawning.exception() is None:
            child.process = child.spawning.result()
        conn, prompt, grace = child.connection, child.prompt, self.config.cancel_grace
        if conn is not None and prompt is not None and not prompt.done():
            assert child.session_id is not None
            if await _finishes(conn.cancel(session_id=child.session_id), grace):
                self.progress("cancel-sent")
                await asyncio.wait({prompt}, timeout=grace)
                if prompt.done() and not prompt.cancelled() and prompt.exception() is None:
                    self.progress("cancel-answered")
        if child.process is not None:
            await self._reap(child.process)
        if conn is not None:  # after the exit, so its reader has already seen EOF
            await _finishes(conn.close(), self.config.eof_grace)

    async def _reap(self, process: Process) -> None:
        if process.stdin is not None:
            process.stdin.close()  # EOF: the agent's cue to exit on its own
        for escalation, grace in (
            (signal.SIGTERM, self.config.eof_grace),
            (signal.SIGKILL, self.config.term_grace),
        ):
            if await _tree_exits(process, grace):
                return
            _signal(process, escalation)
        await _exit_status(process)


def _exit_fact(code: int) -> str:
    return f"child exited (status {code})" if code >= 0 else f"child killed (signal {-code})"


async def _exit_status(process: Process) -> int:
    """The status once the process exits, whoever still holds its pipes.

    asyncio's ``Process.wait()`` also waits for every pipe to close, which a grandchild
    holding stdout can put off forever; the status itself is set at the exit, so look at it.
    """
    while process.returncode is None:
        await asyncio.sleep(POLL)
    return process.returncode


def _group_alive(process: Process) -> bool:
    """Whether the process group the child leads still has a member (zombies count)."""
    try:
        os.killpg(process.pid, 0)
    except ProcessLookupError:  # empty, or the child leads no group (a foreign spawner's)
        return False
    except PermissionError:  # a member we may not signal is still a member
        return True
    return True


async def _tree_exits(process: Process, grace: float) -> bool:
    """Whether the child and every member of the group it leads exit within ``grace``."""
    try:
        async with asyncio.timeout(grace):
            await _exit_status(process)
            while _group_alive(process):  # no wait primitive for a group: look, bounded
                await asyncio.sleep(POLL)
    except TimeoutError:
        return False
    return True


def _signal(process: Process, signum: int) -> None:
    """Signal the group the child leads (even after the child itself exited), else the child."""
    try:
        os.killpg(process.pid, signum)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signum)


__all__ = [
    "EXIT_DRAIN",
    "LINE_LIMIT",
    "PREFIX",
    "STOP_REASONS",
    "AcpAgentConfig",
    "AcpFailure",
    "AcpProvider",
    "LaunchSpec",
    "Permission",
    "ProgressListener",
    "Spawner",
    "StdioTransport",
    "spawn_agent",
]
