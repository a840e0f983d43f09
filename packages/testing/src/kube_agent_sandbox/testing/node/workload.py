"""Driving sandboxes that really run: create, wait, exec, port-forward, suspend and resume.

The e2e suite and the demo talk to the cluster the way a user's tools do: Sandbox objects
through the API, commands through the pod ``exec`` subresource, TCP through ``portforward``.
Waits watch the object (see ``testing.waiting``); nothing here sleeps.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.stream import portforward, stream

from kube_agent_sandbox.api.constants import GROUP
from kube_agent_sandbox.testing.waiting import (
    ObjectRef,
    condition_status,
    wait_for_condition,
    wait_for_deletion,
    wait_for_object,
)

SANDBOX_VERSION = "v1beta1"
SANDBOX_PLURAL = "sandboxes"


@dataclass(frozen=True)
class ExecResult:
    """Output and exit code of a command run through the exec API."""

    stdout: str
    stderr: str
    exit_code: int


def exec_in_pod(
    api_client: client.ApiClient,
    namespace: str,
    pod: str,
    command: Sequence[str],
    *,
    container: str | None = None,
    timeout: float = 60.0,
) -> ExecResult:
    """Run ``command`` in a pod through the Kubernetes exec API and collect its result.

    Args:
        api_client: Client for the cluster.
        namespace: Pod namespace.
        pod: Pod name.
        command: Program and arguments.
        container: Container name (the pod's only container when None).
        timeout: Seconds before giving up on the command.

    Returns:
        stdout, stderr and the exit code.

    Raises:
        TimeoutError: If the command does not finish in time.
    """
    kwargs: dict[str, Any] = {}
    if container:
        kwargs["container"] = container
    response = stream(
        client.CoreV1Api(api_client).connect_get_namespaced_pod_exec,
        pod,
        namespace,
        command=list(command),
        stdout=True,
        stderr=True,
        stdin=False,
        tty=False,
        _preload_content=False,
        **kwargs,
    )
    out: list[str] = []
    err: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while response.is_open():
            if time.monotonic() > deadline:
                raise TimeoutError(f"exec {list(command)} in {namespace}/{pod} did not finish")
            response.update(timeout=1)
            if response.peek_stdout():
                out.append(response.read_stdout())
            if response.peek_stderr():
                err.append(response.read_stderr())
        code = response.returncode
    finally:
        response.close()
    return ExecResult(stdout="".join(out), stderr="".join(err), exit_code=int(code or 0))


def http_get_through_port_forward(
    api_client: client.ApiClient,
    namespace: str,
    pod: str,
    port: int,
    *,
    path: str = "/",
    timeout: float = 30.0,
) -> bytes:
    """GET ``path`` from a server in a pod, tunnelled through the portforward API.

    Args:
        api_client: Client for the cluster.
        namespace: Pod namespace.
        pod: Pod name.
        port: Pod port of the HTTP server.
        path: Request path.
        timeout: Socket timeout in seconds.

    Returns:
        The raw HTTP response (status line, headers and body).
    """
    forward = portforward(
        client.CoreV1Api(api_client).connect_get_namespaced_pod_portforward,
        pod,
        namespace,
        ports=str(port),
    )
    try:
        sock: socket.socket = forward.socket(port)
        sock.settimeout(timeout)
        sock.sendall(f"GET {path} HTTP/1.0\r\nHost: sandbox\r\n\r\n".encode())
        chunks: list[bytes] = []
        while data := sock.recv(65536):
            chunks.append(data)
        sock.close()
    finally:
        forward.close()
    return b"".join(chunks)


def sandbox_manifest(
    name: str,
    *,
    image: str,
    command: Sequence[str],
    readiness_probe: Mapping[str, Any] | None = None,
    restart_policy: str | None = None,
    runtime_class: str | None = None,
    volume_size: str | None = None,
    volume_mount: str = "/data",
    ports: Sequence[int] = (),
) -> dict[str, Any]:
    """A Sandbox (agents.x-k8s.io/v1beta1) running one container of ``image``.

    Args:
        name: Sandbox name.
        image: Container image (pulled only if not present on the node).
        command: Container command.
        readiness_probe: The container's readiness probe.
        restart_policy: Pod restart policy.
        runtime_class: Pod ``runtimeClassName``.
        volume_size: When set, one ``volumeClaimTemplates`` entry ``data`` of this size,
            mounted at ``volume_mount``.
        volume_mount: Mount path of the claim.
        ports: Container ports.

    Returns:
        The manifest.
    """
    container: dict[str, Any] = {
        "name": "main",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": list(command),
    }
    if readiness_probe is not None:
        container["readinessProbe"] = dict(readiness_probe)
    if ports:
        container["ports"] = [{"containerPort": p} for p in ports]
    pod_spec: dict[str, Any] = {"containers": [container], "terminationGracePeriodSeconds": 1}
    if restart_policy:
        pod_spec["restartPolicy"] = restart_policy
    if runtime_class:
        pod_spec["runtimeClassName"] = runtime_class
    spec: dict[str, Any] = {"podTemplate": {"spec": pod_spec}}
    if volume_size:
        container["volumeMounts"] = [{"name": "data", "mountPath": volume_mount}]
        spec["volumeClaimTemplates"] = [
            {
                "metadata": {"name": "data"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": volume_size}},
                },
            }
        ]
    return {
        "apiVersion": f"{GROUP}/{SANDBOX_VERSION}",
        "kind": "Sandbox",
        "metadata": {"name": name},
        "spec": spec,
    }


class SandboxHandle:
    """One Sandbox in one namespace, driven through the API."""

    def __init__(self, api_client: client.ApiClient, namespace: str, name: str) -> None:
        """Refer to a Sandbox (it need not exist yet).

        Args:
            api_client: Client for the cluster.
            namespace: Its namespace.
            name: Its name.
        """
        self.api_client = api_client
        self.namespace = namespace
        self.name = name
        self._custom = client.CustomObjectsApi(api_client)

    @property
    def ref(self) -> ObjectRef:
        """The Sandbox's reference for waits."""
        return ObjectRef(f"{GROUP}/{SANDBOX_VERSION}", "Sandbox", self.name, self.namespace)

    @classmethod
    def create(
        cls, api_client: client.ApiClient, namespace: str, manifest: Mapping[str, Any]
    ) -> SandboxHandle:
        """Create the Sandbox described by ``manifest``.

        Args:
            api_client: Client for the cluster.
            namespace: Target namespace.
            manifest: A Sandbox manifest (see :func:`sandbox_manifest`).

        Returns:
            The handle.
        """
        handle = cls(api_client, namespace, str(manifest["metadata"]["name"]))
        handle._custom.create_namespaced_custom_object(
            GROUP, SANDBOX_VERSION, namespace, SANDBOX_PLURAL, dict(manifest)
        )
        return handle

    def get(self) -> dict[str, Any]:
        """The Sandbox as the apiserver has it."""
        result = self._custom.get_namespaced_custom_object(
            GROUP, SANDBOX_VERSION, self.namespace, SANDBOX_PLURAL, self.name
        )
        return dict(result)  # type: ignore[call-overload,no-any-return]

    def wait_condition(
        self, condition: str, *, status: str = "True", timeout: float = 120.0
    ) -> dict[str, Any]:
        """Wait (watching) until ``condition`` has ``status``; return the Sandbox.

        Args:
            condition: Condition type (``Ready``, ``Suspended``, ``Finished``).
            status: Awaited status.
            timeout: Seconds to wait.
        """
        return wait_for_condition(
            self.api_client, self.ref, condition, status=status, timeout=timeout
        )

    def wait_ready_message(self, fragment: str, *, timeout: float = 120.0) -> dict[str, Any]:
        """Wait until the Ready condition's message contains ``fragment``.

        Args:
            fragment: Text the message must contain.
            timeout: Seconds to wait.
        """

        def matches(obj: Mapping[str, Any]) -> bool:
            for condition in (obj.get("status") or {}).get("conditions") or []:
                if condition.get("type") == "Ready":
                    return fragment in str(condition.get("message", ""))
            return False

        return wait_for_object(
            self.api_client, self.ref, matches, timeout=timeout, what=f"Ready ~ {fragment!r}"
        )

    def set_operating_mode(self, mode: str) -> None:
        """Merge-patch ``spec.operatingMode`` (``Running`` or ``Suspended``).

        Args:
            mode: The new mode.
        """
        self._custom.patch_namespaced_custom_object(
            GROUP,
            SANDBOX_VERSION,
            self.namespace,
            SANDBOX_PLURAL,
            self.name,
            {"spec": {"operatingMode": mode}},
        )

    def suspend(self, *, timeout: float = 120.0) -> dict[str, Any]:
        """Suspend and wait until the pod is gone (Suspended=True).

        Args:
            timeout: Seconds to wait.
        """
        self.set_operating_mode("Suspended")
        return self.wait_condition("Suspended", timeout=timeout)

    def resume(self, *, timeout: float = 120.0) -> dict[str, Any]:
        """Resume and wait until the new pod is Ready.

        Args:
            timeout: Seconds to wait.
        """
        self.set_operating_mode("Running")
        self.wait_condition("Suspended", status="False", timeout=timeout)
        return self.wait_condition("Ready", timeout=timeout)

    def pod(self) -> dict[str, Any]:
        """The Sandbox's pod (named after the Sandbox)."""
        core = client.CoreV1Api(self.api_client)
        pod: dict[str, Any] = self.api_client.sanitize_for_serialization(  # type: ignore[no-untyped-call]
            core.read_namespaced_pod(self.name, self.namespace)
        )
        return pod

    def exec(self, command: Sequence[str], *, timeout: float = 60.0) -> ExecResult:
        """Run a command in the Sandbox's pod.

        Args:
            command: Program and arguments.
            timeout: Seconds to wait for it.
        """
        return exec_in_pod(self.api_client, self.namespace, self.name, command, timeout=timeout)

    def delete(self, *, timeout: float = 120.0) -> None:
        """Delete the Sandbox and wait until it is gone.

        Args:
            timeout: Seconds to wait.
        """
        self._custom.delete_namespaced_custom_object(
            GROUP, SANDBOX_VERSION, self.namespace, SANDBOX_PLURAL, self.name
        )
        wait_for_deletion(self.api_client, self.ref, timeout=timeout)


def ready_reason(sandbox: Mapping[str, Any]) -> str | None:
    """The reason of the Sandbox's Ready condition (None when absent).

    Args:
        sandbox: The Sandbox object.
    """
    for condition in (sandbox.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return str(condition.get("reason"))
    return None


__all__ = [
    "ExecResult",
    "SandboxHandle",
    "condition_status",
    "exec_in_pod",
    "http_get_through_port_forward",
    "ready_reason",
    "sandbox_manifest",
]
