"""The out-of-process provider base: remote one-shot children without a local session.

Theory of operation
-------------------
1. Every out-of-process provider advertises ``NO_START_CAPABILITIES`` (all four flags false)
   and has no ``prepare_continuable``, so it serves one-shot starts only and any request with
   a schema, depth cap, tool filter or persona is refused before ``start`` (OOP-1). It gets no
   delegated policy and has no local session, so it is absent from listing (OOP-9, POLICY-11).
2. A subclass supplies ``run(request, attempt)`` (the remote work, which streams text into
   ``attempt.push_text`` and honours ``attempt.signal``) and may override ``launch`` (the
   unpublished setup), ``teardown`` (release of the remote child), ``report_error`` (the error
   sink) and ``diagnostic_for`` (a sanitized failure fact, OOP-10).
3. ``start`` refuses an aborted signal, mints a fresh run id in the parent's namespace
   (``<parent>/<provider>-<uuid>``, ONE-6, ACP-6: unique across restarts too), awaits
   ``launch`` under the signal (a failure or an abort tears down, then rejects), and
   publishes with ``local_agent`` ``None``.
4. Settlement never rejects (OOP-6): a local cancellation wins over whatever the attempt then
   returns or raises (``aborted`` with the collected output); an attempt's own result stands;
   any other failure calls the error sink (its failures swallowed) and settles ``error`` with
   the collected output and a diagnostic limited to 4096 UTF-8 bytes (OOP-7).
5. The run is a ``DrivenRun``: ``dispose`` is memoized, cancels locally at once, tears down
   and waits for both teardown and the result (ONE-9).
6. Configuration checks (OOP-2..5): timing bounds positive and finite; a child working
   directory absolute and enterable, a configured one resolved against the launch directory,
   the parent's otherwise, never the process's own.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import math
import os
import uuid
from typing import Final

from dsh_subagent.adapters.providers.base import (
    DrivenRun,
    ResolvedStartRequest,
    aborted_before_publication,
    render_error,
)
from dsh_subagent.adapters.signals import AbortController, AbortSignal, race_abort
from dsh_subagent.core.errors import invalid
from dsh_subagent.core.jsonvalue import require_str
from dsh_subagent.core.output import (
    DIAGNOSTIC_LIMIT,
    TRUNCATION_SUFFIX,
    AssistantOutputFold,
    Output,
    limit_diagnostic,
)
from dsh_subagent.core.values import KnownStop, SessionId, SubagentCapabilities, SubagentResult

_log = logging.getLogger(__name__)

NO_START_CAPABILITIES: Final = SubagentCapabilities()


def require_positive_finite(value: object, name: str, prefix: str) -> float:
    """A configured timing bound: a finite number greater than 0 (OOP-2)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise invalid(name, f"{prefix}: {name} must be a positive finite number")
    return float(value)


def require_usable_cwd(path: str, *, prefix: str, source: str) -> str:
    """An absolute, existing directory this process may enter (OOP-3)."""
    if not os.path.isabs(path):
        raise invalid("cwd", f"{prefix}: {source} working directory {path!r} is not absolute")
    if not os.path.isdir(path) or not os.access(path, os.X_OK):
        raise invalid("cwd", f"{prefix}: {source} working directory {path!r} cannot be entered")
    return path


def validate_configured_cwd(value: str | None, *, prefix: str) -> str | None:
    """A configured working directory at load time, resolved and checked (OOP-4)."""
    if value is None:
        return None
    if not require_str(value, "cwd"):
        raise invalid("cwd", f"{prefix}: cwd is empty; omit the key to inherit the parent's")
    return require_usable_cwd(os.path.abspath(value), prefix=prefix, source="configured")


def resolve_child_cwd(configured: str | None, parent_cwd: str | None, *, prefix: str) -> str:
    """The configured override, else the parent session's directory, else an error (OOP-5)."""
    if configured is not None:
        return configured
    if parent_cwd is None:
        raise invalid("cwd", f"{prefix}: the parent session has no working directory")
    return require_usable_cwd(parent_cwd, prefix=prefix, source="parent session")


