"""Controller references between extension objects (pool -> Sandbox, claim -> Sandbox, ...).

Ownership is always decided by the controller reference's group, kind and UID, never by name
or labels alone, and any version of the extensions group counts (v1alpha1 references written
by older controllers are still ours).
"""

from __future__ import annotations

from typing import Any

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime.objects import controller_ref, group_of, meta
from kube_agent_sandbox.controller.runtime.types import Obj


def controller_ref_to(owner: Obj, *, kind: str) -> dict[str, Any]:
    """The controller reference a child of ``owner`` (an extensions object of ``kind``) gets."""
    owner_meta = meta(owner)
    return {
        "apiVersion": c.EXTENSIONS_API_VERSION,
        "kind": kind,
        "name": owner_meta.get("name", ""),
        "uid": owner_meta.get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }


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


def is_controlled_by(obj: Obj, owner: Obj) -> bool:
    """True when the controller reference of ``obj`` carries ``owner``'s UID."""
    ref = controller_ref(obj)
    uid = meta(owner).get("uid")
    return ref is not None and bool(uid) and ref.get("uid") == uid
