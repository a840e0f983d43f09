"""Sandbox reconcile end to end against the in-memory cluster: children, status, idempotence."""

from __future__ import annotations

from reconcile_helpers import SELECTOR
from reconcile_helpers import sandbox_status as _status
from sandbox_fakes import (
    NS,
    Clock,
    FakeCluster,
    FakeRecorder,
    conditions_by_type,
    hash_label,
    make_pod,
    make_sandbox,
    request,
    sandbox_ref,
    strip_ltt,
)

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.api.rest import PODS, PVCS, SERVICES
from kube_agent_sandbox.controller.runtime import Result


class TestReconcile:
    async def test_not_found_is_done(self) -> None:
        cluster = FakeCluster()
        assert await cluster.reconciler().reconcile(request("missing")) == Result()
        assert cluster.writes() == []

    async def test_deleting_sandbox_is_left_alone(self) -> None:
        cluster = FakeCluster()
        sandbox = make_sandbox()
        sandbox["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        cluster.add(SANDBOXES, sandbox)
        assert await cluster.reconciler().reconcile(request()) == Result()
        assert cluster.writes() == []

    async def test_minimal_spec_creates_pod_but_no_service(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox())
        result = await cluster.reconciler().reconcile(request())
        assert result == Result()
        pod = cluster.obj(PODS, "sandbox-name")
        assert pod is not None
        assert pod["metadata"]["labels"] == hash_label()
        assert pod["metadata"]["ownerReferences"] == [sandbox_ref(sandbox)]
        assert "annotations" not in pod["metadata"]
        assert pod["spec"] == sandbox["spec"]["podTemplate"]["spec"]
        create = cluster.writes(PODS)[0]
        assert (create.verb, create.field_manager) == ("create", "sandbox-controller")
        assert cluster.obj(SERVICES, "sandbox-name") is None
        status = _status(cluster)
        assert status["selector"] == SELECTOR
        assert "service" not in status
        assert strip_ltt(status["conditions"]) == [
            {
                "type": "Suspended",
                "status": "False",
                "observedGeneration": 1,
                "reason": "NotSuspended",
                "message": "Sandbox is not suspended",
            },
            {
                "type": "PodScheduled",
                "status": "Unknown",
                "observedGeneration": 1,
                "reason": "PodSchedulingUnknown",
                "message": "Pod has not reported a PodScheduled condition yet",
            },
            {
                "type": "Ready",
                "status": "False",
                "observedGeneration": 1,
                "reason": "DependenciesNotReady",
                "message": "Pod exists with phase: Pending",
            },
        ]
        annotations = cluster.obj(SANDBOXES, "sandbox-name")["metadata"]["annotations"]  # type: ignore[index]
        assert annotations == {c.ANNOTATION_POD_NAME: "sandbox-name"}

    async def test_status_write_is_a_merge_patch_of_the_status_subresource(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox())
        await cluster.reconciler().reconcile(request())
        status_writes = [w for w in cluster.writes(SANDBOXES) if w.subresource == "status"]
        assert len(status_writes) == 1
        body = status_writes[0].body
        assert set(body) == {"status"}
        assert "resourceVersion" not in body.get("metadata", {})

    async def test_service_true_creates_headless_service(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox(service=True))
        await cluster.reconciler().reconcile(request())
        svc = cluster.obj(SERVICES, "sandbox-name")
        assert svc is not None
        assert svc["spec"] == {"clusterIP": "None", "selector": hash_label()}
        assert svc["metadata"]["labels"] == hash_label()
        assert svc["metadata"]["ownerReferences"] == [sandbox_ref(sandbox)]
        status = _status(cluster)
        assert status["service"] == "sandbox-name"
        assert status["serviceFQDN"] == "sandbox-name.default.svc.cluster.local"
        assert conditions_by_type(cluster.obj(SANDBOXES, "sandbox-name"))["Ready"]["message"] == (  # type: ignore[arg-type]
            "Pod exists with phase: Pending; Service Exists"
        )

    async def test_custom_cluster_domain(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(service=True))
        await cluster.reconciler(cluster_domain="corp.example").reconcile(request())
        assert _status(cluster)["serviceFQDN"] == "sandbox-name.default.svc.corp.example"

    async def test_pvc_pod_and_service(self) -> None:
        cluster = FakeCluster()
        vct = {
            "metadata": {"name": "my-pvc", "labels": {"pvc-l": "v"}, "annotations": {"pvc-a": "w"}},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
        sandbox = cluster.add(
            SANDBOXES,
            make_sandbox(
                service=True,
                template_labels={"app": "x", "tier": "y"},
                template_annotations={"note": "n"},
                volumes=[{"name": "my-pvc", "emptyDir": {}}, {"name": "other", "emptyDir": {}}],
                vcts=[vct],
            ),
        )
        await cluster.reconciler().reconcile(request())
        pvc = cluster.obj(PVCS, "my-pvc-sandbox-name")
        assert pvc is not None
        assert pvc["metadata"]["labels"] == {"pvc-l": "v", **hash_label()}
        assert pvc["metadata"]["annotations"] == {"pvc-a": "w"}
        assert pvc["metadata"]["ownerReferences"] == [sandbox_ref(sandbox)]
        assert pvc["spec"] == vct["spec"]
        pod = cluster.obj(PODS, "sandbox-name")
        assert pod is not None
        assert pod["metadata"]["labels"] == {"app": "x", "tier": "y", **hash_label()}
        assert pod["metadata"]["annotations"] == {
            "note": "n",
            c.ANNOTATION_PROPAGATED_LABELS: "app,tier",
            c.ANNOTATION_PROPAGATED_ANNOTATIONS: "note",
        }
        assert pod["spec"]["volumes"] == [
            {"name": "other", "emptyDir": {}},
            {"name": "my-pvc", "persistentVolumeClaim": {"claimName": "my-pvc-sandbox-name"}},
        ]
        assert cluster.obj(SERVICES, "sandbox-name") is not None

    async def test_existing_pod_propagates_ips_and_node(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox())
        cluster.add(PODS, make_pod("sandbox-name", labels=hash_label(), owner=sandbox_ref(sandbox)))
        cluster.set_pod_status("sandbox-name", ips=("10.1.2.3", "fd00::3"), node="kwok-node-0")
        await cluster.reconciler().reconcile(request())
        status = _status(cluster)
        assert status["podIPs"] == ["10.1.2.3", "fd00::3"]
        assert status["nodeName"] == "kwok-node-0"
        assert (
            conditions_by_type(cluster.obj(SANDBOXES, "sandbox-name"))["Ready"]["status"] == "True"
        )  # type: ignore[arg-type]

    async def test_ready_pod_is_ready_without_service(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox())
        cluster.add(PODS, make_pod("sandbox-name", labels=hash_label(), owner=sandbox_ref(sandbox)))
        cluster.set_pod_status("sandbox-name")
        await cluster.reconciler().reconcile(request())
        ready = conditions_by_type(cluster.obj(SANDBOXES, "sandbox-name"))["Ready"]  # type: ignore[arg-type]
        assert (ready["status"], ready["reason"], ready["message"]) == (
            "True",
            "DependenciesReady",
            "Pod is Ready",
        )

    async def test_simple_sandbox_exact_status(self) -> None:
        """TestSimpleSandbox's expectation, with the pod made Ready by a fake kubelet."""
        cluster = FakeCluster()
        cluster.add(
            SANDBOXES,
            make_sandbox(
                "my-sandbox",
                service=True,
                template_labels={"test-label-key": "val-2"},
                template_annotations={"test-anno-key": "val-1"},
            ),
        )
        rec = cluster.reconciler()
        await rec.reconcile(request("my-sandbox"))
        cluster.set_pod_status("my-sandbox")
        await rec.reconcile(request("my-sandbox"))
        status = _status(cluster, "my-sandbox")
        assert {
            k: v for k, v in status.items() if k not in ("conditions", "podIPs", "nodeName")
        } == {
            "service": "my-sandbox",
            "serviceFQDN": f"my-sandbox.{NS}.svc.cluster.local",
            "selector": f"{c.LABEL_SANDBOX_NAME_HASH}=374de8f5",
        }
        assert strip_ltt(status["conditions"]) == [
            {
                "type": "Suspended",
                "status": "False",
                "observedGeneration": 1,
                "reason": "NotSuspended",
                "message": "Sandbox is not suspended",
            },
            {
                "type": "PodScheduled",
                "status": "True",
                "observedGeneration": 1,
                "reason": "PodScheduled",
                "message": "",
            },
            {
                "type": "Ready",
                "status": "True",
                "observedGeneration": 1,
                "reason": "DependenciesReady",
                "message": "Pod is Ready; Service Exists",
            },
        ]

    async def test_second_reconcile_of_same_state_writes_nothing(self) -> None:
        cluster = FakeCluster()
        vct = {
            "metadata": {"name": "data"},
            "spec": {"resources": {"requests": {"storage": "1Gi"}}},
        }
        cluster.add(
            SANDBOXES,
            make_sandbox(
                service=True,
                template_labels={"a": "b"},
                template_annotations={"c": "d"},
                containers=[{"name": "m", "image": "i", "ports": [{"containerPort": 80}]}],
                vcts=[vct],
            ),
        )
        rec = cluster.reconciler()
        await rec.reconcile(request())
        cluster.set_pod_status("sandbox-name")
        await rec.reconcile(request())
        cluster.clear_calls()
        for _ in range(3):
            assert await rec.reconcile(request()) == Result()
        assert cluster.writes() == []

    async def test_suspend_with_terminating_pod(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox(mode="Suspended"))
        pod = make_pod("sandbox-name", labels=hash_label(), owner=sandbox_ref(sandbox))
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        cluster.add(PODS, pod)
        await cluster.reconciler().reconcile(request())
        assert cluster.writes(PODS) == []  # already terminating: no second delete
        conds = conditions_by_type(cluster.obj(SANDBOXES, "sandbox-name"))  # type: ignore[arg-type]
        assert conds["Suspended"]["reason"] == "PodTerminating"
        assert conds["Ready"]["message"] == "Sandbox is suspending"

    async def test_suspend_with_no_pod(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(mode="Suspended"))
        await cluster.reconciler().reconcile(request())
        assert cluster.obj(PODS, "sandbox-name") is None
        conds = conditions_by_type(cluster.obj(SANDBOXES, "sandbox-name"))  # type: ignore[arg-type]
        assert (conds["Suspended"]["status"], conds["Suspended"]["reason"]) == (
            "True",
            "PodTerminated",
        )
        assert conds["Ready"]["message"] == "Sandbox is suspended"

    async def test_suspend_resume_cycle(self) -> None:
        cluster = FakeCluster()
        clock = Clock()
        cluster.add(SANDBOXES, make_sandbox(service=True))
        rec = cluster.reconciler(clock=clock)
        await rec.reconcile(request())
        cluster.set_pod_status("sandbox-name")
        await rec.reconcile(request())
        first_ltt = conditions_by_type(cluster.obj(SANDBOXES, "sandbox-name"))["Suspended"][
            "lastTransitionTime"
        ]  # type: ignore[arg-type]

        cluster.mutate(
            SANDBOXES, "sandbox-name", lambda s: s["spec"].update(operatingMode="Suspended")
        )
        clock.advance(10)
        await rec.reconcile(request())  # deletes the pod (no finalizer: gone at once)
        assert cluster.obj(PODS, "sandbox-name") is None
        await rec.reconcile(request())
        sandbox = cluster.obj(SANDBOXES, "sandbox-name")
        assert sandbox is not None
        conds = conditions_by_type(sandbox)
        assert (conds["Suspended"]["status"], conds["Suspended"]["reason"]) == (
            "True",
            "PodTerminated",
        )
        assert conds["Suspended"]["lastTransitionTime"] > first_ltt
        assert c.ANNOTATION_POD_NAME not in (sandbox["metadata"].get("annotations") or {})
        status = sandbox["status"]
        assert "podIPs" not in status
        assert "nodeName" not in status
        assert status["selector"] == SELECTOR
        assert status["service"] == "sandbox-name"
        assert cluster.obj(SERVICES, "sandbox-name") is not None

        cluster.mutate(
            SANDBOXES, "sandbox-name", lambda s: s["spec"].update(operatingMode="Running")
        )
        clock.advance(10)
        await rec.reconcile(request())
        assert cluster.obj(PODS, "sandbox-name") is not None
        conds = conditions_by_type(cluster.obj(SANDBOXES, "sandbox-name"))  # type: ignore[arg-type]
        assert (conds["Suspended"]["status"], conds["Suspended"]["reason"]) == (
            "False",
            "NotSuspended",
        )
        assert (
            conds["Suspended"]["lastTransitionTime"]
            > sandbox["status"]["conditions"][0]["lastTransitionTime"]
        )

    async def test_pod_deletion_keeps_suspended_ltt(self) -> None:
        cluster = FakeCluster()
        clock = Clock()
        cluster.add(SANDBOXES, make_sandbox())
        rec = cluster.reconciler(clock=clock)
        await rec.reconcile(request())
        cluster.set_pod_status("sandbox-name")
        await rec.reconcile(request())
        before = conditions_by_type(cluster.obj(SANDBOXES, "sandbox-name"))["Suspended"]  # type: ignore[arg-type]
        del cluster.store["pods"][(NS, "sandbox-name")]
        clock.advance(30)
        await rec.reconcile(request())
        assert cluster.obj(PODS, "sandbox-name") is not None  # replacement
        after = conditions_by_type(cluster.obj(SANDBOXES, "sandbox-name"))  # type: ignore[arg-type]
        assert after["Suspended"] == before
        assert after["Ready"]["status"] == "False"


class TestStrictPodMapping:
    async def test_owned_pod_found_by_uid_when_annotation_is_stale(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(
            SANDBOXES, make_sandbox(annotations={c.ANNOTATION_POD_NAME: "gone-pod"})
        )
        cluster.add(PODS, make_pod("pool-xyz", labels=hash_label(), owner=sandbox_ref(sandbox)))
        await cluster.reconciler().reconcile(request())
        assert cluster.obj(PODS, "sandbox-name") is None  # no second pod created
        annotations = cluster.obj(SANDBOXES, "sandbox-name")["metadata"]["annotations"]  # type: ignore[index]
        assert annotations[c.ANNOTATION_POD_NAME] == "pool-xyz"

    async def test_multiple_owned_pods_fail_closed(self) -> None:
        cluster = FakeCluster()
        recorder = FakeRecorder()
        sandbox = cluster.add(SANDBOXES, make_sandbox(service=True))
        for name in ("sandbox-name", "extra"):
            cluster.add(PODS, make_pod(name, labels=hash_label(), owner=sandbox_ref(sandbox)))
        rec = cluster.reconciler(recorder=recorder)
        result = await rec.reconcile(request())
        assert result == Result()  # not an error: the owned-pod watch brings the next pass
        assert cluster.obj(SERVICES, "sandbox-name") is None  # no routing while ambiguous
        assert [w.verb for w in cluster.writes(PODS)] == []
        ready = conditions_by_type(cluster.obj(SANDBOXES, "sandbox-name"))["Ready"]  # type: ignore[arg-type]
        assert ready["reason"] == "MultiplePods"
        assert ready["message"] == (
            "multiple Pods (2) are controlled by this Sandbox; refusing to choose or create a Pod"
        )
        assert [(e["type"], e["reason"]) for e in recorder.events] == [("Warning", "MultiplePods")]
        await rec.reconcile(request())
        assert len(recorder.events) == 1  # only on transitions
