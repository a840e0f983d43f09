"""The extension kinds through both served versions.

Observable contract: v1alpha1 and v1beta1 of SandboxTemplate, SandboxWarmPool and
SandboxClaim are served; v1alpha1 answers carry the deprecation warning; objects written
through one version read back through the other as upstream v0.5.6's conversion rules say (template
policy annotation, pool replicas, claim `warmpool`/`sandboxTemplateRef` <-> `warmPoolRef`),
the pool status read as v1alpha1 has no observedGeneration; and the controller serves objects
written through v1alpha1.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from kube_agent_sandbox.conformance import manifests as m
from kube_agent_sandbox.conformance.client import ApiError, Kube, Obj, Response
from kube_agent_sandbox.conformance.plugin import Settings
from kube_agent_sandbox.conformance.tests.extensions import support as s

ALPHA = s.EXT_ALPHA_API
BETA = s.EXT_API
VCT_POLICY_ANNOTATION = "api.agents.x-k8s.io/v1beta1-volume-claim-templates-policy"
CLAIM_STATE_ANNOTATION = "api.agents.x-k8s.io/v1alpha1-sandboxclaim-state"


def deprecation(kind: str) -> str:
    """The v1alpha1 deprecation warning of ``kind``."""
    return (
        f"extensions.agents.x-k8s.io/v1alpha1 {kind} is deprecated; use "
        f"extensions.agents.x-k8s.io/v1beta1 {kind} instead"
    )


def alpha_create(
    kube: Kube, namespace: str, kind: str, name: str, spec: Mapping[str, Any]
) -> Response:
    """POST a v1alpha1 object; the raw response (with its warnings)."""
    body = {"apiVersion": ALPHA, "kind": kind, "metadata": {"name": name}, "spec": dict(spec)}
    return kube.request("POST", kube.resource(ALPHA, kind).path(namespace), body=body)


def alpha_template_spec(image: str) -> Obj:
    """A v1alpha1 SandboxTemplate spec (same blueprint fields as v1beta1)."""
    return {"podTemplate": m.pod_template(image=image)}


@pytest.mark.spec("1", "1.6")
@pytest.mark.parametrize("kind", ["SandboxTemplate", "SandboxWarmPool", "SandboxClaim"])
def test_v1alpha1_is_served_with_a_deprecation_warning(
    kube: Kube, namespace: str, kind: str
) -> None:
    """Reading any extension kind through v1alpha1 warns with the spec's sentence."""
    response = kube.request("GET", kube.resource(ALPHA, kind).path(namespace))
    assert response.body["items"] == []
    assert any(deprecation(kind) in w for w in response.warnings), response.warnings
    beta = kube.request("GET", kube.resource(BETA, kind).path(namespace))
    assert not any("deprecated" in w for w in beta.warnings), beta.warnings


