"""The runner's local environments: a cluster of the project's harness plus a controller.

Only the runner uses this module (the tests never do): it needs the project's test harness
(``kube-agent-sandbox-testing``) and a repository checkout for the CRDs and RBAC manifests.

- kwok profiles (core, extensions): the local cluster with kwok nodes; the controller runs as a
  local process under a ServiceAccount bound to the generated ClusterRoles, so the run also
  proves the RBAC is enough. The conversion webhook gets a certificate for ``127.0.0.1`` made
  here, and the CRDs point at ``https://127.0.0.1:<port>/convert`` (the local apiserver runs on
  the host and cannot reach a Service).
- real-node profile: the local control plane with a real node and our controller deployed into
  it with ``kubectl apply -k`` (as the e2e suite does), so the webhook is reached through its
  Service like in any cluster.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from kube_agent_sandbox.conformance.client import ApiError, Kube, load_api_client
from kube_agent_sandbox.conformance.target import Target
from kube_agent_sandbox.testing.access import ClusterAccess, load_manifests
from kube_agent_sandbox.testing.cluster import LocalCluster
from kube_agent_sandbox.testing.clusteroptions import LocalClusterOptions
from kube_agent_sandbox.testing.controller_runner import ControllerRunner
from kube_agent_sandbox.testing.pki import CertificateAuthority
from kube_agent_sandbox.testing.probes import free_port
from kube_agent_sandbox.testing.processes import ManagedProcess

_log = logging.getLogger(__name__)

CONTROLLER_NAMESPACE = "agent-sandbox-system"
CONTROLLER_SA = "agent-sandbox-controller"
CORE_ROLE = "agent-sandbox-controller"
EXTENSIONS_ROLE = "agent-sandbox-controller-extensions"
CRD_NAMES = (
    "sandboxes.agents.x-k8s.io",
    "sandboxtemplates.extensions.agents.x-k8s.io",
    "sandboxwarmpools.extensions.agents.x-k8s.io",
    "sandboxclaims.extensions.agents.x-k8s.io",
)
KUSTOMIZATION = "manifests/overlays/extensions"
START_TIMEOUT = 90.0


def repo_root(start: Path | None = None) -> Path:
    """The checkout holding ``manifests/crds`` (searched upwards from ``start`` or the cwd).

    Raises:
        FileNotFoundError: Outside a checkout.
    """
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if any((folder / "manifests" / "crds").glob("*.yaml")):
            return folder
    raise FileNotFoundError(
        f"no manifests/crds above {here}: run from the repository or pass --kubeconfig"
    )


@contextlib.contextmanager
def environment(
    profiles: Sequence[str], *, controller_cmd: Sequence[str] | None
) -> Iterator[Target]:
    """Start what the profiles need; stop it all afterwards.

    Args:
        profiles: Profiles to run (``core``, ``extensions``, ``real-node``).
        controller_cmd: A controller command line to run instead of ours (kwok profiles).

    Yields:
        The target for the suite.

    Raises:
        ValueError: If the real-node profile is mixed with others or given a controller command.
    """
    root = repo_root()
    if "real-node" in profiles:
        if len(profiles) > 1 or controller_cmd:
            raise ValueError(
                "the real-node profile runs alone against our deployed controller "
                "(run it separately, without --controller-cmd)"
            )
        with real_node_environment(root) as target:
            yield target
        return
    with kwok_environment(
        root, extensions="extensions" in profiles, controller_cmd=controller_cmd
    ) as target:
        yield target


@contextlib.contextmanager
def kwok_environment(
    root: Path, *, extensions: bool, controller_cmd: Sequence[str] | None
) -> Iterator[Target]:
    """The local kwok cluster with a controller process (ours unless ``controller_cmd``)."""
    workdir = Path(tempfile.mkdtemp(prefix="agent-sandbox-conformance-"))
    cluster = LocalCluster(LocalClusterOptions(nodes=2, crds=[root / "manifests" / "crds"]))
    try:
        access = cluster.start()
        _log.info("local cluster up (KUBECONFIG=%s)", access.kubeconfig)
        runner = ControllerRunner(access, workdir / "controller")
        try:
            cert_dir, ca_pem = _webhook_certificates(workdir / "webhook")
            port = free_port()
            process, implementation = _start_controller(
                runner,
                root,
                extensions=extensions,
                controller_cmd=controller_cmd,
                cert_dir=cert_dir,
                webhook_port=port,
            )
            _point_crds_at(access, url=f"https://127.0.0.1:{port}/convert", ca_pem=ca_pem)
            _wait_converting(access, process)
            yield Target(kubeconfig=access.kubeconfig, implementation=implementation)
            if not process.alive():
                _log.error("the controller exited during the run:\n%s", process.log_tail())
        finally:
            runner.close()
    finally:
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _webhook_certificates(directory: Path) -> tuple[Path, bytes]:
    """A CA and a serving certificate for ``127.0.0.1`` as ``tls.crt``/``tls.key``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority("agent-sandbox-conformance-webhook-ca")
    serving = ca.issue_serving("127.0.0.1", dns_names=["localhost"], ip_addresses=["127.0.0.1"])
    (directory / "tls.crt").write_bytes(serving.cert_pem)
    (directory / "tls.key").write_bytes(serving.key_pem)
    return directory, ca.key_pair.cert_pem


