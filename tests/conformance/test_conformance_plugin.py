"""The conformance plugin as a harness author meets it: run in a subprocess, as in their CI.

Each test runs ``pytest --pyargs dsh_subagent.conformance`` (a few of its tests, selected with
``-k``) in a scratch directory; ``broken_harness`` (next to this file) is importable there.
``--noconftest`` keeps this checkout's own ``conftest.py`` (an ancestor of the editable
install's package directory) out, as it is out of an installed package.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
EXTRA = "the conformance suite needs Hypothesis: pip install 'dsh-subagent[conformance]'"

# A package that shadows Hypothesis: importing it fails as if Hypothesis were not installed.
_NO_HYPOTHESIS = "raise ModuleNotFoundError(\"No module named 'hypothesis'\", name='hypothesis')\n"


def conformance(tmp_path: Path, *args: str, hypothesis: bool = True) -> tuple[int, str, float]:
    """Run the suite with ``args``; return its exit status, its output and the seconds taken."""
    path = [str(HERE)]
    if not hypothesis:
        shadow = tmp_path / "shadow" / "hypothesis"
        shadow.mkdir(parents=True)
        (shadow / "__init__.py").write_text(_NO_HYPOTHESIS)
        path.insert(0, str(shadow.parent))
        args = (*args, "-p", "no:hypothesispytest")
    began = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--noconftest",
            *args,
            "--pyargs",
            "dsh_subagent.conformance",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(path)},
    )
    return done.returncode, done.stdout + done.stderr, time.monotonic() - began


def test_a_harness_that_never_reaches_a_gate_fails_within_the_bound_naming_it(
    tmp_path: Path,
) -> None:
    status, output, seconds = conformance(
        tmp_path,
        "--dsh-harness=broken_harness:open_broken",
        "--dsh-timeout=2",
        "-k",
        "interrupt_with_keep_inbox",
    )
    assert status == 1, output
    assert "1 failed" in output
    assert "TimeBoundExceeded: not reached within 2s (--dsh-timeout)" in output
    assert "in Gate.reached: await self._reached.wait()" in output
    assert "await gate.reached()" in output
    assert seconds < 60


def test_the_reference_harness_passes_the_selected_tests(tmp_path: Path) -> None:
    status, output, _ = conformance(tmp_path, "-k", "harness_32_followup or harness_9_turn_end")
    assert status == 0, output
    assert "2 passed" in output


def test_a_bad_dsh_harness_is_one_usage_error(tmp_path: Path) -> None:
    for value, reason in [
        ("no_colon", "expected module:factory, got 'no_colon'"),
        ("no_such_module_xyz:f", "cannot import 'no_such_module_xyz'"),
        ("broken_harness:missing", "'broken_harness' has no attribute 'missing'"),
    ]:
        status, output, _ = conformance(tmp_path, f"--dsh-harness={value}")
        assert status == 4, output
        errors = [line for line in output.splitlines() if "--dsh-harness" in line]
        assert len(errors) == 1, output
        assert errors[0].startswith(f"ERROR: --dsh-harness: {reason}"), output


def test_a_bad_dsh_timeout_is_a_usage_error(tmp_path: Path) -> None:
    status, output, _ = conformance(tmp_path, "--dsh-timeout=0")
    assert status == 4, output
    assert "--dsh-timeout" in output


def test_without_hypothesis_the_stateful_test_fails_with_one_line_naming_the_extra(
    tmp_path: Path,
) -> None:
    status, output, _ = conformance(
        tmp_path, "-k", "harness_11_every or harness_32_followup", hypothesis=False
    )
    assert status == 1, output
    assert "1 failed, 1 passed" in output
    assert "error" not in output.lower()
    assert output.count(EXTRA) >= 1
