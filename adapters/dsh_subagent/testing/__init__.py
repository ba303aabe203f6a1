"""Shipped test machines: Hypothesis drives the real service, for ``dsh-subagent verify``.

Theory of operation
-------------------
1. ``service_machine.ServiceMachine`` runs the real ``SubagentService`` over the reference
   harness and SQLite with the fault plans of ``service_faults``, checking the spec's
   invariant predicates after every step. ``stateful_tests/`` runs it under pytest and
   ``dsh-subagent verify`` from the command line.
2. It sits above both adapters and spec, so it may import both; nothing in core, adapters or
   spec imports it (an import-linter contract). It needs Hypothesis: install the ``verify``
   extra (``pip install 'dsh-subagent[verify]'``).
"""
