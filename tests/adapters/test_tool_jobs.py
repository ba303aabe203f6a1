"""The background task surface: one-shot background runs, the job registry, its tools and
``settle_run`` (BG-1..9, BG-30..39, ONE-19)."""

from __future__ import annotations

import asyncio

import pytest

from dsh_subagent.adapters.protocols import CreateOptions, create_user_message
from dsh_subagent.adapters.providers.base import ResolvedStartRequest
from dsh_subagent.adapters.reference.agent_loop import ReferenceAgent
from dsh_subagent.adapters.reference.composition import PromptComposer
from dsh_subagent.adapters.reference.registry import AgentRegistry
from dsh_subagent.adapters.reference.scripted_model import Gate, Gated, reply
from dsh_subagent.adapters.reference.tool_registry import ToolRegistry
from dsh_subagent.adapters.signals import AbortController, race_abort
from dsh_subagent.adapters.tools import (
    Delivery,
    JobOutcome,
    JobRegistry,
    JobStatus,
    SubagentTool,
    SubagentToolConfig,
    settle_run,
)
from dsh_subagent.adapters.tools.jobs import JobHooks, JobSnapshot
from dsh_subagent.adapters.tools.schemas import ToolFailure
from dsh_subagent.adapters.tools.task_tools import (
    JOBS_GUIDANCE,
    register_task_tools,
    render_output,
    task_tools,
)
from dsh_subagent.core.errors import SubagentError
from dsh_subagent.core.values import (
    BaseSource,
    BaseSourceKind,
    JsonObject,
    KnownStop,
    OtherStop,
    SessionId,
    SubagentCapabilities,
    SubagentResult,
    TextBlock,
)
from tests.adapters.service_world import FakeProvider, FakeRun
from tests.adapters.tools_world import (
    ToolsWorld,
    call,
    check_snapshot,
    handle,
    run,
    text,
    transcript,
    until,
)

BG: JsonObject = {
    "description": "background job",
    "prompt": "child task",
    "run_in_background": True,
}
ALL_CAPS = SubagentCapabilities(True, True, True, True)


class BlockingProvider(FakeProvider):
    """A provider whose start waits for ``release`` or the request's abort."""

    def __init__(self, name: str = "slow") -> None:
        super().__init__(name, ALL_CAPS)
        self.release = asyncio.Event()

    async def start(self, request: ResolvedStartRequest) -> FakeRun:
        self.requests.append(request)
        await race_abort(self.release.wait(), request.signal)
        return await super().start(request)


class Producer:
    """A hand-made job producer whose outcome the test decides."""

    def __init__(self, *, cancel_error: Exception | None = None) -> None:
        self.done: asyncio.Future[JobOutcome] = asyncio.get_running_loop().create_future()
        self.cancelled: list[str] = []
        self.cancel_error = cancel_error

    def cancel(self, reason: str) -> None:
        if self.cancel_error is not None:
            raise self.cancel_error
        self.cancelled.append(reason)

    def starter(self) -> JobHooks:
        return JobHooks(self.cancel, self.done)


async def one_shot_world(provider: FakeProvider | None = None) -> tuple[ToolsWorld, ReferenceAgent]:
    world = ToolsWorld()
    if provider is not None:
        world.service.register_provider(provider)
    world.tool(provider.name if provider is not None else "spawn")
    return world, await world.parent()


# ----------------------------------------------------------------------------- one-shot background


def test_bg_1_background_needs_a_task_registry() -> None:
    async def main() -> None:
        world = ToolsWorld()
        SubagentTool(world.service, world.globals, SubagentToolConfig("spawn")).apply()
        parent = await world.parent()
        assert text(await call(parent, "subagent", BG)) == (
            "Error: background tasks unavailable: this subagent tool has no task registry "
            "(give it jobs=JobRegistry(...))"
        )

    run(main)


def test_bg_2_preflight_runs_before_the_provider() -> None:
    async def main() -> None:
        world = ToolsWorld(max_per_owner=1)
        fake = BlockingProvider()
        world.service.register_provider(fake)
        world.tool("slow")
        parent = await world.parent()
        assert text(await call(parent, "subagent", BG)) == (
            "started background subagent task subagent-1"
        )
        assert [job.id for job in world.jobs.list(parent)] == ["subagent-1"]
        await until(lambda: fake.requests)
        refused = await call(parent, "subagent", BG)
        assert text(refused) == (
            "Error: background task limit reached for this owner (limit: 1); use task_kill to "
            "stop an unneeded task, wait for it to finish, then retry"
        )
        await asyncio.sleep(0)
        assert len(fake.requests) == 1
        fake.release.set()

    run(main)


