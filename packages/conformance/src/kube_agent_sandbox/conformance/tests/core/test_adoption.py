"""Adoption of pods, PVCs and Services that exist first."""

from __future__ import annotations

from typing import Any

import pytest

from kube_agent_sandbox.conformance import manifests as m
from kube_agent_sandbox.conformance.client import Kube
from kube_agent_sandbox.conformance.tests.core.support import (
    ADOPTABLE_LABEL,
    NAME_HASH_LABEL,
    condition_view,
    create_sandbox,
    owner_ref,
    wait_pod,
    wait_ready,
    wait_sandbox,
)

POD_STATE_UNKNOWN = (
    "Unknown",
    "PodSchedulingUnknown",
    "Pod state is unknown. Pod scheduling cannot be determined",
)


def _pod(
    name: str, image: str, *, labels: dict[str, str] | None = None, **meta: Any
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, **meta}
    if labels:
        metadata["labels"] = labels
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": [m.container(image=image)]},
    }


def _reconciler_error(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    return wait_sandbox(
        kube,
        namespace,
        name,
        lambda s: m.has_condition(s, "Ready", "False", "ReconcilerError"),
        what="Ready False / ReconcilerError",
    )


@pytest.mark.spec("3.3")
@pytest.mark.parametrize(
    "label",
    [
        pytest.param({ADOPTABLE_LABEL: "true"}, id="adoptable"),
        pytest.param({NAME_HASH_LABEL: m.name_hash("taken")}, id="tracking-label"),
    ],
)
def test_unowned_pod_with_authorization_label_is_adopted(
    kube: Kube, namespace: str, workload_image: str, label: dict[str, str]
) -> None:
    """The existing pod gets the controller ref and the tracking label; it is not replaced."""
    existing = kube.create(_pod("taken", workload_image, labels=label), namespace=namespace)
    created = create_sandbox(kube, namespace, "taken", image=workload_image)
    pod = wait_pod(kube, namespace, "taken", lambda p: m.controller_ref(p) is not None)
    assert pod["metadata"]["uid"] == existing["metadata"]["uid"]
    assert m.controller_ref(pod) == owner_ref(created)
    assert m.labels_of(pod)[NAME_HASH_LABEL] == m.name_hash("taken")
    wait_ready(kube, namespace, "taken")


@pytest.mark.spec("3.3", "3.7", "delta-3.1")
def test_unowned_pod_without_authorization_is_refused(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """No adoptable or tracking label: the pod is left alone and Ready reports the error."""
    kube.create(_pod("squat", workload_image, labels={"app": "other"}), namespace=namespace)
    create_sandbox(kube, namespace, "squat", image=workload_image)
    sandbox = _reconciler_error(kube, namespace, "squat")
    assert condition_view(m.condition(sandbox, "Ready")) == (
        "False",
        "ReconcilerError",
        'Error seen: cannot adopt unowned pod "squat": missing required pool authorization '
        'label ("agents.x-k8s.io/adoptable") or sandbox tracking label '
        '("agents.x-k8s.io/sandbox-name-hash")',
    )
    assert condition_view(m.condition(sandbox, "PodScheduled")) == POD_STATE_UNKNOWN
    assert condition_view(m.condition(sandbox, "Suspended")) == (
        "False",
        "NotSuspended",
        "Sandbox is not suspended",
    )
    status = sandbox["status"]
    assert not status.get("podIPs")
    assert not status.get("nodeName")
    pod = kube.get("v1", "Pod", "squat", namespace)
    assert not pod["metadata"].get("ownerReferences")
    assert m.labels_of(pod) == {"app": "other"}


@pytest.mark.spec("3.3", "3.7")
def test_pod_controlled_by_another_object_is_refused(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """A pod with another controller is never taken over; the error names the owner."""
    owner = kube.create(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "boss"}},
        namespace=namespace,
    )
    foreign = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "boss",
        "uid": owner["metadata"]["uid"],
        "controller": True,
    }
    kube.create(
        _pod("owned", workload_image, labels={ADOPTABLE_LABEL: "true"}, ownerReferences=[foreign]),
        namespace=namespace,
    )
    create_sandbox(kube, namespace, "owned", image=workload_image)
    sandbox = _reconciler_error(kube, namespace, "owned")
    uid = owner["metadata"]["uid"]
    assert condition_view(m.condition(sandbox, "Ready")) == (
        "False",
        "ReconcilerError",
        f'Error seen: pod "owned" is owned by ConfigMap/boss (UID: {uid}), not by sandbox "owned"',
    )
    assert condition_view(m.condition(sandbox, "PodScheduled")) == POD_STATE_UNKNOWN
    pod = kube.get("v1", "Pod", "owned", namespace)
    assert pod["metadata"]["ownerReferences"] == [foreign]


