"""The headless Service — created only on request, named, selecting the pod."""

from __future__ import annotations

import pytest

from kube_agent_sandbox.conformance import manifests as m
from kube_agent_sandbox.conformance.client import Kube
from kube_agent_sandbox.conformance.tests.core.support import (
    NAME_HASH_LABEL,
    SANDBOX_API,
    create_sandbox,
    owner_ref,
    wait_ready,
    wait_sandbox,
)


@pytest.mark.spec("3.5", "2.6")
def test_service_true_creates_a_headless_service(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """Name = Sandbox name, clusterIP None, tracking label and selector, controller ref."""
    created = create_sandbox(kube, namespace, "svc", image=workload_image, service=True)
    service = kube.wait_for("v1", "Service", "svc", namespace, lambda s: s is not None)
    assert service is not None
    tracking = {NAME_HASH_LABEL: m.name_hash("svc")}
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == tracking
    assert m.labels_of(service) == tracking
    assert service["metadata"]["ownerReferences"] == [owner_ref(created)]
    assert not service["spec"].get("ports")
    sandbox = wait_sandbox(
        kube, namespace, "svc", lambda s: bool(s.get("status", {}).get("service")), what="service"
    )
    assert sandbox["status"]["service"] == "svc"
    fqdn = sandbox["status"]["serviceFQDN"]
    assert fqdn.startswith(f"svc.{namespace}.svc."), fqdn
    assert len(fqdn) > len(f"svc.{namespace}.svc."), fqdn


@pytest.mark.spec("3.5")
def test_service_ports_come_from_container_ports(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """Ports of containers and native sidecars, deduplicated, named, sorted by port."""
    template = m.pod_template(
        containers=[
            m.container(
                "main",
                image=workload_image,
                ports=[
                    {"containerPort": 8080},
                    {"containerPort": 9000, "name": "metrics"},
                    {"containerPort": 53, "protocol": "UDP"},
                ],
            ),
            m.container(
                "second",
                image=workload_image,
                ports=[{"containerPort": 8080}, {"containerPort": 9000, "name": "other"}],
            ),
        ],
        initContainers=[
            m.container(
                "sidecar",
                image=workload_image,
                restartPolicy="Always",
                ports=[{"containerPort": 7000, "name": "side"}],
            ),
            m.container("init", image=workload_image, ports=[{"containerPort": 6000}]),
        ],
    )
    create_sandbox(kube, namespace, "ports", image=workload_image, template=template, service=True)
    service = kube.wait_for("v1", "Service", "ports", namespace, lambda s: s is not None)
    assert service is not None
    ports = [
        (p.get("name"), p.get("protocol"), p["port"], p.get("targetPort"))
        for p in service["spec"]["ports"]
    ]
    assert ports == [
        ("p-53-udp", "UDP", 53, 53),
        ("side", "TCP", 7000, 7000),
        ("p-8080-tcp", "TCP", 8080, 8080),
        ("metrics", "TCP", 9000, 9000),
    ]


@pytest.mark.spec("3.5")
def test_no_service_unless_requested(kube: Kube, namespace: str, workload_image: str) -> None:
    """``service`` unset: no Service is ever created."""
    create_sandbox(kube, namespace, "nosvc", image=workload_image)
    wait_ready(kube, namespace, "nosvc")
    kube.consistently(
        lambda: kube.get_or_none("v1", "Service", "nosvc", namespace) is None,
        seconds=2,
        what="no Service",
    )


@pytest.mark.spec("3.5")
def test_service_false_deletes_the_owned_service(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """Switching ``service`` to false deletes the Service and clears the status fields."""
    create_sandbox(kube, namespace, "drop", image=workload_image, service=True)
    wait_sandbox(
        kube, namespace, "drop", lambda s: bool(s.get("status", {}).get("service")), what="service"
    )
    kube.patch(SANDBOX_API, "Sandbox", "drop", namespace, {"spec": {"service": False}})
    kube.wait_gone("v1", "Service", "drop", namespace)
    sandbox = wait_sandbox(
        kube,
        namespace,
        "drop",
        lambda s: not s["status"].get("service") and not s["status"].get("serviceFQDN"),
        what="service status cleared",
    )
    ready = m.condition(sandbox, "Ready")
    assert ready is not None
    assert ready["message"] == "Pod is Ready", ready


@pytest.mark.spec("3.5")
def test_service_drift_is_repaired(kube: Kube, namespace: str, workload_image: str) -> None:
    """A changed selector or tracking label on the owned Service is put back."""
    create_sandbox(kube, namespace, "heal", image=workload_image, service=True)
    kube.wait_for("v1", "Service", "heal", namespace, lambda s: s is not None)
    kube.patch(
        "v1",
        "Service",
        "heal",
        namespace,
        {
            "metadata": {"labels": {NAME_HASH_LABEL: "00000000"}},
            "spec": {"selector": {NAME_HASH_LABEL: "00000000", "extra": "x"}},
        },
    )
    tracking = {NAME_HASH_LABEL: m.name_hash("heal")}
    healed = kube.wait_for(
        "v1",
        "Service",
        "heal",
        namespace,
        lambda s: (
            s is not None
            and s["spec"].get("selector") == tracking
            and m.labels_of(s).get(NAME_HASH_LABEL) == tracking[NAME_HASH_LABEL]
        ),
        what="Service selector and label repaired",
    )
    assert healed is not None


@pytest.mark.spec("3.5", "3.7")
def test_owned_service_is_kept_when_service_is_unset(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """``service`` removed (nil, not false): the owned Service stays and Ready still needs it."""
    create_sandbox(kube, namespace, "legacy", image=workload_image, service=True)
    wait_sandbox(
        kube,
        namespace,
        "legacy",
        lambda s: bool(s.get("status", {}).get("service")),
        what="service",
    )
    service = kube.get("v1", "Service", "legacy", namespace)
    patched = kube.patch(SANDBOX_API, "Sandbox", "legacy", namespace, {"spec": {"service": None}})
    assert "service" not in patched["spec"]
    generation = patched["metadata"]["generation"]
    sandbox = wait_sandbox(
        kube,
        namespace,
        "legacy",
        lambda s: (
            all(c.get("observedGeneration") == generation for c in m.conditions(s))
            and m.has_condition(s, "Ready", "True")
        ),
        what=f"reconciled at generation {generation}",
    )
    ready = m.condition(sandbox, "Ready")
    assert ready is not None
    assert ready["message"] == "Pod is Ready; Service Exists"
    assert sandbox["status"]["service"] == "legacy"
    kept = kube.get("v1", "Service", "legacy", namespace)
    assert kept["metadata"]["uid"] == service["metadata"]["uid"]


@pytest.mark.spec("3.5", "3.7")
def test_unowned_service_without_authorization_is_refused(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """``service: true`` next to an unowned Service lacking the labels: error, no adoption."""
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "private"},
            "spec": {"clusterIP": "None", "selector": {"app": "x"}},
        },
        namespace=namespace,
    )
    create_sandbox(kube, namespace, "private", image=workload_image, service=True)
    sandbox = wait_sandbox(
        kube,
        namespace,
        "private",
        lambda s: m.has_condition(s, "Ready", "False", "ReconcilerError"),
        what="Ready False / ReconcilerError",
    )
    ready = m.condition(sandbox, "Ready")
    assert ready is not None
    assert ready["message"].startswith('Error seen: cannot adopt unowned service "private"'), ready
    service = kube.get("v1", "Service", "private", namespace)
    assert not service["metadata"].get("ownerReferences")
    assert service["spec"]["selector"] == {"app": "x"}