def test_bg_3_the_job_owns_a_fresh_signal_not_the_call_signal() -> None:
    async def main() -> None:
        world, parent = await one_shot_world(FakeProvider("fake", ALL_CAPS))
        controller = AbortController()
        started = await handle(parent, "subagent", BG, controller.signal)
        assert text(started) == "started background subagent task subagent-1"
        fake = world.service.get_provider("fake")
        assert isinstance(fake, FakeProvider)
        await until(lambda: fake.runs)
        assert fake.requests[0].signal is not controller.signal
        controller.abort("turn over")
        assert not fake.requests[0].signal.aborted
        fake.runs[0].result.set_result(
            SubagentResult(({"type": "text", "text": "done"},), KnownStop.COMPLETED)
        )
        await world.settle()
        assert text(await call(parent, "task_output", {"task_id": "subagent-1"})) == (
            "done\n[status: completed]"
        )

    run(main)


def test_bg_4_ids_count_per_kind_and_rejections_consume_none() -> None:
    async def main() -> None:
        world = ToolsWorld(max_per_owner=2)
        parent = await world.parent()
        first, second, third = Producer(), Producer(), Producer()
        assert world.jobs.start("subagent", "a", parent, first.starter) == "subagent-1"
        assert world.jobs.start("other", "b", parent, second.starter) == "other-1"
        with pytest.raises(ToolFailure):
            world.jobs.start("subagent", "c", parent, third.starter)
        first.done.set_result(JobOutcome(JobStatus.COMPLETED))
        await until(lambda: world.jobs.status("subagent-1", parent).status is JobStatus.COMPLETED)
        assert world.jobs.start("subagent", "c", parent, third.starter) == "subagent-2"
        for producer in (second, third):
            producer.done.set_result(JobOutcome(JobStatus.COMPLETED))
        await world.jobs.settled()

    run(main)


def test_bg_5_kill_aborts_the_job_signal_with_the_default_reason() -> None:
    async def main() -> None:
        fake = FakeProvider("fake", ALL_CAPS)
        world, parent = await one_shot_world(fake)
        await call(parent, "subagent", BG)
        await until(lambda: fake.runs)
        assert text(await call(parent, "task_kill", {"task_id": "subagent-1"})) == (
            "requested cancellation of task subagent-1"
        )
        assert fake.requests[0].signal.reason == "background subagent task killed"
        fake.runs[0].result.set_result(SubagentResult((), KnownStop.ABORTED))
        await world.settle()
        assert world.jobs.status("subagent-1", parent).status is JobStatus.KILLED

    run(main)


def test_bg_6_startup_failure_is_failed_with_the_rendered_error() -> None:
    async def main() -> None:
        fake = FakeProvider("fake", ALL_CAPS, failure=RuntimeError("setup failed"))
        world, parent = await one_shot_world(fake)
        await call(parent, "subagent", BG)
        await world.settle()
        assert text(await call(parent, "task_output", {"task_id": "subagent-1"})) == (
            "(no new output)\n[status: failed, RuntimeError: setup failed]"
        )

    run(main)


def test_bg_7_kill_while_startup_is_pending_settles_killed() -> None:
    async def main() -> None:
        slow = BlockingProvider()
        world, parent = await one_shot_world(slow)
        await call(parent, "subagent", BG)
        await until(lambda: slow.requests)
        await call(parent, "task_kill", {"task_id": "subagent-1", "reason": "not needed"})
        assert slow.requests[0].signal.reason == "not needed"
        await world.settle()
        assert text(await call(parent, "task_output", {"task_id": "subagent-1"})) == (
            "(no new output)\n[status: killed]"
        )
        assert slow.runs == []

    run(main)


def test_bg_7_kill_after_publication_aborts_the_child() -> None:
    async def main() -> None:
        world, parent = await one_shot_world()
        gate = Gate()
        world.model.script("child task", Gated(gate, reply("never")))
        await call(parent, "subagent", BG)
        await gate.reached()
        await call(parent, "task_kill", {"task_id": "subagent-1"})
        await world.settle()
        assert world.jobs.status("subagent-1", parent).status is JobStatus.KILLED

    run(main)


