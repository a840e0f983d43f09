# Generated from _async/snapshots.py by scripts/unasync_sdk.py: do not edit.
"""AsyncSnapshotCalls: take, read, list, wait for and delete SandboxSnapshots (starting a
sandbox from one, which returns a handle, is on the client itself).

A snapshot taken here records the warm pool of its source's claim
(``kube-agent-sandbox.io/snapshot-warm-pool``), so a claim from it needs no pool named. A ``Memory``
snapshot is asked of the cluster like a filesystem one; where the node cannot checkpoint it
fails, raising :class:`SnapshotFailedError` with reason ``MemorySnapshotUnsupported`` and the
controller's message naming what is missing (docs/guides/snapshots.md).

Hand-written source: ``_sync/snapshots.py`` is generated from it by ``scripts/unasync_sdk.py``.
"""

from __future__ import annotations

import secrets
from typing import Final

from kube_agent_sandbox.api import constants as api
from kube_agent_sandbox.sdk import builders, readiness
from kube_agent_sandbox.sdk._sync.objects import Obj, ObjectCalls
from kube_agent_sandbox.sdk.constants import (
    SANDBOX_CLAIMS,
    SANDBOX_SNAPSHOTS,
    SANDBOXES,
    SNAPSHOT_WARM_POOL_ANNOTATION,
)
from kube_agent_sandbox.sdk.errors import (
    NotFoundError,
    SandboxTimeoutError,
    SnapshotFailedError,
    SnapshotUnavailableError,
)

DEFAULT_SNAPSHOT_TIMEOUT: Final = 300.0
SNAPSHOT_ACK_TIMEOUT: Final = 15.0
MODES: Final = ("Filesystem", "Memory")
SET_UP_HINT: Final = (
    "run the controller with --extensions --snapshot-registry=<registry> and the"
    " agent-sandbox-snapshotter DaemonSet (docs/guides/snapshots.md)"
)


def snapshot_phase(obj: Obj) -> str:
    """``status.phase`` (``""`` before a controller saw it)."""
    return str((obj.get("status") or {}).get("phase") or "")


def _finished(obj: Obj) -> bool:
    """Ready, or raise the failure the snapshot reports."""
    phase = snapshot_phase(obj)
    if phase == "Failed":
        cond = readiness.condition(obj, api.CONDITION_READY) or {}
        reason, message = str(cond.get("reason") or ""), str(cond.get("message") or "")
        name = (obj.get("metadata") or {}).get("name")
        raise SnapshotFailedError(
            f"snapshot {name} failed: {reason}: {message}", reason=reason, condition_message=message
        )
    return phase == "Ready"


