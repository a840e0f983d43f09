"""Bad input and failing API calls give conditions, events and a retry policy, never a hot loop."""

from __future__ import annotations

import logging

import pytest
from sandbox_fakes import (
    FakeCluster,
    FakeRecorder,
    conditions_by_type,
    hash_label,
    make_pod,
    make_sandbox,
    make_service,
    request,
    sandbox_ref,
)

from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.api.rest import PODS, PVCS, SERVICES
from kube_agent_sandbox.controller.runtime import ApiError, Result, is_transient
from kube_agent_sandbox.controller.sandbox.errors import SandboxReconcileError
from kube_agent_sandbox.controller.sandbox.reconciler import SandboxReconciler

INVALID_POD = ApiError(
    422,
    "Invalid",
    'Pod "sandbox-name" is invalid: spec.containers[0].image: Required value',
)
TERMINATING_NS = ApiError(
    403,
    "Forbidden",
    'pods "sandbox-name" is forbidden: unable to create new content in namespace default '
    "because it is being terminated",
    {"details": {"causes": [{"reason": "NamespaceTerminating", "field": "metadata.namespace"}]}},
)


def _ready(cluster: FakeCluster, name: str = "sandbox-name") -> dict:
    return conditions_by_type(cluster.obj(SANDBOXES, name))["Ready"]  # type: ignore[arg-type]


class TestClassification:
    @pytest.mark.parametrize(
        ("error", "transient"),
        [
            (ApiError(422, "Invalid", "x"), False),
            (ApiError(400, "BadRequest", "x"), False),
            # RBAC missing or not synced yet (a restarted API server): retried with backoff
            (ApiError(403, "Forbidden", "x"), True),
            (TERMINATING_NS, False),
            (ApiError(404, "NotFound", "x"), False),
            (ApiError(409, "Conflict", "x"), True),
            (ApiError(409, "AlreadyExists", "x"), True),
            (ApiError(429, "TooManyRequests", "x"), True),
            (ApiError(500, "InternalError", "x"), True),
            (ApiError(503, "ServiceUnavailable", "x"), True),
            (ConnectionResetError("reset"), True),
            (TimeoutError(), True),
        ],
    )
    def test_is_transient(self, error: BaseException, transient: bool) -> None:
        assert is_transient(error) is transient


class TestBadInput:
    async def test_invalid_pod_template_is_reported_and_retried_slowly(self) -> None:
        cluster = FakeCluster()
        recorder = FakeRecorder()
        cluster.add(SANDBOXES, make_sandbox())
        cluster.fail("create", "pods", INVALID_POD, INVALID_POD)
        rec = cluster.reconciler(recorder=recorder)
        assert await rec.reconcile(request()) == Result(requeue_after=60.0)
        ready = _ready(cluster)
        assert (ready["status"], ready["reason"]) == ("False", "ReconcilerError")
        assert ready["message"] == f"Error seen: {INVALID_POD.message}"
        assert recorder.events == [
            {
                "object": "sandbox-name",
                "type": "Warning",
                "reason": "ReconcilerError",
                "action": "Reconciling",
                "note": ready["message"],
            }
        ]
        cluster.clear_calls()
        assert await rec.reconcile(request()) == Result(requeue_after=60.0)
        assert [(w.verb, w.plural) for w in cluster.writes()] == [
            ("create", "pods")
        ]  # no status write
        assert len(recorder.events) == 1  # no event storm

    async def test_error_clears_when_input_is_fixed(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox())
        cluster.fail("create", "pods", INVALID_POD)
        rec = cluster.reconciler()
        await rec.reconcile(request())
        assert await rec.reconcile(request()) == Result()
        assert _ready(cluster)["reason"] == "DependenciesNotReady"

    async def test_service_name_longer_than_63(self) -> None:
        name = "s" * 70
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(name, service=True))
        result = await cluster.reconciler().reconcile(request(name))
        assert result == Result(requeue_after=60.0)
        assert cluster.writes(SERVICES) == []
        assert cluster.obj(PODS, name) is not None  # the pod is fine: names up to 253
        assert _ready(cluster, name)["message"] == (
            f'Error seen: cannot create headless service "{name}": name must be no more than '
            "63 characters (the Service is named after the Sandbox, which has 70)"
        )

    async def test_long_name_without_service_is_fine(self) -> None:
        name = "s" * 200
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(name))
        assert await cluster.reconciler().reconcile(request(name)) == Result()
        assert _ready(cluster, name)["reason"] == "DependenciesNotReady"

    async def test_service_name_with_dots(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox("a.b", service=True))
        await cluster.reconciler().reconcile(request("a.b"))
        assert cluster.writes(SERVICES) == []
        assert "must be a DNS label" in _ready(cluster, "a.b")["message"]

    async def test_pvc_name_longer_than_253(self) -> None:
        name = "p" * 250
        vct = {"metadata": {"name": "data"}, "spec": {}}
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(name, vcts=[vct]))
        result = await cluster.reconciler().reconcile(request(name))
        assert result == Result(requeue_after=60.0)
        assert cluster.writes(PVCS) == []
        message = _ready(cluster, name)["message"]
        assert message.startswith(
            'Error seen: cannot create PVC for volumeClaimTemplate "data": name "data-ppp'
        )
        assert message.endswith("must be no more than 253 characters (has 255)")

    async def test_invalid_vct_name(self) -> None:
        vct = {"metadata": {"name": "Bad_Name"}, "spec": {}}
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(vcts=[vct]))
        await cluster.reconciler().reconcile(request())
        assert cluster.writes(PVCS) == []
        assert "must be a lowercase RFC 1123 subdomain" in _ready(cluster)["message"]

    async def test_pod_name_taken_by_another_owner_emits_one_warning(self) -> None:
        from sandbox_fakes import owner_ref

        cluster = FakeCluster()
        recorder = FakeRecorder()
        cluster.add(SANDBOXES, make_sandbox())
        cluster.add(
            PODS,
            make_pod(
                "sandbox-name", owner=owner_ref("Job", "j", "job-uid", api_version="batch/v1")
            ),
        )
        rec = cluster.reconciler(recorder=recorder)
        for _ in range(3):
            assert await rec.reconcile(request()) == Result(requeue_after=60.0)
        assert [e["reason"] for e in recorder.events] == ["ReconcilerError"]
        assert "is owned by Job/j (UID: job-uid)" in recorder.events[0]["note"]

    async def test_unparseable_shutdown_time_is_ignored_with_a_log_line(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(shutdown_time="not a time"))
        with caplog.at_level(logging.WARNING):
            assert await cluster.reconciler().reconcile(request()) == Result()
        assert "unparseable spec.shutdownTime" in caplog.text
        assert cluster.obj(PODS, "sandbox-name") is not None

    async def test_long_event_note_is_truncated(self) -> None:
        cluster = FakeCluster()
        recorder = FakeRecorder()
        cluster.add(SANDBOXES, make_sandbox())
        cluster.fail("create", "pods", ApiError(422, "Invalid", "x" * 5000))
        await cluster.reconciler(recorder=recorder).reconcile(request())
        assert len(recorder.events[0]["note"]) == 1024
        assert recorder.events[0]["note"].endswith("...")