def test_bg_8_owner_disposal_cancels_and_drops_its_jobs() -> None:
    async def main() -> None:
        world = ToolsWorld()
        world.tool("spawn")
        handle_ = await world.registry.create(CreateOptions(SessionId("owner")))
        owner = handle_.agent
        gate = Gate()
        world.model.script("child task", Gated(gate, reply("never")))
        await call(owner, "subagent", BG)
        await gate.reached()
        children = [a for a in world.registry.list() if a is not owner]
        assert len(children) == 1
        await handle_.dispose()
        assert world.registry.list() == []
        assert world.jobs._jobs == {}

    run(main)


def test_bg_9_no_subagent_specific_companion_tools() -> None:
    world = ToolsWorld()
    world.tool("spawn")
    assert set(world.globals.names()) == {
        "task_output",
        "task_status",
        "task_list",
        "task_kill",
        "send_message",
        "interrupt_agent",
        "list_agents",
        "subagent",
    }


# ----------------------------------------------------------------------------- the registry


def test_bg_30_preflight_texts() -> None:
    async def main() -> None:
        world = ToolsWorld()
        parent = await world.parent()
        producer = Producer()
        with pytest.raises(ToolFailure, match=r"^invalid job kind: expected a non-empty string$"):
            world.jobs.start("", "label", parent, producer.starter)
        with pytest.raises(ToolFailure, match=r"^invalid job label: expected a non-empty string$"):
            world.jobs.start("subagent", "", parent, producer.starter)
        stranger = ReferenceAgent(parent.session, model=world.model)
        with pytest.raises(ToolFailure) as caught:
            world.jobs.start("subagent", "label", stranger, producer.starter)
        assert str(caught.value) == (
            'agent "parent" is not the registered agent instance '
            "(background task owner must be live)"
        )
        with pytest.raises(SubagentError):
            JobRegistry(world.registry, max_per_owner=0)
        with pytest.raises(SubagentError):
            JobRegistry(world.registry, max_consecutive_wakes=-1)

    run(main)


def test_bg_31_first_settlement_wins_and_failures_are_contained() -> None:
    async def main() -> None:
        world = ToolsWorld()
        parent = await world.parent()
        producer = Producer()
        job = world.jobs.start("work", "label", parent, producer.starter)
        world.jobs.kill(job, parent)
        assert world.jobs.status(job, parent).status is JobStatus.STOPPING
        producer.done.set_exception(RuntimeError("producer broke"))
        await world.jobs.settled()
        snapshot = world.jobs.status(job, parent)
        assert (snapshot.status, snapshot.detail) == (
            JobStatus.FAILED,
            "RuntimeError: producer broke",
        )
        assert snapshot.finished_at is not None
        assert snapshot.started_at < snapshot.finished_at
        world.jobs._settle(world.jobs._jobs[job], JobOutcome(JobStatus.COMPLETED))
        assert world.jobs.status(job, parent).status is JobStatus.FAILED

    run(main)


def test_bg_32_access_fence() -> None:
    async def main() -> None:
        world = ToolsWorld()
        world.tool("spawn")
        parent = await world.parent()
        other = await world.parent("other")
        await call(parent, "subagent", BG)
        assert text(await call(other, "task_output", {"task_id": "subagent-1"})) == (
            "Error: task subagent-1 belongs to another session"
        )
        assert (
            text(await call(parent, "task_kill", {"task_id": "nope"})) == "Error: unknown task nope"
        )
        assert text(await call(other, "task_list")) == "(no background tasks)"
        await world.settle()

    run(main)


