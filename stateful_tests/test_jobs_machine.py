"""The job registry's lockstep machine (``dsh_subagent.spec.jobs_machine.JobsMachine``).

At least 200 sequences of up to 30 steps in every profile (pure core and chart: a few seconds);
larger profiles such as ``soak`` run more.
"""

from __future__ import annotations

from hypothesis import settings

from dsh_subagent.spec.jobs_machine import JobsMachine

_profile = settings()  # the loaded profile (see conftest.py)
JobsMachine.TestCase.settings = settings(
    parent=_profile,
    max_examples=max(200, _profile.max_examples),
    stateful_step_count=max(30, _profile.stateful_step_count),
    deadline=None,
)
JobsMachineTest = JobsMachine.TestCase