class Attempt:
    """One remote attempt: its local cancellation and the output collected so far."""

    def __init__(self) -> None:
        self._cancel = AbortController()
        self._fold = AssistantOutputFold()

    @property
    def signal(self) -> AbortSignal:
        """Aborted by local cancellation (the request signal or ``dispose``)."""
        return self._cancel.signal

    @property
    def cancelled(self) -> bool:
        return self._cancel.signal.aborted

    def cancel(self) -> None:
        self._cancel.abort()

    def push_text(self, text: str) -> None:
        """Collect streamed assistant text (ONE-12)."""
        self._fold = self._fold.push_text(text)

    def collected(self) -> Output:
        return self._fold.collect()


class OutOfProcessProvider(abc.ABC):
    """Base of providers whose child runs in another process (rule 2)."""

    capabilities: Final = NO_START_CAPABILITIES
    inherits_parent_context: Final = False

    def __init__(self, name: str) -> None:
        self.name: Final = require_str(name, "name", non_empty=True)

    def mint_run_id(self, parent: SessionId) -> str:
        """A fresh run id in ``parent``'s namespace (ONE-6, ACP-6)."""
        return f"{parent}/{self.name}-{uuid.uuid4().hex}"

    async def start(self, request: ResolvedStartRequest) -> OutOfProcessRun:
        if request.signal.aborted:
            raise aborted_before_publication()
        run = OutOfProcessRun(self, request, self.mint_run_id(request.request.parent.session_id))
        return await run.start()

    async def launch(self, request: ResolvedStartRequest, attempt: Attempt) -> None:
        """Unpublished setup (e.g. spawn the process); raise to reject the start."""
        return

    @abc.abstractmethod
    async def run(self, request: ResolvedStartRequest, attempt: Attempt) -> SubagentResult:
        """The remote work; should stop promptly once ``attempt.signal`` aborts."""

    async def teardown(self, attempt: Attempt) -> None:
        """Release the remote child (awaited by ``dispose`` and on a failed launch)."""
        return

    def report_error(self, error: BaseException) -> None:
        """The error sink for a failed attempt."""
        _log.warning("subagent provider %r attempt failed: %s", self.name, render_error(error))

    def diagnostic_for(self, error: BaseException) -> str | None:
        """A sanitized failure fact for ``result.diagnostic`` (never raw errors, OOP-10)."""
        return None


def settle_attempt(
    provider: OutOfProcessProvider, attempt: Attempt, outcome: SubagentResult | BaseException
) -> SubagentResult:
    """The result of a finished attempt (OOP-6)."""
    if attempt.cancelled:
        return SubagentResult(attempt.collected(), KnownStop.ABORTED)
    if isinstance(outcome, SubagentResult):
        return outcome
    with contextlib.suppress(Exception):  # the sink cannot change the settlement
        provider.report_error(outcome)
    diagnostic = provider.diagnostic_for(outcome)
    return SubagentResult(
        attempt.collected(),
        KnownStop.ERROR,
        diagnostic=None if diagnostic is None else limit_diagnostic(diagnostic),
    )


class OutOfProcessRun(DrivenRun):
    """A published remote run (``local_agent`` is always ``None``)."""

    def __init__(
        self, provider: OutOfProcessProvider, request: ResolvedStartRequest, run_id: str
    ) -> None:
        super().__init__(request, run_id)
        self._provider = provider
        self._id = run_id
        self._attempt = Attempt()

    @property
    def id(self) -> str:
        return self._id

    @property
    def local_agent(self) -> None:
        return None

    async def start(self) -> OutOfProcessRun:
        await self._publish(self._launch())
        self._spawn(self._drive())
        return self

    async def _launch(self) -> None:
        try:
            launch = self._provider.launch(self._request, self._attempt)
            await race_abort(launch, self._setup_abort.signal)
        except BaseException:
            self._attempt.cancel()
            await self._provider.teardown(self._attempt)
            raise

    async def _drive(self) -> None:
        outcome: SubagentResult | BaseException
        try:
            outcome = await self._provider.run(self._request, self._attempt)
        except (Exception, asyncio.CancelledError) as error:
            outcome = error
        self._settle(settle_attempt(self._provider, self._attempt, outcome))

    def _cancel_work(self) -> None:
        self._attempt.cancel()

    async def _release(self) -> None:
        await self._provider.teardown(self._attempt)


__all__ = [
    "DIAGNOSTIC_LIMIT",
    "NO_START_CAPABILITIES",
    "TRUNCATION_SUFFIX",
    "Attempt",
    "OutOfProcessProvider",
    "OutOfProcessRun",
    "limit_diagnostic",
    "require_positive_finite",
    "require_usable_cwd",
    "resolve_child_cwd",
    "settle_attempt",
]
