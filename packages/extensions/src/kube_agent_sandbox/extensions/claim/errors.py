"""Why a claim pass failed, as the claim's Ready condition and the work queue need to know it.

Upstream sorts its errors into three families (upstream v0.5.6
extensions/controllers/sandboxclaim_controller.go, Reconcile and its error handling):
user-configuration errors that retrying cannot fix (written to Ready, not retried), missing pool
or template (written to Ready, looked at again after a minute) and everything else (written to
Ready as ``ReconcilerError`` and retried with backoff). One small hierarchy on the runtime's
:class:`~kube_agent_sandbox.controller.runtime.ReconcileError` carries the Ready reason, the
message and the retry rule, so the status table and the result rules read one object.
"""

from __future__ import annotations

from typing import Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime import ReconcileError, quote

NOT_FOUND_REQUEUE: Final = 60.0
"""Seconds before a claim whose pool or template is missing is looked at again."""

CREATE_PENDING_REQUEUE: Final = 0.2
"""Seconds before a create that hit AlreadyExists is retried (the cache has not shown it)."""


class ClaimError(ReconcileError):
    """A failed claim pass.

    Attributes:
        reason: The Ready condition reason.
        ready_message: The Ready condition message.
        transient: True when the pass raises it to the work queue (retried with backoff);
            False when the pass only reports it in Ready and returns (looked at again after a
            delay of its own, or when the claim changes).
        keeps_binding: False when ``status.sandbox`` must be cleared (only "not owned").
    """

    reason: str = c.REASON_RECONCILER_ERROR
    keeps_binding: bool = True

    def __init__(self, message: str) -> None:
        super().__init__(message)

    @property
    def ready_message(self) -> str:
        """The Ready message (``Error seen: <err>`` for generic errors)."""
        return f"Error seen: {self.message}"


class ReconcilerError(ClaimError):
    """Anything unexpected: API errors, override conflicts, a foreign same-name Sandbox."""


class _MissingObjectError(ClaimError):
    """A pool or template the claim needs does not exist (looked at again after a minute)."""

    transient = False
    missing_kind: str = ""

    def __init__(self, name: str, *, prefix: str = "") -> None:
        self.name = name
        super().__init__(f"{prefix}{self.missing_kind} {quote(name)} not found")

    @property
    def ready_message(self) -> str:
        return f"{self.missing_kind} {quote(self.name)} not found"


class TemplateNotFoundError(_MissingObjectError):
    """The pool's SandboxTemplate does not exist."""

    reason = c.REASON_TEMPLATE_NOT_FOUND
    missing_kind = c.KIND_SANDBOX_TEMPLATE


class WarmPoolNotFoundError(_MissingObjectError):
    """The claim's SandboxWarmPool does not exist."""

    reason = c.REASON_WARM_POOL_NOT_FOUND
    missing_kind = c.KIND_SANDBOX_WARM_POOL


class _VerbatimError(ClaimError):
    transient = False

    @property
    def ready_message(self) -> str:
        return self.message


class InvalidMetadataError(_VerbatimError):
    """``additionalPodMetadata`` failed validation."""

    reason = c.REASON_INVALID_METADATA

    def __init__(self, detail: str) -> None:
        super().__init__(f"invalid additionalPodMetadata: {detail}")


class EnvInjectionRejectedError(_VerbatimError):
    """The template policy refuses the claim's environment variables."""

    reason = c.REASON_ENV_VARS_INJECTION_REJECTED


class VolumeClaimTemplatesError(_VerbatimError):
    """The claim's volume claim templates are invalid or refused by the template."""

    reason = c.REASON_VOLUME_CLAIM_TEMPLATES_ERROR


class AdoptionConflictError(ClaimError):
    """Another writer changed the claim or the chosen Sandbox during adoption (retried)."""

    reason = c.REASON_ADOPTION_CONFLICT

    @property
    def ready_message(self) -> str:
        return f"{self.message}; the next pass retries from a converged view"


class SandboxNotOwnedError(ClaimError):
    """An expired claim's Sandbox is controlled by someone else: it is left alone."""

    reason = c.REASON_CLAIM_EXPIRED
    transient = False
    keeps_binding = False

    def __init__(self, sandbox: str, claim: str) -> None:
        super().__init__(
            "sandbox not owned by this claim: "
            f"sandbox {quote(sandbox)} is not owned by claim {quote(claim)}"
        )

    @property
    def ready_message(self) -> str:
        return f"Claim expired. {self.message}; deletion skipped."


class SandboxCreatePendingError(ClaimError):
    """The cold create met AlreadyExists: the cache has not shown the Sandbox yet."""

    reason = c.REASON_SANDBOX_CREATE_PENDING
    transient = False

    def __init__(self) -> None:
        super().__init__("Sandbox already created; waiting for cache to converge")

    @property
    def ready_message(self) -> str:
        return self.message


def conflict_detail(text: str) -> str:
    """Replace the apiserver's long conflict tail with ``(conflicting concurrent write)``."""
    marker = "the object has been modified"
    index = text.find(marker)
    if index < 0:
        return text
    head = text[:index].rstrip(" :;,")
    return f"{head} (conflicting concurrent write)"


class SnapshotNotReadyError(_VerbatimError):
    """The SandboxSnapshot a claim starts from is missing, not Ready yet, or Failed.

    Retried with backoff: a snapshot still committing becomes Ready on its own.
    """

    reason = "SnapshotNotReady"
    transient = True
