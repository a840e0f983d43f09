"""Client SDK for Agent Sandbox: create or claim sandboxes, run commands, move files.

``AsyncSandboxClient`` is the hand-written asyncio client; ``SandboxClient`` is generated from
it (``scripts/unasync_sdk.py``) and has the same calls without ``await``. Both speak the
upstream Python SDK's wire contract (``agents.x-k8s.io/created-by: python-client``,
``agents.x-k8s.io/client-first-requested-at``) and raise only :mod:`.errors` classes.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kube_agent_sandbox.sdk._async.client import (
        AsyncCommandExecutor,
        AsyncFilesystem,
        AsyncSandbox,
        AsyncSandboxClient,
    )
    from kube_agent_sandbox.sdk._async.exec import AsyncExecSession
    from kube_agent_sandbox.sdk._sync.client import (
        CommandExecutor,
        Filesystem,
        Sandbox,
        SandboxClient,
    )
    from kube_agent_sandbox.sdk._sync.exec import ExecSession
    from kube_agent_sandbox.sdk.config import ClusterConfig, load_incluster, load_kubeconfig
    from kube_agent_sandbox.sdk.constants import (
        CLIENT_REQUEST_TIME_ANNOTATION,
        CREATED_BY_LABEL,
        CREATED_BY_VALUE,
        TERMINAL_CLAIM_READY_REASONS,
    )
    from kube_agent_sandbox.sdk.errors import (
        ApiRequestError,
        ConfigError,
        ConflictError,
        ExecFailedError,
        ExecTimeoutError,
        NotFoundError,
        PermissionDeniedError,
        SandboxClaimFailedError,
        SandboxDeletedError,
        SandboxError,
        SandboxFailedError,
        SandboxNotFoundError,
        SandboxNotReadyError,
        SandboxPortForwardError,
        SandboxRequestError,
        SandboxTemplateNotFoundError,
        SandboxTimeoutError,
        SandboxWarmPoolNotFoundError,
        SnapshotFailedError,
        SnapshotUnavailableError,
    )
    from kube_agent_sandbox.sdk.execproto import ExecResult, FileEntry
    from kube_agent_sandbox.sdk.metrics import get_metrics
    from kube_agent_sandbox.sdk.readiness import Readiness
    from kube_agent_sandbox.sdk.tracing import SandboxTracerConfig

    ExecutionResult = ExecResult

_LAZY: dict[str, str] = {
    "AsyncCommandExecutor": "kube_agent_sandbox.sdk._async.client",
    "AsyncFilesystem": "kube_agent_sandbox.sdk._async.client",
    "AsyncSandbox": "kube_agent_sandbox.sdk._async.client",
    "AsyncSandboxClient": "kube_agent_sandbox.sdk._async.client",
    "AsyncExecSession": "kube_agent_sandbox.sdk._async.exec",
    "CommandExecutor": "kube_agent_sandbox.sdk._sync.client",
    "Filesystem": "kube_agent_sandbox.sdk._sync.client",
    "Sandbox": "kube_agent_sandbox.sdk._sync.client",
    "SandboxClient": "kube_agent_sandbox.sdk._sync.client",
    "ExecSession": "kube_agent_sandbox.sdk._sync.exec",
    "ClusterConfig": "kube_agent_sandbox.sdk.config",
    "load_incluster": "kube_agent_sandbox.sdk.config",
    "load_kubeconfig": "kube_agent_sandbox.sdk.config",
    "CLIENT_REQUEST_TIME_ANNOTATION": "kube_agent_sandbox.sdk.constants",
    "CREATED_BY_LABEL": "kube_agent_sandbox.sdk.constants",
    "CREATED_BY_VALUE": "kube_agent_sandbox.sdk.constants",
    "TERMINAL_CLAIM_READY_REASONS": "kube_agent_sandbox.sdk.constants",
    "ApiRequestError": "kube_agent_sandbox.sdk.errors",
    "ConfigError": "kube_agent_sandbox.sdk.errors",
    "ConflictError": "kube_agent_sandbox.sdk.errors",
    "ExecFailedError": "kube_agent_sandbox.sdk.errors",
    "ExecTimeoutError": "kube_agent_sandbox.sdk.errors",
    "NotFoundError": "kube_agent_sandbox.sdk.errors",
    "PermissionDeniedError": "kube_agent_sandbox.sdk.errors",
    "SandboxClaimFailedError": "kube_agent_sandbox.sdk.errors",
    "SandboxDeletedError": "kube_agent_sandbox.sdk.errors",
    "SandboxError": "kube_agent_sandbox.sdk.errors",
    "SandboxFailedError": "kube_agent_sandbox.sdk.errors",
    "SandboxNotFoundError": "kube_agent_sandbox.sdk.errors",
    "SandboxNotReadyError": "kube_agent_sandbox.sdk.errors",
    "SandboxPortForwardError": "kube_agent_sandbox.sdk.errors",
    "SandboxRequestError": "kube_agent_sandbox.sdk.errors",
    "SandboxTemplateNotFoundError": "kube_agent_sandbox.sdk.errors",
    "SandboxTimeoutError": "kube_agent_sandbox.sdk.errors",
    "SandboxWarmPoolNotFoundError": "kube_agent_sandbox.sdk.errors",
    "SnapshotFailedError": "kube_agent_sandbox.sdk.errors",
    "SnapshotUnavailableError": "kube_agent_sandbox.sdk.errors",
    "ExecResult": "kube_agent_sandbox.sdk.execproto",
    "FileEntry": "kube_agent_sandbox.sdk.execproto",
    "get_metrics": "kube_agent_sandbox.sdk.metrics",
    "Readiness": "kube_agent_sandbox.sdk.readiness",
    "SandboxTracerConfig": "kube_agent_sandbox.sdk.tracing",
    "ExecutionResult": "kube_agent_sandbox.sdk.execproto",
}
"""Where each public name lives; loaded on first use (PEP 562), so ``import kube_agent_sandbox.sdk``
costs next to nothing and a program pays only for what it touches (httpx with the first client,
httpx-ws with the first exec or port-forward, pydantic and the models with the first create)."""
_RENAMED = {"ExecutionResult": "ExecResult"}
"""Upstream's name of :class:`ExecResult`."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), _RENAMED.get(name, name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__version__ = "0.1.0"

