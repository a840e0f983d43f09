"""Strict Sandbox→Pod mapping — the owner UID decides, ambiguity fails closed."""

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
    owner_ref,
    wait_ready,
    wait_sandbox,
)

MULTIPLE = "multiple Pods (2) are controlled by this Sandbox; refusing to choose or create a Pod"


def _owned_pod(name: str, sandbox: dict[str, Any], image: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {NAME_HASH_LABEL: m.name_hash(sandbox["metadata"]["name"])},
            "ownerReferences": [owner_ref(sandbox)],
        },
        "spec": {"containers": [m.container(image=image)]},
    }


def _reporter(event: dict[str, Any]) -> str:
    return str(
        event.get("reportingController")
        or (event.get("deprecatedSource") or {}).get("component")
        or ""
    )


@pytest.mark.spec("delta-3.2", "delta-2")
def test_two_owned_pods_fail_closed(kube: Kube, namespace: str, workload_image: str) -> None:
    """Ready MultiplePods, no pod created or deleted, one Warning event; recovers after."""
    created = create_sandbox(kube, namespace, "twin", image=workload_image)
    first = kube.wait_for("v1", "Pod", "twin", namespace, lambda p: p is not None)
    assert first is not None
    wait_ready(kube, namespace, "twin")
    kube.create(_owned_pod("twin-extra", created, workload_image), namespace=namespace)

    sandbox = wait_sandbox(
        kube,
        namespace,
        "twin",
        lambda s: m.has_condition(s, "Ready", "False", "MultiplePods"),
        what="Ready False / MultiplePods",
    )
    assert condition_view(m.condition(sandbox, "Ready")) == ("False", "MultiplePods", MULTIPLE)
    assert condition_view(m.condition(sandbox, "PodScheduled")) == (
        "Unknown",
        "PodSchedulingUnknown",
        "Pod state is unknown. Pod scheduling cannot be determined",
    )
    assert condition_view(m.condition(sandbox, "Suspended")) == (
        "False",
        "NotSuspended",
        "Sandbox is not suspended",
    )
    assert not sandbox["status"].get("podIPs")
    assert not sandbox["status"].get("nodeName")

    events = kube.wait_until(
        lambda: [e for e in kube.events_for(sandbox) if e.get("reason") == "MultiplePods"],
        what="a MultiplePods event",
    )
    event = events[0]
    assert event["type"] == "Warning"
    assert event.get("note") == MULTIPLE
    assert event.get("action") == "Reconciling"
    assert _reporter(event) == "sandbox-controller"

    def both_pods_untouched() -> bool:
        pods = kube.list("v1", "Pod", namespace)
        names = sorted(
            p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")
        )
        return names == ["twin", "twin-extra"]

    kube.consistently(both_pods_untouched, seconds=3, what="no pod created or deleted")
    assert len([e for e in kube.events_for(sandbox) if e.get("reason") == "MultiplePods"]) == 1

    kube.delete("v1", "Pod", "twin-extra", namespace, grace_period_seconds=0)
    recovered = wait_ready(kube, namespace, "twin")
    assert kube.get("v1", "Pod", "twin", namespace)["metadata"]["uid"] == first["metadata"]["uid"]
    assert m.annotations_of(recovered)[POD_NAME_ANNOTATION] == "twin"


@pytest.mark.spec("delta-3.2")
def test_owned_pod_with_another_name_is_used(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """The one owned pod wins over the Sandbox's name: no new pod, the annotation follows it."""
    created = create_sandbox(kube, namespace, "alias", image=workload_image)
    wait_ready(kube, namespace, "alias")
    kube.create(_owned_pod("alias-renamed", created, workload_image), namespace=namespace)
    wait_sandbox(
        kube,
        namespace,
        "alias",
        lambda s: m.has_condition(s, "Ready", "False", "MultiplePods"),
        what="MultiplePods",
    )
    # Now the tracked pod (named like the Sandbox) goes away: one owned pod is left.
    kube.delete("v1", "Pod", "alias", namespace, grace_period_seconds=0)
    sandbox = wait_sandbox(
        kube,
        namespace,
        "alias",
        lambda s: (
            m.annotations_of(s).get(POD_NAME_ANNOTATION) == "alias-renamed"
            and m.has_condition(s, "Ready", "True")
        ),
        what="Ready on the owned pod alias-renamed",
    )
    pod = kube.get("v1", "Pod", "alias-renamed", namespace)
    assert sandbox["status"]["podIPs"] == [ip["ip"] for ip in pod["status"]["podIPs"]]
    kube.wait_gone("v1", "Pod", "alias", namespace)
    kube.consistently(
        lambda: kube.get_or_none("v1", "Pod", "alias", namespace) is None,
        seconds=3,
        what="no pod named after the Sandbox is created",
    )


@pytest.mark.spec("delta-3.2", "3.8")
def test_suspend_with_two_owned_pods_deletes_neither(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """Suspended and ambiguous: PodStateUnknown, and both pods survive."""
    created = create_sandbox(kube, namespace, "pair", image=workload_image)
    wait_ready(kube, namespace, "pair")
    kube.create(_owned_pod("pair-extra", created, workload_image), namespace=namespace)
    wait_sandbox(
        kube,
        namespace,
        "pair",
        lambda s: m.has_condition(s, "Ready", "False", "MultiplePods"),
        what="MultiplePods",
    )
    kube.patch(SANDBOX_API, "Sandbox", "pair", namespace, {"spec": {"operatingMode": "Suspended"}})
    sandbox = wait_sandbox(
        kube,
        namespace,
        "pair",
        lambda s: m.has_condition(s, "Suspended", "Unknown", "PodStateUnknown"),
        what="Suspended Unknown / PodStateUnknown",
    )
    assert condition_view(m.condition(sandbox, "Suspended")) == (
        "Unknown",
        "PodStateUnknown",
        "Pod state is unknown. Sandbox suspension cannot be confirmed",
    )
    assert condition_view(m.condition(sandbox, "Ready")) == ("False", "MultiplePods", MULTIPLE)
    kube.consistently(
        lambda: all(
            (kube.get_or_none("v1", "Pod", n, namespace) or {})
            .get("metadata", {})
            .get("deletionTimestamp")
            is None
            and kube.get_or_none("v1", "Pod", n, namespace) is not None
            for n in ("pair", "pair-extra")
        ),
        seconds=3,
        what="neither pod is deleted",
    )
