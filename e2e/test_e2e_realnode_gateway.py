"""The real E2B SDK through the gateway into a real container (issue 14, data plane).

kwok runs no containers, so only the real node shows the data plane end to end: the sandbox
image (the Python image plus ``sandboxd``, see ``testing.images.sandbox``) is imported into
the node's containerd; a SandboxTemplate ``base`` runs it and a SandboxWarmPool keeps one warm
member; ``agent-sandbox-gateway serve`` runs on the host as a ServiceAccount bound only to its
generated ClusterRole and reaches pods at their IPs (the node's bridge is the host's, so no
address override). The ``e2b`` SDK of the workspace, configured only with the gateway's URL and
an API key, creates a sandbox, runs commands (as E2B's ``user`` in ``/home/user``: the
container's, not the host's), writes, lists and reads files, and kills it.

A second test deploys the kustomize component itself (``manifests/overlays/gateway``, the
gateway image built like the controller's, the HMAC Secret created as the guide says) and runs
the SDK through the gateway's Service: the Deployment as written must start non-root on a
read-only root filesystem and serve with its generated RBAC.
"""

from __future__ import annotations

import logging
import secrets
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import e2b
import e2b.exceptions
import pytest
import yaml

from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.controller_runner import ControllerRunner
from kube_agent_sandbox.testing.gateway import (
    ENVD_PORT,
    create_key,
    http_status,
    start_gateway,
    wait_warm_pool_ready,
    warm_template,
)
from kube_agent_sandbox.testing.images.gateway import gateway_image
from kube_agent_sandbox.testing.images.sandbox import sandbox_image
from kube_agent_sandbox.testing.node.cluster import normalize_image_reference
from kube_agent_sandbox.testing.processes import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

_log = logging.getLogger(__name__)
REPO_ROOT = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024
Record = Callable[[str, object], None]


def _template_spec(image: str) -> dict[str, Any]:
    container = {
        "name": "sandbox",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "ports": [{"name": "envd", "containerPort": ENVD_PORT}],
        # Ready = sandboxd answers: the gateway's /init right after the claim cannot miss.
        "readinessProbe": {"tcpSocket": {"port": ENVD_PORT}, "periodSeconds": 1},
    }
    return {
        "podTemplate": {"spec": {"containers": [container], "terminationGracePeriodSeconds": 1}},
        # What docs/guides/gateway.md tells users: admit the gateway's pods (the real node's
        # CNI enforces no policy, so this documents rather than tests the rule).
        "networkPolicy": {
            "ingress": [
                {
                    "from": [
                        {
                            "namespaceSelector": {
                                "matchLabels": {
                                    "kubernetes.io/metadata.name": "agent-sandbox-system"
                                }
                            },
                            "podSelector": {"matchLabels": {"app": "agent-sandbox-gateway"}},
                        }
                    ],
                    "ports": [{"port": ENVD_PORT, "protocol": "TCP"}],
                }
            ]
        },
    }


@pytest.fixture
def base_template(cluster: ClusterAccess, namespace: str, real_node_environment: Any) -> str:
    """The sandbox image on the node and a ``base`` template with one warm member; the key."""
    image = sandbox_image(REPO_ROOT)
    real_node_environment.node.import_image(image)
    cluster.apply(
        warm_template("base", template_spec=_template_spec(image.reference)), namespace=namespace
    )
    wait_warm_pool_ready(
        cluster,
        "base",
        namespace=namespace,
        timeout=240,
        what="a Ready warm member running sandboxd",
    )
    return create_key(cluster.kubeconfig, namespace, gateway_namespace=namespace)


@pytest.fixture
def gateway(
    base_template: str,
    namespace: str,
    controller_runner: ControllerRunner,
    tmp_path: Path,
) -> dict[str, str]:
    """``agent-sandbox-gateway serve`` on the host, as its generated ClusterRole."""
    _process, url = start_gateway(
        controller_runner, namespace=namespace, workdir=tmp_path, watch_namespace=namespace
    )
    return {"url": url, "key": base_template}


def test_e2b_sdk_runs_commands_and_files_in_a_real_container(
    gateway: dict[str, str], record_property: Record
) -> None:
    config = {"api_url": gateway["url"], "sandbox_url": gateway["url"], "api_key": gateway["key"]}
    started = time.monotonic()
    sandbox = e2b.Sandbox.create(template="base", timeout=120, envs={"GREETING": "hi"}, **config)
    create_seconds = time.monotonic() - started
    record_property("gateway_create_warm_seconds", round(create_seconds, 3))
    try:
        who = sandbox.commands.run("whoami; pwd; echo $GREETING; hostname")
        user, cwd, greeting, hostname = who.stdout.split()
        assert (user, cwd, greeting) == ("user", "/home/user", "hi")
        assert hostname != socket.gethostname()  # the container's, not the host's
        with pytest.raises(e2b.CommandExitException) as failed:
            sandbox.commands.run("echo oops >&2; exit 4")
        assert (failed.value.exit_code, failed.value.stderr) == (4, "oops\n")
        samples = []
        for _ in range(5):
            t0 = time.monotonic()
            sandbox.commands.run("true")
            samples.append(time.monotonic() - t0)
        record_property("gateway_command_round_trip_min_seconds", round(min(samples), 4))

        sandbox.files.write("/home/user/notes/a.txt", "written through the gateway\n")
        assert sandbox.commands.run("cat /home/user/notes/a.txt").stdout == (
            "written through the gateway\n"
        )
        assert sandbox.commands.run("stat -c %U /home/user/notes/a.txt").stdout == "user\n"
        assert [e.name for e in sandbox.files.list("/home/user/notes")] == ["a.txt"]
        payload = bytes(range(256)) * 4096  # 1 MiB, every byte value
        t0 = time.monotonic()
        sandbox.files.write("/home/user/blob.bin", payload)
        write_seconds = time.monotonic() - t0
        t0 = time.monotonic()
        assert bytes(sandbox.files.read("/home/user/blob.bin", format="bytes")) == payload
        read_seconds = time.monotonic() - t0
        record_property("gateway_file_write_mib_per_second", round(1 / write_seconds, 2))
        record_property("gateway_file_read_mib_per_second", round(1 / read_seconds, 2))
        assert sandbox.files.exists("/home/user/nope") is False
        _log.info(
            "gateway on the real node: create %.2fs, command min %.0f ms, 1 MiB write %.2fs "
            "read %.2fs",
            create_seconds,
            min(samples) * 1000,
            write_seconds,
            read_seconds,
        )
    finally:
        assert sandbox.kill() is True
    assert sandbox.is_running() is False


