"""API server restart and etcd compaction while objects change: no change may be missed.

The controllers run in-process against the session's local cluster (its own for this pytest
run, so restarting its kube-apiserver disturbs no other test run). Sandboxes and claims are
changed in three batches: before the API server restarts, right after it is back, and after
etcd's history was compacted. A restarted API server starts its watch cache at etcd's current
revision and compaction removes the older history, so the controllers' watches, resuming from
their last resourceVersion, are refused with 410 Gone and must relist; a change that happened
in between is only seen through that relist. At the end a checker compares every object with
what the batches asked for: suspended Sandboxes have no Pod, the others one Ready Pod with
the template's latest label, deleted ones nothing, and every claim is Ready and bound.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import pytest
from reliability_support import check_namespace, claim, ready, setup_pool
from reliability_support import until as poll_until

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOX_CLAIMS, SANDBOXES
from kube_agent_sandbox.api.rest import PODS
from kube_agent_sandbox.controller.config import ControllerOptions
from kube_agent_sandbox.controller.runtime import (
    ApiClient,
    ApiError,
    Manager,
    Obj,
    Resource,
    RuntimeMetrics,
    load_kubeconfig,
)
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.cluster import LocalCluster

pytestmark = pytest.mark.integration
log = logging.getLogger(__name__)

SANDBOXES_AT_START = 12
POOL_REPLICAS = 2
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)


@pytest.fixture
async def api(cluster: ClusterAccess) -> AsyncIterator[ApiClient]:
    async with ApiClient(load_kubeconfig(str(cluster.kubeconfig)), metrics=RuntimeMetrics()) as a:
        yield a


def sandbox(name: str, *, label: str = "0") -> Obj:
    return {
        "metadata": {"name": name},
        "spec": {
            "podTemplate": {
                "metadata": {"labels": {"round": label}},
                "spec": {"containers": [{"name": "c", "image": "pause:3.10"}]},
            }
        },
    }


async def until(what: str, probe: Any, *, seconds: float = 120.0) -> Any:
    return await poll_until(what, probe, seconds=seconds, poll=0.5)


async def api_back(api: ApiClient, namespace: str) -> None:
    async def answers() -> bool:
        try:
            await api.list(SANDBOXES, namespace, limit=1)
        except (ApiError, OSError, TimeoutError):
            return False
        return True

    await until("the API server to answer", answers)


def _conditions(obj: Obj) -> str:
    return ", ".join(
        f"{c.get('type')}={c.get('status')}" + (f" ({c['reason']})" if c.get("reason") else "")
        for c in (obj.get("status") or {}).get("conditions") or ()
    )


async def cluster_report(api: ApiClient, namespace: str) -> str:
    """Why Pods may not be Ready: every node's conditions and taints, every unready Pod."""
    lines = []
    for node in (await api.list(NODES))["items"]:
        taints = [
            f"{t.get('key')}:{t.get('effect')}" for t in node.get("spec", {}).get("taints") or ()
        ]
        lines.append(f"node {node['metadata']['name']}: {_conditions(node)}; taints {taints}")
    for pod in (await api.list(PODS, namespace))["items"]:
        if not ready(pod):
            status = pod.get("status") or {}
            lines.append(
                f"pod {pod['metadata']['name']}: phase {status.get('phase')}, node "
                f"{pod.get('spec', {}).get('nodeName')}, {_conditions(pod)}"
            )
    return "\n".join(lines)


class Expected:
    """What the batches asked for, per Sandbox: ``None`` deleted, else (running 1 / suspended 0,
    label)."""

    def __init__(self) -> None:
        self.sandboxes: dict[str, tuple[int, str] | None] = {}
        self.claims: list[str] = []

    async def create(self, api: ApiClient, ns: str, name: str, label: str = "0") -> None:
        body = {"apiVersion": SANDBOXES.api_version, "kind": SANDBOXES.kind}
        await api.create(SANDBOXES, ns, {**body, **sandbox(name, label=label)})
        self.sandboxes[name] = (1, label)

    async def relabel(self, api: ApiClient, ns: str, name: str, label: str) -> None:
        patch = {"spec": {"podTemplate": {"metadata": {"labels": {"round": label}}}}}
        await api.patch(SANDBOXES, ns, name, patch)
        replicas, _ = self.sandboxes[name] or (1, "")
        self.sandboxes[name] = (replicas, label)

    async def scale(self, api: ApiClient, ns: str, name: str, replicas: int) -> None:
        """Suspend (0) or resume (1) a Sandbox (v1beta1 ``spec.operatingMode``)."""
        mode = c.OPERATING_MODE_SUSPENDED if replicas == 0 else c.OPERATING_MODE_RUNNING
        await api.patch(SANDBOXES, ns, name, {"spec": {"operatingMode": mode}})
        _, label = self.sandboxes[name] or (1, "")
        self.sandboxes[name] = (replicas, label)

    async def delete(self, api: ApiClient, ns: str, name: str) -> None:
        await api.delete(SANDBOXES, ns, name)
        self.sandboxes[name] = None

    async def add_claim(self, api: ApiClient, ns: str, name: str) -> None:
        await api.create(SANDBOX_CLAIMS, ns, claim(name, "pool"))
        self.claims.append(name)

    async def mismatches(self, api: ApiClient, ns: str) -> list[str]:
        """Differences between the cluster and the expectation (empty when they agree)."""
        problems: list[str] = []
        pods = {p["metadata"]["name"]: p for p in (await api.list(PODS, ns))["items"]}
        existing = {s["metadata"]["name"]: s for s in (await api.list(SANDBOXES, ns))["items"]}
        for name, want in self.sandboxes.items():
            pod = pods.get(name)
            if want is None:
                if name in existing or pod is not None:
                    problems.append(f"{name}: deleted, but sandbox or pod still there")
                continue
            replicas, label = want
            if name not in existing:
                problems.append(f"{name}: sandbox missing")
            elif replicas == 0:
                if pod is not None and not pod["metadata"].get("deletionTimestamp"):
                    problems.append(f"{name}: suspended, pod still there")
            elif pod is None:
                problems.append(f"{name}: no pod")
            elif (pod["metadata"].get("labels") or {}).get("round") != label:
                problems.append(f"{name}: pod label round={pod['metadata'].get('labels')}")
            elif not ready(existing[name]):
                problems.append(f"{name}: not Ready")
        claims = {o["metadata"]["name"]: o for o in (await api.list(SANDBOX_CLAIMS, ns))["items"]}
        problems += [f"claim {n}: not Ready" for n in self.claims if not ready(claims.get(n))]
        return problems


