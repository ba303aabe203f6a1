"""Continuable-child setup contributions: install, commit, release, revoke (SETUP-*).

Theory of operation
-------------------
1. A contribution is a synchronous ``(child_scope) -> disposer``; it sees only the child's
   unpublished scope, never the parent (SETUP-11). ``register`` keeps contributions in
   registration order and returns an idempotent disposer, optionally tied to an owner
   ``Scope`` (the registering plugin's lifetime) (SETUP-1).
2. ``apply(child_scope)`` runs inside the unpublished creation window of a fresh creation or
   a cold resume: it iterates a snapshot of the registrations, skips removed ones, installs
   each and records the installation in its registration, in the per-child index and in the
   batch (SETUP-2). An installer that revoked its own registration gets its installation
   released at once, which invalidates the batch (SETUP-3). An installer that raises rolls
   the batch back (every release attempted, secondary failures swallowed) and the original
   error propagates, so the child is never published (SETUP-4).
3. After a successful apply that installed anything, the child scope gets a cleanup
   releasing every installation left for that child (SETUP-5). ``apply`` returns a
   ``SetupCommit``; its ``commit()`` is called synchronously right before publication and
   raises ``ACTIVATION_SETUP_REVOKED`` if the batch was invalidated, else marks the
   installations resident (SETUP-6).
4. Removing a registration marks it removed first (closing it to applies already iterating
   a snapshot), drops it from the list and releases every installation, resident or still
   provisioning; releasing a provisioning one invalidates its batch (SETUP-7). Each
   installation is released at most once, whichever owner comes first (SETUP-8).
5. Batch releases attempt every installation, then raise one
   ``ACTIVATION_SETUP_RELEASE_FAILED`` naming the count and each failure (SETUP-9).
6. A new registration reaches only future applies; child scopes are independent (SETUP-10).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable

import attrs

from dsh_subagent.adapters.signals import Scope
from dsh_subagent.core.errors import ErrorCode, SubagentError, invalid

SetupDisposer = Callable[[], None]
SetupContribution = Callable[[Scope], SetupDisposer]


@attrs.define(eq=False)
class _Batch:
    """One apply's installations until commit."""

    installations: list[_Installation] = attrs.field(factory=list)
    invalidated: bool = False


@attrs.define(eq=False)
class _Registration:
    contribution: SetupContribution
    removed: bool = False
    installations: dict[_Installation, None] = attrs.field(factory=dict)


@attrs.define(eq=False)
class _Installation:
    registration: _Registration
    child_scope: Scope
    dispose: SetupDisposer
    batch: _Batch | None
    released: bool = False


@attrs.frozen(eq=False)
class SetupCommit:
    """Returned by ``apply``; call ``commit()`` immediately before publication (SETUP-6)."""

    _batch: _Batch

    def commit(self) -> None:
        """Mark the installations resident, or raise ``ACTIVATION_SETUP_REVOKED``."""
        if self._batch.invalidated:
            raise SubagentError(
                ErrorCode.ACTIVATION_SETUP_REVOKED,
                "a continuable setup contribution was revoked while the child was being "
                "built; the child was not established",
            )
        for installation in self._batch.installations:
            installation.batch = None


class ContinuableSetupRegistry:
    """Setup contributions composed into every continuable child's creation window."""

    def __init__(self) -> None:
        self._registrations: dict[_Registration, None] = {}
        self._by_child: dict[Scope, dict[_Installation, None]] = {}

    def register(
        self, contribution: SetupContribution, *, owner: Scope | None = None
    ) -> SetupDisposer:
        """Add ``contribution``; the idempotent disposer revokes it everywhere (SETUP-1, -7)."""
        if not callable(contribution):
            raise invalid("contribution", "must be a callable (child_scope) -> disposer")
        if owner is not None and (not isinstance(owner, Scope) or owner.disposed):
            raise invalid("owner", "must be a live Scope")
        registration = _Registration(contribution)
        self._registrations[registration] = None

        def remove() -> None:
            if registration.removed:
                return
            registration.removed = True
            del self._registrations[registration]
            self._release_all(list(registration.installations), "contribution removal")

        if owner is not None:
            return owner.defer(remove)
        return remove

    def apply(self, child_scope: Scope) -> SetupCommit:
        """Install every live contribution into an unpublished child scope (SETUP-2..5)."""
        if not isinstance(child_scope, Scope) or child_scope.disposed:
            raise invalid("child_scope", "must be a live Scope")
        batch = _Batch()
        try:
            for registration in list(self._registrations):
                if not registration.removed:
                    self._install(registration, child_scope, batch)
        except BaseException:
            # The installer's failure stays authoritative (SETUP-4).
            with contextlib.suppress(SubagentError):
                self._release_all(batch.installations, "setup rollback")
            raise
        if child_scope in self._by_child:
            # Nothing can be installed into this scope later (SETUP-10), so a scope without
            # installations needs no cleanup (and keeps no closure while the child lives).
            child_scope.defer(lambda: self._release_child(child_scope))
        return SetupCommit(batch)

    def installed(self, child_scope: Scope) -> int:
        """How many installations ``child_scope`` currently holds."""
        return len(self._by_child.get(child_scope, {}))

    def _install(self, registration: _Registration, child_scope: Scope, batch: _Batch) -> None:
        dispose = registration.contribution(child_scope)
        if not callable(dispose):
            raise invalid("contribution", "must return a disposer")
        installation = _Installation(registration, child_scope, dispose, batch)
        registration.installations[installation] = None
        self._by_child.setdefault(child_scope, {})[installation] = None
        batch.installations.append(installation)
        if registration.removed:  # the installer revoked its own registration (SETUP-3)
            self._release(installation)

    def _release_child(self, child_scope: Scope) -> None:
        remaining = list(self._by_child.get(child_scope, {}))
        self._release_all(remaining, "child scope disposal")

    def _release_all(self, installations: Iterable[_Installation], during: str) -> None:
        failures: list[Exception] = []
        for installation in installations:
            try:
                self._release(installation)
            except Exception as error:
                failures.append(error)
        if failures:
            details = "; ".join(f"{type(error).__name__}: {error}" for error in failures)
            raise SubagentError(
                ErrorCode.ACTIVATION_SETUP_RELEASE_FAILED,
                f"continuable setup {during} failed to release {len(failures)} "
                f"installation(s): {details}",
                cause=failures[0],
            )

    def _release(self, installation: _Installation) -> None:
        if installation.released:
            return
        installation.released = True
        del installation.registration.installations[installation]
        indexed = self._by_child[installation.child_scope]
        del indexed[installation]
        if not indexed:
            del self._by_child[installation.child_scope]
        if installation.batch is not None:
            installation.batch.invalidated = True
        installation.dispose()


__all__ = ["ContinuableSetupRegistry", "SetupCommit", "SetupContribution", "SetupDisposer"]
