"""Who controls an object: controller references, compared by the owner's UID.

A child is modified or deleted only when its controller reference carries the owner's UID, never
because it merely has the right name or labels; every controller classifies its children the
same way, with the helpers below (controller-runtime's ``metav1.GetControllerOf`` and
``controllerutil.SetControllerReference``).
"""

from __future__ import annotations

import enum
import json
from typing import Any

from kube_agent_sandbox.controller.runtime.objects import group_of, meta
from kube_agent_sandbox.controller.runtime.types import Obj


class Ownership(enum.Enum):
    """How an object relates to a would-be owner."""

    OWNED = "owned"
    UNOWNED = "unowned"
    OTHER = "other"


def quote(value: str) -> str:
    """Quote a string for an error message the way Go's ``%q`` does for printable text."""
    return json.dumps(value, ensure_ascii=False)


def controller_ref(obj: Obj) -> dict[str, Any] | None:
    """The ownerReference with ``controller: true``, if any."""
    refs = meta(obj).get("ownerReferences")
    if not refs:
        return None
    for ref in refs:
        if isinstance(ref, dict) and ref.get("controller") is True:
            return ref
    return None


def check_ownership(obj: Obj, owner: Obj) -> tuple[Ownership, Obj | None]:
    """Classify ``obj`` against ``owner`` by the controller reference's UID.

    Returns:
        The classification and the controller reference (None when unowned).
    """
    ref = controller_ref(obj)
    if ref is None:
        return Ownership.UNOWNED, None
    if ref.get("uid") == owner.get("metadata", {}).get("uid"):
        return Ownership.OWNED, ref
    return Ownership.OTHER, ref


def is_owned_by(obj: Obj | None, owner: Obj) -> bool:
    """True when ``obj`` exists and its controller is ``owner``."""
    return obj is not None and check_ownership(obj, owner)[0] is Ownership.OWNED


def is_controlled_by(obj: Obj, owner: Obj) -> bool:
    """True when the controller reference of ``obj`` carries ``owner``'s UID.

    Unlike :func:`is_owned_by`, an owner without a UID (not created yet) controls nothing.
    """
    ref = controller_ref(obj)
    uid = meta(owner).get("uid")
    return ref is not None and bool(uid) and ref.get("uid") == uid


def controller_reference(owner: Obj, *, api_version: str, kind: str) -> dict[str, Any]:
    """The controller reference a child of ``owner`` (of ``api_version``/``kind``) carries."""
    owner_meta = meta(owner)
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": owner_meta.get("name", ""),
        "uid": owner_meta.get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def set_controller_reference(obj: Obj, ref: Obj) -> None:
    """Make ``ref`` the controller reference of ``obj`` (in place), like ``SetControllerReference``.

    An existing reference to the same object (same group, kind and name; any version) is
    replaced; other references are kept. The caller must have checked that ``obj`` has no other
    controller.
    """
    group = group_of(str(ref.get("apiVersion", "")))
    obj_meta = meta(obj)
    refs: list[Any] = [
        existing
        for existing in obj_meta.get("ownerReferences") or ()
        if not (
            group_of(existing.get("apiVersion", "")) == group
            and existing.get("kind") == ref.get("kind")
            and existing.get("name") == ref.get("name")
        )
    ]
    refs.append(ref)
    obj_meta["ownerReferences"] = refs
