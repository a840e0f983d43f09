"""Pod, Service and PVC reconciliation of the Sandbox controller (upstream's reconcilePod,
reconcileService, reconcilePVCs)."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from sandbox_fakes import (
    FakeCluster,
    conditions_by_type,
    hash_label,
    make_pod,
    make_sandbox,
    make_service,
    owner_ref,
    request,
    sandbox_ref,
)

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.api.rest import PODS, PVCS, SERVICES
from kube_agent_sandbox.controller.runtime import Ownership, check_ownership

POOL_REF = owner_ref("SandboxWarmPool", "pool", "pool-uid")
CLAIM_REF = owner_ref("SandboxClaim", "claim", "claim-uid")
RS_REF = owner_ref("ReplicaSet", "rs", "rs-uid", api_version="apps/v1")


def _ready(cluster: FakeCluster, name: str = "sandbox-name") -> dict[str, Any]:
    return conditions_by_type(cluster.obj(SANDBOXES, name))["Ready"]  # type: ignore[arg-type]


def _pod(cluster: FakeCluster, name: str = "sandbox-name") -> dict[str, Any]:
    pod = cluster.obj(PODS, name)
    assert pod is not None
    return pod


async def _reconcile(cluster: FakeCluster, **kwargs: Any) -> None:
    await cluster.reconciler(**kwargs).reconcile(request())


class TestCheckOwnership:
    @pytest.mark.parametrize("kind", ["pod", "service"])
    def test_owned_unowned_other(self, kind: str) -> None:
        sandbox = make_sandbox()
        sandbox["metadata"]["uid"] = "sb-uid"
        build = make_pod if kind == "pod" else make_service
        owned = build("x", owner=owner_ref("Sandbox", "sandbox-name", "sb-uid"))
        assert check_ownership(owned, sandbox)[0] is Ownership.OWNED
        assert check_ownership(build("x"), sandbox) == (Ownership.UNOWNED, None)
        status, ref = check_ownership(build("x", owner=RS_REF), sandbox)
        assert status is Ownership.OTHER
        assert ref is not None
        assert ref["uid"] == "rs-uid"

    def test_same_name_other_uid_is_other(self) -> None:
        sandbox = make_sandbox()
        sandbox["metadata"]["uid"] = "new-uid"
        old = make_pod("x", owner=owner_ref("Sandbox", "sandbox-name", "old-uid"))
        assert check_ownership(old, sandbox)[0] is Ownership.OTHER

    def test_non_controller_reference_is_unowned(self) -> None:
        ref = dict(RS_REF, controller=False)
        assert check_ownership(make_pod("x", owner=ref), make_sandbox())[0] is Ownership.UNOWNED


class TestReconcilePod:
    async def test_label_and_owner_added_to_existing_adoptable_pod(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox())
        cluster.add(PODS, make_pod("sandbox-name", labels={c.LABEL_ADOPTABLE: "true"}))
        await _reconcile(cluster)
        pod = _pod(cluster)
        assert (
            pod["metadata"]["labels"][c.LABEL_SANDBOX_NAME_HASH]
            == hash_label()[c.LABEL_SANDBOX_NAME_HASH]
        )
        assert pod["metadata"]["ownerReferences"] == [sandbox_ref(sandbox)]
        patch = cluster.writes(PODS)[0]
        assert patch.verb == "patch"
        assert set(patch.body) == {"metadata"}  # metadata-only

    async def test_owner_persisted_when_labels_already_right(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox())
        cluster.add(PODS, make_pod("sandbox-name", labels=hash_label()))
        await _reconcile(cluster)
        patches = [w for w in cluster.writes(PODS) if w.verb == "patch"]
        assert len(patches) == 1
        assert patches[0].body["metadata"]["ownerReferences"] == [sandbox_ref(sandbox)]

    async def test_existing_owner_references_are_kept_on_adoption(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox())
        other = dict(RS_REF, controller=False)
        cluster.add(PODS, make_pod("sandbox-name", labels=hash_label(), owner=other))
        await _reconcile(cluster)
        assert _pod(cluster)["metadata"]["ownerReferences"] == [other, sandbox_ref(sandbox)]

    async def test_unowned_pod_without_authorization_is_refused(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox())
        cluster.add(PODS, make_pod("sandbox-name", labels={"app": "x"}))
        result = await cluster.reconciler().reconcile(request())
        assert result.requeue_after == 60.0
        assert "ownerReferences" not in _pod(cluster)["metadata"]
        assert cluster.writes(PODS) == []
        ready = _ready(cluster)
        assert ready["reason"] == "ReconcilerError"
        assert ready["message"] == (
            'Error seen: cannot adopt unowned pod "sandbox-name": missing required pool '
            'authorization label ("agents.x-k8s.io/adoptable") or sandbox tracking label '
            '("agents.x-k8s.io/sandbox-name-hash")'
        )

    async def test_user_supplied_system_keys_are_dropped_on_create(self) -> None:
        cluster = FakeCluster()
        cluster.add(
            SANDBOXES,
            make_sandbox(
                template_labels={
                    c.LABEL_SANDBOX_NAME_HASH: "deadbeef",
                    f"{c.EXTENSIONS_GROUP}/x": "y",
                    c.LABEL_WARM_POOL_SANDBOX: "p",
                    "user": "u",
                },
                template_annotations={
                    c.ANNOTATION_TRACE_CONTEXT: "{}",
                    c.ANNOTATION_POD_NAME: "evil",
                    "note": "n",
                },
            ),
        )
        await _reconcile(cluster)
        meta = _pod(cluster)["metadata"]
        assert meta["labels"] == {"user": "u", **hash_label()}
        assert meta["annotations"] == {
            "note": "n",
            c.ANNOTATION_PROPAGATED_LABELS: "user",
            c.ANNOTATION_PROPAGATED_ANNOTATIONS: "note",
        }

    async def test_sandbox_metadata_system_labels_are_not_propagated(self) -> None:
        cluster = FakeCluster()
        cluster.add(
            SANDBOXES,
            make_sandbox(
                labels={c.LABEL_CLAIM_UID: "u", c.LABEL_SANDBOX_TEMPLATE_REF_HASH: "h", "x": "y"}
            ),
        )
        await _reconcile(cluster)
        assert _pod(cluster)["metadata"]["labels"] == hash_label()

    async def test_stale_system_keys_recorded_by_older_controllers_are_scrubbed(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox(template_labels={"keep": "1"}))
        labels = {
            **hash_label(),
            "keep": "1",
            c.LABEL_CLAIM_UID: "x",
            c.LABEL_WARM_POOL_SANDBOX: "p",
        }
        annotations = {
            c.ANNOTATION_PROPAGATED_LABELS: f"keep,{c.LABEL_CLAIM_UID},{c.LABEL_SANDBOX_NAME_HASH}",
            c.ANNOTATION_PROPAGATED_ANNOTATIONS: f"{c.ANNOTATION_TRACE_CONTEXT}",
            c.ANNOTATION_TRACE_CONTEXT: "{}",
        }
        cluster.add(
            PODS,
            make_pod(
                "sandbox-name", labels=labels, annotations=annotations, owner=sandbox_ref(sandbox)
            ),
        )
        await _reconcile(cluster)
        meta = _pod(cluster)["metadata"]
        assert meta["labels"] == {**hash_label(), "keep": "1"}
        assert meta["annotations"] == {
            c.ANNOTATION_PROPAGATED_LABELS: "keep",
            c.ANNOTATION_PROPAGATED_ANNOTATIONS: "",
        }

    async def test_removed_template_keys_are_deleted_from_pod(self) -> None:
        cluster = FakeCluster()
        cluster.add(
            SANDBOXES,
            make_sandbox(template_labels={"a": "1", "b": "2"}, template_annotations={"x": "1"}),
        )
        rec = cluster.reconciler()
        await rec.reconcile(request())
        cluster.mutate(
            SANDBOXES,
            "sandbox-name",
            lambda s: s["spec"]["podTemplate"].update(metadata={"labels": {"a": "9"}}),
        )
        await rec.reconcile(request())
        meta = _pod(cluster)["metadata"]
        assert meta["labels"] == {"a": "9", **hash_label()}
        assert meta["annotations"] == {
            c.ANNOTATION_PROPAGATED_LABELS: "a",
            c.ANNOTATION_PROPAGATED_ANNOTATIONS: "",
        }

    async def test_unmanaged_pod_keys_are_left_alone(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox(template_labels={"a": "1"}))
        cluster.add(
            PODS,
            make_pod(
                "sandbox-name",
                labels={**hash_label(), "a": "1", "kubelet-added": "z"},
                annotations={c.ANNOTATION_PROPAGATED_LABELS: "a", "other": "o"},
                owner=sandbox_ref(sandbox),
            ),
        )
        await _reconcile(cluster)
        assert cluster.writes(PODS) == []

    @pytest.mark.parametrize(
        ("owner", "sandbox_labels", "expected"),
        [
            (
                POOL_REF,
                {c.LABEL_WARM_POOL_SANDBOX: "pool-h"},
                {c.LABEL_WARM_POOL_SANDBOX: "pool-h"},
            ),
            (CLAIM_REF, {c.LABEL_WARM_POOL_SANDBOX: "pool-h"}, {}),
            (
                CLAIM_REF,
                {c.LABEL_SANDBOX_TEMPLATE_REF_HASH: "t-h"},
                {c.LABEL_SANDBOX_TEMPLATE_REF_HASH: "t-h"},
            ),
            (
                POOL_REF,
                {c.LABEL_WARM_POOL_SANDBOX: "pool-h", c.LABEL_SANDBOX_TEMPLATE_REF_HASH: "t-h"},
                {c.LABEL_WARM_POOL_SANDBOX: "pool-h", c.LABEL_SANDBOX_TEMPLATE_REF_HASH: "t-h"},
            ),
            (None, {c.LABEL_SANDBOX_TEMPLATE_REF_HASH: "t-h"}, {}),
            (RS_REF, {c.LABEL_SANDBOX_TEMPLATE_REF_HASH: "t-h"}, {}),
            (
                owner_ref(
                    "SandboxWarmPool", "pool", "p", api_version=f"{c.EXTENSIONS_GROUP}/v1alpha1"
                ),
                {c.LABEL_WARM_POOL_SANDBOX: "pool-h"},
                {c.LABEL_WARM_POOL_SANDBOX: "pool-h"},
            ),
        ],
    )
    async def test_extension_labels_on_create(
        self, owner: dict[str, Any] | None, sandbox_labels: dict[str, str], expected: dict[str, str]
    ) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(labels=sandbox_labels, owner=owner))
        await _reconcile(cluster)
        assert _pod(cluster)["metadata"]["labels"] == {**hash_label(), **expected}

    async def test_extension_labels_follow_ownership_changes_on_existing_pod(self) -> None:
        cluster = FakeCluster()
        labels = {c.LABEL_WARM_POOL_SANDBOX: "pool-h", c.LABEL_SANDBOX_TEMPLATE_REF_HASH: "t-h"}
        cluster.add(SANDBOXES, make_sandbox(labels=labels, owner=POOL_REF))
        rec = cluster.reconciler()
        await rec.reconcile(request())
        assert _pod(cluster)["metadata"]["labels"] == {**hash_label(), **labels}

        def adopt(s: dict[str, Any]) -> None:  # what the claim controller does
            s["metadata"]["ownerReferences"] = [CLAIM_REF]
            s["metadata"]["labels"].pop(c.LABEL_WARM_POOL_SANDBOX)

        cluster.mutate(SANDBOXES, "sandbox-name", adopt)
        await rec.reconcile(request())
        assert _pod(cluster)["metadata"]["labels"] == {
            **hash_label(),
            c.LABEL_SANDBOX_TEMPLATE_REF_HASH: "t-h",
        }
        cluster.mutate(SANDBOXES, "sandbox-name", lambda s: s["metadata"]["labels"].clear())
        await rec.reconcile(request())
        assert _pod(cluster)["metadata"]["labels"] == hash_label()

    async def test_extension_labels_added_to_existing_pod(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(
            SANDBOXES,
            make_sandbox(labels={c.LABEL_SANDBOX_TEMPLATE_REF_HASH: "t"}, owner=CLAIM_REF),
        )
        cluster.add(PODS, make_pod("sandbox-name", labels=hash_label(), owner=sandbox_ref(sandbox)))
        await _reconcile(cluster)
        assert _pod(cluster)["metadata"]["labels"][c.LABEL_SANDBOX_TEMPLATE_REF_HASH] == "t"

    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            ("go-client", "go-client"),
            ("python-client", "python-client"),
            ("controller", "controller"),
            ("bad value", "unknown"),
        ],
    )
    async def test_created_by_is_normalized(self, value: str, expected: str) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(labels={c.LABEL_CREATED_BY: value}))
        await _reconcile(cluster)
        assert _pod(cluster)["metadata"]["labels"][c.LABEL_CREATED_BY] == expected

    async def test_created_by_updated_and_removed_on_existing_pod(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(labels={c.LABEL_CREATED_BY: "go-client"}))
        rec = cluster.reconciler()
        await rec.reconcile(request())
        cluster.mutate(
            SANDBOXES,
            "sandbox-name",
            lambda s: s["metadata"]["labels"].update({c.LABEL_CREATED_BY: "python-client"}),
        )
        await rec.reconcile(request())
        assert _pod(cluster)["metadata"]["labels"][c.LABEL_CREATED_BY] == "python-client"
        cluster.mutate(SANDBOXES, "sandbox-name", lambda s: s["metadata"]["labels"].clear())
        await rec.reconcile(request())
        assert c.LABEL_CREATED_BY not in _pod(cluster)["metadata"]["labels"]

    async def test_suspended_deletes_owned_pod_which_stays_terminating(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(
            SANDBOXES,
            make_sandbox(mode="Suspended", annotations={c.ANNOTATION_POD_NAME: "sandbox-name"}),
        )
        cluster.add(
            PODS,
            make_pod(
                "sandbox-name",
                labels=hash_label(),
                owner=sandbox_ref(sandbox),
                finalizers=["x/hold"],
            ),
        )
        await _reconcile(cluster)
        pod = _pod(cluster)
        assert pod["metadata"]["deletionTimestamp"]
        delete = cluster.writes(PODS)[0]
        assert (delete.verb, delete.preconditions) == ("delete", {"uid": pod["metadata"]["uid"]})
        # The annotation stays while the pod is still there.
        assert cluster.obj(SANDBOXES, "sandbox-name")["metadata"]["annotations"] == {
            c.ANNOTATION_POD_NAME: "sandbox-name"
        }  # type: ignore[index]
        conds = conditions_by_type(cluster.obj(SANDBOXES, "sandbox-name"))  # type: ignore[arg-type]
        assert conds["Suspended"]["reason"] == "PodTerminating"

    async def test_suspended_without_pod_is_noop(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(mode="Suspended"))
        await _reconcile(cluster)
        assert [w for w in cluster.writes() if w.plural != "sandboxes"] == []

    async def test_annotation_named_pod_is_adopted(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(
            SANDBOXES, make_sandbox(annotations={c.ANNOTATION_POD_NAME: "warm-abcde"})
        )
        cluster.add(PODS, make_pod("warm-abcde", labels={c.LABEL_ADOPTABLE: "true"}))
        await _reconcile(cluster)
        assert _pod(cluster, "warm-abcde")["metadata"]["ownerReferences"] == [sandbox_ref(sandbox)]
        assert cluster.obj(PODS, "sandbox-name") is None

    async def test_pod_owned_by_other_controller_never_modified(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(annotations={c.ANNOTATION_POD_NAME: "sandbox-name"}))
        original = cluster.add(PODS, make_pod("sandbox-name", labels=hash_label(), owner=RS_REF))
        result = await cluster.reconciler().reconcile(request())
        assert result.requeue_after == 60.0
        assert _pod(cluster) == original
        assert cluster.writes(PODS) == []
        assert (
            c.ANNOTATION_POD_NAME
            not in cluster.obj(SANDBOXES, "sandbox-name")["metadata"]["annotations"]
        )  # type: ignore[index]
        assert _ready(cluster)["message"] == (
            'Error seen: pod "sandbox-name" is owned by ReplicaSet/rs (UID: rs-uid), '
            'not by sandbox "sandbox-name"'
        )
        status = cluster.obj(SANDBOXES, "sandbox-name")["status"]  # type: ignore[index]
        assert "podIPs" not in status

    async def test_pod_owned_by_other_controller_not_deleted_when_suspended(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(mode="Suspended"))
        cluster.add(PODS, make_pod("sandbox-name", labels=hash_label(), owner=RS_REF))
        await _reconcile(cluster)
        assert cluster.obj(PODS, "sandbox-name") is not None
        assert cluster.writes(PODS) == []

    async def test_unowned_annotated_pod_not_deleted_on_suspend_and_annotation_removed(
        self,
    ) -> None:
        cluster = FakeCluster()
        cluster.add(
            SANDBOXES, make_sandbox(mode="Suspended", annotations={c.ANNOTATION_POD_NAME: "p"})
        )
        cluster.add(PODS, make_pod("p", labels={c.LABEL_ADOPTABLE: "true"}))
        await _reconcile(cluster)
        assert cluster.obj(PODS, "p") is not None
        assert (
            c.ANNOTATION_POD_NAME
            not in cluster.obj(SANDBOXES, "sandbox-name")["metadata"]["annotations"]
        )  # type: ignore[index]
        conds = conditions_by_type(cluster.obj(SANDBOXES, "sandbox-name"))  # type: ignore[arg-type]
        assert conds["Suspended"]["reason"] == "PodNotOwned"

    async def test_suspended_foreign_pod_does_not_leak_ip_or_node(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(mode="Suspended", service=True))
        cluster.add(PODS, make_pod("sandbox-name", labels=hash_label(), owner=RS_REF))
        cluster.set_pod_status("sandbox-name", ips=("10.9.9.9",), node="n1")
        await _reconcile(cluster)
        status = cluster.obj(SANDBOXES, "sandbox-name")["status"]  # type: ignore[index]
        assert "podIPs" not in status
        assert "nodeName" not in status
        assert status["selector"].endswith(hash_label()[c.LABEL_SANDBOX_NAME_HASH])
        assert status["service"] == "sandbox-name"
        conds = conditions_by_type(cluster.obj(SANDBOXES, "sandbox-name"))  # type: ignore[arg-type]
        assert (conds["Suspended"]["reason"], conds["Ready"]["message"]) == (
            "PodNotOwned",
            "Sandbox is suspending",
        )

    async def test_missing_annotated_pod_clears_annotation_and_recreates(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(annotations={c.ANNOTATION_POD_NAME: "vanished"}))
        await _reconcile(cluster)
        assert cluster.obj(PODS, "sandbox-name") is not None
        annotations = cluster.obj(SANDBOXES, "sandbox-name")["metadata"]["annotations"]  # type: ignore[index]
        assert annotations == {c.ANNOTATION_POD_NAME: "sandbox-name"}

    async def test_pod_annotation_naming_another_pod_is_kept(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(
            SANDBOXES, make_sandbox(annotations={c.ANNOTATION_POD_NAME: "warm-1"})
        )
        cluster.add(PODS, make_pod("warm-1", labels=hash_label(), owner=sandbox_ref(sandbox)))
        await _reconcile(cluster)
        assert [w for w in cluster.writes(SANDBOXES) if w.subresource is None] == []

    async def test_already_exists_on_create_goes_through_existing_pod(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox())
        # The cache has not seen the pod yet: hide it from the reader only.
        rec = cluster.reconciler()
        hidden = make_pod("sandbox-name", labels=hash_label(), owner=sandbox_ref(sandbox))
        rec._pods.get = lambda ns, name: None  # type: ignore[attr-defined]
        rec._pods.by_index = lambda index, value: []  # type: ignore[attr-defined]
        cluster.add(PODS, hidden)
        await rec.reconcile(request())
        verbs = [w.verb for w in cluster.writes(PODS)]
        assert verbs == ["create"]  # the failed create, then the live GET; nothing else
        assert [call.verb for call in cluster.calls if call.plural == "pods"] == ["create", "get"]
        assert _ready(cluster)["reason"] == "DependenciesNotReady"


class TestReconcileService:
    async def _svc(self, cluster: FakeCluster) -> dict[str, Any]:
        svc = cluster.obj(SERVICES, "sandbox-name")
        assert svc is not None
        return svc

    async def test_create_with_ports(self) -> None:
        cluster = FakeCluster()
        containers = [
            {
                "name": "a",
                "image": "i",
                "ports": [
                    {"containerPort": 9000, "protocol": "UDP"},
                    {"containerPort": 8080, "name": "http"},
                ],
            },
            {
                "name": "b",
                "image": "i",
                "ports": [{"containerPort": 8080, "name": "dup"}, {"containerPort": 0}],
            },
        ]
        init = [
            {
                "name": "side",
                "image": "i",
                "restartPolicy": "Always",
                "ports": [{"containerPort": 7000}],
            },
            {"name": "init", "image": "i", "ports": [{"containerPort": 6000}]},
        ]
        cluster.add(
            SANDBOXES, make_sandbox(service=True, containers=containers, init_containers=init)
        )
        await _reconcile(cluster)
        assert (await self._svc(cluster))["spec"]["ports"] == [
            {"name": "p-7000-tcp", "protocol": "TCP", "port": 7000, "targetPort": 7000},
            {"name": "http", "protocol": "TCP", "port": 8080, "targetPort": 8080},
            {"name": "p-9000-udp", "protocol": "UDP", "port": 9000, "targetPort": 9000},
        ]

    async def test_use_owned_service(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox(service=True))
        cluster.add(
            SERVICES,
            make_service(
                "sandbox-name",
                labels=hash_label(),
                owner=sandbox_ref(sandbox),
                selector=hash_label(),
            ),
        )
        await _reconcile(cluster)
        assert cluster.writes(SERVICES) == []
        assert _ready(cluster)["message"].endswith("; Service Exists")

    async def test_repair_selector_label_and_port_drift(self) -> None:
        cluster = FakeCluster()
        containers = [{"name": "a", "image": "i", "ports": [{"containerPort": 80}]}]
        sandbox = cluster.add(SANDBOXES, make_sandbox(service=True, containers=containers))
        cluster.add(
            SERVICES,
            make_service(
                "sandbox-name",
                labels={c.LABEL_SANDBOX_NAME_HASH: "wrong", "keep": "me"},
                owner=sandbox_ref(sandbox),
                selector={"app": "hijack"},
                ports=[{"name": "x", "protocol": "TCP", "port": 81, "targetPort": 81}],
            ),
        )
        await _reconcile(cluster)
        svc = await self._svc(cluster)
        assert svc["metadata"]["labels"] == {**hash_label(), "keep": "me"}
        assert svc["spec"]["selector"] == hash_label()
        assert svc["spec"]["ports"] == [
            {"name": "p-80-tcp", "protocol": "TCP", "port": 80, "targetPort": 80}
        ]
        assert [w.verb for w in cluster.writes(SERVICES)] == ["patch"]

    async def test_unmanaged_port_fields_preserved(self) -> None:
        cluster = FakeCluster()
        containers = [{"name": "a", "image": "i", "ports": [{"containerPort": 80}]}]
        sandbox = cluster.add(SANDBOXES, make_sandbox(service=True, containers=containers))
        port = {
            "name": "p-80-tcp",
            "protocol": "TCP",
            "port": 80,
            "targetPort": 80,
            "appProtocol": "http",
        }
        cluster.add(
            SERVICES,
            make_service(
                "sandbox-name",
                labels=hash_label(),
                owner=sandbox_ref(sandbox),
                selector=hash_label(),
                ports=[port],
            ),
        )
        await _reconcile(cluster)
        assert cluster.writes(SERVICES) == []

    async def test_refuse_foreign_service(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(service=True))
        cluster.add(SERVICES, make_service("sandbox-name", labels=hash_label(), owner=RS_REF))
        await _reconcile(cluster)
        assert cluster.writes(SERVICES) == []
        assert _ready(cluster)["message"] == (
            'Error seen: service "sandbox-name" is owned by ReplicaSet/rs (UID: rs-uid), '
            'not by sandbox "sandbox-name"'
        )

    async def test_adopt_unowned_service_with_legacy_tracking_label(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox(service=True))
        cluster.add(
            SERVICES,
            make_service(
                "sandbox-name",
                labels=hash_label(),
                selector={"wrong": "x"},
                ports=[{"name": "old", "protocol": "TCP", "port": 1, "targetPort": 1}],
            ),
        )
        await _reconcile(cluster)
        svc = await self._svc(cluster)
        assert svc["metadata"]["ownerReferences"] == [sandbox_ref(sandbox)]
        assert svc["spec"]["selector"] == hash_label()
        assert "ports" not in svc["spec"]  # the sandbox has none
        update = cluster.writes(SERVICES)[0]
        assert update.verb == "update"
        assert update.body["metadata"]["resourceVersion"]  # optimistic lock

    async def test_adopt_adoptable_service(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(service=True))
        cluster.add(
            SERVICES,
            make_service("sandbox-name", labels={c.LABEL_ADOPTABLE: "true"}, cluster_ip=""),
        )
        await _reconcile(cluster)
        assert (await self._svc(cluster))["metadata"]["labels"][c.LABEL_SANDBOX_NAME_HASH]

    async def test_refuse_non_headless(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(service=True))
        cluster.add(
            SERVICES, make_service("sandbox-name", labels=hash_label(), cluster_ip="10.0.0.5")
        )
        await _reconcile(cluster)
        assert cluster.writes(SERVICES) == []
        assert _ready(cluster)["message"] == (
            'Error seen: cannot adopt service "sandbox-name": ClusterIP is "10.0.0.5" '
            '(expected "None", field is immutable)'
        )

    async def test_refuse_unowned_without_authorization(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(service=True))
        cluster.add(SERVICES, make_service("sandbox-name", labels={"app": "x"}))
        await _reconcile(cluster)
        assert cluster.writes(SERVICES) == []
        assert 'cannot adopt unowned service "sandbox-name"' in _ready(cluster)["message"]

    async def test_nil_never_creates(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox())
        await _reconcile(cluster)
        assert cluster.obj(SERVICES, "sandbox-name") is None

    async def test_nil_keeps_and_reconciles_owned_service(self) -> None:
        cluster = FakeCluster()
        containers = [{"name": "a", "image": "i", "ports": [{"containerPort": 80}]}]
        sandbox = cluster.add(SANDBOXES, make_sandbox(containers=containers))
        cluster.add(
            SERVICES, make_service("sandbox-name", owner=sandbox_ref(sandbox), selector={"x": "y"})
        )
        await _reconcile(cluster)
        svc = await self._svc(cluster)
        assert svc["spec"]["selector"] == hash_label()
        assert "ports" not in svc["spec"]  # ports are only managed with service: true
        status = cluster.obj(SANDBOXES, "sandbox-name")["status"]  # type: ignore[index]
        assert status["service"] == "sandbox-name"
        assert _ready(cluster)["message"].endswith("; Service Exists")

    async def test_nil_ignores_unowned_service(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox())
        cluster.add(SERVICES, make_service("sandbox-name", labels=hash_label()))
        await _reconcile(cluster)
        assert cluster.writes(SERVICES) == []
        assert "service" not in cluster.obj(SANDBOXES, "sandbox-name")["status"]  # type: ignore[index]

    async def test_false_deletes_owned_service(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(
            SANDBOXES,
            make_sandbox(service=False, status={"service": "sandbox-name", "serviceFQDN": "f"}),
        )
        cluster.add(SERVICES, make_service("sandbox-name", owner=sandbox_ref(sandbox)))
        await _reconcile(cluster)
        assert cluster.obj(SERVICES, "sandbox-name") is None
        status = cluster.obj(SANDBOXES, "sandbox-name")["status"]  # type: ignore[index]
        assert "service" not in status
        assert "serviceFQDN" not in status

    async def test_false_ignores_unowned_service(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(service=False))
        cluster.add(SERVICES, make_service("sandbox-name"))
        await _reconcile(cluster)
        assert cluster.obj(SERVICES, "sandbox-name") is not None


class TestReconcilePVCs:
    VCT: ClassVar[dict[str, Any]] = {
        "metadata": {"name": "data"},
        "spec": {"resources": {"requests": {"storage": "1Gi"}}},
    }

    def _pvc(self, **meta: Any) -> dict[str, Any]:
        return {"metadata": {"name": "data-sandbox-name", **meta}, "spec": {}}

    async def test_create(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox(vcts=[self.VCT]))
        await _reconcile(cluster)
        pvc = cluster.obj(PVCS, "data-sandbox-name")
        assert pvc is not None
        assert pvc["metadata"]["ownerReferences"] == [sandbox_ref(sandbox)]
        assert pvc["metadata"]["labels"] == hash_label()
        assert cluster.writes(PVCS)[0].field_manager == "sandbox-controller"

    async def test_use_owned(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox(vcts=[self.VCT]))
        cluster.add(PVCS, self._pvc(ownerReferences=[sandbox_ref(sandbox)]))
        await _reconcile(cluster)
        assert cluster.writes(PVCS) == []

    async def test_refuse_foreign(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(vcts=[self.VCT]))
        cluster.add(PVCS, self._pvc(ownerReferences=[RS_REF]))
        await _reconcile(cluster)
        assert cluster.writes(PVCS) == []
        assert _ready(cluster)["message"].startswith(
            'Error seen: PVC "data-sandbox-name" is owned by ReplicaSet/rs'
        )
        assert cluster.obj(PODS, "sandbox-name") is not None  # other children still reconciled

    @pytest.mark.parametrize("labels", [{c.LABEL_ADOPTABLE: "true"}, hash_label()])
    async def test_adopt_unowned(self, labels: dict[str, str]) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox(vcts=[self.VCT]))
        cluster.add(PVCS, self._pvc(labels=labels))
        await _reconcile(cluster)
        pvc = cluster.obj(PVCS, "data-sandbox-name")
        assert pvc is not None
        assert pvc["metadata"]["ownerReferences"] == [sandbox_ref(sandbox)]
        assert [w.verb for w in cluster.writes(PVCS)] == ["patch"]

    async def test_refuse_unauthorized(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(vcts=[self.VCT]))
        cluster.add(PVCS, self._pvc(labels={"x": "y"}))
        await _reconcile(cluster)
        assert cluster.writes(PVCS) == []
        assert 'cannot adopt unowned PVC "data-sandbox-name"' in _ready(cluster)["message"]

    async def test_pvcs_never_deleted_on_suspend(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(vcts=[self.VCT]))
        rec = cluster.reconciler()
        await rec.reconcile(request())
        cluster.mutate(
            SANDBOXES, "sandbox-name", lambda s: s["spec"].update(operatingMode="Suspended")
        )
        await rec.reconcile(request())
        await rec.reconcile(request())
        assert cluster.obj(PVCS, "data-sandbox-name") is not None
        assert [w.verb for w in cluster.writes(PVCS)] == ["create"]
