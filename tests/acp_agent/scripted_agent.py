"""A scripted ACP agent for the ``acp`` provider's tests, built on the SDK's agent side.

Run as ``python scripted_agent.py MODE``. Modes:

- ``answer``: one chunk echoing the prompt, the process and session working directories and
  ``$ACP_TEST_MARK``, then ``end_turn``.
- ``stream``: three chunks (``one two three``) among a thought and an image chunk, then
  ``end_turn``.
- ``stop:<reason>``: one chunk, then the given ACP stop reason.
- ``permission:<kinds>``: asks the client for permission offering one option of each
  comma-separated kind (its id is the kind) and answers with the outcome it got.
- ``permission-after-cancel``: one chunk, then waits for ``session/cancel``, asks for
  permission and stops with ``cancelled``; it exits with status 5 if the answer was not
  ``cancelled``.
- ``env``: one chunk naming the values (``-`` if unset) of the variables in ``ENV_NAMES``.
- ``grandchild``: starts a grandchild (stdio detached, in the agent's process group), one
  chunk ``grandchild=<pid>``, then the agent exits with status 0 mid-prompt; the grandchild
  stays until signalled.
- ``grandchild-on-stdout``: like ``grandchild``, but the grandchild inherits stdout and the
  agent never answers the prompt (and stays until signalled).
- ``deaf``: like ``hang``, but it ignores stdin EOF (SIGTERM still ends it).
- ``slow-exit``: like ``hang``, but it exits with status 0 a short while after stdin EOF.
- ``stall``: one chunk, then waits for ``session/cancel`` and stops with ``cancelled``.
- ``hang``: one chunk, then never answers the prompt and ignores ``session/cancel`` (it still
  exits at stdin EOF).
- ``stubborn``: like ``hang``, but it also ignores stdin EOF and SIGTERM.
- ``crash``: one chunk and a secret on stderr, then exits with status 3 mid-prompt.
- ``garbage``: prints a line that is not JSON on stdout, then behaves like ``answer``.
- ``junk-json``: prints a blank line and a JSON number on stdout, then behaves like ``answer``.
- ``long-line``: prints a 64 KiB line on stdout, then behaves like ``answer``.
- ``refuse``: answers ``session/new`` with a JSON-RPC error.
- ``malformed``: answers ``initialize`` with a result that breaks the schema.
- ``old-protocol``: answers ``initialize`` with protocol version 99.
- ``exit-early``: exits with status 2 before reading anything.
- ``silent``: reads stdin until EOF and never answers ``initialize``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from acp import (
    PROTOCOL_VERSION,
    Client,
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
    RequestError,
    image_block,
    run_agent,
    update_agent_message,
    update_agent_message_text,
    update_agent_thought_text,
)
from acp.schema import (
    AgentCapabilities,
    ClientCapabilities,
    Implementation,
    PermissionOption,
    StopReason,
    ToolCallUpdate,
)

SECRET: str = "ACP_TEST_SECRET=hunter2"
ENV_NAMES: tuple[str, ...] = ("ANTHROPIC_API_KEY", "DSH_AMBIENT", "DSH_EXPLICIT")
SLOW_EXIT: float = 0.3  # seconds ``slow-exit`` takes to leave after stdin EOF


class ScriptedAgent:
    """Answers initialize and session/new, then plays ``mode`` on each prompt."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.client: Client | None = None
        self.cwd = ""
        self.cancelled = asyncio.Event()

    def on_connect(self, conn: Client) -> None:
        self.client = conn

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: ClientCapabilities | None = None,
        client_info: Implementation | None = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION, agent_capabilities=AgentCapabilities()
        )

    async def new_session(
        self, cwd: str, mcp_servers: list[Any] | None = None, **kwargs: Any
    ) -> NewSessionResponse:
        if self.mode == "refuse":
            raise RequestError.internal_error({"details": SECRET})
        self.cwd = cwd
        return NewSessionResponse(session_id="scripted-1")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self.cancelled.set()

    async def say(self, session_id: str, text: str) -> None:
        assert self.client is not None
        await self.client.session_update(
            session_id=session_id, update=update_agent_message_text(text)
        )

    async def prompt(self, prompt: list[Any], session_id: str, **kwargs: Any) -> PromptResponse:
        text = "".join(getattr(block, "text", "") for block in prompt)
        stop: StopReason = "end_turn"
        if self.mode in ("answer", "garbage", "junk-json", "long-line"):
            mark = os.environ.get("ACP_TEST_MARK", "")
            await self.say(
                session_id, f"echo={text} cwd={os.getcwd()} session_cwd={self.cwd} mark={mark}"
            )
        elif self.mode == "stream":
            assert self.client is not None
            await self.say(session_id, "one ")
            thought = update_agent_thought_text("thinking")
            await self.client.session_update(session_id=session_id, update=thought)
            await self.client.session_update(session_id="another", update=thought)
            await self.say(session_id, "two ")
            image = update_agent_message(image_block("AAAA", "image/png"))
            await self.client.session_update(session_id=session_id, update=image)
            await self.say(session_id, "three")
        elif self.mode.startswith("stop:"):
            await self.say(session_id, "stopping")
            stop = self.mode.removeprefix("stop:")  # type: ignore[assignment]
        elif self.mode.startswith("permission:"):
            kinds = [kind for kind in self.mode.removeprefix("permission:").split(",") if kind]
            await self.say(session_id, await self.ask_permission(session_id, kinds))
        elif self.mode == "permission-after-cancel":
            await self.say(session_id, "working")
            await self.cancelled.wait()
            if await self.ask_permission(session_id, ["allow_once"]) != "permission=cancelled":
                os._exit(5)
            stop = "cancelled"
        elif self.mode == "env":
            values = [f"{name}={os.environ.get(name, '-')}" for name in ENV_NAMES]
            await self.say(session_id, " ".join(values))
        elif self.mode in ("grandchild", "grandchild-on-stdout"):
            await self.say(session_id, f"grandchild={start_grandchild(self.mode)}")
            if self.mode == "grandchild":
                os._exit(0)
            await asyncio.Event().wait()
        elif self.mode == "stall":
            await self.say(session_id, "working")
            await self.cancelled.wait()
            stop = "cancelled"
        elif self.mode in ("hang", "stubborn", "deaf", "slow-exit"):
            await self.say(session_id, "working")
            await asyncio.Event().wait()
        elif self.mode == "crash":
            await self.say(session_id, "partial")
            os.write(2, f"{SECRET}\n".encode())
            os._exit(3)
        return PromptResponse(stop_reason=stop)

    async def ask_permission(self, session_id: str, kinds: list[str]) -> str:
        assert self.client is not None
        options = [
            PermissionOption(option_id=kind, name=kind, kind=kind)  # type: ignore[arg-type]
            for kind in kinds
        ]
        call = ToolCallUpdate(tool_call_id="call-1", title="write a file")
        answer = await self.client.request_permission(
            session_id=session_id, tool_call=call, options=options
        )
        outcome = answer.outcome
        return f"permission={getattr(outcome, 'option_id', outcome.outcome)}"


