"""dsh-subagent: a formally specified sub-agent delegation seam for Python agent harnesses.

Everything a harness author needs is importable from here::

    from dsh_subagent import ReferenceHarness, StartRequest, TextBlock

Names load lazily, on first use: ``import dsh_subagent.core`` stays free of the adapters
(the pure core imports no asyncio), and importing this package costs nothing until a name is
used; ``PostgresPersistence`` needs the ``postgres`` extra, and only its first use imports
psycopg (without it, that use raises ``MissingExtra`` naming the extra). The groups below
follow the layers: the pure values and errors (``dsh_subagent.core``), the seam (service,
providers, tools, harness protocols), and the reference harness.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING, Any

# One import name over three source roots (core/, adapters/, spec/): this package's path
# spans every ``dsh_subagent`` directory on sys.path.
__path__ = pkgutil.extend_path(__path__, __name__)

_EXPORTS: dict[str, str] = {
    # the pure core: values and errors
    "AgentOptions": "dsh_subagent.core.values",
    "BaseSource": "dsh_subagent.core.values",
    "BaseSourceKind": "dsh_subagent.core.values",
    "Budget": "dsh_subagent.core.budget",
    "ChildRow": "dsh_subagent.core.listing",
    "Content": "dsh_subagent.core.values",
    "CoordinatorSource": "dsh_subagent.core.values",
    "DataBlock": "dsh_subagent.core.values",
    "DescendantRow": "dsh_subagent.core.listing",
    "ErrorCode": "dsh_subagent.core.errors",
    "JsonObject": "dsh_subagent.core.values",
    "JsonValue": "dsh_subagent.core.values",
    "KnownStop": "dsh_subagent.core.values",
    "ListingDiagnostic": "dsh_subagent.core.listing",
    "ListingRow": "dsh_subagent.core.listing",
    "MessageId": "dsh_subagent.core.values",
    "Mode": "dsh_subagent.core.values",
    "ReportDelivery": "dsh_subagent.core.manager.events",
    "RunEndInfo": "dsh_subagent.core.lifecycle",
    "RunStartInfo": "dsh_subagent.core.lifecycle",
    "SessionEvent": "dsh_subagent.core.values",
    "SessionHeader": "dsh_subagent.core.values",
    "SessionId": "dsh_subagent.core.values",
    "StopReason": "dsh_subagent.core.values",
    "SubagentCapabilities": "dsh_subagent.core.values",
    "SubagentError": "dsh_subagent.core.errors",
    "SubagentIntent": "dsh_subagent.core.values",
    "SubagentResult": "dsh_subagent.core.values",
    "SubagentSettledSource": "dsh_subagent.core.values",
    "TextBlock": "dsh_subagent.core.values",
    "ToolFilter": "dsh_subagent.core.values",
    "UserMessage": "dsh_subagent.core.values",
    # the seam: service, authority, providers, tools
    "AbortController": "dsh_subagent.adapters.signals",
    "AbortSignal": "dsh_subagent.adapters.signals",
    "AncestorAuthority": "dsh_subagent.adapters.continuation_types",
    "CallingAgents": "dsh_subagent.adapters.tools",
    "ContinuableStart": "dsh_subagent.adapters.continuation_types",
    "ContinuableStartSpec": "dsh_subagent.adapters.continuation_types",
    "ControlTools": "dsh_subagent.adapters.tools",
    "DisposeOnExit": "dsh_subagent.adapters.providers",
    "ForkProvider": "dsh_subagent.adapters.providers",
    "InProcessHost": "dsh_subagent.adapters.providers",
    "JobRegistry": "dsh_subagent.adapters.tools",
    "OutOfProcessProvider": "dsh_subagent.adapters.providers",
    "ParentAgent": "dsh_subagent.adapters.continuation_types",
    "ReportTool": "dsh_subagent.adapters.tools",
    "SpawnProvider": "dsh_subagent.adapters.providers",
    "StartRequest": "dsh_subagent.adapters.providers",
    "SubagentProvider": "dsh_subagent.adapters.providers",
    "SubagentRun": "dsh_subagent.adapters.providers",
    "SubagentService": "dsh_subagent.adapters.service",
    "SubagentTool": "dsh_subagent.adapters.tools",
    "SubagentToolConfig": "dsh_subagent.adapters.tools",
    "UserGrant": "dsh_subagent.adapters.continuation_types",
    "UserInterruptAuthority": "dsh_subagent.adapters.continuation_types",
    "register_task_tools": "dsh_subagent.adapters.tools",
    # the harness protocols (the seam's only door to a harness) and their shared values
    "Agent": "dsh_subagent.adapters.protocols",
    "AgentRegistry": "dsh_subagent.adapters.protocols",
    "Model": "dsh_subagent.adapters.protocols",
    "ModelRequest": "dsh_subagent.adapters.protocols",
    "ModelStep": "dsh_subagent.adapters.protocols",
    "Session": "dsh_subagent.adapters.protocols",
    "SessionPersistence": "dsh_subagent.adapters.protocols",
    "SessionStore": "dsh_subagent.adapters.protocols",
    "Tool": "dsh_subagent.adapters.protocols",
    "ToolCall": "dsh_subagent.adapters.protocols",
    "ToolOutcome": "dsh_subagent.adapters.protocols",
    "Usage": "dsh_subagent.adapters.protocols",
    "create_user_message": "dsh_subagent.adapters.protocols",
    # the reference harness
    "FunctionModel": "dsh_subagent.adapters.reference.scripted_model",
    "HarnessOpening": "dsh_subagent.adapters.reference.harness",
    "InMemoryPersistence": "dsh_subagent.adapters.reference.persistence",
    "NullModel": "dsh_subagent.adapters.reference.scripted_model",
    "PostgresPersistence": "dsh_subagent.adapters.reference.postgres_persistence",
    "ReferenceHarness": "dsh_subagent.adapters.reference.harness",
    "ScriptedModel": "dsh_subagent.adapters.reference.scripted_model",
    "SqlitePersistence": "dsh_subagent.adapters.reference.sqlite_persistence",
    "call_tool": "dsh_subagent.adapters.reference.scripted_model",
    "reply": "dsh_subagent.adapters.reference.scripted_model",
}

# The names are the table's keys (tests/test_exports.py pins both against the imports below).
__all__ = sorted([*_EXPORTS, "__version__"])  # noqa: PLE0605


def _version() -> str:
    import importlib.metadata  # lazily: it imports email and socket

    try:
        return importlib.metadata.version("dsh-subagent")
    except importlib.metadata.PackageNotFoundError:  # a source tree, not installed
        return "0.0.0+unknown"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        version = globals()["__version__"] = _version()
        return version
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dsh_subagent' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:
    __version__: str
    from dsh_subagent.adapters.continuation_types import AncestorAuthority as AncestorAuthority
    from dsh_subagent.adapters.continuation_types import ContinuableStart as ContinuableStart
    from dsh_subagent.adapters.continuation_types import (
        ContinuableStartSpec as ContinuableStartSpec,
    )
    from dsh_subagent.adapters.continuation_types import ParentAgent as ParentAgent
    from dsh_subagent.adapters.continuation_types import UserGrant as UserGrant
    from dsh_subagent.adapters.continuation_types import (
        UserInterruptAuthority as UserInterruptAuthority,
    )
    from dsh_subagent.adapters.protocols import Agent as Agent
    from dsh_subagent.adapters.protocols import AgentRegistry as AgentRegistry
    from dsh_subagent.adapters.protocols import Model as Model
    from dsh_subagent.adapters.protocols import ModelRequest as ModelRequest
    from dsh_subagent.adapters.protocols import ModelStep as ModelStep
    from dsh_subagent.adapters.protocols import Session as Session
    from dsh_subagent.adapters.protocols import SessionPersistence as SessionPersistence
    from dsh_subagent.adapters.protocols import SessionStore as SessionStore
    from dsh_subagent.adapters.protocols import Tool as Tool
    from dsh_subagent.adapters.protocols import ToolCall as ToolCall
    from dsh_subagent.adapters.protocols import ToolOutcome as ToolOutcome
    from dsh_subagent.adapters.protocols import Usage as Usage
    from dsh_subagent.adapters.protocols import create_user_message as create_user_message
    from dsh_subagent.adapters.providers import DisposeOnExit as DisposeOnExit
    from dsh_subagent.adapters.providers import ForkProvider as ForkProvider
    from dsh_subagent.adapters.providers import InProcessHost as InProcessHost
    from dsh_subagent.adapters.providers import OutOfProcessProvider as OutOfProcessProvider
    from dsh_subagent.adapters.providers import SpawnProvider as SpawnProvider
    from dsh_subagent.adapters.providers import StartRequest as StartRequest
    from dsh_subagent.adapters.providers import SubagentProvider as SubagentProvider
    from dsh_subagent.adapters.providers import SubagentRun as SubagentRun
    from dsh_subagent.adapters.reference.harness import HarnessOpening as HarnessOpening
    from dsh_subagent.adapters.reference.harness import ReferenceHarness as ReferenceHarness
    from dsh_subagent.adapters.reference.persistence import (
        InMemoryPersistence as InMemoryPersistence,
    )
    from dsh_subagent.adapters.reference.postgres_persistence import (
        PostgresPersistence as PostgresPersistence,
    )
    from dsh_subagent.adapters.reference.scripted_model import FunctionModel as FunctionModel
    from dsh_subagent.adapters.reference.scripted_model import NullModel as NullModel
    from dsh_subagent.adapters.reference.scripted_model import ScriptedModel as ScriptedModel
    from dsh_subagent.adapters.reference.scripted_model import call_tool as call_tool
    from dsh_subagent.adapters.reference.scripted_model import reply as reply
    from dsh_subagent.adapters.reference.sqlite_persistence import (
        SqlitePersistence as SqlitePersistence,
    )
    from dsh_subagent.adapters.service import SubagentService as SubagentService
    from dsh_subagent.adapters.signals import AbortController as AbortController
    from dsh_subagent.adapters.signals import AbortSignal as AbortSignal
    from dsh_subagent.adapters.tools import CallingAgents as CallingAgents
    from dsh_subagent.adapters.tools import ControlTools as ControlTools
    from dsh_subagent.adapters.tools import JobRegistry as JobRegistry
    from dsh_subagent.adapters.tools import ReportTool as ReportTool
    from dsh_subagent.adapters.tools import SubagentTool as SubagentTool
    from dsh_subagent.adapters.tools import SubagentToolConfig as SubagentToolConfig
    from dsh_subagent.adapters.tools import register_task_tools as register_task_tools
    from dsh_subagent.core.budget import Budget as Budget
    from dsh_subagent.core.errors import ErrorCode as ErrorCode
    from dsh_subagent.core.errors import SubagentError as SubagentError
    from dsh_subagent.core.lifecycle import RunEndInfo as RunEndInfo
    from dsh_subagent.core.lifecycle import RunStartInfo as RunStartInfo
    from dsh_subagent.core.listing import ChildRow as ChildRow
    from dsh_subagent.core.listing import DescendantRow as DescendantRow
    from dsh_subagent.core.listing import ListingDiagnostic as ListingDiagnostic
    from dsh_subagent.core.listing import ListingRow as ListingRow
    from dsh_subagent.core.manager.events import ReportDelivery as ReportDelivery
    from dsh_subagent.core.values import AgentOptions as AgentOptions
    from dsh_subagent.core.values import BaseSource as BaseSource
    from dsh_subagent.core.values import BaseSourceKind as BaseSourceKind
    from dsh_subagent.core.values import Content as Content
    from dsh_subagent.core.values import CoordinatorSource as CoordinatorSource
    from dsh_subagent.core.values import DataBlock as DataBlock
    from dsh_subagent.core.values import JsonObject as JsonObject
    from dsh_subagent.core.values import JsonValue as JsonValue
    from dsh_subagent.core.values import KnownStop as KnownStop
    from dsh_subagent.core.values import MessageId as MessageId
    from dsh_subagent.core.values import Mode as Mode
    from dsh_subagent.core.values import SessionEvent as SessionEvent
    from dsh_subagent.core.values import SessionHeader as SessionHeader
    from dsh_subagent.core.values import SessionId as SessionId
    from dsh_subagent.core.values import StopReason as StopReason
    from dsh_subagent.core.values import SubagentCapabilities as SubagentCapabilities
    from dsh_subagent.core.values import SubagentIntent as SubagentIntent
    from dsh_subagent.core.values import SubagentResult as SubagentResult
    from dsh_subagent.core.values import SubagentSettledSource as SubagentSettledSource
    from dsh_subagent.core.values import TextBlock as TextBlock
    from dsh_subagent.core.values import ToolFilter as ToolFilter
    from dsh_subagent.core.values import UserMessage as UserMessage
