"""The one error for an optional dependency that is not installed.

Theory of operation
-------------------
1. The base install carries only what the library needs at run time (attrs, jsonschema).
   The command line, the spec's charts, the verifier, the conformance suite and the optional
   providers each come with an extra (``pip install 'dsh-subagent[cli]'`` and so on).
2. A module that needs an extra's package raises ``MissingExtra`` when that package does not
   import: an ``ImportError`` whose message is one line naming the extra to install. The
   command line prints exactly that line and exits 2.
"""

from __future__ import annotations


class MissingExtra(ImportError):
    """``what`` needs ``package``, which the ``extra`` extra installs."""

    def __init__(self, what: str, package: str, extra: str) -> None:
        super().__init__(f"{what} needs {package}: pip install 'dsh-subagent[{extra}]'")
        self.extra = extra
        self.package = package
