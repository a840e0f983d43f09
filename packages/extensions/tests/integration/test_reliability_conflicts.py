"""Other writers patching the same Sandbox, claim, pool and Pod while the controllers reconcile.

A claim is served from a warm pool; then external clients patch, round after round, the
claim's Sandbox, the claim and the pool (an annotation each), and one client tampers with the
label the Sandbox controller propagates from the template to the Pod. Afterwards nothing may be
lost: every external annotation is there, the controllers' own state is intact (claim Ready
and bound, pool full, the Pod carrying the template's label again) and the counts of reconciles
and writes (from the controller's metrics and from the API server's ``apiserver_request_total``)
stay within a small multiple of the external patches, so no writer pair got into a hot loop.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import pytest
from reliability_support import claim, ready, template, warm_pool
from reliability_support import until as poll_until

from kube_agent_sandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from kube_agent_sandbox.api.rest import PODS
from kube_agent_sandbox.controller.config import ControllerOptions
from kube_agent_sandbox.controller.runtime import (
    ApiClient,
    Manager,
    Obj,
    RuntimeMetrics,
    load_kubeconfig,
)
from kube_agent_sandbox.testing.access import ClusterAccess

pytestmark = pytest.mark.integration
log = logging.getLogger(__name__)

ROUNDS = 20
POOL_REPLICAS = 2
WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE")
WATCHED = ("sandboxes", "sandboxclaims", "sandboxwarmpools", "pods")
_APISERVER_SAMPLE = re.compile(r"^apiserver_request_total\{([^}]*)\}\s+(\S+)$")


@pytest.fixture
async def api(cluster: ClusterAccess) -> AsyncIterator[ApiClient]:
    # its own metric set: the in-process controller's rest_client_* must count only its calls
    async with ApiClient(load_kubeconfig(str(cluster.kubeconfig)), metrics=RuntimeMetrics()) as a:
        yield a


def apiserver_writes(cluster: ClusterAccess) -> int:
    """Successful and failed writes the API server served on the watched resources."""
    text = cluster.kubectl("get", "--raw", "/metrics").stdout
    total = 0
    for line in text.splitlines():
        match = _APISERVER_SAMPLE.match(line)
        if not match:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
        if labels.get("verb") in WRITE_VERBS and labels.get("resource") in WATCHED:
            total += int(float(match.group(2)))
    return total


def controller_counts(manager: Manager) -> dict[str, float]:
    """Reconciles per controller, write requests and 409 answers of the controller process."""
    counts: dict[str, float] = {}
    for family in manager.metrics.registry.collect():
        for sample in family.samples:
            if sample.name == "controller_runtime_reconcile_total":
                key = f"reconciles/{sample.labels['controller']}"
                counts[key] = counts.get(key, 0.0) + sample.value
            elif sample.name == "rest_client_requests_total":
                if sample.labels["method"] in WRITE_VERBS:
                    counts["writes"] = counts.get("writes", 0.0) + sample.value
                if sample.labels["code"] == "409":
                    counts["conflicts"] = counts.get("conflicts", 0.0) + sample.value
    return counts


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before.get(k, 0.0) for k in after}


async def until(what: str, probe: Any, *, seconds: float = 90.0) -> Any:
    return await poll_until(what, probe, seconds=seconds)


def annotations(obj: Obj | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("annotations") or {})


class TestConcurrentWriters:
    extensions: ClassVar[tuple[str, ...]] = ("template", "warmpool", "claim")
    controller_options: ClassVar[ControllerOptions] = ControllerOptions(extensions=True)

    @pytest.mark.timeout(600)
    async def test_no_lost_update_and_no_hot_loop(
        self,
        api: ApiClient,
        cluster: ClusterAccess,
        namespace: str,
        extensions_controller: list[Any],
        record_property: Any,
    ) -> None:
        manager: Manager = extensions_controller[0]
        tpl = template("tpl")
        tpl["spec"]["podTemplate"]["metadata"] = {"labels": {"app": "agent"}}
        await api.create(SANDBOX_TEMPLATES, namespace, tpl)
        await api.create(SANDBOX_WARM_POOLS, namespace, warm_pool("pool", "tpl", POOL_REPLICAS))
        await api.create(SANDBOX_CLAIMS, namespace, claim("claim", "pool"))

        async def served() -> str | None:
            obj = await api.get(SANDBOX_CLAIMS, namespace, "claim")
            target = ((obj.get("status") or {}).get("sandbox") or {}).get("name")
            pool = await api.get(SANDBOX_WARM_POOLS, namespace, "pool")
            full = (pool.get("status") or {}).get("readyReplicas") == POOL_REPLICAS
            return target if ready(obj) and full else None

        sandbox_name: str = await until("claim Ready and pool full", served, seconds=180)
        owned_labels = dict(
            (await api.get(SANDBOXES, namespace, sandbox_name))["metadata"].get("labels") or {}
        )
        await asyncio.sleep(2.0)  # let the last status writes' own events settle
        before, server_before = controller_counts(manager), apiserver_writes(cluster)

        async def writer(kind: str, patch_for: Any) -> None:
            for i in range(ROUNDS):
                resource, name, patch = patch_for(i)
                await api.patch(resource, namespace, name, patch)
                await asyncio.sleep(0.05)

        def sandbox_patch(i: int) -> tuple[Any, str, Obj]:
            meta = {"annotations": {f"ext.test/sandbox-{i}": str(i)}}
            return SANDBOXES, sandbox_name, {"metadata": meta}

        def claim_patch(i: int) -> tuple[Any, str, Obj]:
            return SANDBOX_CLAIMS, "claim", {"metadata": {"annotations": {f"ext.test/c-{i}": "x"}}}

        def pool_patch(i: int) -> tuple[Any, str, Obj]:
            return (
                SANDBOX_WARM_POOLS,
                "pool",
                {"metadata": {"annotations": {f"ext.test/p-{i}": "x"}}},
            )

        def pod_tamper(i: int) -> tuple[Any, str, Obj]:
            return PODS, sandbox_name, {"metadata": {"labels": {"app": f"tampered-{i}"}}}

        started = time.monotonic()
        await asyncio.gather(
            writer("sandbox", sandbox_patch),
            writer("claim", claim_patch),
            writer("pool", pool_patch),
            writer("pod", pod_tamper),
        )
        external = 4 * ROUNDS

        async def converged() -> bool:
            pod = await api.get(PODS, namespace, sandbox_name)
            return (pod["metadata"].get("labels") or {}).get("app") == "agent"

        await until("the pod to carry the template's label again", converged)
        await asyncio.sleep(3.0)  # quiet: anything still reconciling now would be a loop
        took = time.monotonic() - started
        counts = delta(controller_counts(manager), before)
        server = apiserver_writes(cluster) - server_before

        # no lost update, on either side
        sandbox = await api.get(SANDBOXES, namespace, sandbox_name)
        claim_obj = await api.get(SANDBOX_CLAIMS, namespace, "claim")
        pool = await api.get(SANDBOX_WARM_POOLS, namespace, "pool")
        for i in range(ROUNDS):
            assert annotations(sandbox).get(f"ext.test/sandbox-{i}") == str(i)
            assert annotations(claim_obj).get(f"ext.test/c-{i}") == "x"
            assert annotations(pool).get(f"ext.test/p-{i}") == "x"
        labels_now = sandbox["metadata"].get("labels") or {}
        assert {k: labels_now.get(k) for k in owned_labels} == owned_labels
        assert ready(claim_obj)
        assert claim_obj["status"]["sandbox"]["name"] == sandbox_name
        assert (pool.get("status") or {}).get("readyReplicas") == POOL_REPLICAS
        assert ready(sandbox)

        reconciles = sum(v for k, v in counts.items() if k.startswith("reconciles/"))
        writes = counts.get("writes", 0.0)
        log.info(
            "conflicts: %d external patches in %.1fs -> %d reconciles (%s), %d controller "
            "writes, %d answered 409, %d writes at the API server (external included)",
            external,
            took,
            reconciles,
            {k.split("/")[1]: int(v) for k, v in counts.items() if k.startswith("reconciles/")},
            writes,
            counts.get("conflicts", 0.0),
            server,
        )
        record_property("external_patches", external)
        record_property("reconciles", int(reconciles))
        record_property("controller_writes", int(writes))
        record_property("conflicts", int(counts.get("conflicts", 0.0)))
        record_property("apiserver_writes", server)
        # Each external patch reaches at most the Sandbox, claim and pool controllers once,
        # and each controller write is one more event: a bounded multiple, never a loop.
        assert reconciles <= 4 * external + 20, counts
        # A tampered pod label is one pod patch back (plus status writes).
        assert writes <= 2 * external + 10, counts
        assert server <= external + 2 * external + 10, server
