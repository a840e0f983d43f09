"""``shutdownTime`` expiry and its policies."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from kube_agent_sandbox.conformance import manifests as m
from kube_agent_sandbox.conformance.client import Kube
from kube_agent_sandbox.conformance.tests.core.support import (
    SANDBOX_API,
    condition_view,
    create_sandbox,
    wait_pod,
    wait_ready,
    wait_sandbox,
)

EXPIRED = ("False", "SandboxExpired", "Sandbox has expired")
PAST = "2020-01-01T00:00:00Z"


def _rfc3339(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _expired(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    return wait_sandbox(
        kube,
        namespace,
        name,
        lambda s: condition_view(m.condition(s, "Ready")) == EXPIRED,
        what="Ready False / SandboxExpired",
    )


@pytest.mark.spec("3.6", "3.7", "delta-3.1")
def test_expiry_with_retain_deletes_pod_and_service_keeps_sandbox_and_pvc(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """Retain: pod and Service deleted, PVC and Sandbox kept, status reduced to conditions."""
    create_sandbox(
        kube,
        namespace,
        "old",
        image=workload_image,
        service=True,
        volumeClaimTemplates=[m.volume_claim_template("data")],
    )
    # Not Ready: on a cluster without a volume provisioner the pod waits for its PVC.
    wait_pod(kube, namespace, "old", lambda p: True)
    pvc_uid = kube.get("v1", "PersistentVolumeClaim", "data-old", namespace)["metadata"]["uid"]
    kube.patch(SANDBOX_API, "Sandbox", "old", namespace, {"spec": {"shutdownTime": PAST}})
    _expired(kube, namespace, "old")
    kube.wait_gone("v1", "Pod", "old", namespace)
    kube.wait_gone("v1", "Service", "old", namespace)
    sandbox = wait_sandbox(
        kube,
        namespace,
        "old",
        lambda s: set(s.get("status", {})) == {"conditions"},
        what="status reduced to conditions",
    )
    assert condition_view(m.condition(sandbox, "Ready")) == EXPIRED
    assert m.condition_types(sandbox) == ["Suspended", "Ready"]
    assert kube.get("v1", "PersistentVolumeClaim", "data-old", namespace)["metadata"]["uid"] == (
        pvc_uid
    )
    kube.consistently(
        lambda: kube.get_or_none("v1", "Pod", "old", namespace) is None,
        seconds=2,
        what="no new pod for an expired Sandbox",
    )


@pytest.mark.spec("3.6")
def test_expiry_with_delete_policy_deletes_the_sandbox(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """Delete: the Sandbox itself is deleted (its children follow by garbage collection)."""
    create_sandbox(kube, namespace, "gone", image=workload_image, shutdownPolicy="Delete")
    wait_ready(kube, namespace, "gone")
    kube.patch(SANDBOX_API, "Sandbox", "gone", namespace, {"spec": {"shutdownTime": PAST}})
    kube.wait_gone(SANDBOX_API, "Sandbox", "gone", namespace)


@pytest.mark.spec("3.6", "3.1")
def test_future_shutdown_time_expires_on_time(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """A shutdownTime a few seconds ahead expires without any further change to the object."""
    soon = dt.datetime.now(dt.UTC).replace(microsecond=0) + dt.timedelta(seconds=8)
    create_sandbox(kube, namespace, "timer", image=workload_image, shutdownTime=_rfc3339(soon))
    wait_ready(kube, namespace, "timer")
    sandbox = _expired(kube, namespace, "timer")
    assert "PodScheduled" not in m.condition_types(sandbox)
    kube.wait_gone("v1", "Pod", "timer", namespace)
    # Not before the deadline (1 s allowance for clock skew between this host and the cluster).
    assert dt.datetime.now(dt.UTC) >= soon - dt.timedelta(seconds=1)


@pytest.mark.spec("3.6")
def test_moving_shutdown_time_ahead_reactivates(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """An expired (Retain) Sandbox runs again once shutdownTime is in the future."""
    create_sandbox(kube, namespace, "again", image=workload_image, shutdownTime=PAST)
    _expired(kube, namespace, "again")
    later = _rfc3339(dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))
    kube.patch(SANDBOX_API, "Sandbox", "again", namespace, {"spec": {"shutdownTime": later}})
    wait_pod(kube, namespace, "again", lambda p: True)
    sandbox = wait_ready(kube, namespace, "again")
    assert condition_view(m.condition(sandbox, "Ready")) == (
        "True",
        "DependenciesReady",
        "Pod is Ready",
    )


@pytest.mark.spec("3.6", "3.1")
def test_created_expired_never_gets_a_pod(kube: Kube, namespace: str, workload_image: str) -> None:
    """A Sandbox created with a past shutdownTime is marked expired and gets no pod."""
    create_sandbox(kube, namespace, "late", image=workload_image, shutdownTime=PAST)
    _expired(kube, namespace, "late")
    kube.consistently(
        lambda: kube.get_or_none("v1", "Pod", "late", namespace) is None,
        seconds=2,
        what="no pod for an expired Sandbox",
    )
