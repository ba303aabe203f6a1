"""The activity lockstep machine (``dsh_subagent.spec.activity_machine``) under pytest.

At least 300 sequences of up to 40 steps in every profile (a few seconds: the machine is pure).
"""

from __future__ import annotations

from hypothesis import settings

from dsh_subagent.spec.activity_machine import ActivityMachine

_profile = settings()  # the loaded profile (see conftest.py)
ActivityMachine.TestCase.settings = settings(
    parent=_profile,
    max_examples=max(300, _profile.max_examples),
    stateful_step_count=max(40, _profile.stateful_step_count),
    deadline=None,
)
ActivityMachineTest = ActivityMachine.TestCase