def test_bg_33_output_reads_waits_and_renders() -> None:
    async def main() -> None:
        world = ToolsWorld()
        parent = await world.parent()
        producer = Producer()
        job = world.jobs.start("work", "label", parent, producer.starter)
        assert text(await call(parent, "task_output", {"task_id": job})) == (
            "(no new output)\n[status: running]"
        )
        assert text(await call(parent, "task_output", {"task_id": ""})) == (
            'Error: invalid task_id: expected a non-empty string, got ""'
        )
        timed_out = await call(
            parent, "task_output", {"task_id": job, "wait": True, "timeout_ms": 1}
        )
        assert text(timed_out) == "(no new output)\n[status: running]"
        bad = await call(parent, "task_output", {"task_id": job, "wait": True, "timeout_ms": -5})
        assert text(bad) == (
            "Error: invalid wait timeout: expected a positive number of milliseconds, got -5"
        )
        controller = AbortController()
        waiting = asyncio.ensure_future(
            handle(parent, "task_output", {"task_id": job, "wait": True}, controller.signal)
        )
        await until(lambda: world.jobs._jobs[job].waiters)
        controller.abort("enough")
        assert text(await waiting) == "Error: wait aborted"
        waiting = asyncio.ensure_future(call(parent, "task_output", {"task_id": job, "wait": True}))
        await until(lambda: world.jobs._jobs[job].waiters)
        producer.done.set_result(JobOutcome(JobStatus.COMPLETED, "line\n"))
        assert text(await waiting) == "line\n[status: completed]"
        assert text(await call(parent, "task_output", {"task_id": job})) == (
            "line\n[status: completed]"
        )
        assert transcript(parent) == []  # the wait saw the settlement: no notice
        assert text(await call(parent, "task_output", {"task_id": job, "wait": "x"})).startswith(
            "Error: invalid arguments: wait: 'x' is not of type 'boolean'"
        )

    run(main)


def test_bg_34_list_rows_in_registration_order() -> None:
    async def main() -> None:
        world = ToolsWorld()
        parent = await world.parent()
        assert text(await call(parent, "task_list")) == "(no background tasks)"
        first, second = Producer(), Producer()
        world.jobs.start("subagent", "first job", parent, first.starter)
        world.jobs.start("subagent", "second job", parent, second.starter)
        first.done.set_result(JobOutcome(JobStatus.FAILED, detail="error"))
        await until(lambda: world.jobs.status("subagent-1", parent).status is JobStatus.FAILED)
        assert text(await call(parent, "task_list")) == (
            "subagent-1 [subagent] failed — first job\nsubagent-2 [subagent] running — second job"
        )
        assert text(await call(parent, "task_status", {"task_id": "subagent-1"})) == (
            "task subagent-1 (subagent: first job) [status: failed, error]"
        )
        second.done.set_result(JobOutcome(JobStatus.COMPLETED))
        await world.jobs.settled()

    run(main)


def test_bg_35_kill_live_and_finished_jobs() -> None:
    async def main() -> None:
        world = ToolsWorld()
        parent = await world.parent()
        producer = Producer()
        job = world.jobs.start("work", "label", parent, producer.starter)
        assert text(await call(parent, "task_kill", {"task_id": job})) == (
            "requested cancellation of task work-1"
        )
        assert producer.cancelled == ["background subagent task killed"]
        producer.done.set_result(JobOutcome(JobStatus.KILLED))
        await world.jobs.settled()
        assert text(await call(parent, "task_kill", {"task_id": job})) == (
            "task work-1 had already finished [status: killed]"
        )
        stubborn = Producer(cancel_error=RuntimeError("cannot"))
        other = world.jobs.start("work", "label", parent, stubborn.starter)
        assert text(await call(parent, "task_kill", {"task_id": other})) == "Error: cannot"
        assert world.jobs.status(other, parent).status is JobStatus.RUNNING
        stubborn.done.set_result(JobOutcome(JobStatus.FAILED, detail="x"))
        await world.jobs.settled()
        assert text(await call(parent, "task_kill", {"task_id": other})) == (
            "task work-2 had already finished [status: failed, x]"
        )

    run(main)


def test_bg_36_reported_jobs_send_no_notice() -> None:
    async def main() -> None:
        world = ToolsWorld()
        parent = await world.parent()
        killed, read = Producer(), Producer()
        world.jobs.start("work", "killed", parent, killed.starter)
        world.jobs.kill("work-1", parent)
        killed.done.set_result(JobOutcome(JobStatus.KILLED))
        world.jobs.start("work", "unread", parent, read.starter)
        read.done.set_result(JobOutcome(JobStatus.COMPLETED, "x"))
        await world.settle()
        assert [row for row in transcript(parent) if row[0] == "user"] == [
            (
                "user",
                "background task work-2 (work: unread) finished [status: completed]. "
                "Read its output with task_output.",
            )
        ]

    run(main)


