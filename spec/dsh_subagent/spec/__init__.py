"""The executable specification: charts, invariant predicates and the traceability table."""
