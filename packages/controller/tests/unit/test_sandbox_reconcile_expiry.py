"""Sandbox reconcile against the in-memory cluster: coalesced status writes and expiry."""

from __future__ import annotations

import pytest
from reconcile_helpers import SELECTOR
from reconcile_helpers import sandbox_status as _status
from sandbox_fakes import (
    Clock,
    FakeCluster,
    conditions_by_type,
    hash_label,
    make_pod,
    make_sandbox,
    make_service,
    owner_ref,
    request,
    sandbox_ref,
    strip_ltt,
)

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.api.rest import PODS, SERVICES
from kube_agent_sandbox.controller.runtime import Result


class TestStatusWrites:
    async def test_coalesces_node_name_only_change_while_not_ready(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox())
        rec = cluster.reconciler()
        await rec.reconcile(request())
        cluster.mutate(PODS, "sandbox-name", lambda p: p["spec"].update(nodeName="node-a"))
        cluster.clear_calls()
        await rec.reconcile(request())
        assert cluster.writes(SANDBOXES) == []
        assert "nodeName" not in _status(cluster)
        # The node name rides along with the next real change (Ready).
        cluster.set_pod_status("sandbox-name", node="node-a")
        await rec.reconcile(request())
        assert _status(cluster)["nodeName"] == "node-a"

    async def test_node_name_change_on_ready_sandbox_is_written(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox())
        rec = cluster.reconciler()
        await rec.reconcile(request())
        cluster.set_pod_status("sandbox-name", node="node-a")
        await rec.reconcile(request())
        cluster.mutate(PODS, "sandbox-name", lambda p: p["spec"].update(nodeName="node-b"))
        cluster.clear_calls()
        await rec.reconcile(request())
        writes = cluster.writes(SANDBOXES)
        assert [w.body for w in writes] == [{"status": {"nodeName": "node-b"}}]

    async def test_status_patch_not_found_is_ignored(self) -> None:
        from kube_agent_sandbox.controller.runtime import ApiError

        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox())
        cluster.fail("patch", "sandboxes/status", ApiError(404, "NotFound", "gone"))
        assert await cluster.reconciler().reconcile(request()) == Result()
        assert "conditions" not in _status(cluster)

    async def test_status_patch_server_error_is_retried_with_backoff(self) -> None:
        from kube_agent_sandbox.controller.runtime import ApiError
        from kube_agent_sandbox.controller.sandbox.errors import SandboxReconcileError

        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox())
        cluster.fail("patch", "sandboxes/status", ApiError(500, "InternalError", "etcd timeout"))
        with pytest.raises(
            SandboxReconcileError, match="failed to patch sandbox status: etcd timeout"
        ):
            await cluster.reconciler().reconcile(request())