def _start_controller(
    runner: ControllerRunner,
    root: Path,
    *,
    extensions: bool,
    controller_cmd: Sequence[str] | None,
    cert_dir: Path,
    webhook_port: int,
) -> tuple[ManagedProcess, str]:
    """Start the controller process as its ServiceAccount; return it and its description."""
    rbac = root / "manifests" / "rbac"
    identity = runner.identity(
        CONTROLLER_SA,
        namespace=CONTROLLER_NAMESPACE,
        cluster_roles=[CORE_ROLE, EXTENSIONS_ROLE],
        roles=[CORE_ROLE],
        rbac=[
            manifest
            for name in (
                "role.generated.yaml",
                "extensions/role.generated.yaml",
                "webhook-secret-role.generated.yaml",
            )
            for manifest in load_manifests(rbac / name)
        ],
    )
    values = {
        "{kubeconfig}": str(identity.kubeconfig),
        "{webhook_port}": str(webhook_port),
        "{cert_dir}": str(cert_dir),
    }
    if controller_cmd:
        argv = [_substitute(arg, values) for arg in controller_cmd]
        implementation = " ".join(controller_cmd)
    else:
        argv = [
            _controller_binary(),
            f"--kubeconfig={identity.kubeconfig}",
            "--leader-elect=false",
            f"--metrics-bind-address=127.0.0.1:{free_port()}",
            f"--health-probe-bind-address=127.0.0.1:{free_port()}",
            "--manage-webhook-certs=false",
            f"--webhook-cert-dir={cert_dir}",
            f"--webhook-port={webhook_port}",
            *(["--extensions"] if extensions else []),
        ]
        implementation = "agent-sandbox-controller (this checkout)" + (
            " --extensions" if extensions else ""
        )
    _log.info("starting controller: %s", " ".join(argv))
    process = runner.start_command(argv, identity=identity, name="controller")
    return process, implementation


def _substitute(arg: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        arg = arg.replace(key, value)
    return arg


def _controller_binary() -> str:
    beside = Path(sys.executable).parent / "agent-sandbox-controller"
    found = shutil.which("agent-sandbox-controller") or (str(beside) if beside.exists() else None)
    if found is None:
        raise FileNotFoundError("agent-sandbox-controller is not installed (uv sync)")
    return found


def _point_crds_at(access: ClusterAccess, *, url: str, ca_pem: bytes) -> None:
    """Point the four CRDs' conversion webhooks at ``url``, trusting ``ca_pem``."""
    kube = Kube(load_api_client(access.kubeconfig))
    try:
        bundle = base64.b64encode(ca_pem).decode()
        for name in CRD_NAMES:
            kube.patch(
                "apiextensions.k8s.io/v1",
                "CustomResourceDefinition",
                name,
                None,
                {
                    "spec": {
                        "conversion": {
                            "strategy": "Webhook",
                            "webhook": {
                                "conversionReviewVersions": ["v1", "v1beta1"],
                                "clientConfig": {"url": url, "caBundle": bundle, "service": None},
                            },
                        }
                    }
                },
            )
    finally:
        kube.close()


def _wait_converting(access: ClusterAccess, process: ManagedProcess) -> None:
    """Wait until a v1beta1 object reads back through v1alpha1 (the webhook answers).

    Raises:
        RuntimeError: If the controller exits or conversion does not work in time.
    """
    kube = Kube(load_api_client(access.kubeconfig))
    probe_ns = f"conformance-probe-{int(time.time())}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": probe_ns}})
    probe = {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxTemplate",
        "metadata": {"name": "probe", "namespace": probe_ns},
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "c", "image": "probe"}]}}},
    }
    try:
        kube.create(probe)
        deadline = time.monotonic() + START_TIMEOUT
        last: Exception | None = None
        while time.monotonic() < deadline:
            if not process.alive():
                raise RuntimeError(f"the controller exited while starting:\n{process.log_tail()}")
            try:
                for kind in ("SandboxTemplate",):
                    kube.get("extensions.agents.x-k8s.io/v1alpha1", kind, "probe", probe_ns)
                _log.info("conversion webhook answers")
                return
            except ApiError as err:
                last = err
                time.sleep(0.3)
        raise RuntimeError(f"conversion through the webhook never worked: {last}")
    finally:
        kube.delete("v1", "Namespace", probe_ns)
        kube.close()


@contextlib.contextmanager
def real_node_environment(root: Path) -> Iterator[Target]:
    """The real-node cluster with our controller deployed in it (needs root and the node)."""
    from kube_agent_sandbox.testing.node.cluster import (
        RealNodeCluster,
        RealNodeClusterOptions,
        deploy_controller,
    )
    from kube_agent_sandbox.testing.node.prerequisites import missing_prerequisites

    reasons = missing_prerequisites()
    if reasons:
        raise RuntimeError("real node unavailable: " + "; ".join(reasons))
    cluster = RealNodeCluster(RealNodeClusterOptions(crds=[root / "manifests" / "crds"]))
    try:
        access = cluster.start()
        deployed = deploy_controller(
            access, cluster.node, repo_root=root, kustomization=KUSTOMIZATION
        )
        image = cluster.node.python_image
        if image is None:
            raise RuntimeError("the real node has no Python image")
        yield Target(
            kubeconfig=access.kubeconfig,
            implementation=f"agent-sandbox-controller deployed ({deployed.manifest_image})",
            image=image.reference,
        )
    finally:
        cluster.stop()
