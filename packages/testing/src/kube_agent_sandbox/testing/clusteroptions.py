"""How to run the local cluster (:class:`LocalClusterOptions`).

Kept apart from :mod:`~kube_agent_sandbox.testing.cluster` so that the options (and their
check of ``apiserver_args``) can be built and tested without the cluster's machinery.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kube_agent_sandbox.testing import versions
from kube_agent_sandbox.testing.flags import check_flags
from kube_agent_sandbox.testing.registry import RegistryOptions


@dataclass
class LocalClusterOptions:
    """How to run the local cluster."""

    #: Directory of the built binaries.
    bin_dir: Path = field(default_factory=versions.bin_dir)
    #: Number of kwok nodes (0 for none).
    nodes: int = 2
    #: CRD manifests (files or directories) installed before the controller manager starts.
    crds: Sequence[Path] = ()
    #: Start only etcd and kube-apiserver (enough for admission/validation tests).
    control_plane_only: bool = False
    #: Work directory for certificates, kubeconfigs and logs; a new temporary one when None.
    workdir: Path | None = None
    #: Keep the work directory after stop (it is removed otherwise when it was temporary).
    keep_workdir: bool = False
    #: Seconds for each component to become ready.
    start_timeout: float = 60.0
    #: kwok's Stage directory (``kustomize/stage`` of its module); looked up via Go when None.
    kwok_stage_root: Path | None = None
    #: Extra kube-apiserver flags (``--name=value`` or ``--name``), merged by name with the
    #: harness's: a flag given here replaces the harness's flag of the same name (in its place),
    #: a later one here replaces an earlier one, and the command line names each flag once.
    apiserver_args: Sequence[str] = ()
    #: Also run an OCI registry on loopback (TLS or plain HTTP, with or without credentials);
    #: None runs none. The running one is :attr:`LocalCluster.registry`.
    registry: RegistryOptions | None = None
    #: kwok serves pod logs (``kubectl logs``, ``pods/log``) from files named by kwok's
    #: ``Logs``/``ClusterLogs`` objects (see :mod:`~kube_agent_sandbox.testing.podlogs`);
    #: without it every log request fails, as no kwok node serves any.
    pod_logs: bool = False

    def __post_init__(self) -> None:
        """Refuse malformed ``apiserver_args`` before anything starts.

        Raises:
            TypeError: If ``apiserver_args`` is a single string.
            ValueError: If an element is not a ``--name[=value]`` flag.
        """
        check_flags(self.apiserver_args, what="apiserver_args")
