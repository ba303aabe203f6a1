"""The reference asyncio harness: an agent loop, a session store and registry, persistence
backends (in-memory and SQLite), a scripted model, a tool registry, prompt composition, the
``ReferenceHarness`` facade, and pydantic-ai as a second child loop.

The seam (the rest of ``dsh_subagent.adapters``) reaches it only through
``dsh_subagent.adapters.protocols``; an import-linter contract forbids the other direction.
"""
