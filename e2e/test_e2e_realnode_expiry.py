"""Upstream e2e scenarios that need real containers: retained expiry of a finished pod, PVCs.

Upstream v0.5.6 test/e2e/shutdown_test.go: TestSandboxRetainedExpiryPreservesFinishedCondition
(a pod that exits 0 before ``shutdownTime``; the Retain expiry must keep the ``Finished``
condition) and test/e2e/volumeclaimtemplate_test.go: TestSandboxVolumeClaimTemplates (a claim
template gives a provisioned PVC owned by the Sandbox and mounted by its pod). The existing
lifecycle suite mounts a claim but never checks its owner, tracking label or the pod's
claimName, hence the second test here.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

import pytest
from kubernetes import client

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.namehash import name_hash
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.node.workload import SandboxHandle, sandbox_manifest
from kube_agent_sandbox.testing.waiting import ObjectRef, wait_for_deletion, wait_for_object

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

SLEEP = ["python3", "-c", "import time; time.sleep(3600)"]
SANDBOX_API_VERSION = "agents.x-k8s.io/v1beta1"


def _conditions(sandbox: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {cond["type"]: cond for cond in (sandbox.get("status") or {}).get("conditions") or []}


def _without_ltt(sandbox: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in cond.items() if k != "lastTransitionTime"}
        for cond in sandbox["status"]["conditions"]
    ]


def _rfc3339(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _controller_ref(sandbox: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": SANDBOX_API_VERSION,
        "kind": "Sandbox",
        "name": sandbox["metadata"]["name"],
        "uid": sandbox["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _expired(sandbox: Mapping[str, Any]) -> bool:
    ready = _conditions(sandbox).get("Ready") or {}
    return ready.get("status") == "False" and ready.get("reason") == "SandboxExpired"


def _expired_and_reset(sandbox: Mapping[str, Any]) -> bool:
    """Expired, and the Retain cleanup pass has cleared the service fields and selector."""
    status = sandbox.get("status") or {}
    cleared = not any(status.get(key) for key in ("service", "serviceFQDN", "selector"))
    return _expired(sandbox) and cleared


def _as_dict(api: client.ApiClient, obj: object) -> dict[str, Any]:
    serialized: dict[str, Any] = api.sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]
    return serialized


class TestSandboxRetainedExpiryPreservesFinishedCondition:
    def test_retained_expiry_keeps_finished_and_clears_the_rest(
        self, cluster: ClusterAccess, namespace: str, python_image: str
    ) -> None:
        api = cluster.api_client()
        manifest = sandbox_manifest(
            "finished-expiry",
            image=python_image,
            command=["sh", "-c", "exit 0"],
            restart_policy="Never",
        )
        shutdown = dt.datetime.now(dt.UTC).replace(microsecond=0) + dt.timedelta(seconds=8)
        manifest["spec"]["shutdownTime"] = _rfc3339(shutdown)
        manifest["spec"]["shutdownPolicy"] = "Retain"
        manifest["spec"]["service"] = True  # so that expiry has a Service to remove
        sandbox = SandboxHandle.create(api, namespace, manifest)

        # The container exits 0 well before shutdownTime: Finished=True/PodSucceeded appears.
        finished = sandbox.wait_condition("Finished", timeout=120)
        finished_cond = _conditions(finished)["Finished"]
        assert finished_cond["reason"] == "PodSucceeded"
        assert finished_cond["message"] == "Pod completed successfully"
        assert finished["status"]["service"] == sandbox.name

        # Then shutdownTime passes. The controller first marks Ready=False/SandboxExpired, and
        # on its next pass deletes the children and resets the status to the conditions only;
        # wait for that final state. Finished must survive it unchanged.
        expired = wait_for_object(
            api,
            sandbox.ref,
            _expired_and_reset,
            timeout=120,
            what="Ready=False/SandboxExpired with the status reset",
        )
        assert sorted(expired["status"]) == ["conditions"]
        assert _without_ltt(expired) == [
            {
                "type": "Suspended",
                "status": "False",
                "observedGeneration": 1,
                "reason": "NotSuspended",
                "message": "Sandbox is not suspended",
            },
            {
                "type": "Ready",
                "status": "False",
                "observedGeneration": 1,
                "reason": "SandboxExpired",
                "message": "Sandbox has expired",
            },
            {
                "type": "Finished",
                "status": "True",
                "observedGeneration": 1,
                "reason": "PodSucceeded",
                "message": "Pod completed successfully",
            },
        ]
        conditions = _conditions(expired)
        assert conditions["Finished"]["lastTransitionTime"] == finished_cond["lastTransitionTime"]
        # Ready was False all along (DependenciesNotReady, PodSucceeded, SandboxExpired), so
        # SetStatusCondition semantics keep its lastTransitionTime.
        ready_before = _conditions(finished)["Ready"]
        assert ready_before["status"] == "False"
        assert conditions["Ready"]["lastTransitionTime"] == ready_before["lastTransitionTime"]

        # The finished pod and the Service are deleted; the Sandbox itself is retained.
        wait_for_deletion(api, ObjectRef("v1", "Pod", sandbox.name, namespace), timeout=120)
        wait_for_deletion(api, ObjectRef("v1", "Service", sandbox.name, namespace), timeout=120)
        retained = sandbox.get()
        assert retained["metadata"]["uid"] == expired["metadata"]["uid"]
        assert "deletionTimestamp" not in retained["metadata"]
        assert _expired(retained)
        assert _conditions(retained)["Finished"]["status"] == "True"
        assert _conditions(retained)["Finished"]["reason"] == "PodSucceeded"


class TestSandboxVolumeClaimTemplates:
    def test_claim_template_gives_an_owned_tracked_pvc_mounted_by_the_pod(
        self, cluster: ClusterAccess, namespace: str, python_image: str
    ) -> None:
        api = cluster.api_client()
        name = "vct-sandbox"
        claim_name = f"data-{name}"
        manifest = sandbox_manifest(
            name, image=python_image, command=SLEEP, volume_size="1Gi", volume_mount="/data"
        )
        sandbox = SandboxHandle.create(api, namespace, manifest)
        ready = sandbox.wait_condition("Ready", timeout=180)
        assert _conditions(ready)["Ready"]["reason"] == "DependenciesReady"

        core = client.CoreV1Api(api)
        pvc = _as_dict(api, core.read_namespaced_persistent_volume_claim(claim_name, namespace))
        assert pvc["metadata"]["ownerReferences"] == [_controller_ref(ready)]
        assert pvc["metadata"]["labels"][c.LABEL_SANDBOX_NAME_HASH] == name_hash(name)
        assert pvc["spec"]["resources"]["requests"]["storage"] == "1Gi"
        assert pvc["status"]["phase"] == "Bound"

        pod = sandbox.pod()
        volumes = {vol["name"]: vol for vol in pod["spec"]["volumes"]}
        assert volumes["data"]["persistentVolumeClaim"]["claimName"] == claim_name
        mounts = pod["spec"]["containers"][0]["volumeMounts"]
        assert {"name": "data", "mountPath": "/data"} in [
            {k: m[k] for k in ("name", "mountPath")} for m in mounts
        ]
        # The claim really is mounted: the container can write to it.
        written = sandbox.exec(["sh", "-c", "echo ok > /data/probe && cat /data/probe"])
        assert written.exit_code == 0, written.stderr
        assert written.stdout.strip() == "ok"