class TestExpiry:
    PAST = "2026-01-02T03:00:00Z"

    def _expired_cluster(self, **kwargs: object) -> tuple[FakeCluster, dict]:
        cluster = FakeCluster()
        sandbox = cluster.add(
            SANDBOXES, make_sandbox(service=True, shutdown_time=self.PAST, **kwargs)
        )  # type: ignore[arg-type]
        cluster.add(PODS, make_pod("sandbox-name", labels=hash_label(), owner=sandbox_ref(sandbox)))
        cluster.add(
            SERVICES, make_service("sandbox-name", labels=hash_label(), owner=sandbox_ref(sandbox))
        )
        return cluster, sandbox

    async def test_retain_two_passes_then_status_reset(self) -> None:
        cluster, _ = self._expired_cluster()
        cluster.mutate(
            SANDBOXES,
            "sandbox-name",
            lambda s: s.update(
                status={
                    "service": "sandbox-name",
                    "serviceFQDN": "x",
                    "selector": SELECTOR,
                    "podIPs": ["1.2.3.4"],
                    "nodeName": "n",
                }
            ),
        )
        rec = cluster.reconciler()
        first = await rec.reconcile(request())
        assert first == Result(requeue_after=0.001)
        assert cluster.obj(PODS, "sandbox-name") is not None  # pass 1 only marks
        ready = conditions_by_type(cluster.obj(SANDBOXES, "sandbox-name"))["Ready"]  # type: ignore[arg-type]
        assert (ready["reason"], ready["message"]) == ("SandboxExpired", "Sandbox has expired")

        second = await rec.reconcile(request())
        assert second == Result()
        assert cluster.obj(PODS, "sandbox-name") is None
        assert cluster.obj(SERVICES, "sandbox-name") is None
        sandbox = cluster.obj(SANDBOXES, "sandbox-name")
        assert sandbox is not None
        assert set(sandbox["status"]) == {"conditions"}
        assert conditions_by_type(sandbox)["Ready"]["reason"] == "SandboxExpired"
        cluster.clear_calls()
        assert await rec.reconcile(request()) == Result()
        assert cluster.writes() == []

    async def test_pass_two_proceeds_when_the_cache_lags(self) -> None:
        cluster, _ = self._expired_cluster()
        rec = cluster.reconciler()
        await rec.reconcile(request())
        # Roll the status back, as a lagging cache would still show it.
        cluster.mutate(SANDBOXES, "sandbox-name", lambda s: s.pop("status", None))
        assert await rec.reconcile(request()) == Result()
        assert cluster.obj(PODS, "sandbox-name") is None

    async def test_retain_deletes_annotated_warm_pool_pod(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(
            SANDBOXES,
            make_sandbox(
                shutdown_time=self.PAST, annotations={c.ANNOTATION_POD_NAME: "pool-abcde"}
            ),
        )
        cluster.add(PODS, make_pod("pool-abcde", labels=hash_label(), owner=sandbox_ref(sandbox)))
        rec = cluster.reconciler()
        await rec.reconcile(request())
        await rec.reconcile(request())
        assert cluster.obj(PODS, "pool-abcde") is None

    async def test_delete_policy_deletes_sandbox(self) -> None:
        cluster, sandbox = self._expired_cluster(shutdown_policy="Delete")
        rec = cluster.reconciler()
        await rec.reconcile(request())
        assert await rec.reconcile(request()) == Result()
        assert cluster.obj(SANDBOXES, "sandbox-name") is None
        delete = next(w for w in cluster.writes(SANDBOXES) if w.verb == "delete")
        assert delete.preconditions == {"uid": sandbox["metadata"]["uid"]}

    async def test_skips_foreign_and_unowned_pods(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(shutdown_time=self.PAST))
        cluster.add(
            PODS,
            make_pod(
                "sandbox-name", owner=owner_ref("ReplicaSet", "rs", "u", api_version="apps/v1")
            ),
        )
        cluster.add(SERVICES, make_service("sandbox-name"))
        rec = cluster.reconciler()
        await rec.reconcile(request())
        await rec.reconcile(request())
        assert cluster.obj(PODS, "sandbox-name") is not None
        assert cluster.obj(SERVICES, "sandbox-name") is not None
        assert [w.verb for w in cluster.writes() if w.verb == "delete"] == []

    async def test_expired_with_no_children(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(shutdown_time=self.PAST))
        rec = cluster.reconciler()
        await rec.reconcile(request())
        assert await rec.reconcile(request()) == Result()
        assert cluster.obj(PODS, "sandbox-name") is None
        assert strip_ltt(_status(cluster)["conditions"]) == [
            {
                "type": "Ready",
                "status": "False",
                "observedGeneration": 1,
                "reason": "SandboxExpired",
                "message": "Sandbox has expired",
            }
        ]

    @pytest.mark.parametrize(
        ("phase", "reason"), [("Succeeded", "PodSucceeded"), ("Failed", "PodFailed")]
    )
    async def test_two_pass_preserves_finished(self, phase: str, reason: str) -> None:
        cluster = FakeCluster()
        clock = Clock()
        cluster.add(SANDBOXES, make_sandbox(shutdown_time="2026-01-02T03:05:00Z"))
        rec = cluster.reconciler(clock=clock)
        await rec.reconcile(request())
        cluster.set_pod_status("sandbox-name", phase=phase, ready=False)
        await rec.reconcile(request())
        finished = conditions_by_type(cluster.obj(SANDBOXES, "sandbox-name"))["Finished"]  # type: ignore[arg-type]
        assert finished["reason"] == reason
        clock.advance(120)
        assert await rec.reconcile(request()) == Result(requeue_after=0.001)
        assert await rec.reconcile(request()) == Result()
        sandbox = cluster.obj(SANDBOXES, "sandbox-name")
        assert sandbox is not None
        conds = conditions_by_type(sandbox)
        assert conds["Finished"] == finished
        assert conds["Ready"]["reason"] == "SandboxExpired"
        assert [cond["type"] for cond in sandbox["status"]["conditions"]] == [
            "Suspended",
            "Ready",
            "Finished",
        ]
        assert cluster.obj(PODS, "sandbox-name") is None

    async def test_future_shutdown_requeues_at_expiry(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(shutdown_time="2026-01-02T03:05:05Z"))
        assert await cluster.reconciler().reconcile(request()) == Result(requeue_after=60.0)

    async def test_moving_shutdown_time_forward_reactivates(self) -> None:
        cluster, _ = self._expired_cluster()
        rec = cluster.reconciler()
        await rec.reconcile(request())
        await rec.reconcile(request())
        cluster.mutate(
            SANDBOXES,
            "sandbox-name",
            lambda s: s["spec"].update(shutdownTime="2026-01-03T00:00:00Z"),
        )
        result = await rec.reconcile(request())
        assert result.requeue_after is not None
        assert result.requeue_after > 3600
        assert cluster.obj(PODS, "sandbox-name") is not None
        assert cluster.obj(SERVICES, "sandbox-name") is not None
