"""How the stateful machines count their invariant checks, for ``dsh-subagent verify``.

Theory of operation
-------------------
1. A machine class mixes in ``CountedChecks`` and declares its own class-level ``totals`` and
   ``violated``, plus an instance ``checks`` counter. After a step it passes its findings
   (invariant ID -> violations) to ``assert_held``, which counts each check on the instance
   and on the class, remembers the IDs ever violated, then fails the step on a violation.
   ``verify`` reads the class counts; ``reset_counts`` forgets them before a run.
2. ``machine_settings`` is the one Hypothesis configuration ``verify`` runs every machine
   under: ``examples`` sequences of at most ``steps`` steps, no deadline, no example database,
   no health check (a run is judged by its invariant table, not by data-generation speed).
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from typing import ClassVar

from hypothesis import HealthCheck, settings


class CountedChecks:
    """Per-ID check counts of a stateful machine (rule 1)."""

    totals: ClassVar[collections.Counter[str]]
    """Checks per invariant ID across every instance since the last ``reset_counts``."""
    violated: ClassVar[set[str]]
    checks: collections.Counter[str]

    def assert_held(self, findings: Mapping[str, Sequence[str]]) -> None:
        """Count every check of ``findings`` and fail on the first violated invariant."""
        for inv_id, problems in findings.items():
            self.checks[inv_id] += 1
            self.totals[inv_id] += 1
            if problems:
                self.violated.add(inv_id)
            assert not problems, f"{inv_id}: {problems}"

    @classmethod
    def reset_counts(cls) -> None:
        """Forget the counts of earlier runs."""
        cls.totals.clear()
        cls.violated.clear()


def machine_settings(examples: int, steps: int) -> settings:
    """The settings ``verify`` runs a machine under (rule 2)."""
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
