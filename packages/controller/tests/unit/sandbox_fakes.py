"""The Sandbox reconciler's test cluster, builders and small fakes.

``FakeCluster`` is the runtime's in-memory API server (``FakeApi``: merge patch,
resourceVersion conflicts, UID preconditions, finalizers holding deletions, AlreadyExists,
failure injection per verb and resource, every request recorded with its body) set up the way
these tests expect: timestamps at ``NOW``, objects in namespace ``default``, new Pods
``Pending`` and new Services given a cluster IP. It hands out ``Reader`` views of its store and
a ``SandboxReconciler`` wired to them, so the reconciler runs unchanged against it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.namehash import name_hash
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.api.rest import PODS, PVCS, SERVICES
from kube_agent_sandbox.controller.runtime import Call, FakeApi, FakeReader, Obj, Request
from kube_agent_sandbox.controller.sandbox.pod import POD_NAME_HASH_INDEX, pod_name_hash_index
from kube_agent_sandbox.controller.sandbox.reconciler import SandboxReconciler

__all__ = [
    "NOW",
    "NOW_TEXT",
    "NS",
    "Call",
    "Clock",
    "FakeCluster",
    "FakeReader",
    "FakeRecorder",
    "conditions_by_type",
    "hash_label",
    "make_pod",
    "make_sandbox",
    "make_service",
    "owner_ref",
    "request",
    "sandbox_ref",
    "strip_ltt",
]

NOW = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
NOW_TEXT = "2026-01-02T03:04:05Z"
NS = "default"
CLUSTER_IP = "10.96.0.10"


@dataclass
class Clock:
    """A settable clock."""

    now: dt.datetime = NOW

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock forward."""
        self.now += dt.timedelta(seconds=seconds)


class FakeRecorder:
    """Collects events."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def event(self, obj: Obj, *, type_: str, reason: str, action: str, note: str) -> None:
        self.events.append(
            {
                "object": obj.get("metadata", {}).get("name"),
                "type": type_,
                "reason": reason,
                "action": action,
                "note": note,
            }
        )


def _start_pending(pod: Obj) -> None:
    pod.setdefault("status", {"phase": "Pending"})


def _allocate_cluster_ip(service: Obj) -> None:
    spec = service.setdefault("spec", {})
    if spec.get("clusterIP") is None:
        spec["clusterIP"] = CLUSTER_IP


class FakeCluster(FakeApi):
    """The runtime's ``FakeApi`` as the Sandbox reconciler's API server (see module docstring).

    Everything ``FakeApi`` offers applies: ``add``, ``obj``, ``mutate``, ``fail``, ``writes``,
    ``clear_calls``, ``calls``, ``on_request``.
    """

    def __init__(self) -> None:
        super().__init__(
            clock=lambda: NOW,
            default_namespace=NS,
            defaults={PODS: _start_pending, SERVICES: _allocate_cluster_ip},
        )

    @property
    def store(self) -> dict[str, dict[tuple[str, str], Obj]]:
        """The live stores of the four kinds by plural, keyed by ``(namespace, name)``."""
        return {r.plural: self.contents(r) for r in (SANDBOXES, PODS, SERVICES, PVCS)}

    def set_pod_status(
        self,
        name: str,
        *,
        phase: str = "Running",
        ready: bool = True,
        ips: Sequence[str] = ("10.0.0.1",),
        node: str | None = "node-1",
        namespace: str = NS,
    ) -> None:
        """Set a stored Pod's status as scheduler and kubelet would (phase, Ready, IPs, node).

        A Pod with a node also gets the scheduler's ``PodScheduled=True`` (no reason).
        """

        def change(pod: Obj) -> None:
            status: Obj = {"phase": phase}
            status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
            if node:
                status["conditions"].insert(0, {"type": "PodScheduled", "status": "True"})
            if ips:
                status["podIPs"] = [{"ip": ip} for ip in ips]
                status["podIP"] = ips[0]
            pod["status"] = status
            if node:
                pod.setdefault("spec", {})["nodeName"] = node

        self.mutate(PODS, name, change, namespace)

    def readers(
        self, *, pod_transform: Callable[[Obj], Obj] | None = None
    ) -> dict[str, FakeReader]:
        """Cache views of the four kinds, by the reconciler's keyword; pods get the hash index."""
        return {
            "sandboxes": self.reader(SANDBOXES),
            "pods": self.reader(
                PODS,
                indexes={POD_NAME_HASH_INDEX: pod_name_hash_index},
                transform=pod_transform,
            ),
            "services": self.reader(SERVICES),
            "pvcs": self.reader(PVCS),
        }

    def reconciler(self, **kwargs: Any) -> SandboxReconciler:
        """A SandboxReconciler on this cluster (``pod_transform`` goes to the pods reader)."""
        readers = self.readers(pod_transform=kwargs.pop("pod_transform", None))
        kwargs.setdefault("clock", Clock())
        return SandboxReconciler(
            self,
            sandboxes=readers["sandboxes"],
            pods=readers["pods"],
            services=readers["services"],
            pvcs=readers["pvcs"],
            **kwargs,
        )


