"""Start the E2B gateway and what it serves, for the gateway's integration, acceptance, e2e tests.

Several suites run the same stack around the gateway: the controller with the extension
controllers (as its generated RBAC), local ``sandboxd`` daemons standing in for the sandboxes'
envd on kwok, ``agent-sandbox-gateway serve`` as a ServiceAccount bound only to the gateway's
generated ClusterRole, a tenant API key and a SandboxTemplate with a warm pool. The pieces live
here once so that every suite starts them the same way.
"""

from __future__ import annotations

import re
import secrets
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.gateway import rbacgen, tenant_rbac
from kube_agent_sandbox.testing.access import ClusterAccess, load_manifests
from kube_agent_sandbox.testing.controller_runner import ControllerRunner, Identity
from kube_agent_sandbox.testing.probes import free_port
from kube_agent_sandbox.testing.processes import ManagedProcess, ProcessSupervisor, wait_until
from kube_agent_sandbox.testing.waiting import ObjectRef, wait_for_object

#: The ``agent-sandbox-gateway`` script of the running interpreter's environment.
GATEWAY_BIN = Path(sys.executable).parent / "agent-sandbox-gateway"
#: envd's port in every sandbox (``sandboxd`` serves it).
ENVD_PORT = 49983
#: The code interpreter's port in a code-interpreter sandbox.
INTERPRETER_PORT = 49999
_KEY = re.compile(r"\be2b_[0-9a-f]{40}\b")


def http_status(url: str, *, cafile: Path | None = None) -> int:
    """The status of a GET of ``url``; 0 when nothing answers.

    Args:
        url: The URL.
        cafile: CA bundle to verify an ``https://`` URL with (the system's if None).

    Returns:
        The HTTP status code, or 0 if the connection failed.
    """
    context = ssl.create_default_context(cafile=str(cafile)) if cafile is not None else None
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as response:
            return int(response.status)
    except urllib.error.HTTPError as err:
        return int(err.code)
    except OSError:
        return 0


