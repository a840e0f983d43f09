"""SandboxClaims served cold from a template and warm from upstream-written pool members.

Runs the Sandbox and SandboxClaim controllers against a real kube-apiserver with kwok nodes.
The warm pool members are created by the test exactly as upstream's pool controller writes
them (owner reference to a SandboxWarmPool, Go hash labels, launch-type warm), so adopting
them is also the interoperability check: objects written by upstream are served by ours.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import pytest
from claim_env import (
    ClaimEnv,
    conditions,
    owner_ref,
    sample,
    wait_started,
)

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.namehash import name_hash
from kube_agent_sandbox.api.resources import SANDBOX_CLAIMS, SANDBOXES
from kube_agent_sandbox.api.rest import PODS
from kube_agent_sandbox.controller.config import ControllerOptions

pytestmark = pytest.mark.integration

CONTROLLER_LATENCY = "agent_sandbox_claim_controller_startup_latency_ms_count"
CLIENT_LATENCY = "agent_sandbox_client_claim_startup_latency_ms_count"
CLIENT_LATENCY_SUM = "agent_sandbox_client_claim_startup_latency_ms_sum"


@pytest.fixture
async def env(
    cluster: Any, namespace: str, extensions_controller: list[Any]
) -> AsyncIterator[ClaimEnv]:
    async with ClaimEnv.connect(cluster.kubeconfig, namespace) as e:
        yield e


def _forwarded(claim: dict[str, Any], sandbox: dict[str, Any]) -> None:
    """The claim's Ready is the Sandbox's, with the claim's generation."""
    ready, source = conditions(claim)["Ready"], conditions(sandbox)["Ready"]
    for key in ("status", "reason", "message", "lastTransitionTime"):
        assert ready[key] == source[key], key
    assert ready["observedGeneration"] == claim["metadata"]["generation"]


