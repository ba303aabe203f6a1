"""The ``acp`` provider over real stdio against a scripted ACP agent (ACP, OOP, ONE-4/6/7/9/12/15).

Every wait is bounded by ``asyncio.wait_for``; every spawned process is checked to be reaped,
and every grandchild an agent starts is checked (by pid) to be gone after dispose.
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
import sys
from collections import defaultdict
from collections.abc import Callable, Coroutine
from pathlib import Path

import pytest

pytest.importorskip(
    "acp", reason="the agent-client-protocol SDK is not installed (pip install 'dsh-subagent[acp]')"
)

from dsh_subagent.adapters.providers.acp import (
    AcpAgentConfig,
    AcpProvider,
    LaunchSpec,
    Process,
    spawn_agent,
)
from dsh_subagent.adapters.providers.base import (
    StartRequest,
    SubagentRun,
    can_prepare_continuable,
)
from dsh_subagent.adapters.providers.out_of_process import NO_START_CAPABILITIES
from dsh_subagent.adapters.signals import AbortController, AbortSignal
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.values import (
    DataBlock,
    JsonValue,
    KnownStop,
    SessionId,
    StopReason,
    SubagentResult,
    TextBlock,
    ToolFilter,
)
from tests.acp_agent.scripted_agent import SECRET, SLOW_EXIT
from tests.adapters.service_world import World, ask

AGENT = Path(__file__).resolve().parents[1] / "acp_agent" / "scripted_agent.py"
BOUND = 20.0  # a hang fails the test instead of wedging the suite; never reached when green
HUNG = "acp session/prompt: no answer within 0.5s"
NOT_RPC = "a JSON value that is not a JSON-RPC object"
FAST = {"handshake_timeout": BOUND, "cancel_grace": 2.0, "eof_grace": 2.0, "term_grace": 2.0}


def config(mode: str, **fields: object) -> AcpAgentConfig:
    return AcpAgentConfig((sys.executable, str(AGENT), mode), **{**FAST, **fields})  # type: ignore[arg-type]


def gone(pid: int) -> bool:
    """Whether ``pid`` is fully reaped (a zombie still answers signal 0)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return not Path(f"/proc/{pid}").exists()
    return False


def dead(pid: int) -> bool:
    """Whether ``pid`` has exited: gone, or a zombie waiting for whoever adopted it."""
    try:
        os.kill(pid, 0)
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (ProcessLookupError, FileNotFoundError):
        return True
    return state == "Z"


async def died(pid: int) -> bool:
    """Whether ``pid`` (not our child, so not awaitable) exits within ``BOUND``."""
    async with asyncio.timeout(BOUND):
        while not dead(pid):
            await asyncio.sleep(0.01)  # polling a foreign pid: there is no wait primitive
    return True


def grandchild_of(result: SubagentResult) -> int:
    """The grandchild pid a ``grandchild*`` agent announced in its first chunk."""
    return int(text(result).removeprefix("grandchild="))


async def settled(run: SubagentRun) -> SubagentResult:
    """The run's result, bounded (shielded: a timeout must not cancel the result itself)."""
    return await asyncio.wait_for(asyncio.shield(run.result), BOUND)


def text(result: SubagentResult) -> str:
    blocks: tuple[JsonValue, ...] = result.output
    return "".join(str(b["text"]) for b in blocks if isinstance(b, dict))


