"""Resume on traffic through the real gateway: the SDK's next request waits, the PVC's data stays.

Issue 14 asks that the gateway resume an idle-suspended sandbox on the next request and that
the caller wait rather than fail. kwok runs no containers and mounts no volumes, so only the
real node shows it end to end: the unmodified ``e2b`` SDK, pointed only at a gateway on the
host (``agent-sandbox-gateway serve`` as a ServiceAccount bound to its generated ClusterRole),
creates a sandbox from a SandboxTemplate whose pod mounts a PVC (``volumeClaimTemplates`` on
the real node's hostPath storage) and runs ``sandboxd``; it asks for E2B's auto-resume
(``lifecycle={"on_timeout": "pause", "auto_resume": True}``) and the template sets a short idle
timeout (the gateway refuses ``metadata.idle_timeout`` under 60 s; the idle reconciler, run
in-process as a ServiceAccount bound to its ``RBAC_RULES`` with the test-only minimum lowered,
inherits the template's value). A file is written on the PVC through the SDK; with no traffic
the idle reconciler suspends the sandbox (the pod goes, the PVC stays); then the SDK reads the
file again through the gateway, which holds the request while it resumes the sandbox with one
patch and forwards it to the new pod.
"""

from __future__ import annotations

import functools
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import e2b
import pytest
from kubernetes import client

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller import rbac
from kube_agent_sandbox.controller.config import ControllerOptions
from kube_agent_sandbox.controller.runtime import ApiClient, Manager, load_kubeconfig
from kube_agent_sandbox.extensions.idle import setup as idle_setup
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.controller_runner import ControllerRunner
from kube_agent_sandbox.testing.gateway import create_key, start_gateway
from kube_agent_sandbox.testing.images.sandbox import sandbox_image
from kube_agent_sandbox.testing.node.workload import SandboxHandle
from kube_agent_sandbox.testing.processes import wait_until
from kube_agent_sandbox.testing.waiting import condition_status, wait_for_object

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

_log = logging.getLogger(__name__)
REPO_ROOT = Path(__file__).resolve().parents[1]
ENVD_PORT = 49983
TEMPLATE = "persist"
MOUNT = "/data"
IDLE_SECONDS = 10
"""Longer than the gateway's Lease debounce (5 s) plus its flush tick, as every production
timeout is (the floor is 60 s); a shorter one lets the reconciler act on a Lease that the
gateway is still holding back."""
IDLE_TIMEOUT = f"{IDLE_SECONDS}s"
IDLE_ROLE = "agent-sandbox-idle-gateway-e2e"
Record = Callable[[str, object], None]


def _template(image: str) -> dict[str, Any]:
    container = {
        "name": "sandbox",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "ports": [{"name": "envd", "containerPort": ENVD_PORT}],
        "readinessProbe": {"tcpSocket": {"port": ENVD_PORT}, "periodSeconds": 1},
        "volumeMounts": [{"name": "data", "mountPath": MOUNT}],
    }
    return {
        "apiVersion": c.EXTENSIONS_API_VERSION,
        "kind": c.KIND_SANDBOX_TEMPLATE,
        "metadata": {
            "name": TEMPLATE,
            # The operator's idle policy; the idle reconciler copies it onto each Sandbox.
            "annotations": {c.ANNOTATION_IDLE_TIMEOUT: IDLE_TIMEOUT},
        },
        "spec": {
            "podTemplate": {
                "spec": {"containers": [container], "terminationGracePeriodSeconds": 1}
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "64Mi"}},
                    },
                }
            ],
        },
    }


async def _run_idle(kubeconfig: Path, *, namespace: str) -> None:
    options = ControllerOptions(extensions=True, idle_shutdown=True, idle_min_timeout=1.0)
    async with ApiClient(load_kubeconfig(str(kubeconfig))) as api:
        manager = Manager(api, metrics_bind_address="0", health_bind_address="0")
        idle_setup.setup(manager, options, namespace=namespace)
        await manager.run()


def _start_idle_reconciler(controller_runner: ControllerRunner, namespace: str) -> None:
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": IDLE_ROLE},
        "rules": [r.to_dict() for r in rbac.normalize_rules(idle_setup.RBAC_RULES)],
    }
    identity = controller_runner.identity(
        "idle-controller", namespace=namespace, cluster_roles=[IDLE_ROLE], rbac=[role]
    )
    controller_runner.start(
        functools.partial(_run_idle, namespace=namespace), identity=identity, name="idle"
    )


