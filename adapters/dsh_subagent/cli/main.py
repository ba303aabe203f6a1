"""``dsh-subagent``: the demo, the verifier, the diagrams and the catalog, from one command.

Theory of operation
-------------------
1. This is the application layer: it may import core, adapters and spec; nothing imports it.
2. Every subcommand prints what the library reports, never canned text. User mistakes (a
   missing or corrupt ``--db``, an unknown id) print one clear line and exit non-zero.
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import click

from dsh_subagent.core.errors import SubagentError


def _version() -> str:
    try:
        return version("dsh-subagent")
    except PackageNotFoundError:  # pragma: no cover - only when run from a bare checkout
        return "0+unknown"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(_version(), prog_name="dsh-subagent")
def cli() -> None:
    """The subagent seam: delegation to child agents with verified lifecycle invariants."""


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


def main() -> None:
    """Console-script entry point: run the CLI, turning seam errors into one clear line."""
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.ClickException as err:
        err.show()
        sys.exit(err.exit_code)
    except SubagentError as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(2)
