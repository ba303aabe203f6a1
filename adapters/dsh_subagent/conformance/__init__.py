"""A conformance suite for harnesses that carry the subagent seam, shipped as a pytest plugin.

Run ``pytest --pyargs dsh_subagent.conformance`` to check the reference harness, or
``pytest --pyargs dsh_subagent.conformance --dsh-harness=my.module:factory`` to check yours;
see ``support.py`` for the factory's contract and ``docs/porting.md`` for a worked example.
The package imports nothing at import time (the plugin loads in every pytest session); import
``dsh_subagent.conformance.support`` for ``HarnessFactory``, ``ModelBook`` and the default
``reference_harness``.
"""
