"""Read-your-writes for the Sandbox status: a lagging cache does not make the controller repeat
the status it has just written (each owned-Pod event would otherwise resend it)."""

from __future__ import annotations

import copy

from sandbox_fakes import FakeCluster, conditions_by_type, make_sandbox, request

from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.controller.runtime import Obj
from kube_agent_sandbox.controller.sandbox.reconciler import SandboxReconciler


class LaggingSandboxes:
    """A Sandbox cache that shows a snapshot until told to catch up with the API server."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.snapshot: Obj | None = None
        self.catch_up()

    def catch_up(self) -> None:
        self.snapshot = copy.deepcopy(self.cluster.obj(SANDBOXES, "sandbox-name"))

    def get(self, namespace: str, name: str) -> Obj | None:
        return copy.deepcopy(self.snapshot)


def _lagging(cluster: FakeCluster) -> tuple[SandboxReconciler, LaggingSandboxes]:
    readers = cluster.readers()
    sandboxes = LaggingSandboxes(cluster)
    reconciler = SandboxReconciler(
        cluster,
        sandboxes=sandboxes,  # type: ignore[arg-type]
        pods=readers["pods"],
        services=readers["services"],
        pvcs=readers["pvcs"],
    )
    return reconciler, sandboxes


def _status_writes(cluster: FakeCluster) -> int:
    return sum(1 for call in cluster.writes(SANDBOXES) if call.subresource == "status")


async def test_a_lagging_cache_does_not_repeat_the_status_write() -> None:
    cluster = FakeCluster()
    cluster.add(SANDBOXES, make_sandbox())
    rec, _ = _lagging(cluster)
    await rec.reconcile(request())
    assert _status_writes(cluster) == 1
    for _ in range(3):  # Pod events arrive; the Sandbox cache still shows no status
        await rec.reconcile(request())
    assert _status_writes(cluster) == 1


async def test_a_real_change_is_written_on_top_of_the_unseen_write() -> None:
    cluster = FakeCluster()
    cluster.add(SANDBOXES, make_sandbox())
    rec, _ = _lagging(cluster)
    await rec.reconcile(request())
    cluster.set_pod_status("sandbox-name")  # the Pod becomes Ready before the cache catches up
    await rec.reconcile(request())
    assert _status_writes(cluster) == 2
    stored = cluster.obj(SANDBOXES, "sandbox-name")
    assert stored is not None
    assert conditions_by_type(stored)["Ready"]["status"] == "True"
    await rec.reconcile(request())
    assert _status_writes(cluster) == 2


async def test_the_overlay_is_dropped_once_the_cache_moves_on() -> None:
    cluster = FakeCluster()
    cluster.add(SANDBOXES, make_sandbox())
    rec, cache = _lagging(cluster)
    await rec.reconcile(request())
    cache.catch_up()
    # Someone else rewrites the status (e.g. a restore): the cache shows it, and the
    # controller recomputes from what the cache shows, not from its memory.
    cluster.mutate(SANDBOXES, "sandbox-name", lambda s: s.update(status={}))
    cache.catch_up()
    await rec.reconcile(request())
    assert _status_writes(cluster) == 2


async def test_a_cache_showing_only_the_metadata_patch_does_not_repeat_the_status_write() -> None:
    # A first pass patches the pod-name annotation, then the status. The next events often
    # come from a cache that shows the annotation patch but not yet the status write: that
    # version is newer than the one the status was computed from, older than the write.
    cluster = FakeCluster()
    cluster.add(SANDBOXES, make_sandbox())
    rec, cache = _lagging(cluster)
    await rec.reconcile(request())
    assert _status_writes(cluster) == 1
    stored = cluster.obj(SANDBOXES, "sandbox-name")
    assert stored is not None
    assert "agents.x-k8s.io/pod-name" in stored["metadata"]["annotations"]
    between = copy.deepcopy(stored)
    between.pop("status", None)
    between["metadata"]["resourceVersion"] = str(int(stored["metadata"]["resourceVersion"]) - 1)
    cache.snapshot = between
    for _ in range(3):
        await rec.reconcile(request())
    assert _status_writes(cluster) == 1


def _metadata_writes(cluster: FakeCluster) -> int:
    return sum(
        1
        for call in cluster.writes(SANDBOXES)
        if call.subresource != "status" and call.verb == "patch"
    )


async def test_a_lagging_cache_does_not_repeat_the_pod_name_annotation() -> None:
    cluster = FakeCluster()
    cluster.add(SANDBOXES, make_sandbox())
    rec, _ = _lagging(cluster)
    await rec.reconcile(request())
    assert _metadata_writes(cluster) == 1
    for _ in range(3):  # owned-Pod events; the cache shows neither write yet
        await rec.reconcile(request())
    assert _metadata_writes(cluster) == 1
    stored = cluster.obj(SANDBOXES, "sandbox-name")
    assert stored is not None
    assert stored["metadata"]["annotations"]["agents.x-k8s.io/pod-name"] == "sandbox-name"
