"""Where a Sandbox's idle policy comes from when the Sandbox itself does not say.

The claim and warm pool controllers build Sandboxes from a SandboxTemplate but copy neither
the template's nor the claim's object annotations onto them (upstream behaviour, kept), and a
template's ``spec.podTemplate.metadata.annotations`` end up on the Pod and in the Sandbox's
``spec.podTemplate``, not in its metadata. So the idle reconciler resolves the policy itself, in
this order, key by key: the Sandbox's annotations, its owning claim's, its template's object
annotations, then the template's pod-template annotations (as copied into the Sandbox's
``spec.podTemplate.metadata``); ``pause-at`` only from the claim. What it finds it writes
onto the Sandbox once, so the gateway and every other reader only ever look at the Sandbox.
"""

from __future__ import annotations

from collections.abc import Mapping

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime import Obj, meta
from kube_agent_sandbox.extensions.idle.policy import POLICY_KEYS

__all__ = ["inherited_annotations", "owning_claim_name", "template_name"]


def owning_claim_name(sandbox: Obj) -> str | None:
    """The name of the SandboxClaim controlling ``sandbox``, if any."""
    for ref in meta(sandbox).get("ownerReferences") or ():
        if (
            ref.get("controller")
            and ref.get("kind") == c.KIND_SANDBOX_CLAIM
            and str(ref.get("apiVersion", "")).startswith(f"{c.EXTENSIONS_GROUP}/")
        ):
            return str(ref.get("name") or "") or None
    return None


def template_name(sandbox: Obj) -> str | None:
    """The SandboxTemplate a claim or warm pool built ``sandbox`` from, if recorded."""
    annotations = meta(sandbox).get("annotations") or {}
    return str(annotations.get(c.ANNOTATION_SANDBOX_TEMPLATE_REF) or "") or None


def _pod_template_annotations(sandbox: Obj) -> Mapping[str, str]:
    pod_template = (sandbox.get("spec") or {}).get("podTemplate") or {}
    return (pod_template.get("metadata") or {}).get("annotations") or {}


def inherited_annotations(
    sandbox: Obj, *, claim: Obj | None, template: Obj | None
) -> dict[str, str]:
    """The policy annotations ``sandbox`` lacks and inherits, by key (empty: nothing to copy).

    Args:
        sandbox: The Sandbox.
        claim: Its owning claim, if any (from the cache).
        template: Its SandboxTemplate, if any (from the cache).
    """
    own = meta(sandbox).get("annotations") or {}
    sources: list[Mapping[str, str]] = []
    if claim is not None:
        sources.append(meta(claim).get("annotations") or {})
    if template is not None:
        sources.append(meta(template).get("annotations") or {})
    sources.append(_pod_template_annotations(sandbox))
    found: dict[str, str] = {}
    for key in POLICY_KEYS:
        if key in own:
            continue
        for source in sources:
            value = source.get(key)
            if value is not None:
                found[key] = str(value)
                break
    # A deadline is per sandbox: only the claim (which the gateway creates before the Sandbox
    # exists) may carry it, never a template.
    if c.ANNOTATION_PAUSE_AT not in own and claim is not None:
        pause_at = (meta(claim).get("annotations") or {}).get(c.ANNOTATION_PAUSE_AT)
        if pause_at is not None:
            found[c.ANNOTATION_PAUSE_AT] = str(pause_at)
    return found
