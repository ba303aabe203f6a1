"""The ``dsh-subagent`` command line: the application layer over core, adapters and spec."""
