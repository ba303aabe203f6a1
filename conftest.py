"""Hypothesis settings profiles, registered in one place for every test tree.

Choose one with ``HYPOTHESIS_PROFILE`` (``dev`` locally, ``ci`` under CI, ``soak`` for long
exploration). ``ci`` is derandomised and sized so the default suite stays well under 15
minutes on a 2-core machine.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import coverage
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "dev",
    max_examples=100,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "ci",
    max_examples=100,
    stateful_step_count=30,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "soak",
    max_examples=5_000,
    stateful_step_count=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

_default = "ci" if os.environ.get("CI") else "dev"
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", _default))

# The throwaway PostgreSQL cluster's fixtures (postgres_cluster, postgres_db).
pytest_plugins = ("dsh_subagent.testing.postgres",)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print what the model-checking tests recorded (state counts, planted bugs' shortest
    traces) after the run: ``record_property("model check", text)`` survives xdist workers."""
    lines = [
        str(value)
        for report in terminalreporter.stats.get("passed", [])
        for name, value in getattr(report, "user_properties", ())
        if name == "model check"
    ]
    if lines:
        terminalreporter.write_sep("-", "model checks")
        for line in sorted(lines):
            terminalreporter.write_line(line)


@pytest.fixture(autouse=True)
def _pause_coverage_for_no_cover_tests(request: pytest.FixtureRequest) -> Iterator[None]:
    """Pause coverage over a test marked ``no_cover``: pytest-cov's own pause misses the
    collectors an xdist worker runs, and branch tracing makes the pure-core searches several
    times slower. Every running collector stops (they stack) and restarts in order after."""
    if request.node.get_closest_marker("no_cover") is None:
        yield
        return
    stopped: list[coverage.Coverage] = []
    while (running := coverage.Coverage.current()) is not None:
        running.stop()
        stopped.append(running)
    try:
        yield
    finally:
        for each in reversed(stopped):
            each.start()
