"""The service machine on PostgreSQL: the same seam, faults and invariants as on SQLite.

Few examples (30 runs of up to 20 steps, the ``ci`` profile's derandomised draws): each run
starts on an emptied database, so the budget goes to opening stores, not to exploring; the
SQLite run (``test_service_machine.py``) explores. About 30 s on 2 loaded cores.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from dsh_subagent.testing.service_machine import ServiceMachine


def test_pg_1_the_service_machine_keeps_its_invariants_on_postgres(postgres_db: str) -> None:
    from dsh_subagent.testing.postgres_faults import PostgresStore  # needs psycopg

    class OnPostgres(ServiceMachine):
        def __init__(self) -> None:
            super().__init__(PostgresStore(postgres_db))

    ServiceMachine.reset_counts()
    run_state_machine_as_test(
        OnPostgres,
        settings=settings(
            parent=settings.get_profile("ci"),
            max_examples=30,
            stateful_step_count=20,
            deadline=None,
        ),
    )
    assert set(ServiceMachine.totals) == set(ServiceMachine.CHECKED)
    assert not ServiceMachine.violated
