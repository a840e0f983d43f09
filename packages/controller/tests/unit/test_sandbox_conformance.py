"""Second-look conformance checks of the Sandbox reconciler against upstream v0.5.4 (Reconcile,
e2e).

Each test pins one rule of the spec that the other test files leave open: exact strings, the
status write rules, the expiry passes, the API calls a converged Sandbox must not make.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sandbox_fakes import (
    NOW,
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
from kube_agent_sandbox.api.namehash import name_hash
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.api.rest import PODS, PVCS, SERVICES
from kube_agent_sandbox.controller.runtime import ApiError, Result
from kube_agent_sandbox.controller.sandbox.pod import update_pod_metadata
from kube_agent_sandbox.controller.sandbox.service import service_ports_for_sandbox

HASH = name_hash("sandbox-name")
SELECTOR = f"{c.LABEL_SANDBOX_NAME_HASH}={HASH}"
PAST = "2026-01-02T03:00:00Z"
POOL_REF = owner_ref("SandboxWarmPool", "pool", "pool-uid")


def _sandbox(cluster: FakeCluster, name: str = "sandbox-name") -> dict[str, Any]:
    sandbox: dict[str, Any] | None = cluster.obj(SANDBOXES, name)
    assert sandbox is not None
    return sandbox


def _conds(cluster: FakeCluster) -> dict[str, dict[str, Any]]:
    conds: dict[str, dict[str, Any]] = conditions_by_type(_sandbox(cluster))
    return conds


class TestConvergedSandboxMakesNoApiCalls:
    """A reconcile of an unchanged, converged Sandbox reads only caches (the hot path)."""

    async def test_running_ready_with_every_child(self) -> None:
        cluster = FakeCluster()
        vct = {"metadata": {"name": "data"}, "spec": {"resources": {"requests": {"storage": "1"}}}}
        cluster.add(
            SANDBOXES,
            make_sandbox(
                service=True,
                labels={c.LABEL_CREATED_BY: "python-client", c.LABEL_WARM_POOL_SANDBOX: "h"},
                owner=POOL_REF,
                template_labels={"a": "b", c.LABEL_ADOPTABLE: "x"},
                template_annotations={"c": "d", c.ANNOTATION_TRACE_CONTEXT: "{}"},
                containers=[
                    {
                        "name": "m",
                        "image": "i",
                        "ports": [{"containerPort": 80}, {"containerPort": 53, "protocol": "UDP"}],
                    }
                ],
                init_containers=[
                    {
                        "name": "side",
                        "image": "i",
                        "restartPolicy": "Always",
                        "ports": [{"containerPort": 9000, "name": "metrics"}],
                    }
                ],
                vcts=[vct],
            ),
        )
        rec = cluster.reconciler()
        await rec.reconcile(request())
        cluster.set_pod_status("sandbox-name")
        await rec.reconcile(request())
        assert _conds(cluster)["Ready"]["status"] == "True"
        cluster.clear_calls()
        for _ in range(2):
            assert await rec.reconcile(request()) == Result()
        assert cluster.calls == []

    async def test_suspended(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(service=True))
        rec = cluster.reconciler()
        await rec.reconcile(request())
        cluster.mutate(
            SANDBOXES, "sandbox-name", lambda s: s["spec"].update(operatingMode="Suspended")
        )
        await rec.reconcile(request())
        await rec.reconcile(request())
        assert _conds(cluster)["Suspended"]["reason"] == "PodTerminated"
        cluster.clear_calls()
        await rec.reconcile(request())
        assert cluster.calls == []

    async def test_expired_and_retained(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(service=True, shutdown_time=PAST))
        rec = cluster.reconciler()
        await rec.reconcile(request())
        await rec.reconcile(request())
        cluster.clear_calls()
        assert await rec.reconcile(request()) == Result()
        assert cluster.calls == []

    async def test_pod_owned_by_another_controller(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox())
        rs = owner_ref("ReplicaSet", "rs", "rs-uid", api_version="apps/v1")
        cluster.add(PODS, make_pod("sandbox-name", owner=rs))
        rec = cluster.reconciler()
        await rec.reconcile(request())
        cluster.clear_calls()
        await rec.reconcile(request())
        assert cluster.calls == []

    async def test_finished_pod_under_an_annotated_name(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(
            SANDBOXES, make_sandbox(annotations={c.ANNOTATION_POD_NAME: "pool-abcde"})
        )
        cluster.add(PODS, make_pod("pool-abcde", labels=hash_label(), owner=sandbox_ref(sandbox)))
        cluster.set_pod_status("pool-abcde", phase="Succeeded", ready=False)
        rec = cluster.reconciler()
        await rec.reconcile(request())
        assert _conds(cluster)["Finished"]["reason"] == "PodSucceeded"
        cluster.clear_calls()
        await rec.reconcile(request())
        assert cluster.calls == []


class TestExpiryPasses:
    async def test_pass_two_with_cleanup_error_leaves_status_alone(self) -> None:
        """handleSandboxExpiry: the status is rewritten only when cleanup succeeded."""
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox(shutdown_time=PAST))
        cluster.add(PODS, make_pod("sandbox-name", labels=hash_label(), owner=sandbox_ref(sandbox)))
        rec = cluster.reconciler()
        await rec.reconcile(request())
        assert _conds(cluster)["Ready"]["observedGeneration"] == 1

        def edit(obj: dict[str, Any]) -> None:
            obj["metadata"]["generation"] = 2

        cluster.mutate(SANDBOXES, "sandbox-name", edit)
        cluster.fail("delete", PODS.plural, ApiError(405, "MethodNotAllowed", "nope"))
        cluster.clear_calls()
        await rec.reconcile(request())
        assert cluster.writes(SANDBOXES) == []
        assert _conds(cluster)["Ready"]["observedGeneration"] == 1

    async def test_expiry_reached_during_the_reconcile_marks_and_requeues_at_once(self) -> None:
        """Reconcile re-checks expiry after the children; expired now -> mark, 1 ms requeue."""
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(shutdown_time="2026-01-02T03:04:06Z"))
        # The clock is read at the start and again after the children: 5 s pass in between.
        moments = iter([NOW, NOW + dt.timedelta(seconds=5)])
        rec = cluster.reconciler(clock=lambda: next(moments))
        assert await rec.reconcile(request()) == Result(requeue_after=0.001)
        assert cluster.obj(PODS, "sandbox-name") is not None
        ready = _conds(cluster)["Ready"]
        assert (ready["reason"], ready["message"]) == ("SandboxExpired", "Sandbox has expired")

    async def test_delete_policy_drops_child_errors_and_writes_no_status(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox(shutdown_time=PAST, shutdown_policy="Delete"))
        cluster.add(PODS, make_pod("sandbox-name", labels=hash_label(), owner=sandbox_ref(sandbox)))
        rec = cluster.reconciler()
        await rec.reconcile(request())
        cluster.fail("delete", PODS.plural, ApiError(500, "InternalError", "boom"))
        cluster.clear_calls()
        assert await rec.reconcile(request()) == Result()
        assert cluster.obj(SANDBOXES, "sandbox-name") is None
        assert [(w.verb, w.plural) for w in cluster.writes()] == [
            ("delete", "pods"),
            ("delete", "sandboxes"),
        ]


class TestServicePortNames:
    def _ports(
        self, containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None
    ) -> Any:
        return service_ports_for_sandbox(make_sandbox(containers=containers, init_containers=init))

    def test_explicit_name_equal_to_a_generated_one_wins(self) -> None:
        ports = self._ports(
            [
                {
                    "name": "m",
                    "image": "i",
                    "ports": [{"containerPort": 80}, {"containerPort": 90, "name": "p-80-tcp"}],
                }
            ]
        )
        assert [(p["name"], p["port"]) for p in ports] == [("p-80-tcp-2", 80), ("p-80-tcp", 90)]

    def test_sorted_by_port_then_protocol_and_port_zero_ignored(self) -> None:
        ports = self._ports(
            [
                {
                    "name": "m",
                    "image": "i",
                    "ports": [
                        {"containerPort": 53, "protocol": "UDP"},
                        {"containerPort": 0, "name": "zero"},
                        {"containerPort": 53, "protocol": "SCTP"},
                        {"containerPort": 53},
                    ],
                }
            ]
        )
        assert ports == [
            {"name": "p-53-sctp", "protocol": "SCTP", "port": 53, "targetPort": 53},
            {"name": "p-53-tcp", "protocol": "TCP", "port": 53, "targetPort": 53},
            {"name": "p-53-udp", "protocol": "UDP", "port": 53, "targetPort": 53},
        ]

    def test_name_taken_by_earlier_port_falls_back_to_generated(self) -> None:
        ports = self._ports(
            [
                {"name": "a", "image": "i", "ports": [{"containerPort": 81, "name": "web"}]},
                {"name": "b", "image": "i", "ports": [{"containerPort": 80, "name": "web"}]},
            ],
            [{"name": "side", "image": "i", "ports": [{"containerPort": 70, "name": "side"}]}],
        )
        assert [(p["name"], p["port"]) for p in ports] == [("p-80-tcp", 80), ("web", 81)]

    def test_duplicate_port_keeps_first_explicit_name(self) -> None:
        ports = self._ports(
            [
                {"name": "a", "image": "i", "ports": [{"containerPort": 80}]},
                {"name": "b", "image": "i", "ports": [{"containerPort": 80, "name": "http"}]},
                {"name": "c", "image": "i", "ports": [{"containerPort": 80, "name": "other"}]},
            ]
        )
        assert [(p["name"], p["port"]) for p in ports] == [("http", 80)]


class TestPodMetadata:
    def test_propagated_lists_are_rewritten_to_empty_when_template_keys_go(self) -> None:
        sandbox = make_sandbox()
        pod = make_pod(
            "sandbox-name",
            labels={**hash_label(), "a": "b"},
            annotations={
                c.ANNOTATION_PROPAGATED_LABELS: "a",
                c.ANNOTATION_PROPAGATED_ANNOTATIONS: f"x,{c.ANNOTATION_TRACE_CONTEXT}",
                "x": "y",
                c.ANNOTATION_TRACE_CONTEXT: "{}",
            },
        )
        assert update_pod_metadata(pod, sandbox, HASH) is True
        assert pod["metadata"]["labels"] == hash_label()
        assert pod["metadata"]["annotations"] == {
            c.ANNOTATION_PROPAGATED_LABELS: "",
            c.ANNOTATION_PROPAGATED_ANNOTATIONS: "",
        }


class TestE2eScenarios:
    """Upstream's e2e scenarios replayed against the in-memory cluster (whole status compared)."""

    async def test_shutdown_time_on_a_ready_sandbox(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(service=True))
        clock = Clock()
        rec = cluster.reconciler(clock=clock)
        await rec.reconcile(request())
        cluster.set_pod_status("sandbox-name")
        await rec.reconcile(request())

        def set_shutdown(obj: dict[str, Any]) -> None:
            obj["spec"]["shutdownTime"] = "2026-01-02T03:04:15Z"
            obj["metadata"]["generation"] = 2

        cluster.mutate(SANDBOXES, "sandbox-name", set_shutdown)
        assert await rec.reconcile(request()) == Result(requeue_after=10.0)
        clock.advance(10)
        assert await rec.reconcile(request()) == Result(requeue_after=0.001)
        assert await rec.reconcile(request()) == Result()
        status = _sandbox(cluster)["status"]
        assert strip_ltt(status.pop("conditions")) == [
            {
                "type": "Suspended",
                "status": "False",
                "observedGeneration": 2,
                "reason": "NotSuspended",
                "message": "Sandbox is not suspended",
            },
            {
                "type": "Ready",
                "status": "False",
                "observedGeneration": 2,
                "reason": "SandboxExpired",
                "message": "Sandbox has expired",
            },
        ]
        assert status == {}
        assert cluster.obj(PODS, "sandbox-name") is None
        assert cluster.obj(SERVICES, "sandbox-name") is None

    async def test_created_suspended_next_to_an_unowned_pod(self) -> None:
        cluster = FakeCluster()
        cluster.add(PODS, make_pod("sandbox-name", labels={"app": "x"}))
        cluster.add(SANDBOXES, make_sandbox(service=True, mode="Suspended"))
        result = await cluster.reconciler().reconcile(request())
        assert result == Result()
        status = _sandbox(cluster)["status"]
        assert strip_ltt(status.pop("conditions")) == [
            {
                "type": "Suspended",
                "status": "False",
                "observedGeneration": 1,
                "reason": "PodNotOwned",
                "message": "Refused to delete pod because it is not owned by this sandbox",
            },
            {
                "type": "Ready",
                "status": "False",
                "observedGeneration": 1,
                "reason": "SandboxSuspended",
                "message": "Sandbox is suspending",
            },
        ]
        assert status == {
            "service": "sandbox-name",
            "serviceFQDN": "sandbox-name.default.svc.cluster.local",
            "selector": SELECTOR,
        }
        pod = cluster.obj(PODS, "sandbox-name")
        assert pod is not None
        assert pod["metadata"]["labels"] == {"app": "x"}
        assert [w.plural for w in cluster.writes()] == ["services", "sandboxes"]

    async def test_suspension_with_terminating_pod_ltt(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox())
        clock = Clock()
        rec = cluster.reconciler(clock=clock)
        await rec.reconcile(request())
        cluster.mutate(
            PODS,
            "sandbox-name",
            lambda p: p["metadata"].update(finalizers=["agents.x-k8s.io/test-hold"]),
        )
        cluster.set_pod_status("sandbox-name")
        await rec.reconcile(request())
        first_ltt = _conds(cluster)["Suspended"]["lastTransitionTime"]
        clock.advance(30)
        cluster.mutate(
            SANDBOXES, "sandbox-name", lambda s: s["spec"].update(operatingMode="Suspended")
        )
        await rec.reconcile(request())
        suspended = _conds(cluster)["Suspended"]
        assert (suspended["reason"], suspended["lastTransitionTime"]) == (
            "PodTerminating",
            first_ltt,
        )
        pod = cluster.obj(PODS, "sandbox-name")
        assert pod is not None
        assert pod["metadata"].get("deletionTimestamp")
        assert _sandbox(cluster)["status"]["podIPs"] == ["10.0.0.1"]
        clock.advance(30)
        cluster.mutate(PODS, "sandbox-name", lambda p: p["metadata"].update(finalizers=[]))
        del cluster.store[PODS.plural][("default", "sandbox-name")]
        await rec.reconcile(request())
        suspended = _conds(cluster)["Suspended"]
        assert suspended["reason"] == "PodTerminated"
        assert suspended["lastTransitionTime"] == "2026-01-02T03:05:05Z"
        status = _sandbox(cluster)["status"]
        assert "podIPs" not in status
        assert "nodeName" not in status
        assert status["selector"] == SELECTOR
        assert c.ANNOTATION_POD_NAME not in (_sandbox(cluster)["metadata"].get("annotations") or {})