class TestApiServerRestartAndCompaction:
    extensions: ClassVar[tuple[str, ...]] = ("template", "warmpool", "claim")
    controller_options: ClassVar[ControllerOptions] = ControllerOptions(extensions=True)

    @pytest.mark.timeout(600)
    async def test_no_change_is_missed(
        self,
        api: ApiClient,
        namespace: str,
        local_cluster: LocalCluster,
        extensions_controller: list[Any],
        record_property: Any,
    ) -> None:
        manager: Manager = extensions_controller[0]
        want = Expected()
        await setup_pool(api, namespace, pool="pool", replicas=POOL_REPLICAS)
        for i in range(SANDBOXES_AT_START):
            await want.create(api, namespace, f"s{i:02d}")

        async def matches() -> bool:
            return not await want.mismatches(api, namespace)

        await until("the first sandboxes Ready", matches)
        relists_before = manager.informer(SANDBOXES).relists

        # batch 1: right before the restart (the controller may not see these before it)
        for i in range(4):
            await want.relabel(api, namespace, f"s{i:02d}", "1")
        await want.scale(api, namespace, "s04", 0)
        await want.delete(api, namespace, "s05")
        await want.add_claim(api, namespace, "claim-a")
        restart_started = time.monotonic()
        local_cluster.restart("kube-apiserver")  # blocks; the controller runs on its own loop
        await api_back(api, namespace)
        restart = time.monotonic() - restart_started

        # batch 2: while the controller reconnects
        await want.create(api, namespace, "n00", label="2")
        await want.scale(api, namespace, "s06", 0)
        await want.delete(api, namespace, "s07")
        await want.relabel(api, namespace, "s08", "2")
        await want.add_claim(api, namespace, "claim-b")
        revision = local_cluster.compact_etcd()

        # batch 3: after compaction (older resourceVersions are gone)
        await want.scale(api, namespace, "s04", 1)
        await want.relabel(api, namespace, "s04", "3")
        await want.delete(api, namespace, "s09")
        await want.create(api, namespace, "n01", label="3")
        await want.add_claim(api, namespace, "claim-c")
        second_started = time.monotonic()
        local_cluster.restart("kube-apiserver")
        await api_back(api, namespace)
        second_restart = time.monotonic() - second_started
        local_cluster.compact_etcd()
        # batch 4: after a second restart and compaction
        await want.relabel(api, namespace, "s10", "4")
        await want.delete(api, namespace, "n00")
        await want.add_claim(api, namespace, "claim-d")

        started = time.monotonic()
        problems: list[str] = []

        async def agrees() -> bool:
            nonlocal problems
            problems = await want.mismatches(api, namespace)
            return not problems

        try:
            await until("the cluster to match every change", agrees, seconds=180)
        except AssertionError:
            pytest.fail("\n".join([*problems, await cluster_report(api, namespace)]))
        converged = time.monotonic() - started
        consistency: list[str] = []

        async def consistent() -> bool:
            nonlocal consistency
            consistency = await check_namespace(
                api, namespace, claims=len(want.claims), pool="pool", pool_replicas=POOL_REPLICAS
            )
            # the free-standing Sandboxes (no claim, no pool) are this test's own
            consistency = [p for p in consistency if "has no controller" not in p]
            return not consistency

        try:
            await until("a consistent namespace", consistent, seconds=90)
        except AssertionError:
            pytest.fail("\n".join(consistency))
        relists = manager.informer(SANDBOXES).relists - relists_before
        log.info(
            "restart+compaction: apiserver back in %.1fs and %.1fs, compacted to %d, "
            "%d sandbox relists, converged %.1fs after the last change",
            restart,
            second_restart,
            revision,
            relists,
            converged,
        )
        record_property("apiserver_restart_seconds", round(restart, 1))
        record_property("apiserver_second_restart_seconds", round(second_restart, 1))
        record_property("converged_seconds", round(converged, 1))
        record_property("sandbox_informer_relists", relists)
        # the watches could not resume across the restart and compaction: they relisted
        assert relists >= 1
