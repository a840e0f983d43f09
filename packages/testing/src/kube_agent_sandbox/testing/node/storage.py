"""Volumes for the real node: a default StorageClass and a tiny hostPath provisioner.

Sandboxes ask for storage through ``volumeClaimTemplates``, so their PVCs must bind without a
cloud disk. The provisioner watches PersistentVolumeClaims of its StorageClass, creates for each
a PersistentVolume on a folder of the node (pre-bound to the claim, pinned to the node), and
deletes volume and folder once the claim is gone (reclaim policy ``Delete``), the job that an
external provisioner does in a production cluster. Claims bind at once (``Immediate``).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

_log = logging.getLogger(__name__)

STORAGE_CLASS = "agent-sandbox-local"
PROVISIONER = "agent-sandbox.dev/local-hostpath"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"


def storage_class_manifest(name: str = STORAGE_CLASS) -> dict[str, Any]:
    """The default StorageClass served by :class:`HostPathProvisioner`.

    Args:
        name: StorageClass name.

    Returns:
        The manifest.
    """
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name, "annotations": {DEFAULT_CLASS_ANNOTATION: "true"}},
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    }


def volume_for_claim(
    claim: dict[str, Any], *, node_name: str, base_dir: Path, storage_class: str
) -> dict[str, Any]:
    """The PersistentVolume that serves ``claim`` from a folder of the node.

    Args:
        claim: The PVC object (API JSON).
        node_name: The node that holds the folder.
        base_dir: Parent folder of every volume's folder.
        storage_class: StorageClass of the claim.

    Returns:
        The PV manifest, pre-bound to the claim.

    Raises:
        ValueError: If the claim has no storage request.
    """
    metadata = claim["metadata"]
    spec = claim.get("spec") or {}
    request = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    if not request:
        raise ValueError(f"claim {metadata['namespace']}/{metadata['name']} requests no storage")
    uid = metadata["uid"]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": f"pvc-{uid}",
            "annotations": {PROVISIONED_BY: PROVISIONER},
        },
        "spec": {
            "capacity": {"storage": request},
            "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": storage_class,
            "volumeMode": spec.get("volumeMode") or "Filesystem",
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": metadata["namespace"],
                "name": metadata["name"],
                "uid": uid,
            },
            "hostPath": {"path": str(base_dir / uid), "type": "DirectoryOrCreate"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "kubernetes.io/hostname",
                                    "operator": "In",
                                    "values": [node_name],
                                }
                            ]
                        }
                    ]
                }
            },
        },
    }


def wants_volume(claim: dict[str, Any], *, storage_class: str) -> bool:
    """Whether ``claim`` is an unbound claim of our StorageClass.

    Args:
        claim: The PVC object.
        storage_class: Our StorageClass name.

    Returns:
        True when the provisioner should create a volume for it.
    """
    spec = claim.get("spec") or {}
    status = claim.get("status") or {}
    return (
        spec.get("storageClassName") == storage_class
        and not spec.get("volumeName")
        and status.get("phase", "Pending") == "Pending"
        and not (claim.get("metadata") or {}).get("deletionTimestamp")
    )


class HostPathProvisioner:
    """Provisions and deletes hostPath volumes for claims of one StorageClass."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        node_name: str,
        base_dir: Path,
        storage_class: str = STORAGE_CLASS,
    ) -> None:
        """Prepare the provisioner.

        Args:
            api_client: Client with rights on PVs, PVCs and StorageClasses (admin).
            node_name: The node whose folders hold the volumes.
            base_dir: Parent folder of the volumes' folders.
            storage_class: StorageClass to serve.
        """
        self._core = client.CoreV1Api(api_client)
        self._storage = client.StorageV1Api(api_client)
        self.node_name = node_name
        self.base_dir = base_dir
        self.storage_class = storage_class
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._watches: list[watch.Watch] = []

    def start(self) -> None:
        """Create the StorageClass and start watching claims and volumes."""
        self.base_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._storage.create_storage_class(storage_class_manifest(self.storage_class))  # type: ignore[arg-type]
        except ApiException as err:
            if err.status != 409:
                raise
        self._threads = [
            threading.Thread(
                target=self._watch_loop,
                args=(self._core.list_persistent_volume_claim_for_all_namespaces,),
                name="provisioner-watch-pvc",
                daemon=True,
            ),
            threading.Thread(
                target=self._watch_loop,
                args=(self._core.list_persistent_volume,),
                name="provisioner-watch-pv",
                daemon=True,
            ),
            threading.Thread(target=self._work_loop, name="provisioner", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        self._wake.set()

    def stop(self) -> None:
        """Stop the watches and the worker."""
        self._stop.set()
        self._wake.set()
        for stream in self._watches:
            stream.stop()  # type: ignore[no-untyped-call]
        for thread in self._threads:
            # Watches wake up only on their next event; the threads are daemons and exit on
            # their own once they see the stop flag.
            thread.join(timeout=0.2)
        self._threads = []

    def _watch_loop(self, list_call: Callable[..., Any]) -> None:
        while not self._stop.is_set():
            stream = watch.Watch()  # type: ignore[no-untyped-call]
            self._watches.append(stream)
            try:
                for _ in stream.stream(list_call, timeout_seconds=60):  # type: ignore[no-untyped-call]
                    self._wake.set()
                    if self._stop.is_set():
                        break
            except Exception as err:  # reconnect on any watch failure while running
                if not self._stop.is_set():
                    _log.debug("provisioner watch restarts: %s", err)
                    self._stop.wait(1)
            finally:
                self._watches.remove(stream)
            self._wake.set()

    def _work_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.reconcile()
            except Exception:  # keep serving; the next event retries
                _log.exception("provisioner pass failed")
                self._stop.wait(1)
                self._wake.set()

    def reconcile(self) -> None:
        """One pass: create volumes for waiting claims, delete released volumes."""
        api = self._core.api_client
        claims = api.sanitize_for_serialization(
            self._core.list_persistent_volume_claim_for_all_namespaces()
        )["items"]
        volumes = api.sanitize_for_serialization(self._core.list_persistent_volume())["items"]
        ours = {
            v["metadata"]["name"]: v
            for v in volumes
            if (v["metadata"].get("annotations") or {}).get(PROVISIONED_BY) == PROVISIONER
        }
        for claim in claims:
            if not wants_volume(claim, storage_class=self.storage_class):
                continue
            manifest = volume_for_claim(
                claim,
                node_name=self.node_name,
                base_dir=self.base_dir,
                storage_class=self.storage_class,
            )
            if manifest["metadata"]["name"] in ours:
                continue
            try:
                self._core.create_persistent_volume(manifest)  # type: ignore[arg-type]
                _log.info(
                    "provisioned %s for %s/%s",
                    manifest["metadata"]["name"],
                    claim["metadata"]["namespace"],
                    claim["metadata"]["name"],
                )
            except ApiException as err:
                if err.status != 409:
                    raise
        for name, volume in ours.items():
            phase = (volume.get("status") or {}).get("phase")
            if phase not in ("Released", "Failed"):
                continue
            path = Path(volume["spec"]["hostPath"]["path"])
            if path.parent == self.base_dir:
                shutil.rmtree(path, ignore_errors=True)
            with contextlib.suppress(ApiException):
                self._core.delete_persistent_volume(name)
            _log.info("deleted released volume %s", name)
