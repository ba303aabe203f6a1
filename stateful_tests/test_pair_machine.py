"""Two harness instances on one SQLite store, with crashes, under the ``ci`` profile (issue 19
item 7): at most one live Activation per child across both (LEASE-7), every acknowledged
message in the store when acknowledged and delivered exactly once (DUR-6)."""

from __future__ import annotations

from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from dsh_subagent.core.values import SessionId
from dsh_subagent.testing.pair_machine import PairMachine, stored_facts


def test_lease_7_dur_6_two_instances_with_crashes_keep_both_invariants() -> None:
    PairMachine.seen.clear()
    config = settings(
        parent=settings.get_profile("ci"), max_examples=40, stateful_step_count=20, deadline=None
    )
    run_state_machine_as_test(PairMachine, settings=config)
    assert PairMachine.seen["accepted into the mailbox"] > 0, PairMachine.seen


def test_dur_26_a_crashed_holder_s_mail_is_taken_over_by_the_scan_on_open() -> None:
    """The machine's rules in one fixed order: slot 0 holds c0, slot 1's follow-up goes to
    the mailbox, slot 0 crashes; the instance opened in its place takes c0 over at its scan
    and delivers the mail once; both invariants hold at every step."""
    PairMachine.seen.clear()
    machine = PairMachine()
    child = SessionId("c0")
    try:
        machine.open_both()
        machine.start(0, child, True)
        machine.followup(1, child, False)
        (posted,) = machine.acked[1:]
        assert posted in stored_facts(machine.db).mailbox
        machine.crash(0)
        machine.pair_invariants_hold()
        facts = stored_facts(machine.db)
        assert facts.claimed[posted] == 1
        assert facts.inserted[posted] == 1  # the row stays until that Activation's release
        machine.recover()
    finally:
        machine.teardown()
    assert set(PairMachine.seen) == {
        "accepted into the mailbox",
        "crash with a live Activation",
        "orphaned mail named",
    }