class TestErrorTexts:
    """reconcilePod/Service/PVCs and computeReadyCondition: the exact Ready text of ownership
    errors, joined in child order."""

    async def test_pvc_and_pod_and_service_errors_are_joined_in_order(self) -> None:
        cluster = FakeCluster()
        vct = {"metadata": {"name": "data"}, "spec": {}}
        cluster.add(SANDBOXES, make_sandbox(service=True, vcts=[vct]))
        rs = owner_ref("ReplicaSet", "rs", "rs-uid", api_version="apps/v1")
        cluster.add(PVCS, {"metadata": {"name": "data-sandbox-name", "ownerReferences": [rs]}})
        cluster.add(PODS, make_pod("sandbox-name"))
        cluster.add(SERVICES, make_service("sandbox-name", owner=rs))
        assert await cluster.reconciler().reconcile(request()) == Result(requeue_after=60.0)
        ready = _conds(cluster)["Ready"]
        assert (ready["status"], ready["reason"]) == ("False", "ReconcilerError")
        assert ready["message"] == (
            'Error seen: PVC "data-sandbox-name" is owned by ReplicaSet/rs (UID: rs-uid), '
            'not by sandbox "sandbox-name"\n'
            'cannot adopt unowned pod "sandbox-name": missing required pool authorization label '
            '("agents.x-k8s.io/adoptable") or sandbox tracking label '
            '("agents.x-k8s.io/sandbox-name-hash")\n'
            'service "sandbox-name" is owned by ReplicaSet/rs (UID: rs-uid), '
            'not by sandbox "sandbox-name"'
        )
        assert _sandbox(cluster)["status"].get("selector") is None

    async def test_non_headless_service_refused_with_upstream_text(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(service=True))
        cluster.add(
            SERVICES, make_service("sandbox-name", labels=hash_label(), cluster_ip="10.0.0.9")
        )
        await cluster.reconciler().reconcile(request())
        assert _conds(cluster)["Ready"]["message"] == (
            'Error seen: cannot adopt service "sandbox-name": ClusterIP is "10.0.0.9" '
            '(expected "None", field is immutable)'
        )
