"""In-memory stand-ins for the API server, informer caches and event recorder.

``FakeCluster`` implements the ``Client`` protocol (with merge patch, resourceVersion
conflicts, UID preconditions, finalizers holding deletions, AlreadyExists) and hands out
``Reader`` views of its store, so the Sandbox reconciler runs unchanged against it. Every
write is recorded so tests can assert exactly what was sent, and failures can be injected
per verb and resource.
"""

from __future__ import annotations

import copy
import datetime as dt
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.namehash import name_hash
from kube_agent_sandbox.controller.runtime.types import ApiError, Obj, Request, Resource
from kube_agent_sandbox.controller.sandbox.mergepatch import apply_merge_patch
from kube_agent_sandbox.controller.sandbox.pod import POD_NAME_HASH_INDEX, pod_name_hash_index
from kube_agent_sandbox.controller.sandbox.reconciler import SandboxReconciler
from kube_agent_sandbox.controller.sandbox.resources import PODS, PVCS, SANDBOXES, SERVICES

NOW = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
NOW_TEXT = "2026-01-02T03:04:05Z"
NS = "default"


@dataclass
class Call:
    """One recorded client call."""

    verb: str
    plural: str
    namespace: str
    name: str
    body: Any = None
    subresource: str | None = None
    field_manager: str | None = None
    preconditions: Mapping[str, str] | None = None


@dataclass
class Clock:
    """A settable clock."""

    now: dt.datetime = NOW

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)


class FakeReader:
    """A ``Reader`` over one resource of a FakeCluster (optionally through a transform)."""

    def __init__(
        self,
        cluster: FakeCluster,
        plural: str,
        *,
        indexes: Mapping[str, Callable[[Obj], list[str]]] | None = None,
        transform: Callable[[Obj], Obj] | None = None,
    ) -> None:
        self._cluster = cluster
        self._plural = plural
        self._indexes = dict(indexes or {})
        self._transform = transform

    def _view(self, obj: Obj) -> Obj:
        view = copy.deepcopy(obj)
        return self._transform(view) if self._transform else view

    def get(self, namespace: str, name: str) -> Obj | None:
        obj = self._cluster.store[self._plural].get((namespace, name))
        return None if obj is None else self._view(obj)

    def list(
        self, namespace: str | None = None, *, labels: Mapping[str, str] | None = None
    ) -> list[Obj]:
        found = []
        for (ns, _), obj in sorted(self._cluster.store[self._plural].items()):
            if namespace is not None and ns != namespace:
                continue
            obj_labels = obj.get("metadata", {}).get("labels") or {}
            if labels and any(obj_labels.get(k) != v for k, v in labels.items()):
                continue
            found.append(self._view(obj))
        return found

    def by_index(self, index: str, value: str) -> list[Obj]:
        func = self._indexes[index]  # KeyError for unknown indexes, like the informer
        return [
            self._view(obj)
            for _, obj in sorted(self._cluster.store[self._plural].items())
            if value in func(obj)
        ]


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


