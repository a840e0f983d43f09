"""The local cluster in its real-node mode, and the controller deployed into it as users do.

:class:`RealNodeCluster` is the local control plane (``LocalCluster``, no kwok nodes) plus one
:class:`~kube_agent_sandbox.testing.node.realnode.RealNode`. :func:`deploy_controller` builds
the controller image from the repository's sources, imports it under the name the manifests
use, runs ``kubectl apply -k manifests/`` and waits for the Deployment to be available.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kube_agent_sandbox.testing.access import ClusterAccess, KubectlError
from kube_agent_sandbox.testing.cluster import LocalCluster
from kube_agent_sandbox.testing.clusteroptions import LocalClusterOptions
from kube_agent_sandbox.testing.images.catalog import BuiltImage
from kube_agent_sandbox.testing.images.controller import controller_image
from kube_agent_sandbox.testing.lifecycle import ClusterLifecycle
from kube_agent_sandbox.testing.node.realnode import RealNode, RealNodeOptions
from kube_agent_sandbox.testing.registry import RegistryOptions

_log = logging.getLogger(__name__)

CONTROLLER_NAMESPACE = "agent-sandbox-system"
CONTROLLER_DEPLOYMENT = "agent-sandbox-controller"


@dataclass
class RealNodeClusterOptions:
    """How to run the real-node cluster."""

    #: CRD manifests installed before the controller manager starts.
    crds: Sequence[Path] = ()
    #: The node's settings.
    node: RealNodeOptions = field(default_factory=RealNodeOptions)
    #: Work folder of the control plane (temporary when None).
    workdir: Path | None = None
    #: Seconds for each control-plane component to become ready.
    start_timeout: float = 60.0
    #: Run an OCI registry on loopback that the node's containerd pulls from (None: none).
    registry: RegistryOptions | None = None


class RealNodeCluster(ClusterLifecycle):
    """Control plane + real node, as a context manager: ``with RealNodeCluster() as access:``."""

    def __init__(self, options: RealNodeClusterOptions | None = None) -> None:
        """Prepare (but do not start) the cluster.

        Args:
            options: How to run it; defaults when None.
        """
        self.options = options or RealNodeClusterOptions()
        self.node = RealNode(self.options.node)
        self.local: LocalCluster | None = None
        self.access: ClusterAccess | None = None
        self.timings: dict[str, float] = {}

    def start(self) -> ClusterAccess:
        """Prepare the node, start the control plane, join the node; return the access.

        Returns:
            Access to the running cluster (node logs included in its log files).
        """
        begin = time.monotonic()
        try:
            self.node.prepare()
            self.timings["node-prepare"] = time.monotonic() - begin
            self.local = LocalCluster(
                LocalClusterOptions(
                    nodes=0,
                    crds=self.options.crds,
                    workdir=self.options.workdir,
                    start_timeout=self.options.start_timeout,
                    apiserver_args=self.node.apiserver_args(),
                    registry=self.options.registry,
                )
            )
            started = time.monotonic()
            access = self.local.start()
            self.timings["control-plane"] = time.monotonic() - started
            if self.local.registry is not None:
                self.node.trust_registry(self.local.registry)
            started = time.monotonic()
            self.node.start(self.local)
            self.timings["node-join"] = time.monotonic() - started
        except BaseException:
            self.stop()
            raise
        self.access = access
        self.timings["total"] = time.monotonic() - begin
        return access

    def stop(self) -> None:
        """Stop the node first (its pods need the apiserver to end cleanly), then the rest."""
        try:
            self.node.stop()
        finally:
            if self.local is not None:
                self.local.stop()
                self.local = None
            self.access = None


def normalize_image_reference(image: str) -> str:
    """The full reference the container runtime resolves a Pod's ``image`` to.

    Args:
        image: An image as written in a manifest, e.g. ``name:tag``.

    Returns:
        The reference with registry and tag, e.g. ``docker.io/library/name:tag``.

    Raises:
        ValueError: If the image is empty.
    """
    if not image:
        raise ValueError("empty image reference")
    name, at, digest = image.partition("@")
    first, slash, _ = name.partition("/")
    has_domain = bool(slash) and ("." in first or ":" in first or first == "localhost")
    if not has_domain:
        name = f"docker.io/{name}" if slash else f"docker.io/library/{name}"
    if not at and ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    return f"{name}{at}{digest}"


def manifest_controller_image(access: ClusterAccess, manifests: Path) -> str:
    """The controller image that ``kubectl apply -k <manifests>`` would deploy.

    Args:
        access: Any cluster access (kubectl renders the kustomization locally).
        manifests: The kustomization folder.

    Returns:
        The Deployment's controller container image.

    Raises:
        ValueError: If the kustomization holds no controller Deployment.
    """
    rendered = access.kubectl("kustomize", str(manifests)).stdout
    for document in yaml.safe_load_all(rendered):
        if not document or document.get("kind") != "Deployment":
            continue
        if document["metadata"]["name"] != CONTROLLER_DEPLOYMENT:
            continue
        containers = document["spec"]["template"]["spec"]["containers"]
        return str(containers[0]["image"])
    raise ValueError(f"no Deployment {CONTROLLER_DEPLOYMENT} in {manifests}")


@dataclass(frozen=True)
class DeployedController:
    """What :func:`deploy_controller` did, with its timings."""

    image: BuiltImage
    manifest_image: str
    timings: dict[str, float]


def deploy_controller(
    access: ClusterAccess,
    node: RealNode,
    *,
    repo_root: Path,
    kustomization: str = "manifests",
    timeout: float = 180.0,
) -> DeployedController:
    """Build and import the controller image, ``kubectl apply -k manifests/``, wait until ready.

    Args:
        access: The real-node cluster.
        node: Its node (the image is imported into its containerd).
        repo_root: The repository root (sources of the wheels, ``manifests/``).
        kustomization: The kustomization to apply, relative to ``repo_root``:
            ``manifests`` (core) or ``manifests/overlays/extensions`` (with ``--extensions``).
        timeout: Seconds for the Deployment to become available.

    Returns:
        The image and timings.

    Raises:
        KubectlError: If applying fails or the rollout does not finish in time (the
            controller's logs are in the message).
    """
    timings: dict[str, float] = {}
    manifests = repo_root / kustomization
    started = time.monotonic()
    image = controller_image(repo_root)
    timings["image-build"] = time.monotonic() - started
    wanted = manifest_controller_image(access, manifests)
    started = time.monotonic()
    node.import_image(image, also_as=[normalize_image_reference(wanted)])
    timings["image-import"] = time.monotonic() - started
    started = time.monotonic()
    # Exactly what the docs tell users to run. The largest CRD is ~136 KB of JSON, within the
    # 256 KiB that client-side apply's last-applied annotation allows.
    access.kubectl("apply", "-k", str(manifests), timeout=timeout)
    timings["apply"] = time.monotonic() - started
    started = time.monotonic()
    result = access.kubectl(
        "-n",
        CONTROLLER_NAMESPACE,
        "rollout",
        "status",
        f"deployment/{CONTROLLER_DEPLOYMENT}",
        f"--timeout={int(timeout)}s",
        check=False,
        timeout=timeout + 30,
    )
    if result.returncode != 0:
        logs = access.kubectl(
            "-n",
            CONTROLLER_NAMESPACE,
            "logs",
            f"deployment/{CONTROLLER_DEPLOYMENT}",
            "--tail=60",
            check=False,
        )
        pods = access.kubectl(
            "-n", CONTROLLER_NAMESPACE, "get", "pods", "-o", "json", check=False
        ).stdout
        raise KubectlError(
            ["rollout", "status"],
            result.returncode,
            f"{result.stderr}\ncontroller logs:\n{logs.stdout}{logs.stderr}\n"
            f"pods: {_pod_summary(pods)}",
        )
    timings["rollout"] = time.monotonic() - started
    _log.info("controller %s deployed (%s)", wanted, timings)
    return DeployedController(image=image, manifest_image=wanted, timings=timings)


def _pod_summary(pods_json: str) -> str:
    try:
        items: list[dict[str, Any]] = json.loads(pods_json).get("items", [])
    except ValueError:
        return pods_json[:500]
    return "; ".join(
        f"{p['metadata']['name']}: {json.dumps(p.get('status', {}).get('containerStatuses'))}"
        for p in items
    )