class TestFailingApi:
    async def test_namespace_terminating_is_not_retried_hot(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox())
        cluster.fail("create", "pods", TERMINATING_NS)
        cluster.fail("patch", "sandboxes/status", ApiError(404, "NotFound", "gone"))
        assert await cluster.reconciler().reconcile(request()) == Result(requeue_after=60.0)

    async def test_server_error_on_create_is_retried_with_backoff(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox())
        cluster.fail(
            "create", "pods", ApiError(500, "InternalError", "etcdserver: request timed out")
        )
        with pytest.raises(SandboxReconcileError, match="etcdserver: request timed out"):
            await cluster.reconciler().reconcile(request())
        # The status was still written before raising.
        assert _ready(cluster)["message"] == "Error seen: etcdserver: request timed out"

    async def test_network_error_is_transient(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox())
        cluster.fail("create", "pods", ConnectionResetError("connection reset by peer"))
        with pytest.raises(SandboxReconcileError):
            await cluster.reconciler().reconcile(request())
        assert _ready(cluster)["message"] == "Error seen: connection reset by peer"

    async def test_conflicting_concurrent_update_is_retried(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(service=True))
        cluster.add(SERVICES, make_service("sandbox-name", labels=hash_label()))
        rec = cluster.reconciler()
        # Someone changes the Service between the cache read and the update.
        stale = rec._services.get("default", "sandbox-name")  # type: ignore[attr-defined]
        cluster.mutate(SERVICES, "sandbox-name", lambda s: s["metadata"]["labels"].update(x="y"))
        rec._services.get = lambda ns, name: stale  # type: ignore[attr-defined]
        with pytest.raises(
            SandboxReconcileError, match="failed to update service with owner reference"
        ):
            await rec.reconcile(request())
        assert "ownerReferences" not in cluster.obj(SERVICES, "sandbox-name")["metadata"]  # type: ignore[index]
        del rec._services.get  # type: ignore[attr-defined]
        assert await rec.reconcile(request()) == Result()
        assert cluster.obj(SERVICES, "sandbox-name")["metadata"]["ownerReferences"]  # type: ignore[index]

    async def test_pod_get_after_already_exists_fails(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox())
        cluster.fail("create", "pods", ApiError(409, "AlreadyExists", "exists"))
        cluster.fail("get", "pods", ApiError(503, "ServiceUnavailable", "unavailable"))
        with pytest.raises(SandboxReconcileError):
            await cluster.reconciler().reconcile(request())
        assert (
            _ready(cluster)["message"]
            == "Error seen: pod already exists but failed to fetch: unavailable"
        )

    async def test_pod_delete_not_found_on_suspend_means_gone(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox(mode="Suspended"))
        cluster.add(PODS, make_pod("sandbox-name", labels=hash_label(), owner=sandbox_ref(sandbox)))
        cluster.fail("delete", "pods", ApiError(404, "NotFound", "gone"))
        assert await cluster.reconciler().reconcile(request()) == Result()
        conds = conditions_by_type(cluster.obj(SANDBOXES, "sandbox-name"))  # type: ignore[arg-type]
        assert conds["Suspended"]["reason"] == "PodTerminated"

    async def test_pod_delete_failure_on_suspend(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox(mode="Suspended"))
        cluster.add(PODS, make_pod("sandbox-name", labels=hash_label(), owner=sandbox_ref(sandbox)))
        cluster.fail("delete", "pods", ApiError(500, "InternalError", "boom"))
        with pytest.raises(SandboxReconcileError):
            await cluster.reconciler().reconcile(request())
        conds = conditions_by_type(cluster.obj(SANDBOXES, "sandbox-name"))  # type: ignore[arg-type]
        assert conds["Suspended"]["reason"] == "PodTerminating"
        assert conds["Ready"]["message"] == "Error seen: failed to delete pod: boom"

    async def test_pod_lookup_failure_while_suspended_is_unknown(self) -> None:
        cluster = FakeCluster()
        cluster.add(
            SANDBOXES, make_sandbox(mode="Suspended", annotations={"agents.x-k8s.io/pod-name": "p"})
        )
        cluster.fail("patch", "sandboxes", ApiError(500, "InternalError", "boom"))
        with pytest.raises(SandboxReconcileError):
            await cluster.reconciler().reconcile(request())
        conds = conditions_by_type(cluster.obj(SANDBOXES, "sandbox-name"))  # type: ignore[arg-type]
        assert conds["Suspended"]["status"] == "Unknown"
        assert conds["Ready"]["message"] == "Error seen: failed to clear pod name annotation: boom"

    async def test_expiry_cleanup_error_keeps_status_and_retries(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox(shutdown_time="2020-01-01T00:00:00Z"))
        cluster.add(PODS, make_pod("sandbox-name", labels=hash_label(), owner=sandbox_ref(sandbox)))
        rec = cluster.reconciler()
        await rec.reconcile(request())
        cluster.fail("delete", "pods", ApiError(500, "InternalError", "boom"))
        with pytest.raises(SandboxReconcileError, match="failed to delete pod: boom"):
            await rec.reconcile(request())
        assert await rec.reconcile(request()) == Result()
        assert cluster.obj(PODS, "sandbox-name") is None

    @staticmethod
    async def _expired_with_delete_policy(
        cluster: FakeCluster, error: ApiError
    ) -> SandboxReconciler:
        """An expired Sandbox (policy Delete) whose next delete fails with ``error``."""
        cluster.add(
            SANDBOXES, make_sandbox(shutdown_time="2020-01-01T00:00:00Z", shutdown_policy="Delete")
        )
        rec = cluster.reconciler()
        await rec.reconcile(request())
        cluster.fail("delete", "sandboxes", error)
        return rec

    async def test_delete_policy_failure_is_reported(self) -> None:
        cluster = FakeCluster()
        rec = await self._expired_with_delete_policy(
            cluster, ApiError(405, "MethodNotAllowed", "no")
        )
        assert await rec.reconcile(request()) == Result(requeue_after=60.0)
        assert cluster.obj(SANDBOXES, "sandbox-name") is not None

    async def test_forbidden_delete_is_reported_and_retried_with_backoff(self) -> None:
        """A 403 (RBAC missing, or not synced yet) heals once the Role is there: backoff."""
        cluster = FakeCluster()
        rec = await self._expired_with_delete_policy(cluster, ApiError(403, "Forbidden", "no"))
        with pytest.raises(SandboxReconcileError, match="failed to delete sandbox: no"):
            await rec.reconcile(request())
        assert cluster.obj(SANDBOXES, "sandbox-name") is not None


class TestWarningEvents:
    async def test_not_repeated_when_the_cache_still_shows_the_old_status(self) -> None:
        cluster = FakeCluster()
        recorder = FakeRecorder()
        cluster.add(SANDBOXES, make_sandbox())
        cluster.fail("create", "pods", INVALID_POD, INVALID_POD)
        rec = cluster.reconciler(recorder=recorder)
        await rec.reconcile(request())
        # Roll the status back, as a lagging cache would still show it.
        cluster.mutate(SANDBOXES, "sandbox-name", lambda s: s.pop("status"))
        await rec.reconcile(request())
        assert len(recorder.events) == 1

    async def test_emitted_again_after_recovery(self) -> None:
        cluster = FakeCluster()
        recorder = FakeRecorder()
        cluster.add(SANDBOXES, make_sandbox())
        rec = cluster.reconciler(recorder=recorder)
        cluster.fail("create", "pods", INVALID_POD)
        await rec.reconcile(request())
        await rec.reconcile(request())  # recovers: the pod is created
        cluster.store["pods"].clear()
        cluster.fail("create", "pods", INVALID_POD)
        await rec.reconcile(request())
        assert [e["reason"] for e in recorder.events] == ["ReconcilerError", "ReconcilerError"]