SYSTEM_NAMESPACE = "agent-sandbox-system"
COMPONENT_OBJECTS = (
    ("deployment", "agent-sandbox-gateway", SYSTEM_NAMESPACE),
    ("service", "agent-sandbox-gateway", SYSTEM_NAMESPACE),
    ("serviceaccount", "agent-sandbox-gateway", SYSTEM_NAMESPACE),
    ("secret", "agent-sandbox-gateway-hmac", SYSTEM_NAMESPACE),
    ("clusterrolebinding", "agent-sandbox-gateway", None),
    ("clusterrole", "agent-sandbox-gateway", None),
)


def _component_image(cluster: ClusterAccess) -> str:
    rendered = cluster.kubectl("kustomize", str(REPO_ROOT / "manifests/components/gateway"))
    for document in yaml.safe_load_all(rendered.stdout):
        if document and document.get("kind") == "Deployment":
            return str(document["spec"]["template"]["spec"]["containers"][0]["image"])
    raise AssertionError("the gateway component has no Deployment")


@pytest.fixture
def deployed_gateway(cluster: ClusterAccess, real_node_environment: Any) -> Iterator[str]:
    """The kustomize component applied as the guide says (overlay + HMAC Secret); its URL."""
    image = gateway_image(REPO_ROOT)
    wanted = normalize_image_reference(_component_image(cluster))
    real_node_environment.node.import_image(image, also_as=[wanted])
    system = ("-n", SYSTEM_NAMESPACE)
    try:
        cluster.kubectl("apply", "-k", str(REPO_ROOT / "manifests/overlays/gateway"), timeout=120)
        cluster.kubectl(
            *system,
            "create",
            "secret",
            "generic",
            "agent-sandbox-gateway-hmac",
            f"--from-literal=key={secrets.token_hex(32)}",
        )
        # One replica is enough here and keeps the shared node light.
        cluster.kubectl(*system, "scale", "deployment/agent-sandbox-gateway", "--replicas=1")
        rollout = cluster.kubectl(
            *system,
            "rollout",
            "status",
            "deployment/agent-sandbox-gateway",
            "--timeout=180s",
            timeout=200,
            check=False,
        )
        if rollout.returncode != 0:
            pods = cluster.kubectl(*system, "describe", "pods", "-l", "app=agent-sandbox-gateway")
            logs = cluster.kubectl(
                *system, "logs", "-l", "app=agent-sandbox-gateway", "--tail=50", check=False
            )
            pytest.fail(f"gateway rollout: {rollout.stderr}\n{pods.stdout[-3000:]}\n{logs.stdout}")
        address = cluster.kubectl(
            *system, "get", "service", "agent-sandbox-gateway", "-o", "jsonpath={.spec.clusterIP}"
        ).stdout.strip()
        url = f"http://{address}"
        wait_until(lambda: http_status(f"{url}/health") == 200, timeout=60, what="gateway Service")
        yield url
    finally:
        for kind, name, namespace in COMPONENT_OBJECTS:
            scope = ("-n", namespace) if namespace else ()
            cluster.kubectl(*scope, "delete", kind, name, "--ignore-not-found", "--wait=false")


def test_the_deployed_component_serves_e2b_clients(
    deployed_gateway: str,
    base_template: str,
    cluster: ClusterAccess,
    namespace: str,
    record_property: Record,
) -> None:
    """Non-root, read-only root filesystem, generated RBAC, reached through its Service."""
    # the deployed gateway reads keys from its own namespace (agent-sandbox-system)
    key = create_key(cluster.kubeconfig, namespace, gateway_namespace="agent-sandbox-system")
    config = {"api_url": deployed_gateway, "sandbox_url": deployed_gateway, "api_key": key}
    deadline = time.monotonic() + 60
    while True:  # until the gateway's key informer has seen the new key
        try:
            e2b.Sandbox.list(**config).next_items()
            break
        except e2b.exceptions.AuthenticationException:
            assert time.monotonic() < deadline, "the deployed gateway never accepted the key"
            time.sleep(0.5)
    started = time.monotonic()
    sandbox = e2b.Sandbox.create(template="base", timeout=60, **config)
    record_property("deployed_gateway_create_warm_seconds", round(time.monotonic() - started, 3))
    try:
        assert sandbox.commands.run("echo $((6 * 7)) $(whoami)").stdout == "42 user\n"
        sandbox.files.write("/home/user/deployed.txt", "through the Service\n")
        assert sandbox.files.read("/home/user/deployed.txt") == "through the Service\n"
        assert sandbox.get_info().template_id == "base"
    finally:
        assert sandbox.kill() is True
