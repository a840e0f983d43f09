"""One small public error hierarchy, so callers never see a raw HTTP or websocket exception.

Every error the SDK raises derives from :class:`SandboxError` (a ``RuntimeError``, as upstream's
is). Upstream's names (``SandboxNotFoundError``, ``SandboxClaimFailedError``...) are kept as the
classes or aliases users already catch.
"""

from __future__ import annotations

from typing import Any


class SandboxError(RuntimeError):
    """Base of every SDK error."""


class ApiRequestError(SandboxError):
    """The Kubernetes API refused a request for a reason without a more specific class.

    Attributes:
        status_code: HTTP status (``None`` when the request never got an answer).
        reason: the Status ``reason`` (e.g. ``Invalid``), or ``""``.
        body: the decoded Status object, when there was one.
    """

    def __init__(
        self,
        message: str,
        status_code: int | None = None,
        *,
        reason: str = "",
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.reason = reason
        self.body = body


class NotFoundError(ApiRequestError):
    """The object (or its kind) does not exist."""


class ConflictError(ApiRequestError):
    """The object already exists, or changed since it was read."""


class PermissionDeniedError(ApiRequestError):
    """The API refused the caller (401/403).

    Attributes:
        verb: what was attempted (``create``, ``get``, ``list``, ``watch``, ``patch``...).
        resource: ``<plural>.<group>`` (or ``pods/exec``...) it was attempted on.
    """

    def __init__(self, message: str, status_code: int, *, verb: str, resource: str) -> None:
        super().__init__(message, status_code, reason="Forbidden")
        self.verb = verb
        self.resource = resource


class SandboxTimeoutError(SandboxError, TimeoutError):
    """A wait or command ran out of time (also a builtin ``TimeoutError``)."""


class SandboxFailedError(SandboxError):
    """The Sandbox or claim reached a state it will not recover from.

    Attributes:
        reason: the Ready condition's reason (e.g. ``PodFailed``, ``ClaimExpired``).
        condition_message: the Ready condition's message.
    """

    def __init__(self, message: str, *, reason: str, condition_message: str = "") -> None:
        super().__init__(message)
        self.reason = reason
        self.condition_message = condition_message


class SandboxClaimFailedError(SandboxFailedError):
    """A claim reported a terminal Ready reason (upstream's name)."""


class SandboxTemplateNotFoundError(SandboxClaimFailedError):
    """The claim's warm pool names a SandboxTemplate that does not exist."""


class SandboxWarmPoolNotFoundError(SandboxClaimFailedError):
    """The claim names a SandboxWarmPool that does not exist."""


class SandboxDeletedError(SandboxFailedError):
    """The object was deleted while the SDK waited on it."""


class SnapshotFailedError(SandboxFailedError):
    """A SandboxSnapshot failed (its Ready reason: ``PushFailed``, ``SourceDeleted``...)."""


class SnapshotUnavailableError(SandboxError):
    """The cluster cannot take this snapshot: no SandboxSnapshot API, no snapshot controller,
    or a memory snapshot (not implemented); the message says what is missing."""


class ExecFailedError(SandboxError):
    """A command could not be run in the sandbox (not: it ran and exited non-zero).

    Attributes:
        reason: the exec Status reason, or ``""``.
    """

    def __init__(self, message: str, *, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


class ExecTimeoutError(SandboxTimeoutError):
    """A command outlived its timeout; the SDK closed its stream (see ``exec`` docs).

    Attributes:
        stdout: output received before the timeout.
        stderr: error output received before the timeout.
    """

    def __init__(self, message: str, *, stdout: bytes = b"", stderr: bytes = b"") -> None:
        super().__init__(message)
        self.stdout = stdout
        self.stderr = stderr


class SandboxPortForwardError(SandboxError):
    """A port-forward could not be opened or broke."""


class ConfigError(SandboxError):
    """No usable cluster configuration (kubeconfig, in-cluster or explicit)."""


# Upstream names (k8s_agent_sandbox) users already catch.
SandboxNotFoundError = NotFoundError
SandboxRequestError = ApiRequestError
SandboxNotReadyError = SandboxFailedError

__all__ = [
    "ApiRequestError",
    "ConfigError",
    "ConflictError",
    "ExecFailedError",
    "ExecTimeoutError",
    "NotFoundError",
    "PermissionDeniedError",
    "SandboxClaimFailedError",
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
    "SnapshotFailedError",
    "SnapshotUnavailableError",
]
