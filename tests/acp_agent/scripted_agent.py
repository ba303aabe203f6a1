"""A scripted ACP agent for the ``acp`` provider's tests, built on the SDK's agent side.

Run as ``python scripted_agent.py MODE``. Modes:

- ``answer``: one chunk echoing the prompt, the process and session working directories and
  ``$ACP_TEST_MARK``, then ``end_turn``.
- ``stream``: three chunks (``one two three``) among a thought and an image chunk, then
  ``end_turn``.
- ``stop:<reason>``: one chunk, then the given ACP stop reason.
- ``permission``: asks the client for permission and answers with the outcome it got.
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
import sys
import threading
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
        elif self.mode == "permission":
            await self.say(session_id, await self.ask_permission(session_id))
        elif self.mode == "stall":
            await self.say(session_id, "working")
            await self.cancelled.wait()
            stop = "cancelled"
        elif self.mode in ("hang", "stubborn"):
            await self.say(session_id, "working")
            await asyncio.Event().wait()
        elif self.mode == "crash":
            await self.say(session_id, "partial")
            os.write(2, f"{SECRET}\n".encode())
            os._exit(3)
        return PromptResponse(stop_reason=stop)

    async def ask_permission(self, session_id: str) -> str:
        assert self.client is not None
        options = [
            PermissionOption(option_id="yes", name="Allow", kind="allow_once"),
            PermissionOption(option_id="no", name="Reject", kind="reject_once"),
        ]
        call = ToolCallUpdate(tool_call_id="call-1", title="write a file")
        answer = await self.client.request_permission(
            session_id=session_id, tool_call=call, options=options
        )
        outcome = answer.outcome
        return f"permission={getattr(outcome, 'option_id', outcome.outcome)}"


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
    if mode == "stubborn":
        threading.Event().wait()  # ignore EOF too: only SIGKILL ends it


if __name__ == "__main__":
    main(sys.argv[1])
