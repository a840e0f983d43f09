"""Condition interpretation: what a Sandbox's or claim's status means for a waiting caller.

Readiness is the Ready condition's *status* (``"True"``), never its mere presence. A wait ends
when the object is Ready, fails at once on a terminal reason, and otherwise keeps waiting
(``SandboxNotReady``, ``SandboxCreatePending``, ``MultiplePods``... are transient; the reasons
are listed in docs/concepts/claims.md, "Conditions").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kube_agent_sandbox.api import constants as api
from kube_agent_sandbox.sdk.constants import (
    TERMINAL_CLAIM_READY_REASONS,
    TERMINAL_SANDBOX_READY_REASONS,
)
from kube_agent_sandbox.sdk.errors import (
    SandboxClaimFailedError,
    SandboxFailedError,
    SandboxTemplateNotFoundError,
    SandboxWarmPoolNotFoundError,
)

Obj = dict[str, Any]


@dataclass(frozen=True)
class Readiness:
    """The Ready condition of an object, read for a waiter.

    Attributes:
        ready: Ready's status is ``"True"`` (and, for a claim, a Sandbox is bound).
        status: Ready's status string (``"True"``, ``"False"``, ``"Unknown"``, ``""`` when
            absent).
        reason: Ready's reason.
        message: Ready's message.
        failure: the error a waiter raises now, or ``None`` to keep waiting.
    """

    ready: bool
    status: str
    reason: str
    message: str
    failure: SandboxFailedError | None = None


def condition(obj: Obj, type_: str) -> Obj | None:
    """The condition of type ``type_`` in ``obj.status.conditions``, if any."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == type_:
            return cond
    return None


def _ready_fields(obj: Obj) -> tuple[str, str, str]:
    cond = condition(obj, api.CONDITION_READY) or {}
    return (
        str(cond.get("status") or ""),
        str(cond.get("reason") or ""),
        str(cond.get("message") or ""),
    )


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def sandbox_readiness(obj: Obj) -> Readiness:
    """Read a Sandbox's Ready condition.

    A Suspended Sandbox is not a failure (it can be resumed); a finished or expired one is.
    """
    status, reason, message = _ready_fields(obj)
    if status == "True":
        return Readiness(True, status, reason, message)
    failure = None
    if status == "False" and reason in TERMINAL_SANDBOX_READY_REASONS:
        failure = SandboxFailedError(
            f"sandbox {_name(obj)} will not become Ready: {reason}: {message}",
            reason=reason,
            condition_message=message,
        )
    return Readiness(False, status, reason, message, failure)


def bound_sandbox_name(claim: Obj) -> str | None:
    """The Sandbox a claim is bound to (``status.sandbox.name``; legacy ``Name`` accepted)."""
    sandbox = (claim.get("status") or {}).get("sandbox") or {}
    value = sandbox.get("name") or sandbox.get("Name")
    return str(value) if value else None


def claim_readiness(claim: Obj) -> Readiness:
    """Read a SandboxClaim's Ready condition.

    docs/guides/sdk.md ("Claim a Sandbox from a warm pool") describes what the waits make of it.

    Ready means Ready=True *and* a bound Sandbox name. ``TemplateNotFound`` and
    ``WarmPoolNotFound`` fail fast with their own errors; a terminal reason fails with
    :class:`SandboxClaimFailedError`; anything else keeps the waiter waiting.
    """
    status, reason, message = _ready_fields(claim)
    name = _name(claim)
    if status == "True" and bound_sandbox_name(claim):
        return Readiness(True, status, reason, message)
    failure: SandboxFailedError | None = None
    text = f"claim {name}: {reason}: {message}"
    if reason == api.REASON_TEMPLATE_NOT_FOUND:
        failure = SandboxTemplateNotFoundError(text, reason=reason, condition_message=message)
    elif reason == api.REASON_WARM_POOL_NOT_FOUND:
        failure = SandboxWarmPoolNotFoundError(text, reason=reason, condition_message=message)
    elif status == "False" and reason in TERMINAL_CLAIM_READY_REASONS:
        failure = SandboxClaimFailedError(text, reason=reason, condition_message=message)
    return Readiness(False, status, reason, message, failure)


def is_suspended(obj: Obj) -> bool:
    """The Sandbox's Suspended condition is True (its pod is gone)."""
    cond = condition(obj, api.CONDITION_SUSPENDED)
    return bool(cond and cond.get("status") == "True")


def pod_name(sandbox: Obj) -> str:
    """The backing Pod's name: the ``agents.x-k8s.io/pod-name`` annotation, else the Sandbox's."""
    annotations = (sandbox.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(api.ANNOTATION_POD_NAME) or _name(sandbox))