class Rig:
    """A service world with one ``acp`` provider whose spawns and progress are recorded."""

    def __init__(self, mode: str, **fields: object) -> None:
        name = fields.pop("name", "acp")
        assert isinstance(name, str)
        self.world = World()
        self.processes: list[Process] = []
        self.reached: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.before_spawn: Callable[[], None] = lambda: None
        self.provider = AcpProvider(
            config(mode, **fields), name=name, spawner=self.spawn, on_progress=self.progress
        )
        self.world.service.register_provider(self.provider)

    async def spawn(self, spec: LaunchSpec) -> Process:
        self.before_spawn()
        process = await spawn_agent(spec)
        self.processes.append(process)
        return process

    async def plain_spawn(self, spec: LaunchSpec) -> Process:
        """A spawner without a process group of its own and with a 1 KiB line limit."""
        process = await asyncio.create_subprocess_exec(
            *spec.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=dict(spec.env),
            cwd=spec.cwd,
            limit=1024,
        )
        self.processes.append(process)
        return process

    def progress(self, stage: str) -> None:
        self.reached[stage].set()

    async def reach(self, stage: str) -> None:
        await asyncio.wait_for(self.reached[stage].wait(), BOUND)

    async def start(
        self,
        cwd: str | None,
        prompt: str = "do the task",
        signal: AbortSignal | None = None,
        **fields: object,
    ) -> SubagentRun:
        parent = await self.world.parent(cwd=cwd)
        request = ask(parent, prompt, signal=signal, **fields)
        return await asyncio.wait_for(self.world.service.start(self.provider.name, request), BOUND)

    async def finish(self, run: SubagentRun, *, dispose_first: bool = False) -> SubagentResult:
        """The settled result and a bounded dispose (first, if asked) that reaps every process."""
        disposed = run.dispose() if dispose_first else None
        result = await settled(run)
        await asyncio.wait_for(disposed or run.dispose(), BOUND)
        self.assert_reaped()
        return result

    def assert_reaped(self) -> None:
        assert all(gone(process.pid) for process in self.processes)


def run(main: Callable[[], Coroutine[object, object, None]]) -> None:
    asyncio.run(asyncio.wait_for(main(), 3 * BOUND))


# --------------------------------------------------------------------------- capabilities, config


def test_acp_1_config_defaults_and_every_bound_is_finite() -> None:
    provider = AcpProvider(AcpAgentConfig(["agent", "--acp"]))
    assert provider.name == "acp"
    assert provider.config == AcpAgentConfig(
        ("agent", "--acp"),
        env={},
        cwd=None,
        permission="reject",
        handshake_timeout=60.0,
        prompt_timeout=600.0,
        cancel_grace=5.0,
        eof_grace=6.0,
        term_grace=3.0,
    )


def test_acp_5_an_already_aborted_signal_rejects_without_spawning(tmp_path: Path) -> None:
    async def main() -> None:
        rig = Rig("answer")
        controller = AbortController()
        controller.abort()
        with pytest.raises(SubagentError) as caught:
            await rig.start(str(tmp_path), signal=controller.signal)
        assert caught.value.code is ErrorCode.CANCELLED
        assert rig.processes == []
        assert rig.world.names() == []

    run(main)


def test_acp_7_ambient_credentials_and_dsh_names_are_dropped_explicit_env_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    monkeypatch.setenv("DSH_AMBIENT", "ambient")

    async def main() -> None:
        rig = Rig("env", env={"DSH_EXPLICIT": "explicit"})
        result = await rig.finish(await rig.start(str(tmp_path)))
        assert text(result) == "ANTHROPIC_API_KEY=- DSH_AMBIENT=- DSH_EXPLICIT=explicit"

    run(main)


def test_acp_9_only_text_blocks_reach_the_agent(tmp_path: Path) -> None:
    async def main() -> None:
        rig = Rig("answer")
        parent = await rig.world.parent(cwd=str(tmp_path))
        prompt = (TextBlock("left "), DataBlock({"dropped": True}), TextBlock("right"))
        request = StartRequest(prompt, parent, AbortController().signal)
        result = await rig.finish(await rig.world.service.start("acp", request))
        assert text(result).startswith("echo=left right cwd=")

    run(main)


def test_oop_1_acp_refuses_parent_enforced_features_before_spawning(tmp_path: Path) -> None:
    async def main() -> None:
        rig = Rig("answer")
        assert rig.provider.capabilities == NO_START_CAPABILITIES
        assert not can_prepare_continuable(rig.provider)
        assert rig.provider.inherits_parent_context is False
        parent = await rig.world.parent(cwd=str(tmp_path))
        for fields in (
            {"output_schema": {"type": "object"}},
            {"max_depth": 1},
            {"tool_filter": ToolFilter(deny=("bash",))},
            {"persona": "a reviewer"},
        ):
            with pytest.raises(SubagentError) as caught:
                await rig.world.service.start("acp", ask(parent, **fields))
            assert caught.value.code is ErrorCode.UNSUPPORTED_CAPABILITY
        assert rig.processes == []
        assert rig.world.names() == []

    run(main)


