"""``dsh-subagent verify``: run the stateful machines and print the invariant table.

Theory of operation
-------------------
1. Two machines: ``CoreMachine`` (``dsh_subagent.spec.machines``) drives the pure core and the
   spec's charts in lockstep; ``ServiceMachine`` (``dsh_subagent.testing.service_machine``)
   drives the real ``SubagentService`` over the reference harness and SQLite, with a drawn
   fault plan.
2. Each machine counts, per invariant ID, how often it was checked and whether it was ever
   violated; the table prints those counts. A violation prints Hypothesis's shrunk sequence
   and the command that reproduces it, and makes the command exit 1.
3. Both machines need Hypothesis, which only the ``verify`` (and ``dev``) extra installs.
   Without it the command prints one line naming the extra and exits 2 (``MissingExtra``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import click
from rich.console import Console
from rich.table import Table


def _table(title: str, rows: Iterable[tuple[str, str, int, bool]]) -> Table:
    table = Table(title=title)
    for column in ("invariant", "rules", "checks", "result"):
        table.add_column(column)
    for inv_id, rules, count, violated in rows:
        verdict = "VIOLATED" if violated else ("held" if count else "n/a")
        table.add_row(inv_id, rules, str(count), verdict)
    return table


def _run(console: Console, label: str, test: Callable[[], None]) -> BaseException | None:
    with console.status(f"running the {label} machine"):
        try:
            test()
        except Exception as err:  # a violation, shrunk by Hypothesis
            return err
    return None


class MissingExtra(click.ClickException):
    """An optional dependency the command needs is not installed (exit status 2)."""

    exit_code = 2


def require_hypothesis() -> None:
    """Raise ``MissingExtra`` naming the ``verify`` extra unless Hypothesis imports."""
    try:
        import hypothesis  # noqa: F401
    except ModuleNotFoundError as err:
        if err.name != "hypothesis":
            raise
        raise MissingExtra("verify needs Hypothesis: pip install 'dsh-subagent[verify]'") from err


def run_verify(*, examples: int, steps: int, seed: int | None, machine: str) -> bool:
    """Run the chosen machines; print their tables; True when every invariant held."""
    require_hypothesis()
    from hypothesis import HealthCheck, settings
    from hypothesis import seed as with_seed
    from hypothesis.stateful import get_state_machine_test

    from dsh_subagent.spec.invariants import ALL_INVARIANTS
    from dsh_subagent.spec.machines import CoreMachine
    from dsh_subagent.testing.service_machine import ServiceMachine, run_service_machine

    console = Console(soft_wrap=True)
    # Planted faults make contained listeners and flushes log warnings by design; the table
    # is the report here, so keep the seam's own logging quiet while the machines run.
    logging.getLogger("dsh_subagent").setLevel(logging.ERROR)
    failures: list[BaseException] = []
    if machine in ("core", "both"):
        CoreMachine.reset_counts()
        test = get_state_machine_test(
            CoreMachine,
            settings=settings(
                max_examples=examples,
                stateful_step_count=steps,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            ),
        )
        failure = _run(console, "core", with_seed(seed)(test) if seed is not None else test)
        rows = [
            (
                inv.id,
                ", ".join(inv.rules),
                CoreMachine.totals.get(inv.id, 0),
                inv.id in CoreMachine.violated,
            )
            for inv in ALL_INVARIANTS
        ]
        console.print(_table("core lockstep machine (core apply vs the spec charts)", rows))
        failures += [failure] if failure else []
    if machine in ("service", "both"):
        ServiceMachine.reset_counts()
        failure = _run(
            console,
            "service",
            lambda: run_service_machine(examples=examples, steps=steps, seed=seed),
        )
        rows = [
            (inv_id, "", count, inv_id in ServiceMachine.violated)
            for inv_id, count in sorted(ServiceMachine.totals.items())
        ]
        console.print(_table("service machine (SubagentService over SQLite, with faults)", rows))
        failures += [failure] if failure else []
    for failure in failures:
        console.print(f"[bold red]violation:[/] {failure}")
        for note in getattr(failure, "__notes__", []):
            console.print(note, markup=False)
    if failures:
        again = f"dsh-subagent verify --machine {machine} --examples {examples} --steps {steps}"
        console.print("reproduce with: " + again + (f" --seed {seed}" if seed is not None else ""))
    return not failures
