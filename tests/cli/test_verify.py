"""``dsh-subagent verify``: a tiny run prints its tables; without Hypothesis, one line."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner

from dsh_subagent.cli.main import cli

# Runs the console entry point with Hypothesis made unimportable (``None`` in
# ``sys.modules`` makes every ``import hypothesis`` fail as if it were not installed).
_WITHOUT_HYPOTHESIS = """
import sys
sys.modules["hypothesis"] = None
sys.argv = ["dsh-subagent", "verify", "--examples", "1"]
from dsh_subagent.cli.main import main
main()
"""


def test_verify_without_hypothesis_names_the_extra_and_exits_2() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_HYPOTHESIS],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert lines == ["Error: verify needs Hypothesis: pip install 'dsh-subagent[verify]'"]


def test_verify_runs_the_core_machine_and_prints_its_invariant_table() -> None:
    result = CliRunner().invoke(
        cli,
        ["verify", "--machine", "core", "--examples", "2", "--steps", "3", "--seed", "1"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert "core lockstep machine" in result.output
    assert "VIOLATED" not in result.output
