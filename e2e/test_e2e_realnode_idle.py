"""Idle shutdown on a real node: idle-suspended, resumed, the PVC's data still there.

kwok has no containers and no volumes, so only the real node shows that a Sandbox the idle
reconciler suspended comes back through the gateway's ``Resumer`` with the files on its PVC
intact. The deployed controller runs without ``--idle-shutdown``; the idle reconciler runs
in-process here as a ServiceAccount bound to a role built from its ``RBAC_RULES``, with the
test-only minimum lowered so a 3-second timeout is accepted. The Resumer runs over a thin
stand-in of the gateway state that reads the Sandbox from the API server.
"""

from __future__ import annotations

import asyncio
import functools
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.controller import rbac
from kube_agent_sandbox.controller.config import ControllerOptions
from kube_agent_sandbox.controller.runtime import ApiClient, Manager, load_kubeconfig
from kube_agent_sandbox.extensions.idle import setup as idle_setup
from kube_agent_sandbox.gateway.resume import Resumer
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.controller_runner import ControllerRunner
from kube_agent_sandbox.testing.node.workload import SandboxHandle, sandbox_manifest
from kube_agent_sandbox.testing.waiting import wait_for_object

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

ROLE = "agent-sandbox-idle-e2e"


async def _run_idle(kubeconfig: Path, *, namespace: str) -> None:
    options = ControllerOptions(extensions=True, idle_shutdown=True, idle_min_timeout=1.0)
    async with ApiClient(load_kubeconfig(str(kubeconfig))) as api:
        manager = Manager(api, metrics_bind_address="0", health_bind_address="0")
        idle_setup.setup(manager, options, namespace=namespace)
        await manager.run()


@dataclass(frozen=True)
class _Record:
    namespace: str
    claim: dict[str, Any]
    sandbox: dict[str, Any] | None
    ready: bool
    suspended: bool

    @property
    def sandbox_id(self) -> str:
        return str(self.claim["metadata"]["name"])

    @property
    def annotations(self) -> dict[str, str]:
        return {}


def _record(namespace: str, sandbox: dict[str, Any]) -> _Record:
    conditions = (sandbox.get("status") or {}).get("conditions") or []
    status = {cond.get("type"): cond.get("status") for cond in conditions}
    suspended = (
        sandbox["spec"].get("operatingMode") == "Suspended" or status.get("Suspended") == "True"
    )
    return _Record(
        namespace=namespace,
        claim={"metadata": {"name": sandbox["metadata"]["name"]}, "spec": {}},
        sandbox=sandbox,
        ready=status.get("Ready") == "True" and not suspended,
        suspended=suspended,
    )


@dataclass
class _Index:
    api: ApiClient

    async def wait_for(
        self, sandbox_id: str, predicate: Any, *, namespace: str, within: float
    ) -> _Record:
        deadline = time.monotonic() + within
        while True:
            record = _record(namespace, await self.api.get(SANDBOXES, namespace, sandbox_id))
            if predicate(record):
                return record
            if time.monotonic() > deadline:
                raise TimeoutError(f"sandbox {sandbox_id} not Ready")
            await asyncio.sleep(0.5)


class _NoActivity:
    """The gateway's activity tracker, which this test does not run (no heartbeat Leases)."""

    def keepalive(self, record: Any) -> None:
        return None


@dataclass
class _State:
    api: ApiClient
    index: _Index
    options: Any = field(default_factory=lambda: type("O", (), {"default_timeout_seconds": 300}))
    activity: _NoActivity = field(default_factory=_NoActivity)
    inits: int = 0

    async def init_sandbox(self, record: Any, *, env_vars: Any) -> bool:
        self.inits += 1  # the plain Python image has no sandboxd to /init
        return False


async def _resume(kubeconfig: str, namespace: str, name: str) -> tuple[_Record, int]:
    async with ApiClient(load_kubeconfig(kubeconfig)) as api:
        state = _State(api, _Index(api))
        record = _record(namespace, await api.get(SANDBOXES, namespace, name))
        fresh = await Resumer(state, ready_budget=180).resume(record, on_traffic=True)
        return fresh, state.inits


def test_an_idle_suspended_sandbox_resumes_with_its_pvc_data(
    cluster: ClusterAccess,
    namespace: str,
    python_image: str,
    controller_runner: ControllerRunner,
) -> None:
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": ROLE},
        "rules": [r.to_dict() for r in rbac.normalize_rules(idle_setup.RBAC_RULES)],
    }
    identity = controller_runner.identity(
        "idle-controller", namespace=namespace, cluster_roles=[ROLE], rbac=[role]
    )
    controller_runner.start(
        functools.partial(_run_idle, namespace=namespace), identity=identity, name="idle"
    )

    api = cluster.api_client()
    token = secrets.token_hex(8)
    manifest = sandbox_manifest(
        "idler",
        image=python_image,
        command=["python3", "-c", "import time; time.sleep(3600)"],
        volume_size="64Mi",
    )
    manifest["metadata"]["annotations"] = {
        c.ANNOTATION_IDLE_TIMEOUT: "3s",
        c.ANNOTATION_AUTO_RESUME: "true",
    }
    sandbox = SandboxHandle.create(api, namespace, manifest)
    sandbox.wait_condition("Ready")
    first_pod = sandbox.pod()["metadata"]["uid"]
    write = sandbox.exec(["sh", "-c", f"echo {token} > /data/token && sync"])
    assert write.exit_code == 0, write.stderr

    # Nobody renews its Lease: the idle reconciler suspends it, the pod goes, the PVC stays.
    suspended = wait_for_object(
        api,
        sandbox.ref,
        lambda o: (
            (o.get("metadata", {}).get("annotations") or {}).get(c.ANNOTATION_SUSPENDED_BY)
            == "idle"
        ),
        timeout=120,
        what="suspended-by: idle",
    )
    assert suspended["spec"]["operatingMode"] == "Suspended"
    sandbox.wait_condition("Suspended", timeout=120)

    fresh, inits = asyncio.run(_resume(str(cluster.kubeconfig), namespace, "idler"))
    assert fresh.ready
    assert inits == 1
    resumed = sandbox.get()
    assert resumed["spec"]["operatingMode"] == "Running"
    assert c.ANNOTATION_SUSPENDED_BY not in (resumed["metadata"].get("annotations") or {})
    assert sandbox.pod()["metadata"]["uid"] != first_pod
    read = sandbox.exec(["cat", "/data/token"])
    assert read.exit_code == 0, read.stderr
    assert read.stdout.strip() == token
