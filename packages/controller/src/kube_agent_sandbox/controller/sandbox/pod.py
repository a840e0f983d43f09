"""The Pod of a Sandbox: its name, the Pod to create, and metadata sync for an existing Pod.

Pure functions over dicts (upstream v0.5.6 controllers/sandbox_controller.go, reconcilePod). Only
labels and annotations of an existing Pod are ever changed; the Pod spec is written once, at
creation. Keys under the system prefixes are never copied from a user's pod template, so a tenant
cannot set the tracking label (the Service selector) and capture another Sandbox's traffic.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime import Obj, controller_ref, group_of
from kube_agent_sandbox.controller.sandbox.keepstate import apply_resume_from
from kube_agent_sandbox.controller.sandbox.ownership import sandbox_controller_ref

POD_NAME_HASH_INDEX = "sandbox-name-hash"
"""Name of the Pod cache index over ``<namespace>/<tracking label value>``."""

_EXTENSION_POD_LABELS = (c.LABEL_WARM_POOL_SANDBOX, c.LABEL_SANDBOX_TEMPLATE_REF_HASH)
_CONTROLLER_MANAGED_POD_ANNOTATIONS = frozenset(
    {c.ANNOTATION_PROPAGATED_LABELS, c.ANNOTATION_PROPAGATED_ANNOTATIONS}
)


def _is_system_label(key: str) -> bool:
    return key.startswith(c.SYSTEM_PREFIXES)


def pod_name_hash_index(obj: Obj) -> list[str]:
    """Index function: ``["<namespace>/<sandbox-name-hash label>"]`` for labelled objects."""
    meta = obj.get("metadata", {})
    value = (meta.get("labels") or {}).get(c.LABEL_SANDBOX_NAME_HASH)
    if value is None:
        return []
    return [f"{meta.get('namespace', '')}/{value}"]


def resolve_pod_name(sandbox: Obj) -> str:
    """The Pod name: the ``agents.x-k8s.io/pod-name`` annotation if non-empty, else the name."""
    meta = sandbox.get("metadata", {})
    annotated = (meta.get("annotations") or {}).get(c.ANNOTATION_POD_NAME)
    return str(annotated) if annotated else str(meta.get("name", ""))


def pvc_name(template_name: str, sandbox_name: str) -> str:
    """Name of the PVC made from a volumeClaimTemplate: ``<template>-<sandbox>``."""
    return f"{template_name}-{sandbox_name}"


def _template_metadata(sandbox: Obj) -> Mapping[str, Any]:
    return sandbox.get("spec", {}).get("podTemplate", {}).get("metadata") or {}


def template_labels(sandbox: Obj) -> dict[str, str]:
    """Pod template labels that may be propagated (system keys removed)."""
    labels = _template_metadata(sandbox).get("labels") or {}
    return {k: v for k, v in labels.items() if not _is_system_label(k)}


def template_annotations(sandbox: Obj) -> dict[str, str]:
    """Pod template annotations that may be propagated (system keys removed)."""
    annotations = _template_metadata(sandbox).get("annotations") or {}
    return {k: v for k, v in annotations.items() if not c.is_system_key(k)}


def extension_pod_labels(sandbox: Obj) -> dict[str, str]:
    """Labels copied from the Sandbox to its Pod when an extension controller owns the Sandbox.

    Only for Sandboxes whose controller is in group ``extensions.agents.x-k8s.io``: the
    warm-pool label (SandboxWarmPool owners only) and the template-ref hash.
    """
    ref = controller_ref(sandbox)
    if ref is None or group_of(str(ref.get("apiVersion", ""))) != c.EXTENSIONS_GROUP:
        return {}
    labels = sandbox.get("metadata", {}).get("labels") or {}
    result: dict[str, str] = {}
    pool = labels.get(c.LABEL_WARM_POOL_SANDBOX)
    if ref.get("kind") == c.KIND_SANDBOX_WARM_POOL and pool:
        result[c.LABEL_WARM_POOL_SANDBOX] = pool
    template_hash = labels.get(c.LABEL_SANDBOX_TEMPLATE_REF_HASH)
    if template_hash:
        result[c.LABEL_SANDBOX_TEMPLATE_REF_HASH] = template_hash
    return result


def created_by_label(sandbox: Obj) -> str | None:
    """The normalised created-by value for the Pod, if the Sandbox has a non-empty label."""
    value = (sandbox.get("metadata", {}).get("labels") or {}).get(c.LABEL_CREATED_BY)
    return c.normalize_created_by(value) if value else None


def merge_volume_claim_volumes(
    existing: list[Obj] | None, pvc_volumes: list[Obj]
) -> list[Obj] | None:
    """Replace template volumes named like a volumeClaimTemplate and append the PVC volumes.

    StatefulSet semantics: the claim volume wins over a template volume of the same name.
    """
    if not pvc_volumes:
        return existing
    names = {v["name"] for v in pvc_volumes}
    kept = [v for v in existing or () if v.get("name") not in names]
    return kept + pvc_volumes


def claim_volumes(sandbox: Obj) -> list[Obj]:
    """Pod volumes for the Sandbox's volumeClaimTemplates."""
    name = sandbox.get("metadata", {}).get("name", "")
    volumes: list[Obj] = []
    for template in sandbox.get("spec", {}).get("volumeClaimTemplates") or ():
        tname = (template.get("metadata") or {}).get("name", "")
        volumes.append(
            {"name": tname, "persistentVolumeClaim": {"claimName": pvc_name(tname, name)}}
        )
    return volumes


