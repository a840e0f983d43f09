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
