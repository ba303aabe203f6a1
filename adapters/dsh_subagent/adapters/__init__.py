"""The asyncio adapters: the seam (service, continuation manager, catalog, providers, tools)
and, in ``dsh_subagent.adapters.reference``, the reference harness it runs on.

The seam reaches a harness only through ``dsh_subagent.adapters.protocols``. Users import the
public API from ``dsh_subagent``; the modules here are its implementation.
"""
