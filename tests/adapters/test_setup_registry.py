"""Continuable setup contributions: install, commit, release and revoke (SETUP-*)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh_subagent.adapters.setup_registry import (
    ContinuableSetupRegistry,
    SetupContribution,
    SetupDisposer,
)
from dsh_subagent.adapters.signals import Scope
from dsh_subagent.core.errors import ErrorCode, SubagentError


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(main())  # type: ignore[arg-type]


class Ledger:
    """Records installs and releases as ``("install"|"release", name, scope number)``."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, str, int]] = []
        self._scopes: dict[Scope, int] = {}

    def number(self, scope: Scope) -> int:
        return self._scopes.setdefault(scope, len(self._scopes))

    def contribution(self, name: str, *, fail_release: bool = False) -> SetupContribution:
        def install(scope: Scope) -> SetupDisposer:
            number = self.number(scope)
            self.entries.append(("install", name, number))

            def release() -> None:
                self.entries.append(("release", name, number))
                if fail_release:
                    raise OSError(f"{name} release failed")

            return release

        return install

    def of(self, kind: str) -> list[tuple[str, int]]:
        return [(name, scope) for entry, name, scope in self.entries if entry == kind]


def error_of(action: Callable[[], object]) -> SubagentError:
    with pytest.raises(SubagentError) as error:
        action()
    return error.value


# --------------------------------------------------------------------------- SETUP-1, -2


def test_setup_1_contributions_apply_in_registration_order_with_idempotent_disposers() -> None:
    registry, ledger = ContinuableSetupRegistry(), Ledger()
    removers = [registry.register(ledger.contribution(name)) for name in ["a", "b", "c"]]
    scope = Scope()
    registry.apply(scope).commit()
    assert ledger.of("install") == [("a", 0), ("b", 0), ("c", 0)]
    removers[1]()
    removers[1]()
    assert ledger.of("release") == [("b", 0)]
    assert registry.installed(scope) == 2


def test_setup_1_owner_scope_ties_the_registration_to_the_plugin_lifetime() -> None:
    async def main() -> None:
        registry, ledger = ContinuableSetupRegistry(), Ledger()
        plugin = Scope()
        remove = registry.register(ledger.contribution("tool"), owner=plugin)
        registry.apply(Scope()).commit()
        await plugin.dispose()
        remove()
        registry.apply(Scope()).commit()
        assert ledger.entries == [("install", "tool", 0), ("release", "tool", 0)]

    run(main)


def test_setup_1_bad_arguments_are_refused_before_any_effect() -> None:
    async def main() -> None:
        registry, ledger = ContinuableSetupRegistry(), Ledger()
        gone = Scope()
        await gone.dispose()
        cases: list[tuple[Callable[[], object], str]] = [
            (lambda: registry.register("nope"), "contribution"),  # type: ignore[arg-type]
            (lambda: registry.register(ledger.contribution("a"), owner=gone), "owner"),
            (lambda: registry.register(ledger.contribution("a"), owner="x"), "owner"),  # type: ignore[arg-type]
            (lambda: registry.apply(gone), "child_scope"),
            (lambda: registry.apply("scope"), "child_scope"),  # type: ignore[arg-type]
        ]
        for action, field in cases:
            error = error_of(action)
            assert (error.code, error.field) == (ErrorCode.INVALID_ARGUMENT, field)
        registry.apply(Scope()).commit()
        assert ledger.entries == []

    run(main)


def test_setup_2_apply_skips_registrations_removed_during_the_same_apply() -> None:
    registry, ledger = ContinuableSetupRegistry(), Ledger()
    removers: list[SetupDisposer] = []
    install_b = ledger.contribution("b")

    def first(scope: Scope) -> SetupDisposer:
        removers[0]()  # revokes "b", which this apply already snapshotted
        return ledger.contribution("a")(scope)

    registry.register(first)
    removers.append(registry.register(install_b))
    scope = Scope()
    registry.apply(scope).commit()
    assert ledger.of("install") == [("a", 0)]
    assert registry.installed(scope) == 1


# --------------------------------------------------------------------------- SETUP-3 .. SETUP-6


def test_setup_3_an_installer_revoking_itself_is_released_and_blocks_publication() -> None:
    registry, ledger = ContinuableSetupRegistry(), Ledger()
    removers: list[SetupDisposer] = []

    def self_revoking(scope: Scope) -> SetupDisposer:
        removers[0]()
        return ledger.contribution("self")(scope)

    removers.append(registry.register(self_revoking))
    scope = Scope()
    commit = registry.apply(scope)
    assert ledger.entries == [("install", "self", 0), ("release", "self", 0)]
    assert registry.installed(scope) == 0
    assert error_of(commit.commit).code is ErrorCode.ACTIVATION_SETUP_REVOKED


