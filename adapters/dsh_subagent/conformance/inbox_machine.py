"""A bounded stateful machine over one agent of the harness under test (HARNESS-3/5/11).

The machine sends, steers, injects, cancels (with and without keep-inbox), lets the loop
advance one scheduling step, and waits for idle, in any order Hypothesis picks. After every
step the inbox notifications must form a valid ledger (every accepted message leaves at most
once, never before it was accepted) whose pending set is the agent's own; at teardown a
disposing cancel must account for every message exactly once. A keep-inbox cancel must leave
the pending list exactly as it was.

The machine needs Hypothesis, so it lives outside the ``test_`` modules: ``test_stateful``
imports it inside its test, which fails with one line naming the ``conformance`` extra when
Hypothesis is missing (instead of a collection error). Every await is ``bounded``.
"""

from __future__ import annotations

import asyncio

from hypothesis import settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

from dsh_subagent.adapters.protocols import (
    Agent,
    CancelCause,
    InboxNotification,
    create_user_message,
)
from dsh_subagent.conformance.support import HarnessFactory, HarnessUnderTest, ModelBook, bounded
from dsh_subagent.core.values import CancelKind, MessageId, TextBlock
from dsh_subagent.spec.inbox import MessageLedger, ledger_of


class InboxMachine(RuleBasedStateMachine):
    """One agent on its own event loop; the spec's inbox ledger is the oracle."""

    factory: HarnessFactory

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.harness: HarnessUnderTest = bounded(self.loop, self.factory(ModelBook(), None))
        self.agent: Agent = bounded(self.loop, self.harness.create_agent("m"))
        self.log: list[tuple[str, MessageId]] = []
        self.count = 0
        for kind in ("inserted", "claimed", "discarded"):
            emitter = getattr(self.agent, kind)
            emitter.subscribe(self._record(kind))

    def _record(self, kind: str) -> object:
        def record(n: InboxNotification) -> None:
            self.log.append((kind, n.message.id))

        return record

    def _ledger(self) -> MessageLedger:
        return ledger_of(self.log)

    def _send(self, verb: str) -> None:
        self.count += 1
        message = create_user_message((TextBlock(f"m{self.count}"),))

        async def send() -> None:
            getattr(self.agent, verb)(message)

        bounded(self.loop, send())

    @rule()
    def followup(self) -> None:
        self._send("followup")

    @rule()
    def steer(self) -> None:
        self._send("steer")

    @rule()
    def inject(self) -> None:
        self._send("inject")

    @rule()
    def cancel(self) -> None:
        self.agent.cancel(CancelCause(CancelKind.USER))

    @rule()
    def interrupt_keeping_inbox(self) -> None:
        before = self.agent.pending()
        self.agent.cancel(CancelCause(CancelKind.PARENT), keep_inbox=True)
        assert self.agent.pending() == before  # HARNESS-5: keep-inbox discards nothing

    @rule()
    def tick(self) -> None:
        self.loop.run_until_complete(asyncio.sleep(0))  # one scheduling step, not a wait

    @rule()
    def settle(self) -> None:
        bounded(self.loop, self.agent.when_idle())

    @invariant()
    def ledger_matches_the_inbox(self) -> None:
        assert self._ledger().pending() == frozenset(self.agent.pending())

    def teardown(self) -> None:
        try:
            self.agent.cancel(CancelCause(CancelKind.DISPOSED))
            bounded(self.loop, self.agent.when_idle())
            ledger = self._ledger()
            assert ledger.pending() == frozenset()
            assert len(ledger.states) == self.count
            bounded(self.loop, self.harness.close())
        finally:
            self.loop.close()


def check_every_accepted_message_leaves_exactly_once(factory: HarnessFactory) -> None:
    """Run ``InboxMachine`` over ``factory`` (HARNESS-11), at most 30 examples."""
    machine = type("BoundInboxMachine", (InboxMachine,), {"factory": staticmethod(factory)})
    limits = settings(max_examples=min(settings().max_examples, 30), stateful_step_count=20)
    run_state_machine_as_test(machine, settings=limits)
