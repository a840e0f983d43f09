"""Builders and waits shared by the core profile's tests.

Every core test creates a Sandbox and waits for the implementation to reach some state; these
helpers keep each test down to what it checks. Strings are the spec's, written literally.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kube_agent_sandbox.conformance import manifests as m
from kube_agent_sandbox.conformance.client import Kube

Obj = dict[str, Any]

SANDBOX_API = "agents.x-k8s.io/v1beta1"
SANDBOX_ALPHA_API = "agents.x-k8s.io/v1alpha1"
NAME_HASH_LABEL = "agents.x-k8s.io/sandbox-name-hash"
ADOPTABLE_LABEL = "agents.x-k8s.io/adoptable"
CREATED_BY_LABEL = "agents.x-k8s.io/created-by"
POD_NAME_ANNOTATION = "agents.x-k8s.io/pod-name"
PROPAGATED_LABELS = "agents.x-k8s.io/propagated-labels"
PROPAGATED_ANNOTATIONS = "agents.x-k8s.io/propagated-annotations"


def create_sandbox(
    kube: Kube,
    namespace: str,
    name: str,
    *,
    image: str,
    template: Mapping[str, Any] | None = None,
    **spec: Any,
) -> Obj:
    """Create a v1beta1 Sandbox (default pod template with ``image``); return it."""
    body = m.sandbox(name, template=template or m.pod_template(image=image), **spec)
    return kube.create(body, namespace=namespace)


def get_sandbox(kube: Kube, namespace: str, name: str) -> Obj:
    """Read a Sandbox through v1beta1."""
    return kube.get(SANDBOX_API, "Sandbox", name, namespace)


def wait_sandbox(
    kube: Kube,
    namespace: str,
    name: str,
    predicate: Callable[[Obj], bool],
    *,
    what: str,
    timeout: float | None = None,
) -> Obj:
    """Wait until the Sandbox exists and ``predicate`` holds; return it."""
    found = kube.wait_for(
        SANDBOX_API,
        "Sandbox",
        name,
        namespace,
        lambda obj: obj is not None and predicate(obj),
        timeout=timeout,
        what=f"Sandbox {name}: {what}",
    )
    assert found is not None
    return found


def wait_condition(
    kube: Kube,
    namespace: str,
    name: str,
    type_: str,
    *,
    status: str | None = None,
    reason: str | None = None,
    timeout: float | None = None,
) -> Obj:
    """Wait until the Sandbox has a condition of ``type_`` with ``status``/``reason``."""
    return wait_sandbox(
        kube,
        namespace,
        name,
        lambda obj: m.has_condition(obj, type_, status, reason),
        what=f"condition {type_} status={status} reason={reason}",
        timeout=timeout,
    )


def wait_ready(kube: Kube, namespace: str, name: str) -> Obj:
    """Wait until the Sandbox is Ready=True (reason ``DependenciesReady``)."""
    return wait_condition(kube, namespace, name, "Ready", status="True", reason="DependenciesReady")


def wait_pod(kube: Kube, namespace: str, name: str, predicate: Callable[[Obj], bool]) -> Obj:
    """Wait until a pod exists and ``predicate`` holds; return it."""
    found = kube.wait_for(
        "v1", "Pod", name, namespace, lambda p: p is not None and predicate(p), what=f"pod {name}"
    )
    assert found is not None
    return found


def owner_ref(sandbox: Obj) -> Obj:
    """The controller ownerReference the spec prescribes to a v1beta1 Sandbox."""
    return {
        "apiVersion": SANDBOX_API,
        "kind": "Sandbox",
        "name": sandbox["metadata"]["name"],
        "uid": sandbox["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def condition_view(cond: Obj | None) -> tuple[str, str, str] | None:
    """``(status, reason, message)`` of a condition, for compact assertions."""
    if cond is None:
        return None
    return (cond.get("status", ""), cond.get("reason", ""), cond.get("message", ""))


def unschedulable_template(image: str) -> Obj:
    """A pod template no node matches (the pod stays Pending, unscheduled)."""
    return m.pod_template(
        image=image, nodeSelector={"conformance.agents.x-k8s.io/no-such-node": "true"}
    )
