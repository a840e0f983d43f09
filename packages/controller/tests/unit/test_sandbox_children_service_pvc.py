"""Service and PVC reconciliation of the Sandbox controller (upstream's reconcileService,
reconcilePVCs)."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from sandbox_children_support import RS_REF, _ready, _reconcile
from sandbox_fakes import (
    FakeCluster,
    hash_label,
    make_sandbox,
    make_service,
    request,
    sandbox_ref,
)

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.api.rest import PODS, PVCS, SERVICES


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