def test_setup_4_a_failing_installer_rolls_back_the_batch_and_propagates() -> None:
    registry, ledger = ContinuableSetupRegistry(), Ledger()
    registry.register(ledger.contribution("a", fail_release=True))
    registry.register(ledger.contribution("b"))

    def broken(scope: Scope) -> SetupDisposer:
        raise ValueError("installer failed")

    registry.register(broken)
    scope = Scope()
    with pytest.raises(ValueError, match="installer failed"):
        registry.apply(scope)
    assert ledger.of("release") == [("a", 0), ("b", 0)]  # all attempted despite a's failure
    assert registry.installed(scope) == 0


def test_setup_4_rollback_does_not_release_a_revoked_installation_twice() -> None:
    registry, ledger = ContinuableSetupRegistry(), Ledger()
    removers: list[SetupDisposer] = []

    def self_revoking(scope: Scope) -> SetupDisposer:
        removers[0]()
        return ledger.contribution("self")(scope)

    def broken(scope: Scope) -> SetupDisposer:
        raise ValueError("installer failed")

    removers.append(registry.register(self_revoking))
    registry.register(broken)
    with pytest.raises(ValueError, match="installer failed"):
        registry.apply(Scope())
    assert ledger.of("release") == [("self", 0)]


def test_setup_4_an_installer_without_a_disposer_is_a_failed_setup() -> None:
    registry, ledger = ContinuableSetupRegistry(), Ledger()
    registry.register(ledger.contribution("a"))
    registry.register(lambda scope: None)  # type: ignore[arg-type,return-value]
    error = error_of(lambda: registry.apply(Scope()))
    assert (error.code, error.field) == (ErrorCode.INVALID_ARGUMENT, "contribution")
    assert ledger.of("release") == [("a", 0)]


def test_setup_5_child_scope_disposal_releases_its_installations() -> None:
    async def main() -> None:
        registry, ledger = ContinuableSetupRegistry(), Ledger()
        registry.register(ledger.contribution("a"))
        registry.register(ledger.contribution("b"))
        child = Scope()
        registry.apply(child).commit()
        await child.dispose()
        assert ledger.of("release") == [("a", 0), ("b", 0)]
        assert registry.installed(child) == 0

    run(main)


def test_setup_6_commit_fails_when_a_contribution_was_revoked_before_publication() -> None:
    async def main() -> None:
        registry, ledger = ContinuableSetupRegistry(), Ledger()
        remove = registry.register(ledger.contribution("a"))
        registry.register(ledger.contribution("b"))
        child = Scope()
        commit = registry.apply(child)
        remove()
        assert ledger.of("release") == [("a", 0)]
        assert error_of(commit.commit).code is ErrorCode.ACTIVATION_SETUP_REVOKED
        await child.dispose()  # creation rolls back: the rest is released with the scope
        assert ledger.of("release") == [("a", 0), ("b", 0)]

    run(main)


def test_setup_6_commit_marks_installations_resident() -> None:
    registry, ledger = ContinuableSetupRegistry(), Ledger()
    remove = registry.register(ledger.contribution("a"))
    commit = registry.apply(Scope())
    commit.commit()
    remove()  # revoking a resident installation does not reopen the finished commit
    commit.commit()
    assert ledger.of("release") == [("a", 0)]


# --------------------------------------------------------------------------- SETUP-7 .. SETUP-11


def test_setup_7_removal_revokes_every_resident_and_provisioning_installation() -> None:
    registry, ledger = ContinuableSetupRegistry(), Ledger()
    remove = registry.register(ledger.contribution("grant"))
    first, second, provisioning = Scope(), Scope(), Scope()
    registry.apply(first).commit()
    registry.apply(second).commit()
    pending = registry.apply(provisioning)
    remove()
    assert ledger.of("release") == [("grant", 0), ("grant", 1), ("grant", 2)]
    assert error_of(pending.commit).code is ErrorCode.ACTIVATION_SETUP_REVOKED
    registry.apply(Scope()).commit()
    assert len(ledger.of("install")) == 3


