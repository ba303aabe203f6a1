"""Worked examples of porting the seam, shipped so the conformance suite can run against them.

``chat_completions`` puts the reference loop on a model behind a plain chat-completions-style
API (see ``docs/porting.md``).
"""