def test_bg_37_notice_delivery_wakes_an_idle_owner_within_its_budget() -> None:
    async def main() -> None:
        world = ToolsWorld(max_consecutive_wakes=1)
        parent = await world.parent()
        first, second = Producer(), Producer()
        world.jobs.start("work", "one", parent, first.starter)
        first.done.set_result(JobOutcome(JobStatus.COMPLETED))
        await world.settle()
        assert transcript(parent)[-1] == ("assistant", "ok")  # the notice opened a turn
        world.jobs.start("work", "two", parent, second.starter)
        second.done.set_result(JobOutcome(JobStatus.COMPLETED))
        await world.settle()
        assert len(parent.next_step) == 1  # budget spent: injected, no turn
        message = parent.next_step[0]
        assert message.source == BaseSource(BaseSourceKind.PLUGIN)
        parent.followup(create_user_message((TextBlock("user speaks"),)))
        await world.settle()
        third = Producer()
        world.jobs.start("work", "three", parent, third.starter)
        third.done.set_result(JobOutcome(JobStatus.COMPLETED))
        await world.settle()
        assert transcript(parent)[-2:] == [
            (
                "user",
                "background task work-3 (work: three) finished [status: completed]. "
                "Read its output with task_output.",
            ),
            ("assistant", "ok"),
        ]

    run(main)


def test_bg_37_quiet_delivery_always_injects() -> None:
    async def main() -> None:
        world = ToolsWorld(delivery=Delivery.QUIET)
        parent = await world.parent()
        producer = Producer()
        world.jobs.start("work", "one", parent, producer.starter)
        producer.done.set_result(JobOutcome(JobStatus.COMPLETED))
        await world.settle()
        assert transcript(parent) == []
        assert len(parent.next_step) == 1

    run(main)


def test_bg_37_a_busy_owner_gets_the_notice_injected() -> None:
    async def main() -> None:
        world = ToolsWorld()
        parent = await world.parent()
        gate = Gate()
        world.model.script("parent", Gated(gate, reply("working")))
        parent.followup(create_user_message((TextBlock("work"),)))
        await gate.reached()
        producer = Producer()
        world.jobs.start("work", "one", parent, producer.starter)
        producer.done.set_result(JobOutcome(JobStatus.COMPLETED))
        await world.jobs.settled()
        assert len(parent.next_step) == 1
        gate.open()
        await world.settle()

    run(main)


def test_bg_37_config_is_validated() -> None:
    world = ToolsWorld()
    with pytest.raises(SubagentError) as caught:
        task_tools(world.jobs, wait_timeout_ms=10, max_wait_timeout_ms=5)
    assert caught.value.message == (
        "wait_timeout_ms: waitTimeoutMs (10) exceeds maxWaitTimeoutMs (5)"
    )


def test_bg_38_the_jobs_guidance_section() -> None:
    world = ToolsWorld()
    sections = {part.name: part for part in world.prompt.system_prompt()}
    assert sections["tool:jobs"].order == 106
    assert sections["tool:jobs"].text == JOBS_GUIDANCE


def test_bg_39_a_throwing_teardown_cancel_force_fails_the_record() -> None:
    async def main() -> None:
        world = ToolsWorld()
        handle_ = await world.registry.create(CreateOptions(SessionId("owner")))
        owner = handle_.agent
        finished = Producer()
        world.jobs.start("done", "finished", owner, finished.starter)
        finished.done.set_result(JobOutcome(JobStatus.COMPLETED))
        await until(lambda: world.jobs.status("done-1", owner).status is JobStatus.COMPLETED)
        stubborn = Producer(cancel_error=RuntimeError("stuck"))
        polite = Producer()
        world.jobs.start("work", "stuck", owner, stubborn.starter)
        world.jobs.start("work", "polite", owner, polite.starter)
        disposal = handle_.dispose()
        await until(lambda: polite.cancelled)
        assert polite.cancelled == ["owner disposed"]
        assert world.jobs.status("work-1", owner).detail == (
            "cancel threw during teardown; work may be orphaned: RuntimeError: stuck"
        )
        assert world.jobs._state.jobs["work-2"].reported  # teardown marks it: no notice
        polite.done.set_result(JobOutcome(JobStatus.KILLED))
        await disposal
        assert world.jobs._jobs == {}

    run(main)


