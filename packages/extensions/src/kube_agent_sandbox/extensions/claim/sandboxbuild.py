"""What a claim's Sandbox looks like: the cold-start Sandbox and the pod metadata of any bound one.

Both paths share :func:`desired_pod_metadata`, so the metadata written at adoption is exactly
what later passes expect and they find nothing to change (no extra write per claim). The
cold-start body follows upstream v0.5.6 extensions/controllers/sandboxclaim_controller.go's cold
create: the template's blueprint, the claim's volume claim templates and environment under the
template's policies, the claim's pod metadata under the "no overrides" rule, and the secure
defaults.
"""

from __future__ import annotations

import copy
from typing import Any

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime import Obj, meta
from kube_agent_sandbox.extensions.claim import envinject, podmetadata, volumes
from kube_agent_sandbox.extensions.claim.errors import (
    EnvInjectionRejectedError,
    ReconcilerError,
    VolumeClaimTemplatesError,
)
from kube_agent_sandbox.extensions.claim.fromsnapshot import kept_state_annotations
from kube_agent_sandbox.extensions.common.blueprint import (
    apply_secure_defaults,
    blueprint_of,
    template_ref_hash,
)
from kube_agent_sandbox.extensions.common.ownership import controller_ref_to

DEFAULT_ENV_POLICY = "Disallowed"
DEFAULT_VCT_POLICY = "Disallowed"


def claim_created_by(claim: Obj) -> str:
    """The claim's ``created-by`` label (``""`` when absent)."""
    return str((meta(claim).get("labels") or {}).get(c.LABEL_CREATED_BY) or "")


def claim_uid(claim: Obj) -> str:
    """The claim's UID."""
    return str(meta(claim).get("uid") or "")


def additional_pod_metadata(claim: Obj) -> Obj:
    """``spec.additionalPodMetadata`` as ``{labels, annotations}`` (empty maps when absent)."""
    extra = (claim.get("spec") or {}).get("additionalPodMetadata") or {}
    return {
        "labels": dict(extra.get("labels") or {}),
        "annotations": dict(extra.get("annotations") or {}),
    }


def has_additional_pod_metadata(claim: Obj) -> bool:
    """True when the claim asks for extra pod labels or annotations."""
    extra = additional_pod_metadata(claim)
    return bool(extra["labels"] or extra["annotations"])


def set_claim_labels(labels: dict[str, Any], claim: Obj, *, template_name: str | None) -> None:
    """Set ``claim-uid``, ``created-by`` (or remove it) and the template hash on ``labels``."""
    labels[c.LABEL_CLAIM_UID] = claim_uid(claim)
    created_by = claim_created_by(claim)
    if created_by:
        labels[c.LABEL_CREATED_BY] = created_by
    else:
        labels.pop(c.LABEL_CREATED_BY, None)
    if template_name is not None:
        labels[c.LABEL_SANDBOX_TEMPLATE_REF_HASH] = template_ref_hash(template_name)


def merge_claim_metadata(base: Obj, claim: Obj) -> Obj:
    """``base`` plus the claim's ``additionalPodMetadata`` under the "no overrides" rule.

    Raises:
        ReconcilerError: a claim key exists in ``base`` with another value.
    """
    try:
        merged: Obj = podmetadata.merge_without_overrides(base, additional_pod_metadata(claim))
    except podmetadata.MetadataOverrideError as exc:
        raise ReconcilerError(str(exc)) from exc
    return _clean(merged)


def desired_pod_metadata(claim: Obj, template: Obj) -> Obj:
    """The pod template metadata of a Sandbox bound to ``claim`` (upstream's cold create).

    The template's pod metadata, plus ``claim-uid``, ``sandbox-template-ref-hash`` and the
    claim's ``created-by``, plus ``additionalPodMetadata``.

    Raises:
        ReconcilerError: ``additionalPodMetadata`` would override a template key.
    """
    source = ((template.get("spec") or {}).get("podTemplate") or {}).get("metadata") or {}
    base: Obj = {
        "labels": dict(source.get("labels") or {}),
        "annotations": dict(source.get("annotations") or {}),
    }
    set_claim_labels(base["labels"], claim, template_name=str(meta(template).get("name") or ""))
    return merge_claim_metadata(base, claim)


