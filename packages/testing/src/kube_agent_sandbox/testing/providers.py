"""Where the test cluster comes from: ``local`` (default), ``kind`` or ``existing``.

- ``local``: :class:`~kube_agent_sandbox.testing.cluster.LocalCluster`, built from Go modules;
  works without Docker or a registry.
- ``kind``: a kind cluster through pytest-kind (``pip install kube-agent-sandbox-testing[kind]``),
  for machines with Docker. kind and kubectl binaries can be given as paths, since pytest-kind
  otherwise downloads them.
- ``existing``: whatever ``KUBECONFIG`` (or ``~/.kube/config``) points at; nothing is started.

Each provider returns a started :class:`ProvidedCluster`; ``stop()`` releases what it started.
"""

from __future__ import annotations

import inspect
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kube_agent_sandbox.testing.access import ClusterAccess, find_kubectl, load_crds
from kube_agent_sandbox.testing.cluster import LocalCluster
from kube_agent_sandbox.testing.clusteroptions import LocalClusterOptions
from kube_agent_sandbox.testing.prerequisites import PrerequisiteError
from kube_agent_sandbox.testing.registry import RegistryOptions

PROVIDERS = ("local", "kind", "existing")
PROVIDER_ENV = "AGENT_SANDBOX_CLUSTER_PROVIDER"


@dataclass
class ProviderOptions:
    """Settings shared by the providers (from pytest options or the environment)."""

    #: CRD files or directories to install at start.
    crds: Sequence[Path] = ()
    #: kwok nodes of the local cluster.
    nodes: int = 2
    #: Work directory of the local cluster (kept when given).
    workdir: Path | None = None
    #: kind: cluster name, binaries, keep the cluster after the run.
    kind_name: str = "agent-sandbox"
    kind_bin: Path | None = None
    kind_kubectl_bin: Path | None = None
    kind_image: str | None = None
    keep_cluster: bool = False
    #: existing: kubeconfig path (``KUBECONFIG`` or ``~/.kube/config`` when None).
    kubeconfig: Path | None = None
    #: local: also run an OCI registry on loopback (None: none).
    registry: RegistryOptions | None = None
    #: local: kwok serves pod logs from files (see ``testing.podlogs``).
    pod_logs: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ProvidedCluster:
    """A started cluster and how to release it."""

    access: ClusterAccess
    stop: Callable[[], None]
    #: The LocalCluster, for the local provider (timings, pids, client certificates).
    local: LocalCluster | None = None
    #: CRD names installed at start.
    crd_names: list[str] = field(default_factory=list)


def start_cluster(provider: str, options: ProviderOptions) -> ProvidedCluster:
    """Start (or connect to) a cluster and install the CRDs.

    Args:
        provider: One of :data:`PROVIDERS`.
        options: Provider settings.

    Returns:
        The started cluster.

    Raises:
        ValueError: If the provider is unknown.
        PrerequisiteError: If something the provider needs is missing.
    """
    if provider == "local":
        return _start_local(options)
    if provider == "kind":
        return _start_kind(options)
    if provider == "existing":
        return _start_existing(options)
    raise ValueError(f"unknown cluster provider {provider!r}; choose one of {', '.join(PROVIDERS)}")


def _crd_documents(options: ProviderOptions) -> list[dict[str, Any]]:
    return [doc for source in options.crds for doc in load_crds(source)]


#: ``real`` runs the local provider's pods on a real node (kubelet + containerd) instead of kwok.
LOCAL_NODE_ENV = "AGENT_SANDBOX_LOCAL_NODE"


def _start_local(options: ProviderOptions) -> ProvidedCluster:
    if os.environ.get(LOCAL_NODE_ENV, "kwok").strip() == "real":
        return _start_local_real_node(options)
    crds = _crd_documents(options)
    local = LocalCluster(
        LocalClusterOptions(
            nodes=options.nodes,
            crds=list(options.crds),
            workdir=options.workdir,
            keep_workdir=options.workdir is not None,
            registry=options.registry,
            pod_logs=options.pod_logs,
        )
    )
    access = local.start()
    names = [str(c["metadata"]["name"]) for c in crds]
    return ProvidedCluster(access=access, stop=local.stop, local=local, crd_names=names)


def _start_local_real_node(options: ProviderOptions) -> ProvidedCluster:
    """The local control plane with one real node (see ``testing.node``), no kwok nodes."""
    from kube_agent_sandbox.testing.node.cluster import RealNodeCluster, RealNodeClusterOptions
    from kube_agent_sandbox.testing.node.prerequisites import missing_prerequisites

    reasons = missing_prerequisites()
    if reasons:
        raise PrerequisiteError("real node unavailable: " + "; ".join(reasons))
    crds = _crd_documents(options)
    cluster = RealNodeCluster(
        RealNodeClusterOptions(
            crds=list(options.crds), workdir=options.workdir, registry=options.registry
        )
    )
    access = cluster.start()
    names = [str(c["metadata"]["name"]) for c in crds]
    return ProvidedCluster(access=access, stop=cluster.stop, local=cluster.local, crd_names=names)


def _start_existing(options: ProviderOptions) -> ProvidedCluster:
    kubeconfig = options.kubeconfig
    if kubeconfig is None:
        env = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
        kubeconfig = Path(env) if env else Path.home() / ".kube" / "config"
    if not kubeconfig.is_file():
        raise PrerequisiteError(f"provider 'existing' needs a kubeconfig; {kubeconfig} not found")
    if find_kubectl() is None:
        raise PrerequisiteError("provider 'existing' needs kubectl (nox -s testenv, or on PATH)")
    access = ClusterAccess(kubeconfig, provider="existing")
    crds = _crd_documents(options)
    names = access.install_crds(crds) if crds else []
    return ProvidedCluster(access=access, stop=access.close, crd_names=names)


def _start_kind(options: ProviderOptions) -> ProvidedCluster:
    try:
        from pytest_kind import KindCluster  # type: ignore[import-not-found,unused-ignore]
    except ImportError as err:
        raise PrerequisiteError(
            "provider 'kind' needs pytest-kind: pip install 'kube-agent-sandbox-testing[kind]'"
        ) from err
    if shutil.which("docker") is None and shutil.which("podman") is None:
        raise PrerequisiteError("provider 'kind' needs a container engine (docker or podman)")
    on_path = shutil.which("kind")
    kubectl = options.kind_kubectl_bin or find_kubectl()
    wanted: dict[str, Any] = {
        # Without a local kind, pytest-kind downloads one (needs GitHub access).
        "kind_path": options.kind_bin or (Path(on_path) if on_path else None),
        "kubectl_path": kubectl,
        "image": options.kind_image,
    }
    accepted = inspect.signature(KindCluster).parameters
    kwargs = {k: v for k, v in wanted.items() if v is not None and k in accepted}
    dropped = sorted(k for k, v in wanted.items() if v is not None and k not in accepted)
    if dropped:
        raise PrerequisiteError(
            f"this pytest-kind does not accept {', '.join(dropped)}; upgrade pytest-kind"
        )
    kind = KindCluster(options.kind_name, **kwargs)
    kind.create()
    access = ClusterAccess(Path(kind.kubeconfig_path), provider="kind", kubectl=kubectl)

    def stop() -> None:
        access.close()
        if not options.keep_cluster:
            kind.delete()

    try:
        crds = _crd_documents(options)
        names = access.install_crds(crds) if crds else []
    except BaseException:
        stop()
        raise
    return ProvidedCluster(access=access, stop=stop, crd_names=names)
