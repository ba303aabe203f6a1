"""Async adapters over the pure core: harness protocols, reference loop, service, tools, CLI."""