def _clean(metadata: Obj) -> Obj:
    """Drop empty label/annotation maps (Go omits them, so comparisons must too)."""
    return {k: dict(v) for k, v in metadata.items() if v}


def template_name_of(pool: Obj) -> str:
    """``spec.sandboxTemplateRef.name`` of a pool."""
    return str(((pool.get("spec") or {}).get("sandboxTemplateRef") or {}).get("name") or "")


def build_cold_sandbox(claim: Obj, template: Obj) -> Obj:
    """The Sandbox a claim gets when no warm one is adopted (``createSandbox``).

    Raises:
        VolumeClaimTemplatesError: the claim's or template's volume claim templates are
            invalid or refused by the template's policy.
        EnvInjectionRejectedError: the template refuses the claim's environment variables.
        ReconcilerError: a forbidden env override, a missing target container, or pod
            metadata that would override the template's.
    """
    claim_meta = meta(claim)
    template_name = str(meta(template).get("name") or "")
    template_spec = template.get("spec") or {}
    claim_spec = claim.get("spec") or {}
    spec = copy.deepcopy(blueprint_of(template))

    claim_vcts = claim_spec.get("volumeClaimTemplates") or None
    try:
        merged_vcts = volumes.merge_volume_claim_templates(
            template_spec.get("volumeClaimTemplates") or None,
            claim_vcts,
            policy=str(template_spec.get("volumeClaimTemplatesPolicy") or DEFAULT_VCT_POLICY),
        )
    except volumes.VolumeClaimTemplatesError as exc:
        raise VolumeClaimTemplatesError(str(exc)) from exc
    except volumes.VolumeClaimTemplatesPolicyError as exc:
        raise ReconcilerError(str(exc)) from exc
    if merged_vcts:
        spec["volumeClaimTemplates"] = merged_vcts
    else:
        spec.pop("volumeClaimTemplates", None)

    pod_template = spec.setdefault("podTemplate", {})
    pod_template["metadata"] = desired_pod_metadata(claim, template)
    if not pod_template["metadata"]:
        del pod_template["metadata"]
    pod_spec = pod_template.setdefault("spec", {})
    env = claim_spec.get("env") or []
    if env:
        try:
            envinject.inject_env(
                pod_spec,
                list(env),
                policy=str(template_spec.get("envVarsInjectionPolicy") or DEFAULT_ENV_POLICY),
            )
        except envinject.EnvInjectionRejectedError as exc:
            raise EnvInjectionRejectedError(str(exc)) from exc
        except envinject.EnvInjectionError as exc:
            raise ReconcilerError(str(exc)) from exc
    apply_secure_defaults(template, pod_spec)

    labels: dict[str, Any] = {}
    set_claim_labels(labels, claim, template_name=template_name)
    labels[c.LABEL_LAUNCH_TYPE] = c.LAUNCH_TYPE_COLD
    name = str(claim_meta.get("name", ""))
    # The Pod will be named like the Sandbox: saying so now saves the Sandbox controller the
    # annotation write it makes after creating the Pod (it keeps an annotation naming itself).
    annotations = {c.ANNOTATION_SANDBOX_TEMPLATE_REF: template_name, c.ANNOTATION_POD_NAME: name}
    trace = (claim_meta.get("annotations") or {}).get(c.ANNOTATION_TRACE_CONTEXT)
    if trace:
        annotations[c.ANNOTATION_TRACE_CONTEXT] = trace
    annotations.update(kept_state_annotations(claim, template))
    return {
        "apiVersion": c.SANDBOX_API_VERSION,
        "kind": c.KIND_SANDBOX,
        "metadata": {
            "name": name,
            "namespace": claim_meta.get("namespace", ""),
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [controller_ref_to(claim, kind=c.KIND_SANDBOX_CLAIM)],
        },
        "spec": spec,
    }
