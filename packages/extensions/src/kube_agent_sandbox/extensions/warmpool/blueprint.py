"""The Sandbox a warm pool creates from its template (upstream's buildSandboxCR).

Kept apart from the reconciler so the exact shape (labels, annotations, owner, secure
defaults) is one pure function, tested on its own and shared by every create of a pass.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from typing import Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.namehash import name_hash
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.controller.runtime import Obj, meta
from kube_agent_sandbox.extensions.common.blueprint import (
    apply_secure_defaults,
    blueprint_hash,
    blueprint_of,
    pod_template_hash,
    template_ref_hash,
)
from kube_agent_sandbox.extensions.common.ownership import controller_ref_to

__all__ = [
    "TemplateHashes",
    "build_member",
    "hashes_of",
    "named_member",
    "pool_selector",
    "template_name_of",
]

# The API server's generateName: the prefix cut to 58 characters plus 5 drawn from this
# alphabet (apimachinery's names.SimpleNameGenerator and util/rand), so names look the same.
_SUFFIX_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"
_SUFFIX_LENGTH: Final = 5
_MAX_PREFIX_LENGTH: Final = 63 - _SUFFIX_LENGTH
_names = random.Random()


@dataclass(frozen=True, slots=True)
class TemplateHashes:
    """The two hashes a member carries as labels (``sandbox-pod-template-hash`` and
    ``sandbox-template-hash``)."""

    pod_template: str
    blueprint: str


def hashes_of(template: Obj) -> TemplateHashes:
    """The hashes of ``template`` as of now."""
    return TemplateHashes(pod_template_hash(template), blueprint_hash(template))


def template_name_of(pool: Obj) -> str:
    """``spec.sandboxTemplateRef.name`` of a pool (``""`` when missing)."""
    ref = (pool.get("spec") or {}).get("sandboxTemplateRef") or {}
    return str(ref.get("name") or "")


def pool_selector(pool_name_hash: str) -> str:
    """``status.selector`` of a pool: the label selector of its members."""
    return f"{c.LABEL_WARM_POOL_SANDBOX}={pool_name_hash}"


def build_member(pool: Obj, template: Obj, *, hashes: TemplateHashes, enable_eviction: bool) -> Obj:
    """The Sandbox to create for ``pool`` from ``template`` (name left to ``generateName``).

    Args:
        pool: The SandboxWarmPool.
        template: Its SandboxTemplate.
        hashes: ``hashes_of(template)``, computed once per pass.
        enable_eviction: ``--enable-warm-pool-eviction``: mark the pod safe to evict unless the
            template sets that annotation itself.

    Returns:
        A new Sandbox object (the template is not modified).
    """
    pool_meta = meta(pool)
    pool_name = str(pool_meta.get("name") or "")
    tmpl_name = template_name_of(pool)
    pool_hash = name_hash(pool_name)
    ref_hash = template_ref_hash(tmpl_name)
    spec = copy.deepcopy(blueprint_of(template))
    pod_template = spec.setdefault("podTemplate", {})
    pod_meta = pod_template.get("metadata")
    if not isinstance(pod_meta, dict):
        pod_meta = pod_template["metadata"] = {}
    pod_labels = pod_meta.get("labels")
    if not isinstance(pod_labels, dict):
        pod_labels = pod_meta["labels"] = {}
    pod_labels[c.LABEL_WARM_POOL_SANDBOX] = pool_hash
    pod_labels[c.LABEL_SANDBOX_TEMPLATE_REF_HASH] = ref_hash
    pod_labels[c.LABEL_SANDBOX_POD_TEMPLATE_HASH] = hashes.pod_template
    pod_labels[c.LABEL_SANDBOX_TEMPLATE_HASH] = hashes.blueprint
    if enable_eviction:
        pod_annotations = pod_meta.get("annotations")
        if not isinstance(pod_annotations, dict):
            pod_annotations = pod_meta["annotations"] = {}
        pod_annotations.setdefault(c.ANNOTATION_SAFE_TO_EVICT, "true")
    pod_spec = pod_template.get("spec")
    if not isinstance(pod_spec, dict):
        pod_spec = pod_template["spec"] = {}
    apply_secure_defaults(template, pod_spec)
    return {
        "apiVersion": SANDBOXES.api_version,
        "kind": SANDBOXES.kind,
        "metadata": {
            "generateName": f"{pool_name}-",
            "namespace": str(pool_meta.get("namespace") or ""),
            "labels": {
                c.LABEL_WARM_POOL_SANDBOX: pool_hash,
                c.LABEL_SANDBOX_TEMPLATE_REF_HASH: ref_hash,
                c.LABEL_LAUNCH_TYPE: c.LAUNCH_TYPE_WARM,
                c.LABEL_SANDBOX_POD_TEMPLATE_HASH: hashes.pod_template,
                c.LABEL_SANDBOX_TEMPLATE_HASH: hashes.blueprint,
                c.LABEL_CREATED_BY: c.CREATED_BY_CONTROLLER,
            },
            "annotations": {c.ANNOTATION_SANDBOX_TEMPLATE_REF: tmpl_name},
            "ownerReferences": [controller_ref_to(pool, kind=c.KIND_SANDBOX_WARM_POOL)],
        },
        "spec": spec,
    }


def named_member(member: Obj, *, rng: random.Random | None = None) -> Obj:
    """``member`` with a name drawn like ``generateName`` and the pod-name annotation set to it.

    Naming the member here rather than in the API server lets it carry
    ``agents.x-k8s.io/pod-name`` from its first write: the Sandbox controller then has no
    annotation to add after creating the Pod, one write less per member (upstream adds it in a
    second write). A drawn name that collides answers AlreadyExists; the caller draws again,
    as it would for a generated name.
    """
    m = meta(member)
    prefix = str(m.get("generateName") or "")[:_MAX_PREFIX_LENGTH]
    name = prefix + "".join((rng or _names).choices(_SUFFIX_ALPHABET, k=_SUFFIX_LENGTH))
    metadata = {k: v for k, v in m.items() if k != "generateName"}
    metadata["name"] = name
    metadata["annotations"] = {**(m.get("annotations") or {}), c.ANNOTATION_POD_NAME: name}
    return {**member, "metadata": metadata}