@pytest.mark.spec("1.7", "1.6")
def test_template_policy_round_trips_through_v1alpha1(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """v1beta1's volumeClaimTemplatesPolicy rides on an annotation in v1alpha1 and comes back."""
    s.create_template(
        kube, namespace, "tpl", image=settings.image, volumeClaimTemplatesPolicy="Allowed"
    )
    alpha = kube.get(ALPHA, "SandboxTemplate", "tpl", namespace)
    assert "volumeClaimTemplatesPolicy" not in alpha["spec"]
    assert m.annotations_of(alpha)[VCT_POLICY_ANNOTATION] == "Allowed"
    assert alpha["spec"]["podTemplate"] == m.pod_template(image=settings.image)
    # A write through v1alpha1 keeps the policy.
    kube.patch(
        ALPHA, "SandboxTemplate", "tpl", namespace, {"metadata": {"labels": {"touched": "yes"}}}
    )
    beta = kube.get(BETA, "SandboxTemplate", "tpl", namespace)
    assert beta["spec"]["volumeClaimTemplatesPolicy"] == "Allowed"
    assert VCT_POLICY_ANNOTATION not in m.annotations_of(beta)
    assert m.labels_of(beta)["touched"] == "yes"


@pytest.mark.spec("1.7", "1.6")
def test_template_written_as_v1alpha1_reads_as_v1beta1(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """A v1alpha1 template keeps its fields in v1beta1 (and gets its NetworkPolicy)."""
    spec = alpha_template_spec(settings.image)
    spec["networkPolicyManagement"] = "Managed"
    spec["envVarsInjectionPolicy"] = "Allowed"
    response = alpha_create(kube, namespace, "SandboxTemplate", "tpl", spec)
    assert any(deprecation("SandboxTemplate") in w for w in response.warnings)
    beta = kube.get(BETA, "SandboxTemplate", "tpl", namespace)
    assert beta["spec"]["podTemplate"] == spec["podTemplate"]
    assert beta["spec"]["envVarsInjectionPolicy"] == "Allowed"
    assert beta["spec"]["networkPolicyManagement"] == "Managed"
    kube.wait_for(
        "networking.k8s.io/v1",
        "NetworkPolicy",
        "tpl-network-policy",
        namespace,
        lambda p: p is not None,
    )


@pytest.mark.spec("1.6", "1.7", "delta-1.1", "4.2.6")
def test_pool_written_as_v1alpha1_is_served_and_reads_back(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """A v1alpha1 pool fills; its status reads through both versions (no observedGeneration
    in v1alpha1); its scale subresource works through v1alpha1 too."""
    s.create_template(kube, namespace, "tpl", image=settings.image)
    spec = {"replicas": 2, "sandboxTemplateRef": {"name": "tpl"}}
    alpha_create(kube, namespace, "SandboxWarmPool", "pool", spec)
    beta = kube.get(BETA, "SandboxWarmPool", "pool", namespace)
    assert beta["spec"]["replicas"] == 2
    assert beta["spec"]["sandboxTemplateRef"] == {"name": "tpl"}
    s.wait_members(kube, namespace, "pool", 2)

    def settled() -> Obj | None:
        pool = kube.get(BETA, "SandboxWarmPool", "pool", namespace)
        status = pool.get("status") or {}
        done = status.get("readyReplicas") == 2 and status.get("observedGeneration")
        return pool if done else None

    kube.wait_until(settled, what="the pool's v1beta1 status")
    alpha = kube.get(ALPHA, "SandboxWarmPool", "pool", namespace)
    assert alpha["status"]["replicas"] == 2
    assert alpha["status"]["readyReplicas"] == 2
    assert alpha["status"]["selector"] == f"{s.WARM_POOL_LABEL}={m.name_hash('pool')}"
    assert "observedGeneration" not in alpha["status"]

    scale = kube.get(ALPHA, "SandboxWarmPool", "pool", namespace, subresource="scale")
    assert scale["spec"]["replicas"] == 2
    kube.patch(
        ALPHA, "SandboxWarmPool", "pool", namespace, {"spec": {"replicas": 1}}, subresource="scale"
    )
    s.wait_members(kube, namespace, "pool", 1)


@pytest.mark.spec("1.6")
def test_v1alpha1_pool_requires_replicas(kube: Kube, namespace: str) -> None:
    """In v1alpha1 `replicas` is required (v1beta1 defaults it)."""
    with pytest.raises(ApiError) as failure:
        alpha_create(
            kube, namespace, "SandboxWarmPool", "pool", {"sandboxTemplateRef": {"name": "t"}}
        )
    assert failure.value.status == 422
    assert "replicas" in failure.value.message


@pytest.mark.spec("1.7", "1.6", "4.3.5")
def test_claim_written_as_v1alpha1_names_its_pool_and_is_served(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """`warmpool: <pool>` becomes `warmPoolRef.name`; the claim adopts from that pool; its
    v1alpha1 view is restored from the state annotation."""
    s.create_template(kube, namespace, "tpl", image=settings.image)
    s.create_pool(kube, namespace, "pool", "tpl", replicas=1)
    (member,) = s.wait_members(kube, namespace, "pool", 1)
    spec = {"sandboxTemplateRef": {"name": "tpl"}, "warmpool": "pool"}
    response = alpha_create(kube, namespace, "SandboxClaim", "claim", spec)
    assert any(deprecation("SandboxClaim") in w for w in response.warnings)
    beta = kube.get(BETA, "SandboxClaim", "claim", namespace)
    assert beta["spec"]["warmPoolRef"] == {"name": "pool"}
    state = json.loads(m.annotations_of(beta)[CLAIM_STATE_ANNOTATION])
    assert state["spec"]["warmpool"] == "pool"
    claim = s.wait_claim(kube, namespace, "claim", status="True")
    assert claim["status"]["sandbox"]["name"] == member["metadata"]["name"]
    alpha = kube.get(ALPHA, "SandboxClaim", "claim", namespace)
    assert alpha["spec"]["sandboxTemplateRef"] == {"name": "tpl"}
    assert alpha["spec"]["warmpool"] == "pool"
    assert CLAIM_STATE_ANNOTATION not in m.annotations_of(alpha)
    assert alpha["status"]["sandbox"]["name"] == member["metadata"]["name"]


@pytest.mark.spec("1.7", "1.6")
@pytest.mark.parametrize("warmpool", ["none", "default", None])
def test_cold_v1alpha1_claims_map_to_the_shadow_pool(
    kube: Kube, namespace: str, warmpool: str | None
) -> None:
    """`warmpool` none/default (the CRD default) maps to `shadow-pool-<template>`."""
    spec: Obj = {"sandboxTemplateRef": {"name": "tpl"}}
    if warmpool is not None:
        spec["warmpool"] = warmpool
    alpha_create(kube, namespace, "SandboxClaim", "claim", spec)
    beta = kube.get(BETA, "SandboxClaim", "claim", namespace)
    assert beta["spec"]["warmPoolRef"] == {"name": "shadow-pool-tpl"}
    alpha = kube.get(ALPHA, "SandboxClaim", "claim", namespace)
    assert alpha["spec"]["warmpool"] == (warmpool or "default")


@pytest.mark.spec("1.7")
@pytest.mark.parametrize(
    ("pool", "template", "warmpool"),
    [("pool", "pool", "pool"), ("shadow-pool-tpl", "tpl", "default")],
    ids=["named-pool", "shadow-pool"],
)
def test_v1beta1_claims_read_as_v1alpha1(
    kube: Kube, namespace: str, pool: str, template: str, warmpool: str
) -> None:
    """A v1beta1 claim's pool reads back as v1alpha1 `sandboxTemplateRef` + `warmpool`."""
    s.create_claim(kube, namespace, "claim", pool)
    alpha = kube.get(ALPHA, "SandboxClaim", "claim", namespace)
    assert alpha["spec"]["sandboxTemplateRef"] == {"name": template}
    assert alpha["spec"]["warmpool"] == warmpool
    assert "warmPoolRef" not in alpha["spec"]
