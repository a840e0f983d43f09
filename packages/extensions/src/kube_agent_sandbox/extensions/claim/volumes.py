"""The volume claim templates of a cold-started Sandbox: template's, claim's, or both.

Mirrors upstream v0.5.6 extensions/controllers/sandboxclaim_controller.go,
mergeVolumeClaimTemplates and validateVolumeClaimTemplates.

The template's ``volumeClaimTemplatesPolicy`` decides whether a claim may bring its own
templates (``Allowed``: only new names; ``Overrides``: may also replace the template's by name;
``Disallowed`` or unset: none). Both lists must have unique, non-empty names because each
becomes a PVC named ``<template name>-<sandbox name>``. Every refusal is a user error that is
written to the claim's Ready condition (``VolumeClaimTemplatesError``) and not retried.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, Final

from kube_agent_sandbox.api.conversion._common import go_quote

POLICY_DISALLOWED: Final = "Disallowed"
POLICY_ALLOWED: Final = "Allowed"
POLICY_OVERRIDES: Final = "Overrides"

MERGE_PREFIX: Final = "failed to merge volume claim templates: "
"""How upstream wraps every error of a merge (the claim has templates)."""

TEMPLATE_ONLY_PREFIX: Final = "invalid volume claim templates in template: "
"""How upstream wraps the template's validation error when the claim has no templates."""

_INVALID: Final = "invalid volume claim templates"


class VolumeClaimTemplatesError(ValueError):
    """Invalid or refused volume claim templates (Ready ``VolumeClaimTemplatesError``)."""


class VolumeClaimTemplatesPolicyError(ValueError):
    """The template names a policy this controller does not know (retried, as upstream)."""


def _name(vct: Mapping[str, Any]) -> str:
    return str((vct.get("metadata") or {}).get("name") or "")


def validate_volume_claim_templates(
    vcts: Sequence[Mapping[str, Any]] | None, *, prefix: str = ""
) -> None:
    """Check that every template has a non-empty name and no name repeats.

    Args:
        vcts: The templates (None or empty: nothing to check).
        prefix: Text put before upstream's message, e.g. :data:`TEMPLATE_ONLY_PREFIX`.

    Raises:
        VolumeClaimTemplatesError: ``<prefix>invalid volume claim templates: name at index
            <i> is empty`` or ``…: duplicate name "<n>"`` (first problem in list order).
    """
    seen: set[str] = set()
    for index, vct in enumerate(vcts or ()):
        name = _name(vct)
        if not name:
            raise VolumeClaimTemplatesError(f"{prefix}{_INVALID}: name at index {index} is empty")
        if name in seen:
            raise VolumeClaimTemplatesError(f"{prefix}{_INVALID}: duplicate name {go_quote(name)}")
        seen.add(name)


def merge_volume_claim_templates(
    template_vcts: Sequence[Mapping[str, Any]] | None,
    claim_vcts: Sequence[Mapping[str, Any]] | None,
    *,
    policy: str,
) -> list[dict[str, Any]]:
    """The volume claim templates of a claim's cold-started Sandbox.

    Without claim templates the template's are only validated and returned. With them: both
    lists are validated (template first), then the policy applies: ``Disallowed`` or ``""``
    refuses; ``Allowed`` refuses a claim name equal to a template name and otherwise returns
    the template's list followed by the claim's; ``Overrides`` returns the template's list
    with same-name entries replaced by the claim's, then the claim's new names in claim order.

    Args:
        template_vcts: The template's ``spec.volumeClaimTemplates``.
        claim_vcts: The claim's ``spec.volumeClaimTemplates``.
        policy: The template's ``volumeClaimTemplatesPolicy``.

    Returns:
        New (deep-copied) template dicts, possibly empty; the inputs are not modified.

    Raises:
        VolumeClaimTemplatesError: with the text upstream writes to the Ready condition:
            ``invalid volume claim templates in template: invalid volume claim templates: …``
            (template invalid, no claim templates) or ``failed to merge volume claim templates:
            `` followed by ``template: invalid …``, ``claim: invalid …``, ``volume claim
            templates are disallowed by the template`` or ``overriding volume claim templates is
            forbidden by the template: cannot override template volume "<n>"``.
        VolumeClaimTemplatesPolicyError: ``failed to merge volume claim templates: unknown
            volume claim templates policy "<p>"``.
    """
    template_list = list(template_vcts or ())
    claim_list = list(claim_vcts or ())
    if not claim_list:
        validate_volume_claim_templates(template_list, prefix=TEMPLATE_ONLY_PREFIX)
        return copy.deepcopy([dict(vct) for vct in template_list])
    validate_volume_claim_templates(template_list, prefix=MERGE_PREFIX + "template: ")
    validate_volume_claim_templates(claim_list, prefix=MERGE_PREFIX + "claim: ")

    if policy in (POLICY_DISALLOWED, ""):
        raise VolumeClaimTemplatesError(
            MERGE_PREFIX + "volume claim templates are disallowed by the template"
        )
    if policy == POLICY_ALLOWED:
        template_names = {_name(vct) for vct in template_list}
        for vct in claim_list:
            if _name(vct) in template_names:
                raise VolumeClaimTemplatesError(
                    MERGE_PREFIX + "overriding volume claim templates is forbidden by the "
                    f"template: cannot override template volume {go_quote(_name(vct))}"
                )
        merged = [*template_list, *claim_list]
    elif policy == POLICY_OVERRIDES:
        claim_by_name = {_name(vct): vct for vct in claim_list}
        merged = [claim_by_name.pop(_name(vct), vct) for vct in template_list]
        merged.extend(vct for vct in claim_list if _name(vct) in claim_by_name)
    else:
        raise VolumeClaimTemplatesPolicyError(
            f"{MERGE_PREFIX}unknown volume claim templates policy {go_quote(policy)}"
        )
    return copy.deepcopy([dict(vct) for vct in merged])
