"""kwok, the simulated nodes of the local cluster: its Stage files and the Nodes it manages.

kwok plays the kubelet of every fake node (pods become Running and Ready); which nodes it
manages is chosen by :data:`KWOK_NODE_ANNOTATION`. Kept apart from
:mod:`~kube_agent_sandbox.testing.cluster`: none of it needs a running cluster.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kube_agent_sandbox.testing.prerequisites import PrerequisiteError

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_LABEL = "type"
KWOK_NODE_LABEL_VALUE = "kwok"
#: kwok's stock "fast" stage set: nodes initialise at once, keep a lease, pods turn Ready.
KWOK_STAGE_SET = "fast"
#: kwok's resources that point a pod's containers at log files on this host (kwok.x-k8s.io):
#: ``Logs`` for one pod (named after it, in its namespace), ``ClusterLogs`` by selector.
KWOK_LOG_KINDS = ("Logs", "ClusterLogs")


def kwok_stage_files(stage_root: Path, stage_set: str = KWOK_STAGE_SET) -> list[Path]:
    """The Stage files of one of kwok's kustomizations, read from kwok's module (not copied).

    Args:
        stage_root: ``kustomize/stage`` directory of the kwok module.
        stage_set: Kustomization under it, e.g. ``fast``.

    Returns:
        The Stage YAML files the kustomization lists, recursively, in order.

    Raises:
        PrerequisiteError: If the kustomization is missing (kwok module not downloaded).
    """

    def resolve(directory: Path) -> list[Path]:
        kustomization = directory / "kustomization.yaml"
        if not kustomization.is_file():
            raise PrerequisiteError(
                f"kwok stages not found at {kustomization}: run `nox -s testenv`"
            )
        files: list[Path] = []
        for entry in yaml.safe_load(kustomization.read_text()).get("resources") or []:
            target = (directory / entry).resolve()
            files += resolve(target) if target.is_dir() else [target]
        return files

    return resolve(stage_root / stage_set)


def kwok_log_crd_files(stage_root: Path) -> list[Path]:
    """The CRDs of :data:`KWOK_LOG_KINDS`, read from kwok's module (next to its stages).

    Args:
        stage_root: ``kustomize/stage`` directory of the kwok module.

    Returns:
        The two CRD files.

    Raises:
        PrerequisiteError: If one is missing (kwok module not downloaded).
    """
    bases = stage_root.parent / "crd" / "bases"
    files = [bases / f"kwok.x-k8s.io_{kind.lower()}.yaml" for kind in KWOK_LOG_KINDS]
    for file in files:
        if not file.is_file():
            raise PrerequisiteError(f"kwok CRD not found at {file}: run `nox -s testenv`")
    return files


def kwok_log_server_flags(port: int, cert: Path, key: Path) -> list[str]:
    """kwok flags that serve pod logs the way a kubelet does, over TLS on loopback.

    ``--node-port`` also makes kwok's node stage advertise the port
    (``status.daemonEndpoints.kubeletEndpoint.Port``), which the API server dials for
    ``pods/log``; the rules come from the cluster's ``Logs``/``ClusterLogs`` objects.

    Args:
        port: Free loopback port.
        cert: Serving certificate valid for 127.0.0.1.
        key: Its private key.
    """
    return [
        f"--node-port={port}",
        f"--server-address=127.0.0.1:{port}",
        f"--tls-cert-file={cert}",
        f"--tls-private-key-file={key}",
        f"--enable-crds={','.join(KWOK_LOG_KINDS)}",
    ]


def apiserver_kubelet_flags(ca: Path) -> list[str]:
    """kube-apiserver flags to reach kwok's log server: by the node's InternalIP (kwok's
    ``--node-ip``, 127.0.0.1; the Hostname is no DNS name), verifying kwok's certificate.

    Args:
        ca: The CA that signed kwok's serving certificate.
    """
    return [
        "--kubelet-preferred-address-types=InternalIP",
        f"--kubelet-certificate-authority={ca}",
    ]


def kwok_node(name: str) -> dict[str, Any]:
    """A Node that kwok manages (by annotation), with room for many pods.

    Args:
        name: Node name.

    Returns:
        The Node manifest.
    """
    capacity = {"cpu": "32", "memory": "256Gi", "pods": "110", "ephemeral-storage": "1Ti"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "node-role.kubernetes.io/agent": "",
                KWOK_NODE_LABEL: KWOK_NODE_LABEL_VALUE,
            },
        },
        "status": {
            "allocatable": capacity,
            "capacity": capacity,
            "nodeInfo": {
                "architecture": "amd64",
                "kubeletVersion": "fake",
                "kubeProxyVersion": "fake",
                "operatingSystem": "linux",
            },
            "phase": "Running",
        },
    }


def kwok_stage_root() -> Path:
    """kwok's ``kustomize/stage`` directory in the Go module cache.

    Raises:
        PrerequisiteError: If ``go env`` cannot locate it.
    """
    from kube_agent_sandbox.testing.build import kwok_stage_dir

    try:
        return kwok_stage_dir()
    except Exception as err:
        raise PrerequisiteError(f"cannot locate kwok's stages via `go env`: {err}") from err
