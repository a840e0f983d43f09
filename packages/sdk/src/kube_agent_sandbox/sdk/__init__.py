"""Client SDK for Agent Sandbox: create or claim sandboxes, run commands, move files.

``AsyncSandboxClient`` is the hand-written asyncio client; ``SandboxClient`` is generated from
it (``scripts/unasync_sdk.py``) and has the same calls without ``await``. Both speak the
upstream Python SDK's wire contract (``agents.x-k8s.io/created-by: python-client``,
``agents.x-k8s.io/client-first-requested-at``) and raise only :mod:`.errors` classes.
"""

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
)
from kube_agent_sandbox.sdk.execproto import ExecResult, FileEntry
from kube_agent_sandbox.sdk.metrics import get_metrics
from kube_agent_sandbox.sdk.readiness import Readiness

ExecutionResult = ExecResult
"""Upstream's name of :class:`ExecResult`."""

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
    "SandboxWarmPoolNotFoundError",
    "get_metrics",
    "load_incluster",
    "load_kubeconfig",
]
