"""What a claim keeps doing after it is bound.

Observable contract: pod metadata changes of the claim or its template flow to the bound
Sandbox and its pod in place, pod spec changes of the template do not; a deleted Sandbox is
provisioned again; a Sandbox that expires on its own is reported as `SandboxExpired`; stale or
foreign assignment references are cleared; a legacy per-claim NetworkPolicy the claim controls
is deleted, a foreign one kept.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from kube_agent_sandbox.conformance import manifests as m
from kube_agent_sandbox.conformance.client import Kube, Obj
from kube_agent_sandbox.conformance.plugin import Settings
from kube_agent_sandbox.conformance.tests.extensions import support as s

NP_API = "networking.k8s.io/v1"
FIRST_READY_ANNOTATION = "agents.x-k8s.io/claim-first-ready-at"


def bound_claim(kube: Kube, namespace: str, settings: Settings, **spec: Any) -> Obj:
    """Template ``tpl``, empty pool ``pool`` and a Ready (cold) claim ``claim``."""
    s.create_template(kube, namespace, "tpl", image=settings.image, labels={"app": "x"})
    s.create_pool(kube, namespace, "pool", "tpl", replicas=0)
    s.create_claim(kube, namespace, "claim", "pool", **spec)
    return s.wait_claim(kube, namespace, "claim", status="True")


def parse_time(value: str) -> dt.datetime:
    """An RFC 3339 timestamp (with or without fractional seconds)."""
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


@pytest.mark.spec("2.2")
def test_first_ready_time_is_recorded_once(kube: Kube, namespace: str, settings: Settings) -> None:
    """`claim-first-ready-at` is stamped when the claim first becomes Ready, then kept."""
    claim = bound_claim(kube, namespace, settings)
    stamped = kube.wait_for(
        s.EXT_API,
        "SandboxClaim",
        "claim",
        namespace,
        lambda c: FIRST_READY_ANNOTATION in m.annotations_of(c),
        what="the first-ready annotation",
    )
    value = m.annotations_of(stamped)[FIRST_READY_ANNOTATION]
    assert value.endswith("Z"), value
    first_ready = parse_time(value)
    assert parse_time(claim["metadata"]["creationTimestamp"]) - dt.timedelta(seconds=1) <= (
        first_ready
    )
    assert first_ready <= dt.datetime.now(dt.UTC)
    kube.patch(
        s.EXT_API,
        "SandboxClaim",
        "claim",
        namespace,
        {"metadata": {"labels": {"poke": "1"}}},
    )
    kube.consistently(
        lambda: (
            m.annotations_of(kube.get(s.EXT_API, "SandboxClaim", "claim", namespace))[
                FIRST_READY_ANNOTATION
            ]
            == value
        ),
        seconds=2,
        what="the first-ready time does not move",
    )


@pytest.mark.spec("4.3.3")
def test_claim_pod_metadata_changes_reach_the_running_pod(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """New additionalPodMetadata lands on the bound Sandbox and its pod, without a restart."""
    bound_claim(kube, namespace, settings)
    pod = kube.wait_for("v1", "Pod", "claim", namespace, lambda p: p is not None)
    assert pod is not None
    kube.patch(
        s.EXT_API,
        "SandboxClaim",
        "claim",
        namespace,
        {"spec": {"additionalPodMetadata": {"labels": {"sandbox.users.io/tier": "gold"}}}},
    )
    kube.wait_for(
        s.SANDBOX_API,
        "Sandbox",
        "claim",
        namespace,
        lambda o: (
            s.pod_metadata(o or {"spec": {"podTemplate": {}}})
            .get("labels", {})
            .get("sandbox.users.io/tier")
            == "gold"
        ),
        what="the label on the Sandbox's pod template",
    )
    updated = kube.wait_for(
        "v1",
        "Pod",
        "claim",
        namespace,
        lambda p: m.labels_of(p).get("sandbox.users.io/tier") == "gold",
        what="the label on the pod",
    )
    assert updated is not None
    assert updated["metadata"]["uid"] == pod["metadata"]["uid"]


@pytest.mark.spec("4.3.3")
def test_template_metadata_flows_to_bound_sandboxes_but_pod_spec_does_not(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """A template label change updates the bound Sandbox; a template env change does not."""
    bound_claim(kube, namespace, settings)
    before = s.get_sandbox(kube, namespace, "claim")
    template = kube.get(s.EXT_API, "SandboxTemplate", "tpl", namespace)
    main = dict(s.pod_spec(template)["containers"][0])
    main["env"] = [{"name": "LATER", "value": "1"}]
    kube.patch(
        s.EXT_API,
        "SandboxTemplate",
        "tpl",
        namespace,
        {
            "spec": {
                "podTemplate": {
                    "metadata": {"labels": {"app": "y"}},
                    "spec": {"containers": [main]},
                }
            }
        },
    )
    # Template updates are not watched by the claim controller (only creations):
    # the change is applied on the claim's next reconcile, which a claim update triggers.
    kube.patch(
        s.EXT_API, "SandboxClaim", "claim", namespace, {"metadata": {"labels": {"poke": "1"}}}
    )
    after = kube.wait_for(
        s.SANDBOX_API,
        "Sandbox",
        "claim",
        namespace,
        lambda o: o is not None and s.pod_metadata(o).get("labels", {}).get("app") == "y",
        what="the template's new label on the bound Sandbox",
    )
    assert after is not None
    assert s.pod_spec(after)["containers"] == s.pod_spec(before)["containers"]
    assert after["metadata"]["uid"] == before["metadata"]["uid"]


@pytest.mark.spec("4.3.3", "4.3.6")
def test_a_deleted_sandbox_is_provisioned_again(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """Deleting the bound Sandbox makes the claim provision a new one and be Ready again."""
    bound_claim(kube, namespace, settings)
    old_uid = s.get_sandbox(kube, namespace, "claim")["metadata"]["uid"]
    kube.delete(s.SANDBOX_API, "Sandbox", "claim", namespace)
    fresh = kube.wait_for(
        s.SANDBOX_API,
        "Sandbox",
        "claim",
        namespace,
        lambda o: o is not None and o["metadata"]["uid"] != old_uid and s.is_ready(o),
        what="a new Ready Sandbox for the claim",
    )
    assert fresh is not None
    claim = s.wait_claim(kube, namespace, "claim", status="True")
    assert claim["status"]["sandbox"]["name"] == "claim"
    assert m.controller_ref(fresh) == s.owner("SandboxClaim", claim)


@pytest.mark.spec("4.3.6")
def test_a_sandbox_that_expires_on_its_own_is_reported(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """Ready False/SandboxExpired when the Sandbox's own shutdownTime passes."""
    bound_claim(kube, namespace, settings)
    past = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    kube.patch(s.SANDBOX_API, "Sandbox", "claim", namespace, {"spec": {"shutdownTime": past}})
    claim = s.wait_claim(kube, namespace, "claim", status="False", reason="SandboxExpired")
    ready = m.condition(claim, "Ready")
    assert ready is not None
    assert ready["message"] == (
        "Underlying Sandbox resource has expired independently of the Claim."
    )
    assert ready["observedGeneration"] == claim["metadata"]["generation"]


