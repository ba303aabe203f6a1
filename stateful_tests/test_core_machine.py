"""The core lockstep machine (``dsh_subagent.spec.machines.CoreMachine``) under pytest."""

from __future__ import annotations

from dsh_subagent.spec.machines import CoreMachine

CoreMachineTest = CoreMachine.TestCase
