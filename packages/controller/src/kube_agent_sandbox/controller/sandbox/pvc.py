"""PersistentVolumeClaims made from a Sandbox's volumeClaimTemplates (upstream's reconcilePVCs).

PVCs are created once and never updated or deleted by the controller: they hold the data
that survives suspend/resume and expiry, and go away only with the Sandbox (garbage
collection through the controller reference).
"""

from __future__ import annotations

import re
from typing import Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime import Obj
from kube_agent_sandbox.controller.sandbox.ownership import sandbox_controller_ref
from kube_agent_sandbox.controller.sandbox.pod import pvc_name

MAX_PVC_NAME_LENGTH: Final = 253
_DNS_SUBDOMAIN_RE: Final = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)


def pvc_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a PVC (a DNS subdomain of at most 253 characters), or None."""
    if len(name) > MAX_PVC_NAME_LENGTH:
        return f"must be no more than {MAX_PVC_NAME_LENGTH} characters (has {len(name)})"
    if not _DNS_SUBDOMAIN_RE.match(name):
        return "must be a lowercase RFC 1123 subdomain"
    return None


def desired_pvc(sandbox: Obj, template: Obj, name_hash: str) -> Obj:
    """The PVC to create for one volumeClaimTemplate."""
    meta = sandbox.get("metadata", {})
    tmeta = template.get("metadata") or {}
    labels = dict(tmeta.get("labels") or {})
    labels[c.LABEL_SANDBOX_NAME_HASH] = name_hash
    pvc_meta: Obj = {
        "name": pvc_name(tmeta.get("name", ""), meta.get("name", "")),
        "namespace": meta.get("namespace", ""),
        "labels": labels,
    }
    if tmeta.get("annotations"):
        pvc_meta["annotations"] = dict(tmeta["annotations"])
    pvc_meta["ownerReferences"] = [sandbox_controller_ref(sandbox)]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": pvc_meta,
        "spec": dict(template.get("spec") or {}),
    }