@pytest.mark.parametrize("scope_first", [False, True])
def test_setup_8_each_installation_is_released_once_in_either_order(scope_first: bool) -> None:
    async def main() -> None:
        registry, ledger = ContinuableSetupRegistry(), Ledger()
        remove = registry.register(ledger.contribution("a"))
        child = Scope()
        registry.apply(child).commit()
        if scope_first:
            await child.dispose()
            remove()
        else:
            remove()
            await child.dispose()
        assert ledger.of("release") == [("a", 0)]

    run(main)


def test_setup_9_removal_attempts_every_release_then_raises_once() -> None:
    registry, ledger = ContinuableSetupRegistry(), Ledger()
    remove = registry.register(ledger.contribution("flaky", fail_release=True))
    for _ in range(3):
        registry.apply(Scope()).commit()
    error = error_of(remove)
    assert error.code is ErrorCode.ACTIVATION_SETUP_RELEASE_FAILED
    assert "3 installation(s)" in error.message
    assert isinstance(error.cause, OSError)
    assert ledger.of("release") == [("flaky", 0), ("flaky", 1), ("flaky", 2)]


def test_setup_9_child_scope_release_failure_is_reported() -> None:
    async def main() -> None:
        registry, ledger = ContinuableSetupRegistry(), Ledger()
        registry.register(ledger.contribution("flaky", fail_release=True))
        registry.register(ledger.contribution("fine"))
        child = Scope()
        registry.apply(child).commit()
        with pytest.raises(SubagentError) as error:
            await child.dispose()
        assert error.value.code is ErrorCode.ACTIVATION_SETUP_RELEASE_FAILED
        assert "1 installation(s)" in error.value.message
        assert ledger.of("release") == [("flaky", 0), ("fine", 0)]

    run(main)


def test_setup_10_new_grants_wait_for_the_next_activation_and_scopes_are_independent() -> None:
    async def main() -> None:
        registry, ledger = ContinuableSetupRegistry(), Ledger()
        registry.register(ledger.contribution("old"))
        resident = Scope()
        registry.apply(resident).commit()
        registry.register(ledger.contribution("new"))
        assert registry.installed(resident) == 1
        later = Scope()
        registry.apply(later).commit()
        await resident.dispose()
        assert ledger.of("release") == [("old", 0)]
        assert registry.installed(later) == 2

    run(main)


def test_setup_11_a_contribution_sees_only_the_child_scope_on_every_activation() -> None:
    async def main() -> None:
        registry = ContinuableSetupRegistry()
        seen: list[tuple[object, ...]] = []

        def contribution(*args: Scope) -> SetupDisposer:
            seen.append(args)
            return lambda: None

        registry.register(contribution)
        fresh, resumed = Scope(), Scope()
        registry.apply(fresh).commit()
        await fresh.dispose()
        registry.apply(resumed).commit()  # a cold resume installs again, into the new scope
        assert seen == [(fresh,), (resumed,)]

    run(main)


# --------------------------------------------------------------------------- property

operations = st.lists(
    st.tuples(
        st.sampled_from(["register", "apply", "commit", "remove", "dispose"]), st.integers(0, 5)
    ),
    max_size=40,
)


@given(operations)
def test_setup_8_every_installation_is_released_exactly_once_whatever_the_order(
    steps: list[tuple[str, int]],
) -> None:
    async def main() -> None:
        registry, ledger = ContinuableSetupRegistry(), Ledger()
        removers: list[SetupDisposer] = []
        scopes: list[Scope] = []
        commits: list[Callable[[], None]] = []
        refusals: set[ErrorCode] = set()
        for index, (operation, pick) in enumerate(steps):
            if operation == "register":
                removers.append(registry.register(ledger.contribution(f"c{index}")))
            elif operation == "apply":
                scope = Scope()
                scopes.append(scope)
                commits.append(registry.apply(scope).commit)
            elif operation == "commit" and commits:
                try:
                    commits[pick % len(commits)]()
                except SubagentError as error:
                    refusals.add(error.code)
            elif operation == "remove" and removers:
                removers[pick % len(removers)]()
            elif operation == "dispose" and scopes:
                await scopes[pick % len(scopes)].dispose()
        for remove in removers:
            remove()
        for scope in scopes:
            await scope.dispose()
        installs, releases = ledger.of("install"), ledger.of("release")
        assert sorted(installs) == sorted(releases)
        assert len(set(releases)) == len(releases)
        assert refusals <= {ErrorCode.ACTIVATION_SETUP_REVOKED}

    run(main)
