"""Cache indexes of the warm pool controller.

Members are found by their pool label through an index, so a pass decodes only its own pool's
Sandboxes, never the whole namespace; pools are found by template name the same way when a
template changes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime import Obj, meta, namespace_of
from kube_agent_sandbox.extensions.warmpool.blueprint import template_name_of

__all__ = [
    "MEMBER_INDEX",
    "TEMPLATE_REF_INDEX",
    "member_index",
    "member_key",
    "template_ref_index",
    "template_ref_key",
]

MEMBER_INDEX: Final = "warmpool:member"
"""Sandboxes by ``<namespace>/<warm-pool-sandbox label value>``."""

TEMPLATE_REF_INDEX: Final = "warmpool:templateRef"
"""SandboxWarmPools by ``<namespace>/<spec.sandboxTemplateRef.name>``."""


def member_key(namespace: str, pool_name_hash: str) -> str:
    """The :data:`MEMBER_INDEX` value of a pool's members."""
    return f"{namespace}/{pool_name_hash}"


def member_index(sandbox: Obj) -> Iterable[str]:
    """Index function of :data:`MEMBER_INDEX`."""
    value = (meta(sandbox).get("labels") or {}).get(c.LABEL_WARM_POOL_SANDBOX)
    return (member_key(namespace_of(sandbox), str(value)),) if value else ()


def template_ref_key(namespace: str, template_name: str) -> str:
    """The :data:`TEMPLATE_REF_INDEX` value of pools using ``template_name``."""
    return f"{namespace}/{template_name}"


def template_ref_index(pool: Obj) -> Iterable[str]:
    """Index function of :data:`TEMPLATE_REF_INDEX`."""
    name = template_name_of(pool)
    return (template_ref_key(namespace_of(pool), name),) if name else ()