@pytest.mark.spec("4.3.3")
def test_an_assignment_to_a_missing_sandbox_is_cleared(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """A `sandbox-name` annotation naming no Sandbox is dropped and the claim is served."""
    s.create_template(kube, namespace, "tpl", image=settings.image)
    s.create_pool(kube, namespace, "pool", "tpl", replicas=0)
    body = m.extension_object("SandboxClaim", "claim", warmPoolRef={"name": "pool"})
    body["metadata"]["annotations"] = {s.SANDBOX_NAME_ANNOTATION: "ghost"}
    kube.create(body, namespace=namespace)
    claim = s.wait_claim(kube, namespace, "claim", status="True")
    assert claim["status"]["sandbox"]["name"] == "claim"
    assert m.annotations_of(claim).get(s.SANDBOX_NAME_ANNOTATION) != "ghost"


@pytest.mark.spec("delta-5.6", "4.3.3")
def test_an_assignment_to_another_claims_sandbox_is_cleared(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """A claim pointing at another claim's Sandbox drops the reference and gets its own."""
    first = bound_claim(kube, namespace, settings)
    body = m.extension_object("SandboxClaim", "second", warmPoolRef={"name": "pool"})
    body["metadata"]["annotations"] = {s.SANDBOX_NAME_ANNOTATION: "claim"}
    kube.create(body, namespace=namespace)
    second = s.wait_claim(kube, namespace, "second", status="True")
    assert second["status"]["sandbox"]["name"] == "second"
    assert m.annotations_of(second).get(s.SANDBOX_NAME_ANNOTATION) != "claim"
    theirs = s.get_sandbox(kube, namespace, "claim")
    assert theirs["metadata"]["ownerReferences"] == [s.owner("SandboxClaim", first)]


def legacy_policy(name: str, owner: Obj | None = None) -> Obj:
    """A NetworkPolicy ``<name>-network-policy`` as old upstream versions made per claim."""
    metadata: Obj = {"name": f"{name}-network-policy"}
    if owner is not None:
        metadata["ownerReferences"] = [s.owner("SandboxClaim", owner)]
    return {
        "apiVersion": NP_API,
        "kind": "NetworkPolicy",
        "metadata": metadata,
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
    }


@pytest.mark.spec("4.3.1", "2.6")
def test_a_foreign_legacy_claim_network_policy_is_kept(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """A `<claim>-network-policy` the claim does not control survives the claim's reconciles."""
    s.create_template(kube, namespace, "tpl", image=settings.image)
    s.create_pool(kube, namespace, "pool", "tpl", replicas=0)
    kept = kube.create(legacy_policy("kept"), namespace=namespace)
    s.create_claim(kube, namespace, "kept", "pool")
    s.wait_claim(kube, namespace, "kept", status="True")
    still = kube.get(NP_API, "NetworkPolicy", "kept-network-policy", namespace)
    assert still["metadata"]["uid"] == kept["metadata"]["uid"]


@pytest.mark.spec("4.3.1", "2.6")
def test_a_legacy_claim_network_policy_controlled_by_the_claim_is_deleted(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """Every reconcile deletes `<claim>-network-policy` when the claim is its controller."""
    s.create_template(kube, namespace, "tpl", image=settings.image)
    claim = s.create_claim(kube, namespace, "owned", "later")
    # The claim has been reconciled (it waits for its pool) before its legacy policy exists.
    s.wait_claim(kube, namespace, "owned", status="False", reason="WarmPoolNotFound")
    kube.create(legacy_policy("owned", claim), namespace=namespace)
    s.create_pool(kube, namespace, "later", "tpl", replicas=0)  # reconciles the claim again
    s.wait_claim(kube, namespace, "owned", status="True")
    kube.wait_gone(NP_API, "NetworkPolicy", "owned-network-policy", namespace, timeout=10)


@pytest.mark.spec("4.3.3", "2.1")
def test_created_by_follows_the_claim(kube: Kube, namespace: str, settings: Settings) -> None:
    """The claim's `created-by` label is copied to the bound Sandbox, and removed with it."""
    bound_claim(kube, namespace, settings)

    def created_by(value: str | None) -> None:
        def check(obj: Obj | None) -> bool:
            if obj is None:
                return False
            on_sandbox = m.labels_of(obj).get(s.CREATED_BY_LABEL)
            on_pod = (s.pod_metadata(obj).get("labels") or {}).get(s.CREATED_BY_LABEL)
            return on_sandbox == value and on_pod == value

        kube.wait_for(
            s.SANDBOX_API, "Sandbox", "claim", namespace, check, what=f"created-by {value}"
        )

    kube.patch(
        s.EXT_API,
        "SandboxClaim",
        "claim",
        namespace,
        {"metadata": {"labels": {s.CREATED_BY_LABEL: "python-client"}}},
    )
    created_by("python-client")
    kube.patch(
        s.EXT_API,
        "SandboxClaim",
        "claim",
        namespace,
        {"metadata": {"labels": {s.CREATED_BY_LABEL: None}}},
    )
    created_by(None)
