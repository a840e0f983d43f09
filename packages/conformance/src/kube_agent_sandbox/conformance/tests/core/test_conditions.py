"""Status fields and the Suspended/PodScheduled/Ready conditions."""

from __future__ import annotations

import pytest

from kube_agent_sandbox.conformance import manifests as m
from kube_agent_sandbox.conformance.client import Kube
from kube_agent_sandbox.conformance.tests.core.support import (
    NAME_HASH_LABEL,
    condition_view,
    create_sandbox,
    unschedulable_template,
    wait_condition,
    wait_pod,
    wait_ready,
    wait_sandbox,
)


@pytest.mark.spec("3.7", "delta-3.1")
def test_ready_sandbox_conditions_types_reasons_messages_and_order(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """A fresh Sandbox ends with [Suspended, PodScheduled, Ready], all for its generation."""
    create_sandbox(kube, namespace, "fresh", image=workload_image)
    sandbox = wait_ready(kube, namespace, "fresh")
    assert m.condition_types(sandbox) == ["Suspended", "PodScheduled", "Ready"]
    assert condition_view(m.condition(sandbox, "Suspended")) == (
        "False",
        "NotSuspended",
        "Sandbox is not suspended",
    )
    assert condition_view(m.condition(sandbox, "Ready")) == (
        "True",
        "DependenciesReady",
        "Pod is Ready",
    )
    pod = kube.get("v1", "Pod", "fresh", namespace)
    pod_scheduled = m.condition(pod, "PodScheduled")
    assert pod_scheduled is not None
    assert pod_scheduled["status"] == "True"
    assert condition_view(m.condition(sandbox, "PodScheduled")) == (
        "True",
        pod_scheduled.get("reason") or "PodScheduled",
        pod_scheduled.get("message", ""),
    )
    generation = sandbox["metadata"]["generation"]
    for cond in m.conditions(sandbox):
        assert cond["observedGeneration"] == generation, cond
        assert cond["lastTransitionTime"], cond


@pytest.mark.spec("3.2", "1.2")
def test_status_fields_of_a_ready_sandbox(kube: Kube, namespace: str, workload_image: str) -> None:
    """``selector``, ``podIPs`` and ``nodeName`` mirror the pod; no service fields without one."""
    create_sandbox(kube, namespace, "fields", image=workload_image)
    sandbox = wait_sandbox(
        kube,
        namespace,
        "fields",
        lambda s: m.has_condition(s, "Ready", "True") and bool(s["status"].get("podIPs")),
        what="Ready with podIPs",
    )
    pod = kube.get("v1", "Pod", "fields", namespace)
    status = sandbox["status"]
    assert status["selector"] == f"{NAME_HASH_LABEL}={m.name_hash('fields')}"
    assert status["podIPs"] == [ip["ip"] for ip in pod["status"]["podIPs"]]
    assert status["nodeName"] == pod["spec"]["nodeName"]
    assert "service" not in status or not status["service"]
    assert "serviceFQDN" not in status or not status["serviceFQDN"]


@pytest.mark.spec("3.7", "delta-3.1")
def test_unschedulable_pod_is_mirrored_and_not_ready(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """A pod no node fits: PodScheduled copied from the pod, Ready says the pod is Pending."""
    create_sandbox(
        kube,
        namespace,
        "stuck",
        image=workload_image,
        template=unschedulable_template(workload_image),
    )
    pod = wait_pod(kube, namespace, "stuck", lambda p: m.has_condition(p, "PodScheduled", "False"))
    pod_scheduled = m.condition(pod, "PodScheduled")
    assert pod_scheduled is not None
    sandbox = wait_condition(kube, namespace, "stuck", "PodScheduled", status="False")
    sandbox = wait_sandbox(
        kube,
        namespace,
        "stuck",
        lambda s: (
            condition_view(m.condition(s, "Ready"))
            == ("False", "DependenciesNotReady", "Pod exists with phase: Pending")
        ),
        what="Ready False / Pending",
    )
    assert condition_view(m.condition(sandbox, "PodScheduled")) == (
        "False",
        pod_scheduled.get("reason") or "PodSchedulingUnknown",
        pod_scheduled.get("message", ""),
    )
    assert m.condition_types(sandbox) == ["Suspended", "PodScheduled", "Ready"]
    status = sandbox["status"]
    assert status["selector"] == f"{NAME_HASH_LABEL}={m.name_hash('stuck')}"
    assert not status.get("podIPs")
    assert not status.get("nodeName")


@pytest.mark.spec("3.7")
def test_ready_requires_the_requested_service(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """With ``service: true`` the Ready message names the Service."""
    create_sandbox(kube, namespace, "with-svc", image=workload_image, service=True)
    sandbox = wait_ready(kube, namespace, "with-svc")
    assert condition_view(m.condition(sandbox, "Ready")) == (
        "True",
        "DependenciesReady",
        "Pod is Ready; Service Exists",
    )


@pytest.mark.spec("3.7")
def test_generation_change_is_observed_by_every_condition(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """A spec change bumps ``metadata.generation``; conditions report the new one."""
    created = create_sandbox(kube, namespace, "gen", image=workload_image)
    wait_ready(kube, namespace, "gen")
    patched = kube.patch(
        "agents.x-k8s.io/v1beta1",
        "Sandbox",
        "gen",
        namespace,
        {"spec": {"podTemplate": {"metadata": {"labels": {"bump": "1"}}}}},
    )
    generation = patched["metadata"]["generation"]
    assert generation > created["metadata"]["generation"]
    sandbox = wait_sandbox(
        kube,
        namespace,
        "gen",
        lambda s: (
            all(c.get("observedGeneration") == generation for c in m.conditions(s))
            and m.has_condition(s, "Ready", "True")
        ),
        what=f"all conditions at generation {generation}",
    )
    assert m.condition_types(sandbox) == ["Suspended", "PodScheduled", "Ready"]