def accepts(port: int) -> bool:
    """Whether 127.0.0.1:``port`` accepts connections."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def gateway_cluster_roles() -> list[dict[str, Any]]:
    """The gateway's generated roles (as ``manifests/components/gateway`` holds them).

    The keys Role loses its namespace: it lands in the gateway's ServiceAccount's namespace.
    """
    roles: list[dict[str, Any]] = [d for d in yaml.safe_load_all(rbacgen.render()) if d]
    for role in roles:
        if role["kind"] == "Role":
            del role["metadata"]["namespace"]
    return roles


def gateway_identity(
    runner: ControllerRunner, *, namespace: str, tenants: Sequence[str] | None = None
) -> Identity:
    """The ``agent-sandbox-gateway`` ServiceAccount bound only to the generated roles.

    As documented: ``agent-sandbox-gateway`` cluster-wide, the Role ``agent-sandbox-gateway-keys``
    (its API keys) in its own namespace, ``agent-sandbox-gateway-tenant`` (the sandboxes' env
    Secrets) by a RoleBinding in each tenant namespace only.

    Args:
        runner: The harness that creates identities.
        namespace: Namespace of the ServiceAccount.
        tenants: Tenant namespaces to bind the tenant role in (existing ones); ``namespace``
            only if None. Bind later ones with :func:`bind_gateway_tenant`.

    Returns:
        The identity (its kubeconfig authenticates as the ServiceAccount).
    """
    identity = runner.identity(
        "agent-sandbox-gateway",
        namespace=namespace,
        cluster_roles=[rbacgen.GATEWAY_ROLE],
        roles=[rbacgen.KEYS_ROLE],
        rbac=gateway_cluster_roles(),
    )
    for tenant in (namespace,) if tenants is None else tenants:
        bind_gateway_tenant(runner, identity, tenant)
    return identity


def bind_gateway_tenant(runner: ControllerRunner, identity: Identity, tenant: str) -> None:
    """Make ``tenant`` (an existing namespace) a tenant the gateway may keep env Secrets in.

    The binding ``agent-sandbox-gateway keys create``/``keys bind`` would make there.
    """
    runner.bind_in_namespace(identity, rbacgen.TENANT_ROLE, tenant, name=tenant_rbac.BINDING_NAME)


def gateway_argv(
    *,
    port: int,
    kubeconfig: str,
    secret_file: Path,
    namespace: str | None = None,
    gateway_namespace: str | None = None,
    pod_address_override: str | None = None,
    port_map: Mapping[int, int] | None = None,
    domain: str | None = None,
    tls: tuple[Path, Path] | None = None,
    mcp_file_root: str | None = None,
) -> list[str]:
    """The command line of ``agent-sandbox-gateway serve``.

    Args:
        port: Port to listen on (127.0.0.1).
        kubeconfig: Kubeconfig path (or the runner's ``{kubeconfig}`` placeholder).
        secret_file: File holding the HMAC secret.
        namespace: The only namespace to serve; all namespaces if None.
        gateway_namespace: The gateway's own namespace, where its API keys are
            (``--gateway-namespace``); the command's default if None.
        pod_address_override: Address that replaces every pod IP (testing only).
        port_map: Sandbox port -> local port (testing only).
        domain: Wildcard domain of ``<port>-<id>.<domain>`` (``--domain``); none if None.
        tls: Certificate and key files to serve HTTPS with; plain HTTP if None.
        mcp_file_root: ``--mcp-file-root`` (the MCP file tools' root); ``/`` if None.

    Returns:
        The argv.
    """
    argv = [
        str(GATEWAY_BIN),
        "serve",
        f"--listen=127.0.0.1:{port}",
        f"--kubeconfig={kubeconfig}",
    ]
    if namespace is not None:
        argv.append(f"--namespace={namespace}")
    if gateway_namespace is not None:
        argv.append(f"--gateway-namespace={gateway_namespace}")
    argv.append(f"--hmac-secret-file={secret_file}")
    if pod_address_override is not None:
        argv.append(f"--pod-address-override={pod_address_override}")
    if port_map:
        argv.append("--pod-port-map=" + ",".join(f"{k}={v}" for k, v in sorted(port_map.items())))
    if domain is not None:
        argv.append(f"--domain={domain}")
    if tls is not None:
        argv += [f"--tls-cert-file={tls[0]}", f"--tls-key-file={tls[1]}"]
    if mcp_file_root is not None:
        argv.append(f"--mcp-file-root={mcp_file_root}")
    return argv


def write_hmac_secret(path: Path) -> Path:
    """Write a fresh random HMAC secret to ``path`` and return it."""
    path.write_text(secrets.token_hex(32))
    return path


def wait_gateway_healthy(
    url: str,
    *,
    process: ManagedProcess,
    what: str = "gateway /health",
    cafile: Path | None = None,
) -> None:
    """Wait until the gateway at ``url`` answers ``/health`` with 200 (its caches synced).

    Args:
        url: The gateway's base URL.
        process: The gateway's process (its exit ends the wait early).
        what: What is awaited (for the error message).
        cafile: CA bundle that verifies an ``https://`` gateway.

    Raises:
        ProcessFailedError: If the gateway exits or does not become healthy within 60 s.
    """
    wait_until(
        lambda: http_status(f"{url}/health", cafile=cafile) == 200,
        timeout=60,
        what=what,
        process=process,
    )


def start_gateway(
    runner: ControllerRunner,
    *,
    namespace: str,
    workdir: Path,
    watch_namespace: str | None = None,
    pod_address_override: str | None = None,
    port_map: Mapping[int, int] | None = None,
    domain: str | None = None,
    tls: tuple[Path, Path] | None = None,
    cafile: Path | None = None,
    name: str = "gateway",
    mcp_file_root: str | None = None,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    tenants: Sequence[str] | None = None,
    secret_file: Path | None = None,
) -> tuple[ManagedProcess, str]:
    """``agent-sandbox-gateway serve`` as its generated RBAC, once ``/health`` answers.

    Args:
        runner: The harness that runs the command as the gateway's ServiceAccount.
        namespace: Namespace of the ServiceAccount (the gateway's own: its API keys are there).
        workdir: Folder for the HMAC secret file (``hmac-key``).
        watch_namespace: The only namespace to serve; all namespaces if None.
        pod_address_override: Address that replaces every pod IP (testing only).
        port_map: Sandbox port -> local port (testing only).
        domain: Wildcard domain of ``<port>-<id>.<domain>``; none if None.
        tls: Certificate and key files: serve HTTPS (the URL is ``https://127.0.0.1:PORT``).
        cafile: CA bundle that verifies the ``tls`` certificate (for the health wait).
        name: Process name, unique per runner (log file ``<name>.log``).
        mcp_file_root: The MCP file tools' root (``--mcp-file-root``); ``/`` if None.
        extra_args: More ``serve`` flags (e.g. ``--enable-tracing``).
        env: Extra environment variables (e.g. the ``OTEL_EXPORTER_OTLP_*`` ones).
        tenants: Existing tenant namespaces the tenant role is bound in; ``namespace`` if None.
        secret_file: An HMAC secret file to share (replicas of one gateway); a fresh one in
            ``workdir`` if None.

    Returns:
        The process and the gateway's URL.
    """
    identity = gateway_identity(runner, namespace=namespace, tenants=tenants)
    secret_file = secret_file or write_hmac_secret(workdir / "hmac-key")
    port = free_port()
    argv = gateway_argv(
        port=port,
        kubeconfig="{kubeconfig}",
        secret_file=secret_file,
        namespace=watch_namespace,
        gateway_namespace=namespace,
        pod_address_override=pod_address_override,
        port_map=port_map,
        domain=domain,
        tls=tls,
        mcp_file_root=mcp_file_root,
    )
    argv += list(extra_args)
    process = runner.start_command(argv, identity=identity, name=name, env=env)
    url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    wait_gateway_healthy(
        url, process=process, what=f"{name} /health (caches synced)", cafile=cafile
    )
    return process, url


def create_key(kubeconfig: Path | str, namespace: str, *, gateway_namespace: str) -> str:
    """A tenant API key made with ``agent-sandbox-gateway keys create`` (as a user would).

    The command stores it in the gateway's namespace and binds the gateway's tenant role in
    ``namespace``.

    Args:
        kubeconfig: Admin kubeconfig.
        namespace: The tenant's namespace.
        gateway_namespace: Namespace of the gateway's ServiceAccount and keys (the
            ``namespace`` given to :func:`start_gateway`).

    Returns:
        The key (``e2b_`` and 40 hex digits).
    """
    result = subprocess.run(
        [
            str(GATEWAY_BIN),
            "keys",
            "create",
            f"--namespace={namespace}",
            f"--kubeconfig={kubeconfig}",
            f"--gateway-namespace={gateway_namespace}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    found = _KEY.findall(result.stdout)
    assert len(found) == 1, f"expected one key in the output: {result.stdout!r}"
    # The key is shown once and never logged.
    assert found[0] not in result.stderr
    return str(found[0])


# Flags of the controller's Deployment that only place it in a cluster (leader election, the
# conversion webhook, listen addresses, the kubeconfig): a local run sets its own.
_PLACEMENT_FLAGS = (
    "--leader-elect",
    "--leader-election-",
    "--webhook-",
    "--enable-webhook",
    "--metrics-bind-address",
    "--health-probe-bind-address",
    "--kubeconfig",
)


def documented_controller_flags(cluster: ClusterAccess, overlay: Path) -> list[str]:
    """The behaviour flags a kustomize install gives the controller (``--extensions``, ...).

    So the suites run the controller as the documented install configures it: a flag the
    install forgets fails a test instead of a user.

    Args:
        cluster: For ``kubectl kustomize``.
        overlay: The kustomization directory (e.g. ``manifests/overlays/gateway``).
    """
    built = yaml.safe_load_all(cluster.kubectl("kustomize", str(overlay)).stdout)
    deployment = next(
        doc
        for doc in built
        if doc
        and doc["kind"] == "Deployment"
        and doc["metadata"]["name"] == "agent-sandbox-controller"
    )
    args = deployment["spec"]["template"]["spec"]["containers"][0].get("args") or []
    return [str(arg) for arg in args if not str(arg).startswith(_PLACEMENT_FLAGS)]


def start_controller(
    runner: ControllerRunner,
    *,
    namespace: str,
    repo_root: Path,
    flags: Sequence[str] = ("--extensions",),
    metrics_port: int | None = None,
    env: Mapping[str, str] | None = None,
) -> ManagedProcess:
    """``agent-sandbox-controller <flags>`` as its generated RBAC, once ``/readyz`` answers.

    Args:
        runner: The harness that runs the command as the controller's ServiceAccount (it
            creates ``namespace``).
        namespace: Namespace of the ServiceAccount.
        repo_root: The repository root (for ``manifests/rbac``).
        flags: Its behaviour flags (:func:`documented_controller_flags` of an install).
        metrics_port: Port of ``/metrics`` on 127.0.0.1; a free one when None.
        env: Extra environment variables (e.g. the ``OTEL_EXPORTER_OTLP_*`` ones).

    Returns:
        The controller's process.
    """
    rbac = repo_root / "manifests" / "rbac"
    identity = runner.identity(
        "agent-sandbox-controller",
        namespace=namespace,
        cluster_roles=["agent-sandbox-controller", "agent-sandbox-controller-extensions"],
        rbac=[
            *load_manifests(rbac / "role.generated.yaml"),
            *load_manifests(rbac / "extensions" / "role.generated.yaml"),
        ],
    )
    health = free_port()
    argv = [
        sys.executable,
        "-m",
        "kube_agent_sandbox.controller",
        "--kubeconfig={kubeconfig}",
        *flags,
        "--leader-elect=false",
        "--enable-webhook=false",
        f"--metrics-bind-address=127.0.0.1:{metrics_port or free_port()}",
        f"--health-probe-bind-address=127.0.0.1:{health}",
    ]
    process = runner.start_command(argv, identity=identity, name="controller", env=env)
    wait_until(
        lambda: http_status(f"http://127.0.0.1:{health}/readyz") == 200,
        timeout=90,
        what="controller /readyz",
        process=process,
    )
    return process


def start_daemon(
    supervisor: ProcessSupervisor, name: str, argv: Sequence[str], *, cwd: Path
) -> tuple[ManagedProcess, int]:
    """A local daemon (``python -m <argv> --port <free port>``), once its port accepts.

    Args:
        supervisor: Starts and later stops the process.
        name: The process's name (for restarts and logs).
        argv: The module and its arguments after ``python -m``.
        cwd: Working directory.

    Returns:
        The process and its port.
    """
    port = free_port()
    process = supervisor.start(name, [sys.executable, "-m", *argv, "--port", str(port)], cwd=cwd)
    wait_until(lambda: accepts(port), timeout=60, what=name, process=process)
    return process, port


def warm_template(
    name: str,
    *,
    template_spec: Mapping[str, Any],
    replicas: int = 1,
    namespace: str | None = None,
) -> list[dict[str, Any]]:
    """A SandboxTemplate and a SandboxWarmPool of ``replicas`` members, both called ``name``.

    Args:
        name: Name of both objects (the E2B template id).
        template_spec: The SandboxTemplate's spec.
        replicas: Warm members.
        namespace: Namespace in the objects' metadata; none (apply sets it) if None.

    Returns:
        The two objects.
    """
    metadata: dict[str, str] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    return [
        {
            "apiVersion": c.EXTENSIONS_API_VERSION,
            "kind": c.KIND_SANDBOX_TEMPLATE,
            "metadata": dict(metadata),
            "spec": dict(template_spec),
        },
        {
            "apiVersion": c.EXTENSIONS_API_VERSION,
            "kind": c.KIND_SANDBOX_WARM_POOL,
            "metadata": dict(metadata),
            "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": name}},
        },
    ]


def kwok_template_spec(image: str) -> dict[str, Any]:
    """A SandboxTemplate spec of one container ``sandbox`` (kwok runs nothing of it)."""
    return {"podTemplate": {"spec": {"containers": [{"name": "sandbox", "image": image}]}}}


def wait_warm_pool_ready(
    cluster: ClusterAccess,
    name: str,
    *,
    namespace: str,
    replicas: int = 1,
    timeout: float = 90,
    what: str = "a Ready warm member",
) -> None:
    """Wait until the SandboxWarmPool ``name`` reports ``replicas`` ready members.

    Raises:
        WaitTimeoutError: If it does not within ``timeout`` seconds.
    """
    wait_for_object(
        cluster.api_client(),
        ObjectRef(c.EXTENSIONS_API_VERSION, c.KIND_SANDBOX_WARM_POOL, name, namespace),
        lambda o: int((o.get("status") or {}).get("readyReplicas") or 0) >= replicas,
        timeout=timeout,
        what=what,
    )