class TestColdAndWarm:
    extensions = ("claim",)

    async def test_cold_start_from_template(
        self, env: ClaimEnv, extensions_controller: list[Any]
    ) -> None:
        manager = (await wait_started(extensions_controller))[0]
        latency = {"launch_type": "cold", "sandbox_template": "tmpl"}
        controller_before = sample(manager, CONTROLLER_LATENCY, latency)
        client_before = sample(manager, CLIENT_LATENCY, latency)
        await env.template(
            "tmpl",
            podTemplate={
                "metadata": {"labels": {"app-label": "x"}},
                "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
            },
        )
        await env.pool("pool", "tmpl")
        created = await env.claim(
            "cold-claim", "pool", labels={c.LABEL_CREATED_BY: c.CREATED_BY_PYTHON_CLIENT}
        )
        uid = created["metadata"]["uid"]
        claim = await env.until_claim("cold-claim", status="True")
        sandbox = await env.get(SANDBOXES, "cold-claim")
        assert sandbox is not None
        assert sandbox["metadata"]["labels"] == {
            c.LABEL_CLAIM_UID: uid,
            c.LABEL_CREATED_BY: c.CREATED_BY_PYTHON_CLIENT,
            c.LABEL_LAUNCH_TYPE: c.LAUNCH_TYPE_COLD,
            c.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash("tmpl"),
        }
        assert sandbox["metadata"]["annotations"][c.ANNOTATION_SANDBOX_TEMPLATE_REF] == "tmpl"
        assert sandbox["metadata"]["ownerReferences"] == [owner_ref(claim, c.KIND_SANDBOX_CLAIM)]
        pod_meta = sandbox["spec"]["podTemplate"]["metadata"]
        assert pod_meta["labels"] == {
            "app-label": "x",
            c.LABEL_CLAIM_UID: uid,
            c.LABEL_CREATED_BY: c.CREATED_BY_PYTHON_CLIENT,
            c.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash("tmpl"),
        }
        pod_spec = sandbox["spec"]["podTemplate"]["spec"]
        assert pod_spec["automountServiceAccountToken"] is False
        assert pod_spec["dnsPolicy"] == "None"
        _forwarded(claim, sandbox)
        assert claim["status"]["sandbox"] == {
            "name": "cold-claim",
            "podIPs": sandbox["status"]["podIPs"],
        }
        assert claim["status"]["sandbox"]["podIPs"]
        annotations = claim["metadata"]["annotations"]
        observed = annotations[c.ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT]
        assert dt.datetime.fromisoformat(observed.replace("Z", "+00:00")) <= dt.datetime.now(dt.UTC)
        provisioned = await env.until_event("cold-claim", "SandboxProvisioned")
        assert provisioned["note"] == 'Created Sandbox "cold-claim"'
        assert provisioned["action"] == "Provisioning"

        async def first_ready() -> dict[str, Any] | None:
            found = await env.get(SANDBOX_CLAIMS, "cold-claim")
            anns = (found or {}).get("metadata", {}).get("annotations") or {}
            return found if anns.get(c.ANNOTATION_CLAIM_FIRST_READY_AT) else None

        await env.until(first_ready, "first-ready annotation")
        labels = {
            "namespace": env.namespace,
            "sandbox_template": "tmpl",
            "launch_type": "cold",
            "warmpool_name": "pool",
            "pod_condition": "not_ready",
            "created_by": "python-client",
        }
        assert sample(manager, "agent_sandbox_claim_creation_total", labels) == 1.0
        assert sample(manager, CONTROLLER_LATENCY, latency) == controller_before + 1
        # no client annotation: the client latency histogram gets nothing
        assert sample(manager, CLIENT_LATENCY, latency) == client_before

    async def test_warm_adoption_of_upstream_pool_members(
        self, env: ClaimEnv, extensions_controller: list[Any]
    ) -> None:
        manager = (await wait_started(extensions_controller))[0]
        latency = {"launch_type": "warm", "sandbox_template": "tmpl"}
        controller_before = sample(manager, CONTROLLER_LATENCY, latency)
        client_before = sample(manager, CLIENT_LATENCY, latency)
        client_sum_before = sample(manager, CLIENT_LATENCY_SUM, latency)
        template = await env.template("tmpl")
        pool = await env.pool("pool", "tmpl", replicas=2)
        members = await env.ready_members(pool, template, 2)
        member_names = {m["metadata"]["name"] for m in members}
        requested = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)).isoformat()
        created = await env.claim(
            "warm-claim",
            "pool",
            labels={c.LABEL_CREATED_BY: c.CREATED_BY_GO_CLIENT},
            annotations={c.ANNOTATION_CLIENT_FIRST_REQUESTED_AT: requested},
        )
        claim = await env.until_claim("warm-claim", status="True")
        name = claim["status"]["sandbox"]["name"]
        assert name in member_names
        assert claim["metadata"]["annotations"][c.ANNOTATION_SANDBOX_NAME] == name
        assert claim["metadata"]["annotations"][c.ANNOTATION_CLAIM_FIRST_READY_AT]
        sandbox = await env.get(SANDBOXES, name)
        assert sandbox is not None
        _forwarded(claim, sandbox)
        assert claim["status"]["sandbox"]["podIPs"] == sandbox["status"]["podIPs"]
        assert sandbox["metadata"]["ownerReferences"] == [owner_ref(created, c.KIND_SANDBOX_CLAIM)]
        labels = sandbox["metadata"]["labels"]
        for gone in (
            c.LABEL_WARM_POOL_SANDBOX,
            c.LABEL_SANDBOX_POD_TEMPLATE_HASH,
            c.LABEL_SANDBOX_TEMPLATE_HASH,
        ):
            assert gone not in labels
        assert labels[c.LABEL_LAUNCH_TYPE] == c.LAUNCH_TYPE_WARM
        assert labels[c.LABEL_CLAIM_UID] == created["metadata"]["uid"]
        assert labels[c.LABEL_CREATED_BY] == c.CREATED_BY_GO_CLIENT
        assert labels[c.LABEL_SANDBOX_TEMPLATE_REF_HASH] == name_hash("tmpl")
        assert sandbox["metadata"]["annotations"][c.ANNOTATION_POD_NAME] == name
        pod_meta = sandbox["spec"]["podTemplate"]["metadata"]
        assert pod_meta["labels"] == {
            c.LABEL_CLAIM_UID: created["metadata"]["uid"],
            c.LABEL_CREATED_BY: c.CREATED_BY_GO_CLIENT,
            c.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash("tmpl"),
        }
        assert c.ANNOTATION_SAFE_TO_EVICT not in (pod_meta.get("annotations") or {})

        async def pod_released() -> dict[str, Any] | None:
            pod = await env.get(PODS, name)
            labels = (pod or {}).get("metadata", {}).get("labels") or {}
            return pod if pod and c.LABEL_WARM_POOL_SANDBOX not in labels else None

        pod = await env.until(pod_released, "pod leaves the pool")
        assert pod["metadata"]["ownerReferences"][0]["uid"] == sandbox["metadata"]["uid"]
        adopted = await env.until_event("warm-claim", "SandboxAdopted")
        assert adopted["note"] == f'Adopted warm pool Sandbox "{name}"'
        creation = {
            "namespace": env.namespace,
            "sandbox_template": "tmpl",
            "launch_type": "warm",
            "warmpool_name": "pool",
            "pod_condition": "ready",
            "created_by": "go-client",
        }
        assert sample(manager, "agent_sandbox_claim_creation_total", creation) == 1.0
        assert sample(manager, CLIENT_LATENCY, latency) == client_before + 1
        assert sample(manager, CLIENT_LATENCY_SUM, latency) - client_sum_before >= 1000
        assert sample(manager, CONTROLLER_LATENCY, latency) == controller_before + 1
        # the other member is still the pool's
        other = (member_names - {name}).pop()
        remaining = await env.get(SANDBOXES, other)
        assert remaining is not None
        assert remaining["metadata"]["labels"][c.LABEL_WARM_POOL_SANDBOX] == name_hash("pool")


class TestQuietClaims:
    extensions = ("claim",)
    controller_options = ControllerOptions(
        extensions=True,
        disable_claim_events=True,
        disable_claim_observability_annotations=True,
    )

    async def test_no_events_and_no_observability_annotations(self, env: ClaimEnv) -> None:
        await env.template("tmpl")
        await env.pool("pool", "tmpl")
        await env.claim("quiet", "pool")
        claim = await env.until_claim("quiet", status="True")
        annotations = claim["metadata"].get("annotations") or {}
        assert c.ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT not in annotations
        assert await env.events_for("quiet") == []