@dataclass
class FakeCluster:
    """An in-memory API server implementing the ``Client`` protocol."""

    store: dict[str, dict[tuple[str, str], Obj]] = field(
        default_factory=lambda: {r.plural: {} for r in (SANDBOXES, PODS, SERVICES, PVCS)}
    )
    calls: list[Call] = field(default_factory=list)
    failures: dict[tuple[str, str], list[BaseException]] = field(default_factory=dict)
    _counter: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    # --- test helpers -------------------------------------------------------------------------
    def fail(self, verb: str, plural: str, *errors: BaseException) -> None:
        """Make the next calls of ``verb`` on ``plural`` raise these errors, in order."""
        self.failures.setdefault((verb, plural), []).extend(errors)

    def writes(self, resource: Resource | str | None = None) -> list[Call]:
        """Recorded calls that change something (optionally of one resource)."""
        plural = resource.plural if isinstance(resource, Resource) else resource
        return [
            call
            for call in self.calls
            if call.verb in ("create", "update", "patch", "delete")
            and (plural is None or call.plural == plural)
        ]

    def clear_calls(self) -> None:
        self.calls.clear()

    def _next_rv(self) -> str:
        return str(next(self._counter))

    def add(self, resource: Resource, obj: Obj) -> Obj:
        """Store an object as if created by someone else (fills uid, rv, generation)."""
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("namespace", NS)
        meta.setdefault("uid", f"uid-{meta['name']}-{next(self._counter)}")
        meta.setdefault("creationTimestamp", NOW_TEXT)
        meta["resourceVersion"] = self._next_rv()
        if resource is SANDBOXES:
            meta.setdefault("generation", 1)
        obj.setdefault("apiVersion", resource.api_version)
        obj.setdefault("kind", resource.kind)
        self.store[resource.plural][(meta["namespace"], meta["name"])] = obj
        return copy.deepcopy(obj)

    def obj(self, resource: Resource, name: str, namespace: str = NS) -> Obj | None:
        found = self.store[resource.plural].get((namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def mutate(
        self, resource: Resource, name: str, func: Callable[[Obj], None], namespace: str = NS
    ) -> None:
        """Change a stored object in place (a kubelet or a user would), bumping its RV."""
        obj = self.store[resource.plural][(namespace, name)]
        func(obj)
        obj["metadata"]["resourceVersion"] = self._next_rv()

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
        def change(pod: Obj) -> None:
            status: Obj = {"phase": phase}
            status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
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
        return {
            "sandboxes": FakeReader(self, SANDBOXES.plural),
            "pods": FakeReader(
                self,
                PODS.plural,
                indexes={POD_NAME_HASH_INDEX: pod_name_hash_index},
                transform=pod_transform,
            ),
            "services": FakeReader(self, SERVICES.plural),
            "pvcs": FakeReader(self, PVCS.plural),
        }

    def reconciler(self, **kwargs: Any) -> SandboxReconciler:
        readers = self.readers(pod_transform=kwargs.pop("pod_transform", None))
        kwargs.setdefault("clock", Clock())
        return SandboxReconciler(self, **readers, **kwargs)

    def _maybe_fail(self, verb: str, plural: str) -> None:
        queue = self.failures.get((verb, plural))
        if queue:
            raise queue.pop(0)

    def _not_found(self, resource: Resource, name: str) -> ApiError:
        return ApiError(404, "NotFound", f'{resource.plural} "{name}" not found')

    # --- Client protocol ----------------------------------------------------------------------
    async def get(self, resource: Resource, namespace: str, name: str) -> Obj:
        self.calls.append(Call("get", resource.plural, namespace, name))
        self._maybe_fail("get", resource.plural)
        found = self.store[resource.plural].get((namespace, name))
        if found is None:
            raise self._not_found(resource, name)
        return copy.deepcopy(found)

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> Obj:
        self.calls.append(Call("list", resource.plural, namespace or "", ""))
        items = [
            copy.deepcopy(o)
            for (ns, _), o in self.store[resource.plural].items()
            if namespace is None or ns == namespace
        ]
        return {"items": items, "metadata": {}}

    async def create(
        self, resource: Resource, namespace: str, body: Obj, *, field_manager: str | None = None
    ) -> Obj:
        name = body.get("metadata", {}).get("name", "")
        self.calls.append(
            Call(
                "create",
                resource.plural,
                namespace,
                name,
                copy.deepcopy(body),
                field_manager=field_manager,
            )
        )
        self._maybe_fail("create", resource.plural)
        if (namespace, name) in self.store[resource.plural]:
            raise ApiError(409, "AlreadyExists", f'{resource.plural} "{name}" already exists')
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        meta["namespace"] = namespace
        meta["uid"] = f"uid-{name}-{next(self._counter)}"
        meta["resourceVersion"] = self._next_rv()
        meta["creationTimestamp"] = NOW_TEXT
        if resource is PODS:
            obj.setdefault("status", {"phase": "Pending"})
        if resource is SERVICES and obj.get("spec", {}).get("clusterIP") is None:
            obj["spec"]["clusterIP"] = "10.96.0.10"
        self.store[resource.plural][(namespace, name)] = obj
        return copy.deepcopy(obj)

    async def update(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        body: Obj,
        *,
        subresource: str | None = None,
        field_manager: str | None = None,
    ) -> Obj:
        self.calls.append(
            Call("update", resource.plural, namespace, name, copy.deepcopy(body), subresource)
        )
        self._maybe_fail("update", resource.plural)
        current = self.store[resource.plural].get((namespace, name))
        if current is None:
            raise self._not_found(resource, name)
        rv = body.get("metadata", {}).get("resourceVersion")
        if rv is not None and rv != current["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {resource.plural} "{name}": the object has '
                "been modified; please apply your changes to the latest version and try again",
            )
        obj = copy.deepcopy(body)
        obj["metadata"]["uid"] = current["metadata"]["uid"]
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self.store[resource.plural][(namespace, name)] = obj
        return copy.deepcopy(obj)

    async def patch(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        patch: Obj | Sequence[Obj],
        *,
        patch_type: str = "merge",
        subresource: str | None = None,
        field_manager: str | None = None,
    ) -> Obj:
        assert patch_type == "merge", patch_type
        self.calls.append(
            Call("patch", resource.plural, namespace, name, copy.deepcopy(patch), subresource)
        )
        self._maybe_fail("patch", resource.plural + (f"/{subresource}" if subresource else ""))
        current = self.store[resource.plural].get((namespace, name))
        if current is None:
            raise self._not_found(resource, name)
        assert isinstance(patch, dict)
        if subresource == "status":
            patched = copy.deepcopy(current)
            patched["status"] = apply_merge_patch(
                current.get("status") or {}, patch.get("status") or {}
            )
        else:
            body = {k: v for k, v in patch.items() if k != "status"}
            patched = apply_merge_patch(current, body)
        rv = (patch.get("metadata") or {}).get("resourceVersion")
        if rv is not None and rv != current["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", "the object has been modified")
        if resource is SANDBOXES and patched.get("spec") != current.get("spec"):
            patched["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
        if patched != current:
            patched["metadata"]["resourceVersion"] = self._next_rv()
        self.store[resource.plural][(namespace, name)] = patched
        return copy.deepcopy(patched)

    async def delete(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        *,
        propagation_policy: str | None = None,
        preconditions: Mapping[str, str] | None = None,
    ) -> Obj | None:
        self.calls.append(
            Call("delete", resource.plural, namespace, name, preconditions=preconditions)
        )
        self._maybe_fail("delete", resource.plural)
        current = self.store[resource.plural].get((namespace, name))
        if current is None:
            raise self._not_found(resource, name)
        if preconditions and preconditions.get("uid") not in (None, current["metadata"]["uid"]):
            raise ApiError(409, "Conflict", "Precondition failed: UID in precondition mismatch")
        if current["metadata"].get("finalizers"):
            current["metadata"].setdefault("deletionTimestamp", NOW_TEXT)
            return copy.deepcopy(current)
        del self.store[resource.plural][(namespace, name)]
        return copy.deepcopy(current)


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
