"""e2e suite: the controller deployed into a local cluster with a real node, as users run it.

The session starts the local control plane plus a real node (kubelet, containerd, runc, CNI
bridge, kube-proxy), builds the controller image from this checkout without Docker, deploys it
with ``kubectl apply -k manifests/overlays/extensions`` (the core install plus ``--extensions``,
so templates, warm pools and claims are served) and hands the cluster to the project's pytest
plugin by overriding its session cluster fixture, so ``cluster`` and ``namespace`` work as
everywhere.
Missing prerequisites skip locally and fail under ``CI=true`` (``plugin.unavailable``).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kube_agent_sandbox.controller import rbac
from kube_agent_sandbox.extensions.snapshot import rbacgen
from kube_agent_sandbox.extensions.snapshot.checkpoint import KubeletCheckpointer, ssl_context
from kube_agent_sandbox.testing import versions
from kube_agent_sandbox.testing.access import ClusterAccess, load_manifests
from kube_agent_sandbox.testing.node.cluster import (
    DeployedController,
    RealNodeCluster,
    RealNodeClusterOptions,
    deploy_controller,
)
from kube_agent_sandbox.testing.node.realnode import (
    RealNode,
    RealNodeOptions,
    missing_prerequisites,
)
from kube_agent_sandbox.testing.plugin import provider_options, unavailable
from kube_agent_sandbox.testing.providers import ProvidedCluster
from kube_agent_sandbox.testing.registry import RegistryOptions

_log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[1]
CRDS = REPO_ROOT / "manifests" / "crds"
KUSTOMIZATION = "manifests/overlays/extensions"
_LOG_LINES = 60
_ENVIRONMENT = pytest.StashKey["RealNodeEnvironment"]()


@dataclass
class RealNodeEnvironment:
    """The running real-node cluster with the controller deployed in it."""

    cluster: RealNodeCluster
    controller: DeployedController
    python_image: str

    @property
    def node(self) -> RealNode:
        """The real node."""
        return self.cluster.node


def _node_options() -> RealNodeOptions:
    """The node's options: with AGENT_SANDBOX_E2E_CHECKPOINT=1, containerd 2.3 and CRIU 4.2
    from the test cache (``build --with-containerd2 --with-criu``), for the memory snapshot."""
    if os.environ.get("AGENT_SANDBOX_E2E_CHECKPOINT") != "1":
        return RealNodeOptions()
    containerd, criu = versions.containerd2_bin_dir(), versions.criu_bin_dir()
    missing = [str(p) for p in (containerd / "containerd", criu / "criu") if not p.is_file()]
    if missing:
        unavailable(
            f"AGENT_SANDBOX_E2E_CHECKPOINT=1 but {', '.join(missing)} missing: run "
            "python -m kube_agent_sandbox.testing.build --with-containerd2 --with-criu"
        )
    return RealNodeOptions(containerd_bin_dir=containerd, criu_bin_dir=criu)


@pytest.fixture(scope="session")
def real_node_environment(request: pytest.FixtureRequest) -> Iterator[RealNodeEnvironment]:
    """Start the real-node cluster and deploy the controller (once per session)."""
    provider, _ = provider_options(request.config)
    if provider != "local":
        unavailable(f"the e2e suite runs on the local provider's real node, not {provider!r}")
    reasons = missing_prerequisites()
    if reasons:
        unavailable("real node unavailable: " + "; ".join(reasons))
    if not any(CRDS.glob("*.yaml")):
        unavailable(f"no CRDs in {CRDS}: run `nox -s generate`")
    # The snapshot test pushes to and pulls from a real registry (TLS with credentials).
    cluster = RealNodeCluster(
        RealNodeClusterOptions(crds=[CRDS], registry=RegistryOptions(), node=_node_options())
    )
    try:
        access = cluster.start()
        controller = deploy_controller(
            access, cluster.node, repo_root=REPO_ROOT, kustomization=KUSTOMIZATION
        )
        assert cluster.node.python_image is not None
        environment = RealNodeEnvironment(
            cluster=cluster,
            controller=controller,
            python_image=cluster.node.python_image.reference,
        )
        _log.info("real-node cluster %s, controller %s", cluster.timings, controller.timings)
        request.config.stash[_ENVIRONMENT] = environment
        yield environment
    finally:
        if _ENVIRONMENT in request.config.stash:
            del request.config.stash[_ENVIRONMENT]
        cluster.stop()


@pytest.fixture(scope="session")
def _provided_cluster(real_node_environment: RealNodeEnvironment) -> ProvidedCluster:
    """The plugin's session cluster, replaced by the real-node cluster for this suite."""
    cluster = real_node_environment.cluster
    assert cluster.access is not None
    return ProvidedCluster(
        access=cluster.access,
        stop=lambda: None,  # the environment fixture stops it
        local=cluster.local,
        crd_names=[
            str(doc["metadata"]["name"])
            for doc in load_manifests(CRDS)
            if doc.get("kind") == "CustomResourceDefinition"
        ],
    )


