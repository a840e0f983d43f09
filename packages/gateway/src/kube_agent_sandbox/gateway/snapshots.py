"""Snapshots of a tenant's sandboxes as SandboxSnapshots (docs/guides/snapshots.md).

The E2B routes (:mod:`.controlplane.snapshots`) and the web console share these steps. A
snapshot's id is its SandboxSnapshot's name, in the tenant's namespace: a key sees and uses
only its own namespace's snapshots. A memory snapshot is a SandboxSnapshot of mode Memory:
where the node cannot checkpoint, the controller fails it with ``MemorySnapshotUnsupported``
and its message (what is missing) is answered as :class:`MemorySnapshotUnsupported`. The
gateway records the warm pool of the source claim on the SandboxSnapshot
(:data:`~kube_agent_sandbox.api.constants.ANNOTATION_SNAPSHOT_WARM_POOL`): a sandbox created
from it is a claim of that pool, hence of the source's template, with the snapshot's image.

Whether the cluster can snapshot shows in two ways: the SandboxSnapshot API is absent (the
CRD is not installed: the API answers 404 for the collection), or nothing gives a new
SandboxSnapshot a phase (no controller runs with ``--snapshot-registry``); both are answered
with :class:`SnapshotsUnavailable`, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import secrets
import string
from dataclasses import dataclass
from typing import Any, Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOX_SNAPSHOTS
from kube_agent_sandbox.controller.runtime import ApiError, Obj
from kube_agent_sandbox.gateway.annotations import LABEL_SNAPSHOT_SANDBOX
from kube_agent_sandbox.gateway.index import SandboxRecord
from kube_agent_sandbox.gateway.state import GatewayState

logger = logging.getLogger(__name__)

READY: Final = "Ready"
FAILED: Final = "Failed"
POLL_SECONDS: Final = 0.25
# A snapshot's name doubles as its image tag by default (at most 128 characters) and must be a
# Kubernetes name: one DNS label keeps both true.
SNAPSHOT_NAME: Final = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_SUFFIX: Final = string.ascii_lowercase + string.digits
SET_UP_HINT: Final = (
    "run the controller with --extensions --snapshot-registry=<registry> and the"
    " agent-sandbox-snapshotter DaemonSet (docs/guides/snapshots.md)"
)
REASON_MEMORY_UNSUPPORTED: Final = "MemorySnapshotUnsupported"


class SnapshotError(Exception):
    """A snapshot step that ends with an error answer.

    Attributes:
        status: the HTTP status to answer (E2B's codes).
        error_code: E2B's semantic ``error_code``, when there is one.
    """

    status = 500
    error_code: str | None = None


class SnapshotsUnavailable(SnapshotError):
    """The cluster cannot take snapshots (no SandboxSnapshot API, or no controller for it)."""

    status = 400
    error_code = "snapshots_unavailable"


class MemorySnapshotUnsupported(SnapshotError):
    """A memory ("full") snapshot the source's node cannot take (the message says why)."""

    status = 400
    error_code = "snapshot_memory_unsupported"


class InvalidSnapshotRequest(SnapshotError):
    """A malformed name or argument."""

    status = 400


class SnapshotConflict(SnapshotError):
    """The sandbox cannot be snapshotted now, or the name is taken."""

    status = 409


class SnapshotNotFound(SnapshotError):
    """No snapshot of that id in the tenant's namespace (or its source went away)."""

    status = 404


class SnapshotFailed(SnapshotError):
    """The commit failed (the SandboxSnapshot's Ready condition says why)."""


class SnapshotStillCommitting(SnapshotError):
    """Not Ready within ``--snapshot-timeout``; the SandboxSnapshot is kept."""

    status = 503


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """What E2B's ``SnapshotInfo`` and the console show of a SandboxSnapshot."""

    snapshot_id: str
    phase: str
    source_sandbox: str
    image: str
    size: int | None

    def e2b(self) -> dict[str, Any]:
        """E2B's body: ``{"snapshotID", "names"}`` (the id is the one name it has)."""
        return {"snapshotID": self.snapshot_id, "names": [self.snapshot_id]}


def info_of(obj: Obj) -> SnapshotInfo:
    """The :class:`SnapshotInfo` of a SandboxSnapshot object."""
    status = obj.get("status") or {}
    size = status.get("size")
    return SnapshotInfo(
        snapshot_id=str(obj["metadata"]["name"]),
        phase=str(status.get("phase") or ""),
        source_sandbox=str((obj["metadata"].get("labels") or {}).get(LABEL_SNAPSHOT_SANDBOX, "")),
        image=str(status.get("image") or ""),
        size=size if isinstance(size, int) else None,
    )


def new_snapshot_name(sandbox_id: str) -> str:
    """``<sandbox id>-<8 random characters>``: unique, and says where it came from."""
    return f"{sandbox_id}-" + "".join(secrets.choice(_SUFFIX) for _ in range(8))


def check_name(name: str) -> str:
    """``name`` if it can name a snapshot.

    Raises:
        InvalidSnapshotRequest: it cannot.
    """
    if SNAPSHOT_NAME.fullmatch(name) is None:
        raise InvalidSnapshotRequest(
            f"snapshot name {name!r} must be 1-63 lowercase letters, digits or '-',"
            " starting and ending with a letter or digit"
        )
    return name


def _api_missing(exc: ApiError) -> SnapshotsUnavailable:
    return SnapshotsUnavailable(
        "this cluster has no SandboxSnapshot API (the CRD"
        f" {SANDBOX_SNAPSHOTS.plural}.{c.EXTENSIONS_GROUP} is not installed: {exc.message}); "
        + SET_UP_HINT
    )


def _refused(exc: ApiError, what: str) -> SnapshotError:
    if exc.status == 403:
        return SnapshotError(
            f"the gateway may not {what} SandboxSnapshots ({exc.message}): apply its generated"
            " ClusterRole (manifests/gateway)"
        )
    return SnapshotError(f"cluster error: {exc.message}")


async def take_snapshot(
    state: GatewayState, record: SandboxRecord, *, name: str | None = None, memory: bool = False
) -> SnapshotInfo:
    """A snapshot of the running sandbox, once Ready (the sandbox keeps running): of its files,
    or with ``memory`` of its processes too (mode Memory).

    A snapshot that fails is deleted (nothing is kept of it) and the failure answered.

    Raises:
        SnapshotError: the cluster cannot, the sandbox is not running, the name is taken, the
            commit failed or did not finish within ``--snapshot-timeout``;
            :class:`MemorySnapshotUnsupported` when the node cannot checkpoint.
    """
    sandbox = record.sandbox
    if record.suspended or sandbox is None or record.pod is None:
        raise SnapshotConflict(
            f"sandbox {record.sandbox_id} is not running (paused or starting): connect to it"
            " first; a snapshot commits a running container"
        )
    name = check_name(name) if name else new_snapshot_name(record.sandbox_id)
    pool = str(((record.claim.get("spec") or {}).get("warmPoolRef") or {}).get("name") or "")
    body = {
        "apiVersion": c.EXTENSIONS_API_VERSION,
        "kind": c.KIND_SANDBOX_SNAPSHOT,
        "metadata": {
            "name": name,
            "namespace": record.namespace,
            "labels": {LABEL_SNAPSHOT_SANDBOX: record.sandbox_id},
            "annotations": {c.ANNOTATION_SNAPSHOT_WARM_POOL: pool},
        },
        "spec": {
            "sandboxName": sandbox["metadata"]["name"],
            "mode": "Memory" if memory else "Filesystem",
        },
    }
    try:
        await state.api.create(SANDBOX_SNAPSHOTS, record.namespace, body)
    except ApiError as exc:
        if exc.not_found:
            raise _api_missing(exc) from exc
        if exc.already_exists:
            raise SnapshotConflict(
                f"a snapshot named {name!r} exists: delete it first or choose another name"
            ) from exc
        if exc.status in (400, 422):
            raise InvalidSnapshotRequest(
                f"the cluster refused the snapshot: {exc.message}"
            ) from exc
        raise _refused(exc, "create") from exc
    logger.info("sandbox %s/%s: snapshot %s requested", record.namespace, record.sandbox_id, name)
    obj = await _outcome(state, record.namespace, name)
    info = info_of(obj)
    if info.phase == READY:
        return info
    reason, message = _ready_condition(obj)
    await _delete_quietly(state, record.namespace, name)
    if reason in ("SandboxNotFound", "SourceDeleted"):
        raise SnapshotNotFound(f"sandbox {record.sandbox_id} went away during the snapshot")
    if reason == REASON_MEMORY_UNSUPPORTED:
        raise MemorySnapshotUnsupported(
            f"memory snapshot of sandbox {record.sandbox_id} is not possible on its node:"
            f' {message}; take a filesystem snapshot (mode="filesystem") instead'
        )
    raise SnapshotFailed(f"snapshot {name} failed ({reason}): {message}")


async def _outcome(state: GatewayState, namespace: str, name: str) -> Obj:
    """The SandboxSnapshot once Ready or Failed.

    Raises:
        SnapshotsUnavailable: nothing gave it a phase within ``snapshot_ack_seconds`` (it is
            deleted again).
        SnapshotStillCommitting: not finished within ``snapshot_timeout_seconds``.
    """
    options = state.options
    loop = asyncio.get_running_loop()
    start = loop.time()
    while True:
        try:
            obj = await state.api.get(SANDBOX_SNAPSHOTS, namespace, name)
        except ApiError as exc:
            if exc.not_found:
                raise SnapshotNotFound(f"snapshot {name} was deleted while being taken") from exc
            raise _refused(exc, "read") from exc
        phase = (obj.get("status") or {}).get("phase")
        if phase in (READY, FAILED):
            return obj
        elapsed = loop.time() - start
        if not phase and elapsed >= options.snapshot_ack_seconds:
            await _delete_quietly(state, namespace, name)
            raise SnapshotsUnavailable(
                f"no snapshot controller took SandboxSnapshot {name} within"
                f" {options.snapshot_ack_seconds:g} s: " + SET_UP_HINT
            )
        if elapsed >= options.snapshot_timeout_seconds:
            raise SnapshotStillCommitting(
                f"snapshot {name} is still {phase} after {options.snapshot_timeout_seconds:g} s;"
                " it is listed once Ready"
            )
        await asyncio.sleep(POLL_SECONDS)


def _ready_condition(obj: Obj) -> tuple[str, str]:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == c.CONDITION_READY:
            return str(cond.get("reason") or ""), str(cond.get("message") or "")
    return "", ""


async def _delete_quietly(state: GatewayState, namespace: str, name: str) -> None:
    with contextlib.suppress(ApiError):
        await state.api.delete(SANDBOX_SNAPSHOTS, namespace, name)


@dataclass(frozen=True, slots=True)
class SnapshotPage:
    """One page of a tenant's Ready snapshots and the token of the next (``""``: none)."""

    items: list[SnapshotInfo]
    next_token: str


async def list_snapshots(
    state: GatewayState,
    namespace: str,
    *,
    sandbox_id: str | None = None,
    limit: int = 100,
    token: str | None = None,
) -> SnapshotPage:
    """The Ready snapshots of ``namespace`` (of one source sandbox when ``sandbox_id``).

    Raises:
        SnapshotError: no SandboxSnapshot API, or the cluster refused.
    """
    selector = f"{LABEL_SNAPSHOT_SANDBOX}={sandbox_id}" if sandbox_id else None
    try:
        page = await state.api.list(
            SANDBOX_SNAPSHOTS,
            namespace,
            label_selector=selector,
            limit=limit,
            continue_token=token or None,
        )
    except ApiError as exc:
        if exc.not_found:
            raise _api_missing(exc) from exc
        if exc.status in (400, 410, 422):
            raise InvalidSnapshotRequest(f"invalid listing: {exc.message}") from exc
        raise _refused(exc, "list") from exc
    items = [
        info_of(obj)
        for obj in page.get("items") or []
        if not obj["metadata"].get("deletionTimestamp")
        and (obj.get("status") or {}).get("phase") == READY
    ]
    return SnapshotPage(items, str((page.get("metadata") or {}).get("continue") or ""))


async def delete_snapshot(state: GatewayState, namespace: str, snapshot_id: str) -> None:
    """Delete the snapshot (its finalizer then deletes the image from the registry).

    Raises:
        SnapshotNotFound: none of that id in ``namespace``.
        SnapshotError: no SandboxSnapshot API, or the cluster refused.
    """
    if SNAPSHOT_NAME.fullmatch(snapshot_id) is None:
        raise SnapshotNotFound(f"snapshot {snapshot_id!r} not found")
    try:
        await state.api.delete(SANDBOX_SNAPSHOTS, namespace, snapshot_id)
    except ApiError as exc:
        if exc.not_found:  # without a SandboxSnapshot API there is no such snapshot either
            raise SnapshotNotFound(f"snapshot {snapshot_id!r} not found") from exc
        raise _refused(exc, "delete") from exc
    logger.info("snapshot %s/%s deleted", namespace, snapshot_id)


async def snapshot_pool(state: GatewayState, namespace: str, snapshot_id: str) -> str | None:
    """The warm pool a sandbox from snapshot ``snapshot_id`` is claimed from; None: no such
    snapshot in ``namespace`` (or no snapshot API).

    Raises:
        InvalidSnapshotRequest: the snapshot failed, or it records no warm pool.
        SnapshotError: the cluster refused the read.
    """
    if SNAPSHOT_NAME.fullmatch(snapshot_id) is None:
        return None
    try:
        obj = await state.api.get(SANDBOX_SNAPSHOTS, namespace, snapshot_id)
    except ApiError as exc:
        if exc.not_found:
            return None
        raise _refused(exc, "read") from exc
    if obj["metadata"].get("deletionTimestamp"):
        return None
    if (obj.get("status") or {}).get("phase") == FAILED:
        reason, message = _ready_condition(obj)
        raise InvalidSnapshotRequest(f"snapshot {snapshot_id} failed ({reason}): {message}")
    pool = (obj["metadata"].get("annotations") or {}).get(c.ANNOTATION_SNAPSHOT_WARM_POOL)
    if not pool:
        raise InvalidSnapshotRequest(
            f"snapshot {snapshot_id} records no warm pool to start from: annotate it"
            f" {c.ANNOTATION_SNAPSHOT_WARM_POOL}=<pool of the template to run it with>"
        )
    return str(pool)