def start_grandchild(mode: str) -> int:
    """A process in the agent's group that lives until signalled; its pid."""
    stdout = None if mode == "grandchild-on-stdout" else subprocess.DEVNULL
    command = [sys.executable, "-c", "import time; time.sleep(120)"]
    return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=stdout).pid


RAW_INITIALIZE: dict[str, dict[str, object]] = {
    "malformed": {"protocolVersion": "one"},
    "old-protocol": {"protocolVersion": 99},
}


def answer_raw(result: dict[str, object]) -> None:
    """Answer the first request with ``result`` by hand, then wait for EOF."""
    request = json.loads(sys.stdin.buffer.readline())
    reply = {"jsonrpc": "2.0", "id": request["id"], "result": result}
    os.write(1, json.dumps(reply).encode() + b"\n")
    sys.stdin.buffer.read()


def main(mode: str) -> None:
    if mode == "exit-early":
        sys.exit(2)
    if mode in RAW_INITIALIZE:
        answer_raw(RAW_INITIALIZE[mode])
        return
    if mode == "silent":
        sys.stdin.buffer.read()
        return
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if mode == "garbage":
        os.write(1, b"hello from a chatty agent\n")
    if mode == "long-line":
        os.write(1, b"x" * 65536 + b"\n")
    if mode == "junk-json":
        os.write(1, b"\n42\n")
    asyncio.run(run_agent(ScriptedAgent(mode)))  # type: ignore[arg-type]
    if mode in ("stubborn", "deaf"):
        threading.Event().wait()  # ignore EOF too: only a signal ends it
    if mode == "slow-exit":
        time.sleep(SLOW_EXIT)


if __name__ == "__main__":
    main(sys.argv[1])
