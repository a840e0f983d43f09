"""Controller references between extension objects (pool -> Sandbox, claim -> Sandbox, ...).

Ownership is always decided by the controller reference's group, kind and UID, never by name
or labels alone, and any version of the extensions group counts (v1alpha1 references written
by older controllers are still ours).
"""

from __future__ import annotations

from typing import Any

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime import (
    Obj,
    controller_ref,
    controller_reference,
    group_of,
)


def controller_ref_to(owner: Obj, *, kind: str) -> dict[str, Any]:
    """The controller reference a child of ``owner`` (an extensions object of ``kind``) gets."""
    return controller_reference(owner, api_version=c.EXTENSIONS_API_VERSION, kind=kind)


def is_extension_ref(ref: Obj | None, *, kind: str) -> bool:
    """True when ``ref`` points at an object of ``kind`` in the extensions group (any version)."""
    if ref is None:
        return False
    return ref.get("kind") == kind and group_of(str(ref.get("apiVersion", ""))) == (
        c.EXTENSIONS_GROUP
    )


def controlled_by_kind(obj: Obj, *, kind: str) -> Obj | None:
    """The controller reference of ``obj`` when its controller is an extensions ``kind``."""
    ref = controller_ref(obj)
    return ref if is_extension_ref(ref, kind=kind) else None