def _annotations(obj: dict[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def _mode(obj: dict[str, Any]) -> str | None:
    return (obj.get("spec") or {}).get("operatingMode")


class _History(threading.Thread):
    """Every version of one Sandbox the API server shows, until it runs Ready again."""

    def __init__(self, api: client.ApiClient, handle: SandboxHandle) -> None:
        super().__init__(name="sandbox-history", daemon=True)
        self.api = api
        self.handle = handle
        self.seen: list[dict[str, Any]] = []
        self.listed = threading.Event()
        self.error: BaseException | None = None

    def _record(self, obj: dict[str, Any]) -> bool:
        self.seen.append(obj)
        self.listed.set()
        return _mode(obj) == c.OPERATING_MODE_RUNNING and condition_status(obj, "Ready") == "True"

    def run(self) -> None:
        try:
            wait_for_object(self.api, self.handle.ref, self._record, timeout=180, what="Ready")
        except BaseException as err:  # re-raised by the test
            self.error = err
            self.listed.set()


def test_the_sdk_waits_while_the_gateway_resumes_an_idle_sandbox(
    cluster: ClusterAccess,
    namespace: str,
    controller_runner: ControllerRunner,
    real_node_environment: Any,
    tmp_path: Path,
    record_property: Record,
) -> None:
    image = sandbox_image(REPO_ROOT)
    real_node_environment.node.import_image(image)
    cluster.apply([_template(image.reference)], namespace=namespace)
    _start_idle_reconciler(controller_runner, namespace)
    key = create_key(cluster.kubeconfig, namespace, gateway_namespace=namespace)
    gateway, url = start_gateway(
        controller_runner, namespace=namespace, workdir=tmp_path, watch_namespace=namespace
    )

    started = time.monotonic()
    sandbox = e2b.Sandbox.create(
        template=TEMPLATE,
        timeout=600,
        lifecycle={"on_timeout": "pause", "auto_resume": True},
        api_url=url,
        sandbox_url=url,
        api_key=key,
    )
    record_property("gateway_create_cold_pvc_seconds", round(time.monotonic() - started, 3))
    try:
        api = cluster.api_client()
        claim = client.CustomObjectsApi(api).get_namespaced_custom_object(
            c.EXTENSIONS_GROUP, c.V1BETA1, namespace, "sandboxclaims", sandbox.sandbox_id
        )
        assert isinstance(claim, dict)
        handle = SandboxHandle(api, namespace, claim["status"]["sandbox"]["name"])
        first_pod = handle.pod()["metadata"]["uid"]
        pvc_name = f"data-{handle.name}"
        core = client.CoreV1Api(api)

        def pvc_uid() -> str:
            pvc = core.read_namespaced_persistent_volume_claim(pvc_name, namespace)
            return str(pvc.metadata.uid)  # type: ignore[union-attr]

        first_pvc = pvc_uid()

        # The PVC's root belongs to root on hostPath storage (no fsGroup): write as root.
        token = f"kept across the suspend {secrets.token_hex(8)}\n"
        sandbox.files.write(f"{MOUNT}/token.txt", token, user="root")
        assert sandbox.files.read(f"{MOUNT}/token.txt") == token
        last_request = time.monotonic()

        # No traffic: the idle reconciler suspends it; the pod goes, the PVC stays.
        suspended = wait_for_object(
            api,
            handle.ref,
            lambda o: _annotations(o).get(c.ANNOTATION_SUSPENDED_BY) == c.SUSPENDED_BY_IDLE,
            timeout=120,
            what="suspended-by: idle",
        )
        suspend_after = time.monotonic() - last_request
        assert _mode(suspended) == c.OPERATING_MODE_SUSPENDED
        assert _annotations(suspended).get(c.ANNOTATION_IDLE_TIMEOUT) == IDLE_TIMEOUT
        assert _annotations(suspended).get(c.ANNOTATION_AUTO_RESUME) == "true"
        suspended = handle.wait_condition("Suspended", timeout=120)
        # The gateway's traffic renewed the heartbeat Lease: the suspend came a full idle
        # timeout after the last request (minus the few ms the response took), not earlier.
        lease = client.CoordinationV1Api(api).read_namespaced_lease(handle.name, namespace)
        assert lease.spec is not None
        assert lease.spec.renew_time is not None
        assert suspend_after >= IDLE_SECONDS - 0.5, (suspend_after, lease.spec.renew_time)

        def reasons() -> list[str]:
            selector = f"involvedObject.name={handle.name}"
            events = core.list_namespaced_event(namespace, field_selector=selector)
            return [str(e.reason) for e in events.items]

        wait_until(lambda: "IdleSuspended" in reasons(), timeout=30, what="IdleSuspended event")
        with pytest.raises(client.ApiException) as no_pod:
            handle.pod()
        assert no_pod.value.status == 404
        assert pvc_uid() == first_pvc

        # The next request waits while the gateway resumes the sandbox, then succeeds.
        history = _History(api, handle)
        history.start()
        assert history.listed.wait(30), "the Sandbox's history did not start"
        t0 = time.monotonic()
        content = sandbox.files.read(f"{MOUNT}/token.txt")
        resume_wait = time.monotonic() - t0
        history.join(60)
        assert not history.is_alive(), "the Sandbox did not run Ready again"
        if history.error is not None:
            raise history.error
        assert content == token

        resumed = history.seen[-1]
        assert _mode(resumed) == c.OPERATING_MODE_RUNNING
        assert c.ANNOTATION_SUSPENDED_BY not in _annotations(resumed)
        # One patch: one spec write, and no version runs with suspended-by still set.
        assert resumed["metadata"]["generation"] == suspended["metadata"]["generation"] + 1
        half_done = [
            o["metadata"]["resourceVersion"]
            for o in history.seen
            if _mode(o) == c.OPERATING_MODE_RUNNING and c.ANNOTATION_SUSPENDED_BY in _annotations(o)
        ]
        assert half_done == []
        resumes = re.findall(
            rf"sandbox {sandbox.sandbox_id} resumed\b", gateway.log_path.read_text()
        )
        assert len(resumes) == 1, gateway.log_tail(80)
        assert handle.pod()["metadata"]["uid"] != first_pod
        assert pvc_uid() == first_pvc
        assert sandbox.commands.run(f"cat {MOUNT}/token.txt").stdout == token

        record_property("idle_suspend_after_last_request_seconds", round(suspend_after, 2))
        record_property("gateway_resume_wait_seconds", round(resume_wait, 3))
        _log.info(
            "idle %s: suspended %.1fs after the last request; the SDK's read waited %.2fs for "
            "the resume",
            IDLE_TIMEOUT,
            suspend_after,
            resume_wait,
        )
    finally:
        assert sandbox.kill() is True