@pytest.mark.parametrize(
    "field", ["handshake_timeout", "prompt_timeout", "cancel_grace", "eof_grace", "term_grace"]
)
@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf, True])
def test_oop_2_acp_timing_bounds_must_be_positive_and_finite(field: str, bad: object) -> None:
    with pytest.raises(SubagentError) as caught:
        config("answer", **{field: bad})
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert caught.value.field == field
    assert f"acp: {field} must be a positive finite number" in str(caught.value)


def test_oop_2_acp_command_env_and_permission_are_checked_at_load() -> None:
    assert AcpAgentConfig(["agent"], env={"B": "2", "A": "1"}).env == (("A", "1"), ("B", "2"))
    for fields, field in (
        ({"argv": ()}, "argv"),
        ({"argv": ("agent", "")}, "argv"),
        ({"argv": ("agent",), "env": {"KEY": 1}}, "env"),
        ({"argv": ("agent",), "permission": "maybe"}, "permission"),
        ({"argv": ("agent",), "prompt_timeout": None}, "prompt_timeout"),
    ):
        with pytest.raises(SubagentError) as caught:
            AcpAgentConfig(**fields)
        assert caught.value.field == field
    with pytest.raises(SubagentError) as bad_config:
        AcpProvider("not a config")  # type: ignore[arg-type]
    assert bad_config.value.field == "config"


def test_oop_4_acp_configured_cwd_is_resolved_and_checked_at_load(tmp_path: Path) -> None:
    assert config("answer", cwd=".").cwd == os.getcwd()
    assert config("answer", cwd=str(tmp_path)).cwd == str(tmp_path)
    for bad in ("", str(tmp_path / "missing")):
        with pytest.raises(SubagentError) as caught:
            config("answer", cwd=bad)
        assert caught.value.field == "cwd"


# --------------------------------------------------------------------------- running


def test_oop_5_acp_child_runs_in_the_parent_session_cwd(tmp_path: Path) -> None:
    async def main() -> None:
        rig = Rig("answer", env={"ACP_TEST_MARK": "configured"})
        result = await rig.finish(await rig.start(str(tmp_path), "hello child"))
        assert result.stop_reason is KnownStop.COMPLETED
        assert text(result) == (
            f"echo=hello child cwd={tmp_path} session_cwd={tmp_path} mark=configured"
        )
        assert result.diagnostic is None
        assert rig.processes[0].returncode == 0  # it left on stdin EOF, unforced

    run(main)


def test_oop_5_acp_configured_cwd_overrides_the_parent_session(tmp_path: Path) -> None:
    override = tmp_path / "override"
    override.mkdir()

    async def main() -> None:
        rig = Rig("answer", cwd=str(override))
        result = await rig.finish(await rig.start("/"))
        assert f"cwd={override} session_cwd={override}" in text(result)

    run(main)


def test_oop_5_acp_without_a_working_directory_rejects_before_spawning() -> None:
    async def main() -> None:
        rig = Rig("answer")
        with pytest.raises(SubagentError) as caught:
            await rig.start(None)
        assert caught.value.field == "cwd"
        assert rig.processes == []
        assert rig.world.names() == []

    run(main)


