"""A conformance suite for harnesses that carry the subagent seam, shipped as a pytest plugin.

Run ``pytest --pyargs dsh_subagent.conformance`` to check the reference harness, or
``pytest --pyargs dsh_subagent.conformance --dsh-harness=my.module:factory`` to check yours;
see ``plugin.py`` for the factory's contract and ``docs/porting.md`` for a worked example.
"""

from dsh_subagent.conformance.plugin import HarnessFactory, ModelBook, reference_harness

__all__ = ["HarnessFactory", "ModelBook", "reference_harness"]