@pytest.fixture
def python_image(real_node_environment: RealNodeEnvironment) -> str:
    """Reference of the Python image present on the node (no registry needed)."""
    return real_node_environment.python_image


@pytest.fixture
def kubelet_checkpointer(
    cluster: ClusterAccess,
    namespace: str,
    real_node_environment: RealNodeEnvironment,
    tmp_path: Path,
) -> KubeletCheckpointer:
    """The node's kubelet checkpoint API as the node agent calls it: with the token of a
    ServiceAccount bound only to the node agent's generated ClusterRole (so its one grant,
    create on ``nodes/checkpoint``, is what lets it). Unavailable without containerd 2.3 and
    CRIU on the node (``AGENT_SANDBOX_E2E_CHECKPOINT=1``, as ``nox -s e2e`` sets)."""
    node = real_node_environment.node
    if node.options.criu_bin_dir is None:
        unavailable("the node runs without containerd 2.3 and CRIU: AGENT_SANDBOX_E2E_CHECKPOINT=1")
    node_obj = cluster.kubectl("get", "node", node.options.node_name, "-o", "json").stdout
    status = json.loads(node_obj)["status"]
    address = next(a["address"] for a in status["addresses"] if a["type"] == "InternalIP")
    port = status["daemonEndpoints"]["kubeletEndpoint"]["Port"]
    return KubeletCheckpointer(
        f"https://{address}:{port}",
        node=node.options.node_name,
        token_file=_node_agent_token(cluster, namespace, tmp_path),
        context=ssl_context("", insecure=True),
    )


def _node_agent_token(cluster: ClusterAccess, namespace: str, tmp_path: Path) -> Path:
    """A token of a ServiceAccount bound only to the node agent's generated ClusterRole."""
    role = f"snapshotter-{namespace}"
    rules = [r.to_dict() for r in rbac.normalize_rules(rbacgen.RBAC_RULES)]
    cluster.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": rules,
        }
    )
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "snapshotter", "namespace": namespace},
        }
    )
    cluster.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"kind": "ServiceAccount", "name": "snapshotter", "namespace": namespace}],
        }
    )
    token = cluster.kubectl("-n", namespace, "create", "token", "snapshotter").stdout.strip()
    path = tmp_path / "token"
    path.write_text(token)
    return path


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the control plane's, the node's and the controller's logs to a failing test."""
    report = yield
    environment = item.config.stash.get(_ENVIRONMENT, None)
    if report.failed and environment is not None and environment.cluster.access is not None:
        access = environment.cluster.access
        for name, tail in access.log_tails(_LOG_LINES).items():
            report.sections.append((f"cluster log: {name} (last {_LOG_LINES} lines)", tail))
        logs = access.kubectl(
            "-n",
            "agent-sandbox-system",
            "logs",
            "deployment/agent-sandbox-controller",
            f"--tail={_LOG_LINES}",
            check=False,
        )
        report.sections.append(("controller log", logs.stdout + logs.stderr))
    return report