def test_oop_3_acp_parent_cwd_that_cannot_be_entered_rejects_before_spawning(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        rig = Rig("answer")
        with pytest.raises(SubagentError) as caught:
            await rig.start(str(tmp_path / "missing"))
        assert caught.value.field == "cwd"
        assert "parent session working directory" in str(caught.value)
        assert rig.processes == []

    run(main)


def test_oop_10_acp_diagnostic_never_carries_raw_errors() -> None:
    provider = AcpProvider(config("answer"))
    assert provider.diagnostic_for(RuntimeError(SECRET)) == "acp: the child run failed unexpectedly"


def test_acp_a_failing_progress_listener_is_contained(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def explode(stage: str) -> None:
        raise RuntimeError(stage)

    async def main() -> None:
        rig = Rig("answer")
        rig.provider._on_progress = explode
        result = await rig.finish(await rig.start(str(tmp_path)))
        assert result.stop_reason is KnownStop.COMPLETED

    run(main)
    assert "acp progress listener failed at 'spawned'" in caplog.text


def test_one_4_acp_a_command_that_cannot_start_rejects_the_start(tmp_path: Path) -> None:
    async def main() -> None:
        rig = Rig("answer")
        rig.provider = AcpProvider(AcpAgentConfig([str(tmp_path / "no-such-agent")]), name="bad")
        rig.world.service.register_provider(rig.provider)
        with pytest.raises(FileNotFoundError):
            await rig.start(str(tmp_path))
        assert rig.world.names() == []

    run(main)


def test_one_6_oop_8_acp_runs_are_remote_with_parent_scoped_ids(tmp_path: Path) -> None:
    async def main() -> None:
        rig = Rig("answer")
        first = await rig.start(str(tmp_path))
        assert first.id.startswith("parent/acp-")
        assert "scripted" not in first.id  # the agent's own session id stays on the wire
        assert first.local_agent is None
        assert first.dispose() is first.dispose()  # memoized
        await rig.finish(first)
        assert rig.world.names() == ["subagent/start", "subagent/end"]

    run(main)


def test_one_12_acp_streamed_chunks_fold_into_one_text_block(tmp_path: Path) -> None:
    async def main() -> None:
        rig = Rig("stream")
        result = await rig.finish(await rig.start(str(tmp_path)))
        assert result.output == ({"type": "text", "text": "one two three"},)
        assert result.stop_reason is KnownStop.COMPLETED

    run(main)


STOPS: dict[str, StopReason] = {
    "end_turn": KnownStop.COMPLETED,
    "max_tokens": KnownStop.MAX_TOKENS,
    "refusal": KnownStop.REFUSAL,
    "cancelled": KnownStop.ABORTED,
    "max_turn_requests": KnownStop.ERROR,
}


def test_oop_6_reg_9_concurrent_acp_runs_map_their_own_stop_reasons(tmp_path: Path) -> None:
    async def main() -> None:
        rig = Rig("answer")
        parent = await rig.world.parent(cwd=str(tmp_path))
        for reason in STOPS:
            provider = AcpProvider(config(f"stop:{reason}"), name=reason, spawner=rig.spawn)
            rig.world.service.register_provider(provider)
        runs = await asyncio.gather(*(rig.world.service.start(r, ask(parent)) for r in STOPS))
        results = await asyncio.gather(*(settled(child) for child in runs))
        await asyncio.wait_for(asyncio.gather(*(child.dispose() for child in runs)), BOUND)
        rig.assert_reaped()
        for reason, result in zip(STOPS, results, strict=True):
            assert result.stop_reason == STOPS[reason]
            assert text(result) == "stopping"
            expected = f"acp session/prompt: child stopped with {reason}"
            assert result.diagnostic == (expected if reason == "max_turn_requests" else None)
        assert len(rig.processes) == len(STOPS)

    run(main)


@pytest.mark.parametrize(
    ("policy", "offered", "answer"),
    [
        ("reject", "allow_once,reject_once", "reject_once"),
        ("reject", "allow_always,reject_always,reject_once", "reject_always"),
        ("reject", "allow_once,allow_always", "cancelled"),
        ("reject", "", "cancelled"),
        ("allow", "reject_once,allow_always,allow_once", "allow_always"),
        ("allow", "reject_always,reject_once", "reject_always"),
        ("allow", "", "cancelled"),
    ],
)
def test_acp_14_ask_1_permission_requests_are_answered_by_the_policy_never_a_human(
    tmp_path: Path, policy: str, offered: str, answer: str
) -> None:
    async def main() -> None:
        rig = Rig(f"permission:{offered}", permission=policy)
        result = await rig.finish(await rig.start(str(tmp_path)))
        assert text(result) == f"permission={answer}"
        assert result.stop_reason is KnownStop.COMPLETED

    run(main)


def test_acp_14_a_permission_request_after_cancel_is_answered_cancelled(tmp_path: Path) -> None:
    async def main() -> None:
        rig = Rig("permission-after-cancel", permission="allow")
        child = await rig.start(str(tmp_path))
        await rig.reach("update")
        result = await rig.finish(child, dispose_first=True)
        assert result.stop_reason is KnownStop.ABORTED
        await rig.reach("cancel-answered")  # it asked after the cancel, and was told cancelled
        assert rig.processes[0].returncode == 0

    run(main)


def test_oop_9_named_acp_instances_coexist_and_duplicates_fail(tmp_path: Path) -> None:
    async def main() -> None:
        rig = Rig("answer", name="acp-a")
        rig.world.service.register_provider(AcpProvider(config("answer"), name="acp-b"))
        with pytest.raises(SubagentError) as caught:
            rig.world.service.register_provider(AcpProvider(config("answer"), name="acp-a"))
        assert caught.value.code is ErrorCode.DUPLICATE_PROVIDER
        run_a = await rig.start(str(tmp_path))
        assert run_a.id.startswith("parent/acp-a-")
        await rig.finish(run_a)
        parent = rig.world.registry.get(SessionId("parent"))
        assert parent is not None
        run_b = await rig.world.service.start("acp-b", ask(parent))
        assert run_b.id.startswith("parent/acp-b-")
        assert (await settled(run_b)).stop_reason is KnownStop.COMPLETED
        await asyncio.wait_for(run_b.dispose(), BOUND)

    run(main)


# --------------------------------------------------------------------------- failure modes


@pytest.mark.parametrize(
    ("mode", "fields", "diagnostic", "collected"),
    [
        ("crash", {}, "acp session/prompt: child exited (status 3)", "partial"),
        ("hang", {"prompt_timeout": 0.5, "cancel_grace": 0.2}, HUNG, "working"),
        ("garbage", {}, "acp initialize: child wrote a line that is not JSON on stdout", ""),
        ("exit-early", {}, "acp initialize: child exited (status 2)", ""),
        ("silent", {"handshake_timeout": 0.5}, "acp initialize: no answer within 0.5s", ""),
        ("junk-json", {}, f"acp initialize: child wrote {NOT_RPC} on stdout", ""),
        ("refuse", {}, "acp session/new: child answered JSON-RPC error -32603", ""),
        ("malformed", {}, "acp initialize: child sent a malformed message", ""),
        ("old-protocol", {}, "acp initialize: unsupported protocol version 99", ""),
    ],
)
def test_oop_6_oop_10_one_15_acp_child_failures_settle_error_never_hang(
    tmp_path: Path, mode: str, fields: dict[str, object], diagnostic: str, collected: str
) -> None:
    async def main() -> None:
        rig = Rig(mode, **fields)
        result = await rig.finish(await rig.start(str(tmp_path)))
        assert result.stop_reason is KnownStop.ERROR
        assert result.diagnostic == diagnostic
        assert SECRET not in result.diagnostic
        assert text(result) == collected
        assert rig.world.names() == ["subagent/start", "subagent/end"]

    run(main)


# --------------------------------------------------------------------------- cancellation


def test_oop_6_oop_10_acp_a_line_over_the_spawners_limit_settles_error(tmp_path: Path) -> None:
    async def main() -> None:
        rig = Rig("long-line")
        rig.provider._spawner = rig.plain_spawn
        result = await rig.finish(await rig.start(str(tmp_path)))
        assert result.stop_reason is KnownStop.ERROR
        assert result.diagnostic == "acp initialize: child wrote an over-long line on stdout"

    run(main)


def test_one_7_acp_abort_before_publication_reaps_the_process_and_rejects(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        rig = Rig("answer")
        controller = AbortController()
        rig.before_spawn = controller.abort  # the abort lands while the process is being spawned
        with pytest.raises(SubagentError) as caught:
            await rig.start(str(tmp_path), signal=controller.signal)
        assert caught.value.code is ErrorCode.CANCELLED
        assert len(rig.processes) == 1
        rig.assert_reaped()
        assert rig.world.names() == []

    run(main)


def test_oop_8_acp_dispose_before_initialize_is_answered(tmp_path: Path) -> None:
    async def main() -> None:
        rig = Rig("silent")
        child = await rig.start(str(tmp_path))
        await rig.reach("spawned")
        result = await rig.finish(child, dispose_first=True)
        assert result == SubagentResult((), KnownStop.ABORTED)
        assert "session" not in rig.reached

    run(main)


def test_one_7_acp_abort_during_prompt_sends_cancel_and_settles_aborted(tmp_path: Path) -> None:
    async def main() -> None:
        rig = Rig("stall")
        controller = AbortController()
        child = await rig.start(str(tmp_path), signal=controller.signal)
        await rig.reach("update")
        controller.abort()
        result = await settled(child)
        assert result == SubagentResult(({"type": "text", "text": "working"},), KnownStop.ABORTED)
        await rig.reach("cancel-answered")  # the agent honoured session/cancel
        assert await rig.finish(child) == result
        assert rig.processes[0].returncode == 0

    run(main)


@pytest.mark.parametrize("own_group", [True, False])
def test_oop_8_acp_dispose_escalates_to_kill_within_the_bounds(
    tmp_path: Path, own_group: bool
) -> None:
    async def main() -> None:
        grace = {"cancel_grace": 0.2, "eof_grace": 0.2, "term_grace": 0.2}
        rig = Rig("stubborn", **grace)
        if not own_group:
            rig.provider._spawner = rig.plain_spawn  # signals go to the child alone
        child = await rig.start(str(tmp_path))
        await rig.reach("update")
        result = await rig.finish(child, dispose_first=True)  # cancel, EOF, SIGTERM: ignored
        assert result.stop_reason is KnownStop.ABORTED
        assert "cancel-sent" in rig.reached
        assert "cancel-answered" not in rig.reached
        assert rig.processes[0].returncode == -signal.SIGKILL

    run(main)


def test_one_9_acp_dispose_after_settlement_keeps_the_result_and_reaps(tmp_path: Path) -> None:
    async def main() -> None:
        rig = Rig("stream")
        child = await rig.start(str(tmp_path))
        result = await settled(child)
        assert await rig.finish(child) == result
        assert result.stop_reason is KnownStop.COMPLETED
        await asyncio.wait_for(child.dispose(), BOUND)  # a repeat is a no-op

    run(main)


# --------------------------------------------------------------------------- the dispose ladder


@pytest.mark.parametrize(
    ("mode", "fields", "returncode"),
    [
        ("hang", {}, 0),  # tier 1: exits at stdin EOF
        ("deaf", {"eof_grace": 0.2}, -signal.SIGTERM),  # tier 2: ignores EOF, not SIGTERM
        ("stubborn", {"eof_grace": 0.2, "term_grace": 0.2}, -signal.SIGKILL),  # tier 3
        # the EOF window outlasts the SIGTERM grace: a slow but willing exit is not signalled
        ("slow-exit", {"eof_grace": 10 * SLOW_EXIT, "term_grace": SLOW_EXIT / 3}, 0),
    ],
)
def test_acp_15_dispose_closes_stdin_then_terminates_then_kills(
    tmp_path: Path, mode: str, fields: dict[str, object], returncode: int
) -> None:
    async def main() -> None:
        rig = Rig(mode, cancel_grace=0.2, **fields)
        child = await rig.start(str(tmp_path))
        await rig.reach("update")
        result = await rig.finish(child, dispose_first=True)
        assert result == SubagentResult(({"type": "text", "text": "working"},), KnownStop.ABORTED)
        assert rig.processes[0].returncode == returncode

    run(main)


def test_acp_15_dispose_signals_the_group_after_its_leader_exited(tmp_path: Path) -> None:
    async def main() -> None:
        rig = Rig("grandchild", eof_grace=0.3)
        child = await rig.start(str(tmp_path))
        result = await settled(child)
        assert result.diagnostic == "acp session/prompt: child exited (status 0)"
        grandchild = grandchild_of(result)
        assert not dead(grandchild)  # the leader is gone, its group is not
        await rig.finish(child)
        assert await died(grandchild)

    run(main)


def test_acp_15_oop_6_a_killed_agent_ends_the_run_while_a_grandchild_holds_stdout(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        rig = Rig("grandchild-on-stdout", eof_grace=0.3)
        child = await rig.start(str(tmp_path))
        await rig.reach("update")
        rig.processes[0].kill()  # the leader only: the grandchild keeps the pipe open
        result = await settled(child)
        assert result.stop_reason is KnownStop.ERROR
        assert result.diagnostic == f"acp session/prompt: child killed (signal {signal.SIGKILL})"
        grandchild = grandchild_of(result)
        await rig.finish(child)
        assert await died(grandchild)

    run(main)


def test_acp_1_a_missed_prompt_timeout_settles_error(tmp_path: Path) -> None:
    async def main() -> None:
        rig = Rig("hang", prompt_timeout=0.3, cancel_grace=0.2)
        result = await rig.finish(await rig.start(str(tmp_path)))
        assert result == SubagentResult(
            ({"type": "text", "text": "working"},),
            KnownStop.ERROR,
            diagnostic="acp session/prompt: no answer within 0.3s",
        )

    run(main)