@pytest.mark.spec("3.8", "3.3", "delta-3.1")
def test_suspended_sandbox_leaves_an_unowned_pod_alone(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """Created Suspended next to an unowned pod: PodNotOwned, the pod is not deleted."""
    existing = kube.create(_pod("guest", workload_image), namespace=namespace)
    create_sandbox(kube, namespace, "guest", image=workload_image, operatingMode="Suspended")
    sandbox = wait_sandbox(
        kube,
        namespace,
        "guest",
        lambda s: m.has_condition(s, "Suspended", "False", "PodNotOwned"),
        what="Suspended False / PodNotOwned",
    )
    assert condition_view(m.condition(sandbox, "Suspended")) == (
        "False",
        "PodNotOwned",
        "Refused to delete pod because it is not owned by this sandbox",
    )
    assert condition_view(m.condition(sandbox, "Ready")) == (
        "False",
        "SandboxSuspended",
        "Sandbox is suspending",
    )
    assert "PodScheduled" not in m.condition_types(sandbox)
    assert sandbox["status"]["selector"] == f"{NAME_HASH_LABEL}={m.name_hash('guest')}"
    assert not sandbox["status"].get("podIPs")
    kube.consistently(
        lambda: (
            (kube.get_or_none("v1", "Pod", "guest", namespace) or {}).get("metadata", {}).get("uid")
            == existing["metadata"]["uid"]
        ),
        seconds=2,
        what="the unowned pod is kept",
    )


@pytest.mark.spec("3.4")
def test_adoptable_pvc_is_adopted(kube: Kube, namespace: str, workload_image: str) -> None:
    """An existing adoptable PVC named ``<template>-<sandbox>`` gets the controller ref."""
    vct = m.volume_claim_template("data")
    existing = kube.create(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data-keep", "labels": {ADOPTABLE_LABEL: "true"}},
            "spec": vct["spec"],
        },
        namespace=namespace,
    )
    created = create_sandbox(
        kube, namespace, "keep", image=workload_image, volumeClaimTemplates=[vct]
    )
    pvc = kube.wait_for(
        "v1",
        "PersistentVolumeClaim",
        "data-keep",
        namespace,
        lambda p: m.controller_ref(p) is not None,
        what="PVC adopted",
    )
    assert pvc is not None
    assert pvc["metadata"]["uid"] == existing["metadata"]["uid"]
    assert m.controller_ref(pvc) == owner_ref(created)


@pytest.mark.spec("3.4", "3.7")
def test_unowned_pvc_without_authorization_is_refused(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """A PVC without adoptable/tracking label is not adopted; Ready reports the error."""
    vct = m.volume_claim_template("data")
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data-stolen"},
            "spec": vct["spec"],
        },
        namespace=namespace,
    )
    create_sandbox(kube, namespace, "stolen", image=workload_image, volumeClaimTemplates=[vct])
    sandbox = _reconciler_error(kube, namespace, "stolen")
    ready = m.condition(sandbox, "Ready")
    assert ready is not None
    assert ready["message"].startswith('Error seen: cannot adopt unowned PVC "data-stolen"'), ready
    pvc = kube.get("v1", "PersistentVolumeClaim", "data-stolen", namespace)
    assert not pvc["metadata"].get("ownerReferences")


def _service(name: str, *, labels: dict[str, str], cluster_ip: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"ports": [{"port": 80}], "selector": {"app": "x"}}
    if cluster_ip is not None:
        spec["clusterIP"] = cluster_ip
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }


@pytest.mark.spec("3.5")
def test_adoptable_headless_service_is_adopted(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """``service: true`` adopts an unowned headless Service and rewrites its selector."""
    existing = kube.create(
        _service("shared", labels={ADOPTABLE_LABEL: "true"}, cluster_ip="None"), namespace=namespace
    )
    created = create_sandbox(kube, namespace, "shared", image=workload_image, service=True)
    tracking = {NAME_HASH_LABEL: m.name_hash("shared")}
    service = kube.wait_for(
        "v1",
        "Service",
        "shared",
        namespace,
        lambda s: s is not None and m.controller_ref(s) is not None,
        what="Service adopted",
    )
    assert service is not None
    assert service["metadata"]["uid"] == existing["metadata"]["uid"]
    assert m.controller_ref(service) == owner_ref(created)
    assert service["spec"]["selector"] == tracking
    assert m.labels_of(service)[NAME_HASH_LABEL] == tracking[NAME_HASH_LABEL]
    sandbox = wait_ready(kube, namespace, "shared")
    assert sandbox["status"]["service"] == "shared"


@pytest.mark.spec("3.5", "3.7")
def test_service_with_cluster_ip_cannot_be_adopted(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """An adoptable Service that has a ClusterIP is refused with the spec's message."""
    existing = kube.create(
        _service("vip", labels={ADOPTABLE_LABEL: "true"}, cluster_ip=None), namespace=namespace
    )
    ip = existing["spec"]["clusterIP"]
    create_sandbox(kube, namespace, "vip", image=workload_image, service=True)
    sandbox = _reconciler_error(kube, namespace, "vip")
    ready = m.condition(sandbox, "Ready")
    assert ready is not None
    assert (
        f'cannot adopt service "vip": ClusterIP is "{ip}" (expected "None", field is immutable)'
        in ready["message"]
    ), ready
    assert ready["message"].startswith("Error seen: "), ready
    assert not kube.get("v1", "Service", "vip", namespace)["metadata"].get("ownerReferences")


@pytest.mark.spec("3.5", "3.7")
def test_unowned_service_is_ignored_when_service_is_unset(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """``service`` unset: an unowned Service of that name is neither adopted nor reported."""
    kube.create(
        _service("bystander", labels={ADOPTABLE_LABEL: "true"}, cluster_ip="None"),
        namespace=namespace,
    )
    create_sandbox(kube, namespace, "bystander", image=workload_image)
    sandbox = wait_ready(kube, namespace, "bystander")
    assert condition_view(m.condition(sandbox, "Ready")) == (
        "True",
        "DependenciesReady",
        "Pod is Ready",
    )
    assert not sandbox["status"].get("service")
    service = kube.get("v1", "Service", "bystander", namespace)
    assert not service["metadata"].get("ownerReferences")
    assert service["spec"]["selector"] == {"app": "x"}