def test_bg_39_a_force_failed_job_settling_after_its_owners_release_is_ignored() -> None:
    """The producer of a job force-failed at teardown settles after its owner was released
    and the job dropped: nothing is reported and no settlement task fails."""

    async def main() -> None:
        world = ToolsWorld()
        handle_ = await world.registry.create(CreateOptions(SessionId("owner")))
        owner = handle_.agent
        stubborn = Producer(cancel_error=RuntimeError("stuck"))
        world.jobs.start("work", "stuck", owner, stubborn.starter)
        await handle_.dispose()
        assert world.jobs.list(owner) == []  # released: the job is dropped
        stubborn.done.set_result(JobOutcome(JobStatus.COMPLETED, output="late"))
        await world.jobs.settled()  # raised INVALID_ARGUMENT [job_id] before the fix
        assert world.jobs.list(owner) == []

    run(main)


def test_bg_38_registering_the_task_tools_is_reversible() -> None:
    world = ToolsWorld()
    tools = ToolRegistry()
    prompt = PromptComposer()
    remove = register_task_tools(tools, world.jobs, prompt=prompt)
    assert len(tools.names()) == 4
    remove()
    assert tools.names() == ()
    assert prompt.system_prompt() == ()


def test_bg_33_task_tool_snapshots() -> None:
    world = ToolsWorld()
    for name in ("task_output", "task_status", "task_list", "task_kill"):
        tool = world.globals.get(name)
        assert tool is not None
        check_snapshot(name, tool)


def test_bg_33_rendering() -> None:
    snapshot = JobSnapshot("a-1", "a", "l", JobStatus.FAILED, "error; diagnostic: d", 1.0, 2.0)
    assert render_output("", snapshot) == "(no new output)\n[status: failed, error; diagnostic: d]"


# ----------------------------------------------------------------------------- ONE-19


class DisposeFails(FakeRun):
    async def _dispose(self) -> None:
        self.disposals += 1
        raise RuntimeError("gone")


@pytest.mark.parametrize(
    ("settle", "expected"),
    [
        (
            SubagentResult(
                ({"type": "text", "text": "a"}, {"type": "text", "text": "b"}), KnownStop.COMPLETED
            ),
            JobOutcome(JobStatus.COMPLETED, "ab"),
        ),
        (SubagentResult((), KnownStop.ABORTED), JobOutcome(JobStatus.KILLED)),
        (
            SubagentResult((), KnownStop.MAX_TOKENS),
            JobOutcome(JobStatus.FAILED, detail="max-tokens"),
        ),
        (
            SubagentResult((), KnownStop.ERROR, diagnostic="denied"),
            JobOutcome(JobStatus.FAILED, detail="error; diagnostic: denied"),
        ),
        (SubagentResult((), OtherStop("x-stop")), JobOutcome(JobStatus.FAILED, detail="x-stop")),
    ],
)
def test_one_19_settle_run_maps_the_result(settle: SubagentResult, expected: JobOutcome) -> None:
    async def main() -> None:
        fake = FakeRun("run-1")
        fake.result.set_result(settle)
        assert await settle_run(fake) == expected
        assert fake.disposals == 1

    run(main)


def test_one_19_a_rejected_result_and_a_failed_dispose_both_survive() -> None:
    async def main() -> None:
        rejected = DisposeFails("run-1")
        rejected.result.set_exception(RuntimeError("lost"))
        assert await settle_run(rejected) == JobOutcome(
            JobStatus.FAILED, detail="RuntimeError: lost; dispose failed: RuntimeError: gone"
        )
        completed = DisposeFails("run-2")
        completed.result.set_result(
            SubagentResult(({"type": "text", "text": "x"},), KnownStop.COMPLETED)
        )
        assert await settle_run(completed) == JobOutcome(
            JobStatus.FAILED, detail="dispose failed: RuntimeError: gone"
        )

    run(main)


def test_bg_6_job_outcomes_through_the_tool() -> None:
    async def main() -> None:
        fake = FakeProvider("fake", ALL_CAPS)
        world, parent = await one_shot_world(fake)
        await call(parent, "subagent", BG)
        await until(lambda: fake.runs)
        fake.runs[0].result.set_result(
            SubagentResult(({"type": "text", "text": "partial"},), KnownStop.ERROR, diagnostic="d")
        )
        await world.settle()
        assert text(await call(parent, "task_output", {"task_id": "subagent-1"})) == (
            "(no new output)\n[status: failed, error; diagnostic: d]"
        )
        assert isinstance(world.globals, ToolRegistry)
        assert isinstance(world.registry, AgentRegistry)

    run(main)
