"""Suspend and resume a Sandbox."""

from __future__ import annotations

from typing import Any

import pytest

from kube_agent_sandbox.conformance import manifests as m
from kube_agent_sandbox.conformance.client import Kube
from kube_agent_sandbox.conformance.tests.core.support import (
    NAME_HASH_LABEL,
    POD_NAME_ANNOTATION,
    SANDBOX_API,
    condition_view,
    create_sandbox,
    wait_pod,
    wait_sandbox,
)

SUSPENDED_DONE = ("True", "PodTerminated", "Pod has been terminated. Sandbox is suspended")


def _suspend(kube: Kube, namespace: str, name: str) -> None:
    kube.patch(SANDBOX_API, "Sandbox", name, namespace, {"spec": {"operatingMode": "Suspended"}})


def _suspended(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    return wait_sandbox(
        kube,
        namespace,
        name,
        lambda s: condition_view(m.condition(s, "Suspended")) == SUSPENDED_DONE,
        what="Suspended True / PodTerminated",
    )


@pytest.mark.spec("3.8", "3.7", "delta-3.1")
def test_suspend_deletes_the_pod_and_keeps_service_and_pvcs(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """Suspended: pod gone, Service and PVC kept, conditions and status as the spec says."""
    create_sandbox(
        kube,
        namespace,
        "nap",
        image=workload_image,
        service=True,
        volumeClaimTemplates=[m.volume_claim_template("data")],
    )
    # Not Ready: on a cluster without a volume provisioner the pod waits for its PVC.
    wait_pod(kube, namespace, "nap", lambda p: True)
    ready = wait_sandbox(
        kube, namespace, "nap", lambda s: bool(m.condition(s, "Suspended")), what="conditions"
    )
    pvc = kube.get("v1", "PersistentVolumeClaim", "data-nap", namespace)
    service = kube.get("v1", "Service", "nap", namespace)
    ready_suspended_ltt = m.condition(ready, "Suspended")["lastTransitionTime"]  # type: ignore[index]

    _suspend(kube, namespace, "nap")
    sandbox = _suspended(kube, namespace, "nap")
    assert kube.get_or_none("v1", "Pod", "nap", namespace) is None
    assert m.condition_types(sandbox) == ["Suspended", "Ready"]
    assert condition_view(m.condition(sandbox, "Ready")) == (
        "False",
        "SandboxSuspended",
        "Sandbox is suspended",
    )
    status = sandbox["status"]
    assert not status.get("podIPs")
    assert not status.get("nodeName")
    assert status["selector"] == f"{NAME_HASH_LABEL}={m.name_hash('nap')}"
    assert status["service"] == "nap"
    assert status["serviceFQDN"].startswith(f"nap.{namespace}.svc.")
    assert POD_NAME_ANNOTATION not in m.annotations_of(sandbox)
    generation = sandbox["metadata"]["generation"]
    assert all(c["observedGeneration"] == generation for c in m.conditions(sandbox))
    # Kept: same objects, not recreated.
    assert (
        kube.get("v1", "PersistentVolumeClaim", "data-nap", namespace)["metadata"]["uid"]
        == (pvc["metadata"]["uid"])
    )
    assert (
        kube.get("v1", "Service", "nap", namespace)["metadata"]["uid"]
        == (service["metadata"]["uid"])
    )
    suspended = m.condition(sandbox, "Suspended")
    assert suspended is not None
    assert suspended["lastTransitionTime"] >= ready_suspended_ltt
    kube.consistently(
        lambda: kube.get_or_none("v1", "Pod", "nap", namespace) is None,
        seconds=2,
        what="no pod while suspended",
    )


@pytest.mark.spec("3.8", "3.7", "delta-3.1")
def test_resume_creates_a_new_pod_from_the_current_template(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """Running again: a new pod with the same name and current template, same PVC."""
    create_sandbox(
        kube,
        namespace,
        "wake",
        image=workload_image,
        volumeClaimTemplates=[m.volume_claim_template("data")],
    )
    first = wait_pod(kube, namespace, "wake", lambda p: True)
    pvc_uid = kube.get("v1", "PersistentVolumeClaim", "data-wake", namespace)["metadata"]["uid"]
    _suspend(kube, namespace, "wake")
    _suspended(kube, namespace, "wake")
    kube.patch(
        SANDBOX_API,
        "Sandbox",
        "wake",
        namespace,
        {
            "spec": {
                "operatingMode": "Running",
                "podTemplate": {"metadata": {"labels": {"resumed": "yes"}}},
            }
        },
    )
    pod = wait_pod(
        kube, namespace, "wake", lambda p: p["metadata"]["uid"] != first["metadata"]["uid"]
    )
    assert m.labels_of(pod).get("resumed") == "yes"
    claims = [
        v["persistentVolumeClaim"]["claimName"]
        for v in pod["spec"].get("volumes", [])
        if "persistentVolumeClaim" in v
    ]
    assert claims == ["data-wake"]
    # PodScheduled is back (appended after Ready) once the new pod is seen.
    sandbox = wait_sandbox(
        kube,
        namespace,
        "wake",
        lambda s: (
            "PodScheduled" in m.condition_types(s)
            and m.annotations_of(s).get(POD_NAME_ANNOTATION) == "wake"
        ),
        what="resumed",
    )
    assert kube.get("v1", "PersistentVolumeClaim", "data-wake", namespace)["metadata"]["uid"] == (
        pvc_uid
    )
    assert condition_view(m.condition(sandbox, "Suspended")) == (
        "False",
        "NotSuspended",
        "Sandbox is not suspended",
    )
    # Suspended is never removed; PodScheduled comes back at the end, after Ready.
    assert m.condition_types(sandbox) == ["Suspended", "Ready", "PodScheduled"]


@pytest.mark.spec("3.8", "1.2")
def test_created_suspended_never_gets_a_pod(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """A Sandbox created Suspended reports PodTerminated/suspended and has no pod."""
    create_sandbox(kube, namespace, "asleep", image=workload_image, operatingMode="Suspended")
    sandbox = _suspended(kube, namespace, "asleep")
    assert m.condition_types(sandbox) == ["Suspended", "Ready"]
    assert condition_view(m.condition(sandbox, "Ready")) == (
        "False",
        "SandboxSuspended",
        "Sandbox is suspended",
    )
    kube.consistently(
        lambda: kube.get_or_none("v1", "Pod", "asleep", namespace) is None,
        seconds=2,
        what="no pod for a Sandbox created suspended",
    )


@pytest.mark.spec("1.2")
def test_spec_defaults(kube: Kube, namespace: str, workload_image: str) -> None:
    """``operatingMode`` defaults to Running and ``shutdownPolicy`` to Retain."""
    created = create_sandbox(kube, namespace, "defaults", image=workload_image)
    assert created["spec"]["operatingMode"] == "Running"
    assert created["spec"]["shutdownPolicy"] == "Retain"
    assert "service" not in created["spec"]
