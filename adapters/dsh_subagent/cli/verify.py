"""``dsh-subagent verify``: run the stateful machines and report every invariant's checks.

Theory of operation
-------------------
1. Two machines: ``CoreMachine`` (``dsh_subagent.spec.machines``) drives the pure core and the
   spec's charts in lockstep; ``ServiceMachine`` (``dsh_subagent.testing.service_machine``)
   drives the real ``SubagentService`` over the reference harness and SQLite, with a drawn
   fault plan. Each names the invariants it checks (``CHECKED``) and counts, per ID, how often
   it checked one and whether one was ever violated.
2. Every run has a seed: ``--seed`` or one drawn here, printed before the machines run, so any
   run (passing or not) can be repeated exactly.
3. The verdict: a violated invariant fails the run, and so does one checked 0 times
   ("vacuous": the run never reached it) unless ``--allow-vacuous``. A violation carries
   Hypothesis's shrunk sequence and the command that reproduces it. Exit status 1 on failure.
4. Reports: rich tables on stdout (default); ``--json`` prints one document instead (schema
   in ``docs/ci.md``; the seed line then goes to stderr); ``--junit-xml PATH`` also writes one
   test case per invariant per machine, for CI test reporters.
5. Hypothesis keeps its files under ``--cache-dir DIR``, by default the user cache directory,
   never the working directory; ``--cache-dir off`` keeps them in a scratch directory removed
   after the run. A seeded run uses no example database (Hypothesis's rule for ``@seed``):
   the printed seed is what replays a run.
6. Both machines need Hypothesis, which only the ``verify`` (and ``dev``) extra installs.
   Without it the command prints one line naming the extra and exits 2 (``MissingExtra``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from xml.etree import ElementTree as ET

import attrs
import click
from rich.console import Console
from rich.table import Table

from dsh_subagent.core.extras import MissingExtra

OFF = "off"


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/dsh-subagent/hypothesis`` (``~/.cache`` when unset)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "dsh-subagent" / "hypothesis"


@attrs.frozen
class Row:
    """One invariant of one machine: how often it was checked and whether it was violated."""

    id: str
    rules: str
    checks: int
    violated: bool

    @property
    def result(self) -> str:
        return "violated" if self.violated else ("held" if self.checks else "vacuous")


@attrs.frozen
class MachineReport:
    """One machine's run: its rows and, on a violation, the message and shrunk sequence."""

    name: str
    title: str
    rows: tuple[Row, ...]
    failure: str | None = None
    sequence: tuple[str, ...] = ()

    def failed(self, *, allow_vacuous: bool) -> bool:
        bad = {"violated"} if allow_vacuous else {"violated", "vacuous"}
        return self.failure is not None or any(row.result in bad for row in self.rows)


@attrs.frozen
class VerifyRun:
    """What one ``verify`` invocation ran with and found."""

    seed: int
    examples: int
    steps: int
    machine: str
    allow_vacuous: bool
    reports: tuple[MachineReport, ...]

    @property
    def passed(self) -> bool:
        return not any(r.failed(allow_vacuous=self.allow_vacuous) for r in self.reports)

    def reproduce(self) -> str:
        return (
            f"dsh-subagent verify --machine {self.machine} --examples {self.examples}"
            f" --steps {self.steps} --seed {self.seed}"
        )


def require_hypothesis() -> None:
    """Raise ``MissingExtra`` naming the ``verify`` extra unless Hypothesis imports."""
    try:
        import hypothesis  # noqa: F401
    except ModuleNotFoundError as err:
        if err.name != "hypothesis":
            raise
        raise MissingExtra("dsh-subagent verify", "hypothesis", "verify") from err


@contextlib.contextmanager
def _hypothesis_files(where: str) -> Iterator[None]:
    """Keep Hypothesis's files under ``where`` (``off``: a scratch directory) for the run."""
    from hypothesis.configuration import set_hypothesis_home_dir, storage_directory

    previous = storage_directory(intent_to_write=False).home_directory
    with contextlib.ExitStack() as stack:
        scratch = stack.enter_context(tempfile.TemporaryDirectory()) if where == OFF else where
        set_hypothesis_home_dir(scratch)
        try:
            yield
        finally:
            set_hypothesis_home_dir(previous)


def _attempt(test: Callable[[], None]) -> tuple[str | None, tuple[str, ...]]:
    """Run one machine test: ``(None, ())`` or its violation and shrunk sequence."""
    try:
        test()
    except Exception as err:  # a violation, shrunk by Hypothesis
        notes: list[str] = getattr(err, "__notes__", [])
        lines = [line for note in notes for line in note.splitlines()]
        return str(err), tuple(lines)
    return None, ()


def _run_core(examples: int, steps: int, seed: int) -> MachineReport:
    from hypothesis import seed as with_seed
    from hypothesis.stateful import get_state_machine_test

    from dsh_subagent.spec.counting import machine_settings
    from dsh_subagent.spec.invariants import ALL_INVARIANTS
    from dsh_subagent.spec.machines import CoreMachine

    CoreMachine.reset_counts()
    config = machine_settings(examples, steps)
    failure, sequence = _attempt(
        with_seed(seed)(get_state_machine_test(CoreMachine, settings=config))
    )
    rules = {inv.id: ", ".join(inv.rules) for inv in ALL_INVARIANTS}
    rows = tuple(
        Row(i, rules[i], CoreMachine.totals.get(i, 0), i in CoreMachine.violated)
        for i in CoreMachine.CHECKED
    )
    title = "core lockstep machine (core apply vs the spec charts)"
    return MachineReport("core", title, rows, failure, sequence)


