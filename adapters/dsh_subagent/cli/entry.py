"""The ``dsh-subagent`` console script: check the ``cli`` extra, then run the command line.

Theory of operation
-------------------
1. The base install has no click or rich. This module imports neither, so a missing ``cli``
   extra is one line on stderr naming it (``MissingExtra``) and exit status 2, not a
   traceback from the console script's import.
"""

from __future__ import annotations

import importlib.util
import sys

from dsh_subagent.core.extras import MissingExtra

CLI_PACKAGES = ("click", "rich")


def error_line(code: str, message: str) -> str:
    """The command line's one error format."""
    return f"error: {code}: {message}"


def main() -> None:
    """Run ``dsh_subagent.cli.main`` when the ``cli`` extra is installed."""
    for package in CLI_PACKAGES:
        if importlib.util.find_spec(package) is None:
            missing = MissingExtra("the dsh-subagent command", package, "cli")
            print(error_line("MISSING_EXTRA", str(missing)), file=sys.stderr)
            sys.exit(2)
    from dsh_subagent.cli.main import main as run

    run()
