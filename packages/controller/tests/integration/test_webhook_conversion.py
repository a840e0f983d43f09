"""The conversion webhook behind a real kube-apiserver.

The session cluster's generated CRDs are pointed (by URL + caBundle, as the local apiserver
runs on the host) at a webhook server running in this process over real TLS, with certificates
managed through a real Secret. Objects are then written through one version and read through
the other. The CRDs' original conversion settings are restored afterwards.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kube_agent_sandbox.api.constants import (
    ANNOTATION_V1ALPHA1_SANDBOX_STATE,
    ANNOTATION_V1ALPHA1_SANDBOXCLAIM_STATE,
    ANNOTATION_V1ALPHA1_SANDBOXTEMPLATE_STATE,
    ANNOTATION_V1BETA1_VCT_POLICY,
)
from kube_agent_sandbox.api.rest import CUSTOM_RESOURCE_DEFINITIONS as CRDS
from kube_agent_sandbox.controller.runtime import (
    ApiClient,
    ApiError,
    Obj,
    Resource,
    load_kubeconfig,
)
from kube_agent_sandbox.controller.webhook import (
    CONVERSION_CRD_NAMES,
    ConversionWebhookServer,
    WebhookCertificates,
    ensure_webhook_certificates,
    patch_conversion_webhooks,
)

pytestmark = pytest.mark.integration

SVC = "agent-sandbox-webhook-service"


def res(group: str, version: str, plural: str, kind: str) -> Resource:
    return Resource(group=group, version=version, plural=plural, kind=kind)


SANDBOX_A = res("agents.x-k8s.io", "v1alpha1", "sandboxes", "Sandbox")
SANDBOX_B = res("agents.x-k8s.io", "v1beta1", "sandboxes", "Sandbox")
TEMPLATE_A = res("extensions.agents.x-k8s.io", "v1alpha1", "sandboxtemplates", "SandboxTemplate")
TEMPLATE_B = res("extensions.agents.x-k8s.io", "v1beta1", "sandboxtemplates", "SandboxTemplate")
POOL_A = res("extensions.agents.x-k8s.io", "v1alpha1", "sandboxwarmpools", "SandboxWarmPool")
POOL_B = res("extensions.agents.x-k8s.io", "v1beta1", "sandboxwarmpools", "SandboxWarmPool")
CLAIM_A = res("extensions.agents.x-k8s.io", "v1alpha1", "sandboxclaims", "SandboxClaim")
CLAIM_B = res("extensions.agents.x-k8s.io", "v1beta1", "sandboxclaims", "SandboxClaim")

POD_TEMPLATE = {"spec": {"containers": [{"name": "agent", "image": "agent:latest"}]}}


def obj(resource: Resource, name: str, spec: Obj, **metadata: Any) -> Obj:
    return {
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": {"name": name, **metadata},
        "spec": spec,
    }


class Webhook:
    """What the fixture set up: client, namespace, certificates and the running server."""

    def __init__(
        self, client: ApiClient, namespace: str, certs: WebhookCertificates, port: int
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.certs = certs
        self.port = port


PROBES: list[tuple[Resource, Resource, Obj]] = [
    (SANDBOX_B, SANDBOX_A, {"podTemplate": POD_TEMPLATE}),
    (TEMPLATE_B, TEMPLATE_A, {"podTemplate": POD_TEMPLATE}),
    (POOL_B, POOL_A, {"sandboxTemplateRef": {"name": "probe"}}),
    (CLAIM_B, CLAIM_A, {"warmPoolRef": {"name": "probe"}}),
]


async def wait_until_served(client: ApiClient, namespace: str) -> None:
    """Poll until the apiserver converts every kind through our webhook.

    The apiserver reloads each CRD's conversion settings asynchronously after the patch, so a
    v1alpha1 read of a stored v1beta1 object fails until it uses the new URL (the previous
    settings point at a Service or server that does not answer).
    """
    for stored, served, spec in PROBES:
        await client.create(stored, namespace, obj(stored, "probe", spec))
        last: Exception | None = None
        for _ in range(300):
            try:
                await client.get(served, namespace, "probe")
                break
            except ApiError as exc:
                last = exc
                await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"the apiserver never used the webhook for {served.kind}: {last}")


@pytest.fixture
async def webhook(
    cluster: Any, agent_sandbox_crds: list[str], namespace: str, tmp_path: Path
) -> AsyncIterator[Webhook]:
    assert set(CONVERSION_CRD_NAMES) <= set(agent_sandbox_crds)
    client = ApiClient(load_kubeconfig(str(cluster.kubeconfig)))
    originals = {
        name: (await client.get(CRDS, "", name))["spec"]["conversion"]
        for name in CONVERSION_CRD_NAMES
    }
    certs = await ensure_webhook_certificates(
        client,
        cert_dir=tmp_path,
        namespace=namespace,
        service_name=SVC,
        cluster_domain="cluster.local",
        extra_sans=["127.0.0.1"],
    )
    server = ConversionWebhookServer(
        tmp_path / "tls.crt", tmp_path / "tls.key", host="127.0.0.1", port=0
    )
    await server.start()
    try:
        patched = await patch_conversion_webhooks(
            client,
            certs.ca_pem,
            service_name=SVC,
            namespace=namespace,
            url=f"https://127.0.0.1:{server.port}/convert",
        )
        assert patched == list(CONVERSION_CRD_NAMES)
        await wait_until_served(client, namespace)
        yield Webhook(client, namespace, certs, server.port)
    finally:
        for name, conversion in originals.items():
            await client.patch(
                CRDS,
                "",
                name,
                [{"op": "replace", "path": "/spec/conversion", "value": conversion}],
                patch_type="json",
            )
        await server.stop()
        await client.close()


async def test_certificates_secret_and_crd_client_config(webhook: Webhook, tmp_path: Path) -> None:
    secret = await webhook.client.get(
        Resource(group="", version="v1", plural="secrets", kind="Secret"),
        webhook.namespace,
        "agent-sandbox-webhook-certs",
    )
    assert secret["type"] == "Opaque"
    assert sorted(secret["data"]) == ["ca.crt", "tls.crt", "tls.key"]

    # A second replica (or a restart) finds the Secret and serves the same certificate.
    again = await ensure_webhook_certificates(
        webhook.client,
        cert_dir=tmp_path / "replica-2",
        namespace=webhook.namespace,
        service_name=SVC,
        cluster_domain="cluster.local",
    )
    assert again == webhook.certs

    for name in CONVERSION_CRD_NAMES:
        crd = await webhook.client.get(CRDS, "", name)
        conversion = crd["spec"]["conversion"]
        assert conversion["strategy"] == "Webhook"
        assert conversion["webhook"]["conversionReviewVersions"] == ["v1", "v1beta1"]
        config = conversion["webhook"]["clientConfig"]
        assert config["url"] == f"https://127.0.0.1:{webhook.port}/convert"
        assert "service" not in config


async def test_sandbox_written_as_v1alpha1_read_as_v1beta1(webhook: Webhook) -> None:
    client, ns = webhook.client, webhook.namespace
    spec = {"podTemplate": POD_TEMPLATE, "replicas": 0, "shutdownPolicy": "Delete"}
    created = await client.create(
        SANDBOX_A, ns, obj(SANDBOX_A, "alpha-sb", spec, labels={"team": "a"})
    )
    assert created["apiVersion"] == SANDBOX_A.api_version
    assert created["spec"]["replicas"] == 0

    beta = await client.get(SANDBOX_B, ns, "alpha-sb")
    assert beta["apiVersion"] == SANDBOX_B.api_version
    assert beta["spec"]["operatingMode"] == "Suspended"
    assert "replicas" not in beta["spec"]
    assert beta["spec"]["shutdownPolicy"] == "Delete"
    assert beta["metadata"]["labels"] == {"team": "a"}
    state = json.loads(beta["metadata"]["annotations"][ANNOTATION_V1ALPHA1_SANDBOX_STATE])
    assert state["apiVersion"] == SANDBOX_A.api_version
    assert state["spec"]["replicas"] == 0

    alpha = await client.get(SANDBOX_A, ns, "alpha-sb")
    assert alpha["spec"]["replicas"] == 0
    assert ANNOTATION_V1ALPHA1_SANDBOX_STATE not in (alpha["metadata"].get("annotations") or {})

    # Resume through v1beta1: the v1alpha1 view follows.
    await client.patch(SANDBOX_B, ns, "alpha-sb", {"spec": {"operatingMode": "Running"}})
    alpha = await client.get(SANDBOX_A, ns, "alpha-sb")
    assert alpha["spec"]["replicas"] == 1


async def test_sandbox_written_as_v1beta1_read_as_v1alpha1(webhook: Webhook) -> None:
    client, ns = webhook.client, webhook.namespace
    spec = {"podTemplate": POD_TEMPLATE, "operatingMode": "Suspended"}
    await client.create(SANDBOX_B, ns, obj(SANDBOX_B, "beta-sb", spec))

    alpha = await client.get(SANDBOX_A, ns, "beta-sb")
    assert alpha["spec"]["replicas"] == 0
    assert "operatingMode" not in alpha["spec"]

    # Suspend -> resume through v1alpha1, stored as v1beta1.
    await client.patch(SANDBOX_A, ns, "beta-sb", {"spec": {"replicas": 1}})
    beta = await client.get(SANDBOX_B, ns, "beta-sb")
    assert beta["spec"]["operatingMode"] == "Running"
    assert ANNOTATION_V1ALPHA1_SANDBOX_STATE in beta["metadata"]["annotations"]

    listed = await client.list(SANDBOX_A, ns)
    items = {item["metadata"]["name"]: item for item in listed["items"]}
    assert {"beta-sb", "probe"} <= set(items)
    assert {item["apiVersion"] for item in listed["items"]} == {SANDBOX_A.api_version}
    assert items["beta-sb"]["spec"]["replicas"] == 1


async def test_template_policy_annotation_round_trip(webhook: Webhook) -> None:
    client, ns = webhook.client, webhook.namespace
    template = obj(
        TEMPLATE_A,
        "tmpl",
        {"podTemplate": POD_TEMPLATE},
        annotations={ANNOTATION_V1BETA1_VCT_POLICY: "Allowed"},
    )
    await client.create(TEMPLATE_A, ns, template)

    beta = await client.get(TEMPLATE_B, ns, "tmpl")
    assert beta["spec"]["volumeClaimTemplatesPolicy"] == "Allowed"
    assert ANNOTATION_V1BETA1_VCT_POLICY not in beta["metadata"]["annotations"]
    assert ANNOTATION_V1ALPHA1_SANDBOXTEMPLATE_STATE in beta["metadata"]["annotations"]

    alpha = await client.get(TEMPLATE_A, ns, "tmpl")
    assert alpha["metadata"]["annotations"] == {ANNOTATION_V1BETA1_VCT_POLICY: "Allowed"}
    assert "volumeClaimTemplatesPolicy" not in alpha["spec"]


async def test_invalid_policy_annotation_is_rejected_with_upstreams_message(
    webhook: Webhook,
) -> None:
    template = obj(
        TEMPLATE_A,
        "bad-tmpl",
        {"podTemplate": POD_TEMPLATE},
        annotations={ANNOTATION_V1BETA1_VCT_POLICY: "Bogus"},
    )
    with pytest.raises(ApiError) as info:
        await webhook.client.create(TEMPLATE_A, webhook.namespace, template)
    assert 'invalid VolumeClaimTemplatesPolicy annotation value: "Bogus"' in info.value.message


async def test_claim_warm_pool_ref_derivation_and_restore(webhook: Webhook) -> None:
    client, ns = webhook.client, webhook.namespace
    await client.create(
        CLAIM_A, ns, obj(CLAIM_A, "claim", {"sandboxTemplateRef": {"name": "tmpl"}})
    )

    beta = await client.get(CLAIM_B, ns, "claim")
    # warmpool defaulted to "default" by the v1alpha1 schema, no sandbox yet -> shadow pool.
    assert beta["spec"]["warmPoolRef"] == {"name": "shadow-pool-tmpl"}
    assert "sandboxTemplateRef" not in beta["spec"]
    assert ANNOTATION_V1ALPHA1_SANDBOXCLAIM_STATE in beta["metadata"]["annotations"]

    alpha = await client.get(CLAIM_A, ns, "claim")
    assert alpha["spec"]["sandboxTemplateRef"] == {"name": "tmpl"}
    assert alpha["spec"]["warmpool"] == "default"

    # Point the claim at another pool through v1beta1: the template ref is kept.
    await client.patch(CLAIM_B, ns, "claim", {"spec": {"warmPoolRef": {"name": "pool-b"}}})
    alpha = await client.get(CLAIM_A, ns, "claim")
    assert alpha["spec"]["warmpool"] == "pool-b"
    assert alpha["spec"]["sandboxTemplateRef"] == {"name": "tmpl"}

    # A claim born in v1beta1 reads as template = pool = name in v1alpha1.
    await client.create(CLAIM_B, ns, obj(CLAIM_B, "claim-b", {"warmPoolRef": {"name": "p1"}}))
    alpha = await client.get(CLAIM_A, ns, "claim-b")
    assert alpha["spec"]["sandboxTemplateRef"] == {"name": "p1"}
    assert alpha["spec"]["warmpool"] == "p1"


async def test_warm_pool_replicas(webhook: Webhook) -> None:
    client, ns = webhook.client, webhook.namespace
    await client.create(
        POOL_A, ns, obj(POOL_A, "pool-a", {"replicas": 2, "sandboxTemplateRef": {"name": "t"}})
    )
    beta = await client.get(POOL_B, ns, "pool-a")
    assert beta["spec"]["replicas"] == 2

    await client.create(POOL_B, ns, obj(POOL_B, "pool-b", {"sandboxTemplateRef": {"name": "t"}}))
    alpha = await client.get(POOL_A, ns, "pool-b")
    assert alpha["spec"]["replicas"] == 1  # defaulted in v1beta1, carried over

    scale = await client.get(POOL_A, ns, "pool-a", subresource="scale")
    assert scale["spec"]["replicas"] == 2


async def test_warm_pool_observed_generation_is_v1beta1_only(webhook: Webhook) -> None:
    """Upstream v0.5.6 (#1328): the field exists in v1beta1 only; v1alpha1 drops it."""
    client, ns = webhook.client, webhook.namespace
    await client.create(POOL_B, ns, obj(POOL_B, "pool-gen", {"sandboxTemplateRef": {"name": "t"}}))
    status = {"status": {"replicas": 1, "readyReplicas": 1, "observedGeneration": 1}}
    written = await client.patch(POOL_B, ns, "pool-gen", status, subresource="status")
    assert written["status"]["observedGeneration"] == 1  # the CRD schema keeps the field

    alpha = await client.get(POOL_A, ns, "pool-gen")
    assert alpha["status"] == {"replicas": 1, "readyReplicas": 1}

    # A status written through v1alpha1 carries no observedGeneration back to storage.
    await client.patch(POOL_A, ns, "pool-gen", {"status": {"replicas": 2}}, subresource="status")
    beta = await client.get(POOL_B, ns, "pool-gen")
    assert beta["status"] == {"replicas": 2, "readyReplicas": 1}

    refused = {"status": {"observedGeneration": -1}}
    with pytest.raises(ApiError) as caught:
        await client.patch(POOL_B, ns, "pool-gen", refused, subresource="status")
    assert caught.value.status == 422