class SnapshotCalls(ObjectCalls):
    """The SandboxSnapshot calls of :class:`~kube_agent_sandbox.sdk.SandboxClient`."""

    def create_snapshot(
        self,
        sandbox: str,
        *,
        name: str | None = None,
        namespace: str | None = None,
        mode: str = "Filesystem",
        warm_pool: str | None = None,
        wait: bool = True,
        timeout: float = DEFAULT_SNAPSHOT_TIMEOUT,
    ) -> Obj:
        """Snapshot a running Sandbox (it keeps running) and, by default, wait for Ready.

        Args:
            sandbox: the Sandbox.
            name: the snapshot's name (``<sandbox>-<8 hex>`` by default).
            namespace: the Sandbox's namespace.
            mode: ``Filesystem`` (its files) or ``Memory`` (its processes too, where the node
                can checkpoint).
            warm_pool: the pool a claim from it uses; by default the pool of the Sandbox's claim.
            wait: wait until Ready.
            timeout: seconds to wait.

        Returns:
            The SandboxSnapshot (Ready with ``status.image`` when ``wait``).

        Raises:
            ValueError: an unknown mode or an invalid name.
            SnapshotUnavailableError: no SandboxSnapshot API, or no controller took it (it is
                deleted again).
            SnapshotFailedError: the snapshot failed (its reason says why:
                ``MemorySnapshotUnsupported`` when the node cannot checkpoint memory).
            SandboxTimeoutError: not Ready in time (it is kept).
        """
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        ns = self._ns(namespace)
        name = builders.validate_name(name or f"{sandbox}-{secrets.token_hex(4)}")
        pool = warm_pool or self._claim_pool(sandbox, ns)
        metadata: Obj = {"name": name, "namespace": ns}
        if pool:
            metadata["annotations"] = {SNAPSHOT_WARM_POOL_ANNOTATION: pool}
        body = {
            "apiVersion": api.EXTENSIONS_API_VERSION,
            "kind": api.KIND_SANDBOX_SNAPSHOT,
            "metadata": metadata,
            "spec": {"sandboxName": sandbox, "mode": mode},
        }
        with self._tracer.span("create_snapshot", {"sandbox.name": sandbox}):
            try:
                created = self._request("POST", SANDBOX_SNAPSHOTS, ns, verb="create", body=body)
            except NotFoundError as err:
                raise SnapshotUnavailableError(_api_missing(ns)) from err
            if not wait:
                return created
            return self._wait_snapshot(name, ns, timeout=timeout)

    def _wait_snapshot(self, name: str, ns: str, *, timeout: float) -> Obj:
        """Wait for a phase (else no controller runs: delete it), then for Ready."""
        try:
            self._wait(
                SANDBOX_SNAPSHOTS,
                name,
                namespace=ns,
                timeout=min(timeout, SNAPSHOT_ACK_TIMEOUT),
                done=lambda obj: bool(snapshot_phase(obj)),
                what="taken by a controller",
            )
        except SandboxTimeoutError as err:
            if timeout <= SNAPSHOT_ACK_TIMEOUT:
                raise
            self._delete(SANDBOX_SNAPSHOTS, name, namespace=ns, missing_ok=True)
            raise SnapshotUnavailableError(
                f"no snapshot controller took SandboxSnapshot {ns}/{name} within"
                f" {SNAPSHOT_ACK_TIMEOUT:g} s: {SET_UP_HINT}"
            ) from err
        return self.wait_snapshot_ready(name, namespace=ns, timeout=timeout)

    def _claim_pool(self, sandbox: str, ns: str) -> str | None:
        """The warm pool of the claim that owns the Sandbox, if one does."""
        try:
            obj = self._get(SANDBOXES, sandbox, namespace=ns)
        except NotFoundError:
            return None  # the controller fails the snapshot with SandboxNotFound
        for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
            if ref.get("kind") == api.KIND_SANDBOX_CLAIM:
                try:
                    claim = self._get(SANDBOX_CLAIMS, str(ref["name"]), namespace=ns)
                except NotFoundError:
                    return None
                pool = ((claim.get("spec") or {}).get("warmPoolRef") or {}).get("name")
                return str(pool) if pool else None
        return None

    def get_snapshot(self, name: str, *, namespace: str | None = None) -> Obj:
        """The SandboxSnapshot object."""
        return self._get(SANDBOX_SNAPSHOTS, name, namespace=self._ns(namespace))

    def list_snapshots(
        self,
        *,
        namespace: str | None = None,
        sandbox: str | None = None,
        label_selector: str | None = None,
    ) -> list[Obj]:
        """SandboxSnapshots of a namespace (of one source Sandbox when ``sandbox``).

        Raises:
            SnapshotUnavailableError: the cluster has no SandboxSnapshot API.
        """
        ns = self._ns(namespace)
        try:
            items = self._list(SANDBOX_SNAPSHOTS, namespace=ns, label_selector=label_selector)
        except NotFoundError as err:
            raise SnapshotUnavailableError(_api_missing(ns)) from err
        if sandbox is None:
            return items
        return [o for o in items if (o.get("spec") or {}).get("sandboxName") == sandbox]

    def wait_snapshot_ready(
        self,
        name: str,
        *,
        namespace: str | None = None,
        timeout: float = DEFAULT_SNAPSHOT_TIMEOUT,
    ) -> Obj:
        """Watch a snapshot until Ready (raises :class:`SnapshotFailedError` if it fails)."""
        return self._wait(
            SANDBOX_SNAPSHOTS,
            name,
            namespace=self._ns(namespace),
            timeout=timeout,
            done=_finished,
            what="Ready",
        )

    def delete_snapshot(
        self,
        name: str,
        *,
        namespace: str | None = None,
        wait: bool = False,
        timeout: float = 60.0,
        missing_ok: bool = False,
    ) -> None:
        """Delete a SandboxSnapshot; its finalizer deletes the image from the registry first
        (``wait`` waits for that)."""
        with self._tracer.span("delete_snapshot", {"sandbox.snapshot.name": name}):
            self._delete(
                SANDBOX_SNAPSHOTS,
                name,
                namespace=self._ns(namespace),
                missing_ok=missing_ok,
                wait=wait,
                timeout=timeout,
            )


def _api_missing(namespace: str) -> str:
    return (
        f"no SandboxSnapshot API here (the CRD {SANDBOX_SNAPSHOTS.plural}.{api.EXTENSIONS_GROUP}"
        f" is not installed, or namespace {namespace} does not exist): {SET_UP_HINT}"
    )