# --- object builders ---------------------------------------------------------------------------


def make_sandbox(
    name: str = "sandbox-name",
    *,
    namespace: str = NS,
    service: bool | None = None,
    mode: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    template_labels: Mapping[str, str] | None = None,
    template_annotations: Mapping[str, str] | None = None,
    containers: list[Obj] | None = None,
    init_containers: list[Obj] | None = None,
    volumes: list[Obj] | None = None,
    vcts: list[Obj] | None = None,
    shutdown_time: str | None = None,
    shutdown_policy: str | None = None,
    owner: Obj | None = None,
    status: Obj | None = None,
    generation: int = 1,
) -> Obj:
    """A Sandbox dict as the API server would return it."""
    pod_spec: Obj = {"containers": containers or [{"name": "main", "image": "pause"}]}
    if init_containers:
        pod_spec["initContainers"] = init_containers
    if volumes:
        pod_spec["volumes"] = volumes
    template: Obj = {"spec": pod_spec}
    tmeta: Obj = {}
    if template_labels:
        tmeta["labels"] = dict(template_labels)
    if template_annotations:
        tmeta["annotations"] = dict(template_annotations)
    if tmeta:
        template["metadata"] = tmeta
    spec: Obj = {"podTemplate": template, "shutdownPolicy": shutdown_policy or "Retain"}
    if service is not None:
        spec["service"] = service
    if mode is not None:
        spec["operatingMode"] = mode
    if vcts is not None:
        spec["volumeClaimTemplates"] = vcts
    if shutdown_time is not None:
        spec["shutdownTime"] = shutdown_time
    meta: Obj = {"name": name, "namespace": namespace, "generation": generation}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    if owner:
        meta["ownerReferences"] = [owner]
    sandbox: Obj = {
        "apiVersion": SANDBOXES.api_version,
        "kind": "Sandbox",
        "metadata": meta,
        "spec": spec,
    }
    if status is not None:
        sandbox["status"] = status
    return sandbox


def owner_ref(kind: str, name: str, uid: str, *, api_version: str | None = None) -> Obj:
    """A controller ownerReference."""
    if api_version is None:
        api_version = (
            c.SANDBOX_API_VERSION if kind == "Sandbox" else f"{c.EXTENSIONS_GROUP}/{c.V1BETA1}"
        )
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def sandbox_ref(sandbox: Obj) -> Obj:
    """The controller reference of a stored Sandbox."""
    meta = sandbox["metadata"]
    return owner_ref("Sandbox", meta["name"], meta["uid"])


def make_pod(
    name: str,
    *,
    namespace: str = NS,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    owner: Obj | None = None,
    phase: str | None = None,
    finalizers: list[str] | None = None,
) -> Obj:
    """A Pod dict."""
    meta: Obj = {"name": name, "namespace": namespace}
    if labels is not None:
        meta["labels"] = dict(labels)
    if annotations is not None:
        meta["annotations"] = dict(annotations)
    if owner is not None:
        meta["ownerReferences"] = [owner]
    if finalizers:
        meta["finalizers"] = finalizers
    pod: Obj = {"metadata": meta, "spec": {"containers": [{"name": "main", "image": "pause"}]}}
    if phase:
        pod["status"] = {"phase": phase}
    return pod


def make_service(
    name: str,
    *,
    namespace: str = NS,
    labels: Mapping[str, str] | None = None,
    owner: Obj | None = None,
    selector: Mapping[str, str] | None = None,
    ports: list[Obj] | None = None,
    cluster_ip: str = "None",
) -> Obj:
    """A Service dict."""
    meta: Obj = {"name": name, "namespace": namespace}
    if labels is not None:
        meta["labels"] = dict(labels)
    if owner is not None:
        meta["ownerReferences"] = [owner]
    spec: Obj = {"clusterIP": cluster_ip}
    if selector is not None:
        spec["selector"] = dict(selector)
    if ports is not None:
        spec["ports"] = ports
    return {"metadata": meta, "spec": spec}


def hash_label(name: str = "sandbox-name") -> dict[str, str]:
    """``{tracking label: name_hash(name)}``."""
    return {c.LABEL_SANDBOX_NAME_HASH: name_hash(name)}


def request(name: str = "sandbox-name", namespace: str = NS) -> Request:
    return Request(namespace, name)


def conditions_by_type(obj: Obj) -> dict[str, Obj]:
    """Status conditions keyed by type."""
    return {cond["type"]: cond for cond in (obj.get("status") or {}).get("conditions") or ()}


def strip_ltt(conditions: list[Obj]) -> list[Obj]:
    """Conditions without lastTransitionTime (as the e2e tests compare them)."""
    return [{k: v for k, v in cond.items() if k != "lastTransitionTime"} for cond in conditions]
