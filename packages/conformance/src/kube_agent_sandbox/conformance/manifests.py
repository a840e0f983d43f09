"""Minimal valid manifests and small readers of the objects the suite inspects.

Tests build their objects here so each test states only what it checks. Every string follows
the spec literally; nothing comes from an implementation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kube_agent_sandbox.conformance.resources import EXTENSIONS_V1BETA1, SANDBOX_V1BETA1

Obj = dict[str, Any]

DEFAULT_IMAGE = "registry.k8s.io/pause:3.10"
NAME_HASH_LABEL = "agents.x-k8s.io/sandbox-name-hash"


def name_hash(name: str) -> str:
    """``NameHash``: 32-bit FNV-1a of the UTF-8 bytes, as 8 lowercase hex digits.

    Upstream v0.5.6 controllers/sandbox_controller.go, NameHash.

    Args:
        name: The object name.

    Returns:
        For example ``name_hash("my-sandbox") == "374de8f5"``.
    """
    value = 0x811C9DC5
    for byte in name.encode():
        value ^= byte
        value = (value * 0x01000193) & 0xFFFFFFFF
    return f"{value:08x}"


def container(
    name: str = "main",
    *,
    image: str = DEFAULT_IMAGE,
    ports: Sequence[Mapping[str, Any]] = (),
    **extra: Any,
) -> Obj:
    """A container spec."""
    spec: Obj = {"name": name, "image": image, **extra}
    if ports:
        spec["ports"] = [dict(p) for p in ports]
    return spec


def pod_template(
    *,
    containers: Sequence[Mapping[str, Any]] | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    image: str = DEFAULT_IMAGE,
    **spec_extra: Any,
) -> Obj:
    """A ``PodTemplate`` (``spec`` plus optional labels/annotations metadata)."""
    spec: Obj = {"containers": [dict(c) for c in containers or [container(image=image)]]}
    spec.update(spec_extra)
    template: Obj = {"spec": spec}
    metadata: Obj = {}
    if labels:
        metadata["labels"] = dict(labels)
    if annotations:
        metadata["annotations"] = dict(annotations)
    if metadata:
        template["metadata"] = metadata
    return template


def volume_claim_template(name: str, *, storage: str = "1Gi", **metadata: Any) -> Obj:
    """A ``PersistentVolumeClaimTemplate`` (ReadWriteOnce, ``storage`` requested)."""
    return {
        "metadata": {"name": name, **metadata},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": storage}},
        },
    }


def sandbox(
    name: str,
    *,
    namespace: str | None = None,
    api_version: str = SANDBOX_V1BETA1,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    template: Mapping[str, Any] | None = None,
    **spec: Any,
) -> Obj:
    """A Sandbox manifest.

    Args:
        name: Sandbox name.
        namespace: Namespace.
        api_version: Served version to write through.
        labels: Sandbox labels.
        annotations: Sandbox annotations.
        template: ``spec.podTemplate`` (default :func:`pod_template`).
        **spec: Other spec fields verbatim (``service=True``, ``operatingMode="Suspended"``,
            ``volumeClaimTemplates=[...]``, ``shutdownTime=...``, ``shutdownPolicy=...``).

    Returns:
        The manifest.
    """
    metadata: Obj = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    if labels:
        metadata["labels"] = dict(labels)
    if annotations:
        metadata["annotations"] = dict(annotations)
    body: Obj = {"podTemplate": dict(template or pod_template()), **spec}
    return {"apiVersion": api_version, "kind": "Sandbox", "metadata": metadata, "spec": body}


def extension_object(kind: str, name: str, *, namespace: str | None = None, **spec: Any) -> Obj:
    """A manifest of an ``extensions.agents.x-k8s.io/v1beta1`` kind with ``spec`` verbatim."""
    metadata: Obj = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": EXTENSIONS_V1BETA1, "kind": kind, "metadata": metadata, "spec": spec}


# -- readers ------------------------------------------------------------------------------


def conditions(obj: Mapping[str, Any] | None) -> list[Obj]:
    """``status.conditions`` (empty when absent)."""
    if not obj:
        return []
    return list((obj.get("status") or {}).get("conditions") or [])


def condition(obj: Mapping[str, Any] | None, type_: str) -> Obj | None:
    """The condition of a type, or ``None``."""
    for cond in conditions(obj):
        if cond.get("type") == type_:
            return cond
    return None


def condition_types(obj: Mapping[str, Any] | None) -> list[str]:
    """Condition types in list order."""
    return [c.get("type", "") for c in conditions(obj)]


def has_condition(
    obj: Mapping[str, Any] | None,
    type_: str,
    status: str | None = None,
    reason: str | None = None,
) -> bool:
    """Whether a condition of ``type_`` exists with the given status and reason (if given)."""
    cond = condition(obj, type_)
    if cond is None:
        return False
    if status is not None and cond.get("status") != status:
        return False
    return reason is None or cond.get("reason") == reason


def controller_ref(obj: Mapping[str, Any] | None) -> Obj | None:
    """The ownerReference with ``controller: true``, or ``None``."""
    if not obj:
        return None
    for owner in obj.get("metadata", {}).get("ownerReferences") or []:
        if owner.get("controller"):
            return dict(owner)
    return None


def labels_of(obj: Mapping[str, Any] | None) -> dict[str, str]:
    """``metadata.labels`` (empty when absent)."""
    return dict(((obj or {}).get("metadata") or {}).get("labels") or {})


def annotations_of(obj: Mapping[str, Any] | None) -> dict[str, str]:
    """``metadata.annotations`` (empty when absent)."""
    return dict(((obj or {}).get("metadata") or {}).get("annotations") or {})