def desired_pod(sandbox: Obj, name_hash: str) -> Obj:
    """The Pod to create for ``sandbox`` (named like the Sandbox, controlled by it).

    A container whose state was saved on suspend runs the snapshot's image (keepstate.py).
    """
    meta = sandbox.get("metadata", {})
    labels = template_labels(sandbox)
    propagated_labels = sorted(labels)
    labels[c.LABEL_SANDBOX_NAME_HASH] = name_hash
    labels.update(extension_pod_labels(sandbox))
    created_by = created_by_label(sandbox)
    if created_by:
        labels[c.LABEL_CREATED_BY] = created_by
    annotations = template_annotations(sandbox)
    propagated_annotations = sorted(annotations)
    if propagated_labels:
        annotations[c.ANNOTATION_PROPAGATED_LABELS] = ",".join(propagated_labels)
    if propagated_annotations:
        annotations[c.ANNOTATION_PROPAGATED_ANNOTATIONS] = ",".join(propagated_annotations)
    spec = copy.deepcopy(sandbox.get("spec", {}).get("podTemplate", {}).get("spec") or {})
    apply_resume_from(sandbox, spec)
    volumes = merge_volume_claim_volumes(spec.get("volumes"), claim_volumes(sandbox))
    if volumes is not None:
        spec["volumes"] = volumes
    pod_meta: Obj = {"name": meta.get("name", ""), "namespace": meta.get("namespace", "")}
    pod_meta["labels"] = labels
    if annotations:
        pod_meta["annotations"] = annotations
    pod_meta["ownerReferences"] = [sandbox_controller_ref(sandbox)]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}


def _split_keys(value: str | None) -> list[str]:
    return [k for k in (value or "").split(",") if k]


def update_pod_metadata(pod: Obj, sandbox: Obj, name_hash: str) -> bool:
    """Bring an existing Pod's labels and annotations in line with the Sandbox (in place).

    Args:
        pod: A private copy of the Pod; modified in place.
        sandbox: The Sandbox.
        name_hash: ``name_hash(sandbox name)``.

    Returns:
        Whether anything changed.
    """
    meta = pod.setdefault("metadata", {})
    had_annotations = meta.get("annotations") is not None
    if meta.get("labels") is None:
        meta["labels"] = {}
    if meta.get("annotations") is None:
        meta["annotations"] = {}
    labels: dict[str, str] = meta["labels"]
    annotations: dict[str, str] = meta["annotations"]
    before = (dict(labels), dict(annotations))

    labels[c.LABEL_SANDBOX_NAME_HASH] = name_hash
    wanted_labels = template_labels(sandbox)
    labels.update(wanted_labels)
    for key in _split_keys(annotations.get(c.ANNOTATION_PROPAGATED_LABELS)):
        if _is_system_label(key):
            if key != c.LABEL_SANDBOX_NAME_HASH:
                labels.pop(key, None)
        elif key not in wanted_labels:
            labels.pop(key, None)
    extension = extension_pod_labels(sandbox)
    for key in _EXTENSION_POD_LABELS:
        if key in extension:
            labels[key] = extension[key]
        else:
            labels.pop(key, None)
    created_by = created_by_label(sandbox)
    if created_by:
        labels[c.LABEL_CREATED_BY] = created_by
    else:
        labels.pop(c.LABEL_CREATED_BY, None)

    wanted_annotations = template_annotations(sandbox)
    annotations.update(wanted_annotations)
    for key in _split_keys(annotations.get(c.ANNOTATION_PROPAGATED_ANNOTATIONS)):
        if c.is_system_key(key):
            if key not in _CONTROLLER_MANAGED_POD_ANNOTATIONS:
                annotations.pop(key, None)
        elif key not in wanted_annotations:
            annotations.pop(key, None)
    for key, keys in (
        (c.ANNOTATION_PROPAGATED_LABELS, wanted_labels),
        (c.ANNOTATION_PROPAGATED_ANNOTATIONS, wanted_annotations),
    ):
        joined = ",".join(sorted(keys))
        if annotations.get(key, "") != joined:
            annotations[key] = joined
    if not annotations and not had_annotations:
        del meta["annotations"]
    return (labels, annotations) != before
