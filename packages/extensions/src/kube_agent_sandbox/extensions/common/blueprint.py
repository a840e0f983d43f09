"""Rules every Sandbox built from a SandboxTemplate follows (upstream's buildSandboxCR,
isSandboxStale).

* :func:`apply_secure_defaults`: no service account token unless asked for, and public DNS
  when the template's default NetworkPolicy (which blocks cluster DNS) applies.
* Hashes that mark which template (and which version of it) a Sandbox was made from.
* :func:`blueprint_matches`: whether a Sandbox's spec is still what its template would make,
  compared semantically (quantities, empty values), as upstream's ``compareSandboxBlueprint``.
* :func:`update_strategy`: a pool's update strategy, unknown values read as ``OnReplenish``.

Hashes are FNV-1a over canonical JSON (sorted keys), so they are stable across processes but
never equal to the Go controller's; wherever a hash is missing or differs, the semantic
comparison decides, which is what lets either controller serve the other's sandboxes.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.namehash import name_hash
from kube_agent_sandbox.controller.runtime import Obj, semantic_equal

__all__ = [
    "DEFAULT_DNS_NAMESERVERS",
    "ON_REPLENISH",
    "RECREATE",
    "apply_secure_defaults",
    "blueprint_hash",
    "blueprint_matches",
    "blueprint_of",
    "is_secure_by_default",
    "pod_template_hash",
    "system_labels_for_template",
    "template_ref_hash",
    "update_strategy",
]

DEFAULT_DNS_NAMESERVERS: Final = ("8.8.8.8", "1.1.1.1")
RECREATE: Final = "Recreate"
ON_REPLENISH: Final = "OnReplenish"
_MANAGED: Final = "Managed"


def template_ref_hash(template_name: str) -> str:
    """Value of the ``sandbox-template-ref-hash`` label (``NameHash(template name)``)."""
    return name_hash(template_name)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def blueprint_of(template: Obj) -> Obj:
    """The SandboxBlueprint of a template's spec: podTemplate, volumeClaimTemplates, service."""
    spec = template.get("spec") or {}
    return {k: spec[k] for k in ("podTemplate", "volumeClaimTemplates", "service") if k in spec}


def pod_template_hash(template: Obj) -> str:
    """Value of the (deprecated) ``sandbox-pod-template-hash`` label."""
    return name_hash(_canonical((template.get("spec") or {}).get("podTemplate") or {}))


def blueprint_hash(template: Obj) -> str:
    """Value of the ``sandbox-template-hash`` label: the whole blueprint, hashed."""
    return name_hash(_canonical(blueprint_of(template)))


def is_secure_by_default(template: Obj) -> bool:
    """True when the template's default NetworkPolicy applies (Managed, no custom rules)."""
    spec = template.get("spec") or {}
    management = spec.get("networkPolicyManagement") or _MANAGED
    return management == _MANAGED and spec.get("networkPolicy") is None


def apply_secure_defaults(template: Obj, pod_spec: Obj) -> Obj:
    """Apply upstream's ``ApplySandboxSecureDefaults`` to ``pod_spec`` in place and return it.

    An unset ``automountServiceAccountToken`` becomes ``False`` (an explicit value is kept).
    Under the default NetworkPolicy, which blocks cluster DNS, an unset ``dnsPolicy`` becomes
    ``None`` with public nameservers; a custom or unmanaged policy leaves DNS alone.
    """
    if pod_spec.get("automountServiceAccountToken") is None:
        pod_spec["automountServiceAccountToken"] = False
    if is_secure_by_default(template) and not pod_spec.get("dnsPolicy"):
        pod_spec["dnsPolicy"] = "None"
        pod_spec["dnsConfig"] = {"nameservers": list(DEFAULT_DNS_NAMESERVERS)}
    return pod_spec


def _vcts_match(template_vcts: list[Obj], sandbox_vcts: list[Obj]) -> bool:
    if len(template_vcts) != len(sandbox_vcts):
        return False
    for want, have in zip(template_vcts, sandbox_vcts, strict=True):
        if (want.get("metadata") or {}).get("name") != (have.get("metadata") or {}).get("name"):
            return False
        if not semantic_equal(want.get("spec"), have.get("spec")):
            return False
    return True


def blueprint_matches(template: Obj, sandbox_spec: Obj) -> bool:
    """Whether ``sandbox_spec`` is what ``template`` makes today (``compareSandboxBlueprint``).

    Compares the pod spec after secure defaults, the volume claim templates index by index
    (name and spec; their labels and annotations are ignored) and ``service`` (unset differs
    from ``false``). Pod template metadata is not compared: metadata edits never make a
    Sandbox stale.
    """
    spec = template.get("spec") or {}
    want_pod = apply_secure_defaults(
        template, copy.deepcopy((spec.get("podTemplate") or {}).get("spec") or {})
    )
    have_pod = (sandbox_spec.get("podTemplate") or {}).get("spec") or {}
    if not semantic_equal(want_pod, have_pod):
        return False
    if not _vcts_match(
        list(spec.get("volumeClaimTemplates") or []),
        list(sandbox_spec.get("volumeClaimTemplates") or []),
    ):
        return False
    return spec.get("service") == sandbox_spec.get("service")


def update_strategy(pool: Obj) -> str:
    """``Recreate`` when the pool asks for it; anything else (unset, unknown) is ``OnReplenish``."""
    strategy = ((pool.get("spec") or {}).get("updateStrategy") or {}).get("type")
    return RECREATE if strategy == RECREATE else ON_REPLENISH


def system_labels_for_template(template_name: str) -> dict[str, str]:
    """The label every Sandbox (and Pod) made from ``template_name`` carries."""
    return {c.LABEL_SANDBOX_TEMPLATE_REF_HASH: template_ref_hash(template_name)}
