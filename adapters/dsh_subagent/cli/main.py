"""``dsh-subagent``: the demo, the verifier, the diagrams and the catalog, from one command.

Theory of operation
-------------------
1. This is the application layer: it may import core, adapters and spec; nothing imports it.
2. Every subcommand prints what the library reports, never canned text.
3. Every error is one line on stderr, ``error: CODE: message`` (``entry.error_line``), naming
   the offending field once: a ``SubagentError``'s code (exit status 1: the run failed), a
   missing extra as ``MISSING_EXTRA`` and a bad command line as ``USAGE`` (exit status 2:
   nothing ran). Counts and choices are checked by the parser, before anything runs.
4. Paths are resolved against the working directory; the directory of ``--db`` must exist
   (it is never created). A ``postgresql://`` address as ``--db`` is passed on as it is:
   the harness opens PostgreSQL for it (the ``postgres`` extra).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import NoReturn, TypeVar

import click

from dsh_subagent.cli.entry import error_line
from dsh_subagent.core.errors import ErrorCode, SubagentError
from dsh_subagent.core.extras import MissingExtra

EXHAUSTIVE_MACHINES = ("manager", "one-shot", "observer", "jobs", "activity")
"""``verify --exhaustive --machine`` names (``spec.modelcheck.MACHINES``; a test pins them)."""

_F = TypeVar("_F", bound=Callable[..., object])


def _version() -> str:
    try:
        return version("dsh-subagent")
    except PackageNotFoundError:  # pragma: no cover - only when run from a bare checkout
        return "0+unknown"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(_version(), prog_name="dsh-subagent")
def cli() -> None:
    """The subagent seam: delegation to child agents with verified lifecycle invariants."""


def _store_path(
    _ctx: click.Context, param: click.Parameter, value: str | None
) -> Path | str | None:
    """``--db`` as an absolute path whose directory exists (it is never created), or a
    PostgreSQL address as it is."""
    from dsh_subagent.adapters.reference.persistence import is_postgres_address

    if value is None or is_postgres_address(value):
        return value
    path = Path(value).expanduser().resolve()
    if path.is_dir():
        raise click.BadParameter(f"{path} is a directory", param=param)
    if not path.parent.is_dir():
        raise click.BadParameter(f"no directory {path.parent}", param=param)
    return path


def _count_option(flag: str, minimum: int, default: int | None, text: str) -> Callable[[_F], _F]:
    """An integer option of at least ``minimum``; a default other than None is shown."""
    return click.option(
        flag,
        type=click.IntRange(min=minimum),
        default=default,
        show_default=default is not None,
        help=text,
    )


def _store_option(text: str, *, required: bool = False) -> Callable[[_F], _F]:
    """``--db``: a session store path or address, checked by ``_store_path``."""
    return click.option("--db", default=None, required=required, callback=_store_path, help=text)


@cli.command()
@_store_option("SQLite file or postgresql:// address to use and keep (default: a temporary one).")
@click.option("--json", "as_json", is_flag=True, help="Print the lifecycle event log as JSON.")
@click.option("--step", "step_through", is_flag=True, help="Pause between phases.")
@click.option(
    "--trace", "show_trace", is_flag=True, help="Print the OpenTelemetry span tree at the end."
)
def demo(db: Path | str | None, as_json: bool, step_through: bool, show_trace: bool) -> None:
    """Delegate, continue, interrupt, restart and cold-resume on the reference harness."""
    from dsh_subagent.cli.demo import main as run_demo

    run_demo(db=db, as_json=as_json, step_through=step_through, show_trace=show_trace)


@cli.command()
@_store_option(
    "The session store to read: a SQLite file or a postgresql:// address.", required=True
)
@click.option("--parent", default=None, help="List this session's children (default: every root).")
@click.option("--descendants", is_flag=True, help="Walk the whole tree below each parent.")
def catalog(db: Path | str, parent: str | None, descendants: bool) -> None:
    """List the children in a store: ids, labels, modes, activity and diagnostics."""
    from dsh_subagent.cli.catalog import print_catalog

    if isinstance(db, Path) and not db.is_file():
        raise SubagentError(ErrorCode.NOT_FOUND, f"no session store at {db}", field="--db")
    print_catalog(db, parent, descendants=descendants)


@cli.command()
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("docs/diagrams"),
    show_default=True,
    help="Directory to write the Mermaid diagrams into.",
)
def diagram(out: Path) -> None:
    """Render every spec chart as a Mermaid diagram."""
    from dsh_subagent.spec.diagrams import render_all, write_all

    changed = {p.name for p in write_all(out)}
    for name in render_all():
        click.echo(f"{out / name}: {'written' if name in changed else 'unchanged'}")


@cli.command()
@_count_option("--examples", 1, 200, "Sequences to run.")
@_count_option("--steps", 1, 30, "Maximum steps per sequence.")
@_count_option("--seed", 0, None, "Seed for a reproducible run (default: drawn, and printed).")
@click.option(
    "--machine",
    type=click.Choice(["core", "service", "both", *EXHAUSTIVE_MACHINES]),
    default="both",
    show_default=True,
    help="The core lockstep machine, the service machine over the real harness, or both;"
    " with --exhaustive: one of the checked machines (core: the manager; both: all).",
)
@click.option(
    "--exhaustive",
    type=click.Choice(["small", "medium"]),
    is_flag=False,
    flag_value="small",
    default=None,
    help="Instead: explore every state of the core machines in this scope (default small).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document as the report.")
@click.option(
    "--junit-xml",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write a JUnit XML report (one test case per invariant per machine).",
)
@click.option(
    "--cache-dir",
    default=None,
    metavar="DIR|off",
    help="Where Hypothesis keeps its files (default: the user cache directory; off: none).",
)
@click.option(
    "--allow-vacuous", is_flag=True, help="Do not fail on an invariant that was never checked."
)
def verify(
    *,
    examples: int,
    steps: int,
    seed: int | None,
    machine: str,
    as_json: bool,
    junit_xml: Path | None,
    cache_dir: str | None,
    allow_vacuous: bool,
    exhaustive: str | None,
) -> None:
    """Run the stateful machines and report how often each invariant was checked."""
    from dsh_subagent.cli.verify import default_cache_dir, run_verify

    if exhaustive is not None:
        from dsh_subagent.spec.modelcheck import MACHINES, run_exhaustive

        chosen = {"both": MACHINES, "core": ("manager",)}.get(machine, (machine,))
        if machine == "service":
            raise click.UsageError("--exhaustive checks the core machines, not the service")
        if not run_exhaustive(exhaustive, chosen, as_json=as_json, echo=click.echo):
            sys.exit(1)
        return
    if machine in EXHAUSTIVE_MACHINES:
        raise click.UsageError(f"--machine {machine} needs --exhaustive")

    passed = run_verify(
        examples=examples,
        steps=steps,
        seed=seed,
        machine=machine,
        as_json=as_json,
        junit_xml=junit_xml,
        cache_dir=cache_dir or str(default_cache_dir()),
        allow_vacuous=allow_vacuous,
    )
    if not passed:
        sys.exit(1)


def _message(err: SubagentError) -> str:
    """The error's message with its field named once."""
    if err.field is None or err.message.startswith(f"{err.field}:"):
        return err.message
    return f"{err.field}: {err.message}"


def _fail(code: str, message: str, status: int) -> NoReturn:
    click.echo(error_line(code, message), err=True)
    sys.exit(status)


def main() -> None:
    """Console-script entry point: run the CLI; every error is one line (module header)."""
    try:
        cli.main(prog_name="dsh-subagent", standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.exceptions.NoArgsIsHelpError as err:  # bare ``dsh-subagent``: the help
        click.echo(err.format_message())
        sys.exit(2)
    except click.UsageError as err:
        hint = f" (see '{err.ctx.command_path} --help')" if err.ctx is not None else ""
        _fail("USAGE", err.format_message() + hint, 2)
    except click.ClickException as err:
        _fail("ERROR", err.format_message(), 1)
    except SubagentError as err:
        _fail(err.code.value, _message(err), 1)
    except MissingExtra as err:
        _fail("MISSING_EXTRA", str(err), 2)
