"""The pure, IO-free core of the subagent seam.

Values, errors and transition functions only: no asyncio, clocks, randomness or IO.
Ids and times arrive as event fields. See ``docs/spec.md`` for the rules it implements.
"""