def _run_service(examples: int, steps: int, seed: int) -> MachineReport:
    from dsh_subagent.spec.invariants import ALL_INVARIANTS
    from dsh_subagent.testing.service_machine import ServiceMachine, run_service_machine

    ServiceMachine.reset_counts()
    failure, sequence = _attempt(
        lambda: run_service_machine(examples=examples, steps=steps, seed=seed)
    )
    rules = {inv.id: f"{inv.id}: {', '.join(inv.rules)}" for inv in ALL_INVARIANTS}
    rows = tuple(
        Row(i, rules.get(spec, ""), ServiceMachine.totals.get(i, 0), i in ServiceMachine.violated)
        for i, spec in ServiceMachine.CHECKED.items()
    )
    title = "service machine (SubagentService over SQLite, with faults)"
    return MachineReport("service", title, rows, failure, sequence)


def _table(report: MachineReport) -> Table:
    table = Table(title=report.title)
    for column in ("invariant", "rules", "checks", "result"):
        table.add_column(column)
    for row in report.rows:
        table.add_row(row.id, row.rules, str(row.checks), row.result)
    return table


def to_json(run: VerifyRun) -> str:
    """The ``--json`` document (``docs/ci.md`` describes it)."""
    document = {
        "verdict": "pass" if run.passed else "fail",
        "seed": run.seed,
        "examples": run.examples,
        "steps": run.steps,
        "allow_vacuous": run.allow_vacuous,
        "machines": [
            {
                "name": r.name,
                "seed": run.seed,
                "verdict": "fail" if r.failed(allow_vacuous=run.allow_vacuous) else "pass",
                "invariants": [
                    {"id": row.id, "rules": row.rules, "checks": row.checks, "result": row.result}
                    for row in r.rows
                ],
                "failure": (
                    None
                    if r.failure is None
                    else {"message": r.failure, "sequence": list(r.sequence)}
                ),
            }
            for r in run.reports
        ],
        "reproduce": run.reproduce(),
    }
    return json.dumps(document, indent=2)


def write_junit(run: VerifyRun, path: Path) -> None:
    """One ``testsuite`` per machine, one ``testcase`` per invariant."""
    suites = ET.Element("testsuites", name="dsh-subagent verify")
    for report in run.reports:
        suite = ET.SubElement(suites, "testsuite", name=f"verify.{report.name}")
        ET.SubElement(
            ET.SubElement(suite, "properties"), "property", name="seed", value=str(run.seed)
        )
        failures = 0
        for row in report.rows:
            case = ET.SubElement(suite, "testcase", classname=f"verify.{report.name}", name=row.id)
            if row.result == "violated":
                failures += 1
                failure = ET.SubElement(case, "failure", message=report.failure or "violated")
                failure.text = "\n".join([*report.sequence, "reproduce with: " + run.reproduce()])
            elif row.result == "vacuous":
                message = "vacuous: checked 0 times"
                if run.allow_vacuous:
                    ET.SubElement(case, "skipped", message=message)
                else:
                    failures += 1
                    ET.SubElement(case, "failure", message=message)
        suite.set("tests", str(len(report.rows)))
        suite.set("failures", str(failures))
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)


def _print(console: Console, run: VerifyRun) -> None:
    for report in run.reports:
        console.print(_table(report))
    for report in run.reports:
        if report.failure is not None:
            console.print(f"[bold red]violation ({report.name}):[/] {report.failure}")
            console.print("\n".join(report.sequence), markup=False)
        vacuous = [row.id for row in report.rows if row.result == "vacuous"]
        if vacuous and not run.allow_vacuous:
            console.print(
                f"[bold red]vacuous ({report.name}):[/] never checked: {', '.join(vacuous)}"
                " (run more --examples / --steps, or pass --allow-vacuous)"
            )
    if not run.passed:
        console.print("reproduce with: " + run.reproduce(), markup=False)


def run_verify(
    *,
    examples: int,
    steps: int,
    seed: int | None,
    machine: str,
    as_json: bool = False,
    junit_xml: Path | None = None,
    cache_dir: str = str(default_cache_dir()),
    allow_vacuous: bool = False,
) -> bool:
    """Run the chosen machines and report them; True when the verdict is a pass."""
    require_hypothesis()
    chosen = seed if seed is not None else random.randrange(2**32)
    console = Console(soft_wrap=True, stderr=as_json)
    console.print(f"seed: {chosen}", markup=False)
    # Planted faults make contained listeners and flushes log warnings by design; the report
    # is the output here, so keep the seam's own logging quiet while the machines run.
    seam_log = logging.getLogger("dsh_subagent")
    level = seam_log.level
    seam_log.setLevel(logging.ERROR)
    runners: Sequence[tuple[str, Callable[..., MachineReport]]] = [
        ("core", _run_core),
        ("service", _run_service),
    ]
    reports = []
    try:
        with _hypothesis_files(cache_dir):
            for name, runner in runners:
                if machine in (name, "both"):
                    with console.status(f"running the {name} machine"):
                        reports.append(runner(examples, steps, chosen))
    finally:
        seam_log.setLevel(level)  # the caller's logging is theirs again (verify runs in-process)
    run = VerifyRun(chosen, examples, steps, machine, allow_vacuous, tuple(reports))
    if as_json:
        click.echo(to_json(run))
    else:
        _print(console, run)
    if junit_xml is not None:
        write_junit(run, junit_xml)
    return run.passed