__all__ = [
    "CLIENT_REQUEST_TIME_ANNOTATION",
    "CREATED_BY_LABEL",
    "CREATED_BY_VALUE",
    "TERMINAL_CLAIM_READY_REASONS",
    "ApiRequestError",
    "AsyncCommandExecutor",
    "AsyncExecSession",
    "AsyncFilesystem",
    "AsyncSandbox",
    "AsyncSandboxClient",
    "ClusterConfig",
    "CommandExecutor",
    "ConfigError",
    "ConflictError",
    "ExecFailedError",
    "ExecResult",
    "ExecSession",
    "ExecTimeoutError",
    "ExecutionResult",
    "FileEntry",
    "Filesystem",
    "NotFoundError",
    "PermissionDeniedError",
    "Readiness",
    "Sandbox",
    "SandboxClaimFailedError",
    "SandboxClient",
    "SandboxDeletedError",
    "SandboxError",
    "SandboxFailedError",
    "SandboxNotFoundError",
    "SandboxNotReadyError",
    "SandboxPortForwardError",
    "SandboxRequestError",
    "SandboxTemplateNotFoundError",
    "SandboxTimeoutError",
    "SandboxTracerConfig",
    "SandboxWarmPoolNotFoundError",
    "SnapshotFailedError",
    "SnapshotUnavailableError",
    "get_metrics",
    "load_incluster",
    "load_kubeconfig",
]
