"""A SandboxSnapshot's status as the controller and the node agent write it.

Both write through the status subresource with the ``resourceVersion`` they read, so of two
writers (the controller failing a snapshot whose Pod is gone, the agent reporting it pushed) one
wins and the other sees a conflict and reads again: a snapshot is never Ready and Failed in turn.
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any, Final

from kube_agent_sandbox.api.resources import SANDBOX_SNAPSHOTS
from kube_agent_sandbox.controller.runtime import (
    FALSE,
    TRUE,
    Client,
    Obj,
    format_time,
    meta,
    name_of,
    namespace_of,
    new_condition,
    set_status_condition,
)

PENDING: Final = "Pending"
COMMITTING: Final = "Committing"
READY: Final = "Ready"
FAILED: Final = "Failed"
FINAL_PHASES: Final = frozenset({READY, FAILED})

CONDITION_READY: Final = "Ready"
CONDITION_IMAGE_DELETED: Final = "ImageDeleted"

FINALIZER: Final = "extensions.agents.x-k8s.io/snapshot-image"
"""Held until the snapshot's image is deleted from the registry."""
ANNOTATION_KEEP_IMAGE: Final = "extensions.agents.x-k8s.io/keep-image"
"""``"true"``: deleting the snapshot leaves its image in the registry (for registries that
refuse deletes, or images still in use)."""

# Reasons of the Ready condition (and of Events).
REASON_WAITING: Final = "SandboxNotRunning"
REASON_COMMITTING: Final = "Committing"
REASON_PUSHED: Final = "Pushed"
REASON_MEMORY_UNSUPPORTED: Final = "MemorySnapshotUnsupported"
REASON_SANDBOX_NOT_FOUND: Final = "SandboxNotFound"
REASON_SOURCE_DELETED: Final = "SourceDeleted"
REASON_TIMED_OUT: Final = "CommitTimedOut"
REASON_COMMIT_FAILED: Final = "CommitFailed"
REASON_PUSH_FAILED: Final = "PushFailed"
REASON_NOT_CONTAINERD: Final = "UnsupportedRuntime"
REASON_NODE_DISK_FULL: Final = "NodeDiskFull"
REASON_REGISTRY_STORAGE_FULL: Final = "RegistryStorageFull"
REASON_NODE_LOST: Final = "NodeLost"
# Reasons of the ImageDeleted condition.
REASON_REGISTRY_UNAVAILABLE: Final = "RegistryUnavailable"
REASON_CREDENTIALS_REFUSED: Final = "RegistryCredentialsRefused"
REASON_DELETE_REFUSED: Final = "RegistryRefusesDelete"


def status_of(snapshot: Obj) -> dict[str, Any]:
    """The snapshot's status (empty when none)."""
    status = snapshot.get("status")
    return status if isinstance(status, dict) else {}


def phase_of(snapshot: Obj) -> str:
    """The phase; ``Pending`` when none is written yet."""
    return str(status_of(snapshot).get("phase") or PENDING)


def spec_of(snapshot: Obj) -> dict[str, Any]:
    """The snapshot's spec."""
    spec = snapshot.get("spec")
    return spec if isinstance(spec, dict) else {}


def with_status(
    snapshot: Obj,
    *,
    phase: str,
    reason: str,
    message: str,
    now: dt.datetime,
    condition: str = CONDITION_READY,
    **fields: Any,
) -> Obj:
    """A copy of ``snapshot`` with a new phase, condition and fields (None removes a field).

    ``completionTime`` is set when the phase becomes final; the ``Ready`` condition is True only
    in phase Ready.
    """
    body = copy.deepcopy(snapshot)
    status = body.setdefault("status", {})
    status["phase"] = phase
    for key, value in fields.items():
        if value is None:
            status.pop(key, None)
        else:
            status[key] = value
    if phase in FINAL_PHASES and "completionTime" not in status:
        status["completionTime"] = format_time(now)
    state = TRUE if condition == CONDITION_READY and phase == READY else FALSE
    conditions = status.setdefault("conditions", [])
    generation = int(meta(snapshot).get("generation") or 0)
    cond = new_condition(condition, state, reason, message, observed_generation=generation)
    set_status_condition(conditions, cond, now=now)
    return body


async def write_status(client: Client, body: Obj) -> Obj:
    """PUT the status with the ``resourceVersion`` it was read at (a conflict raises 409)."""
    return await client.update(
        SANDBOX_SNAPSHOTS, namespace_of(body), name_of(body), body, subresource="status"
    )


def split_image(image: str) -> tuple[str, str, str]:
    """``host/repository@sha256:...`` as ``(host, repository, digest)``.

    Raises:
        ValueError: Not a pinned reference.
    """
    name, sep, digest = image.partition("@")
    host, slash, repository = name.partition("/")
    if not sep or not slash or not digest.startswith("sha256:"):
        raise ValueError(f"{image!r} is not a reference host/repository@sha256:...")
    return host, repository, digest
