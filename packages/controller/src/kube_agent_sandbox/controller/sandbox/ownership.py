"""Who controls an object: controller references, ownership checks and adoption rules.

Every child the controller touches (Pod, Service, PVC) goes through the same three-way
classification, compared by owner UID, so a Pod that merely has the right name or labels is
never modified or deleted unless this Sandbox controls it or it was explicitly marked adoptable.
"""

from __future__ import annotations

import enum
import json
from typing import Any

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime.objects import controller_ref, group_of
from kube_agent_sandbox.controller.runtime.types import Obj


class Ownership(enum.Enum):
    """How an object relates to a Sandbox."""

    OWNED = "owned"
    UNOWNED = "unowned"
    OTHER = "other"


def quote(value: str) -> str:
    """Quote a string for an error message the way Go's ``%q`` does for printable text."""
    return json.dumps(value, ensure_ascii=False)


def check_ownership(obj: Obj, sandbox: Obj) -> tuple[Ownership, Obj | None]:
    """Classify ``obj`` against ``sandbox`` by the controller reference's UID.

    Returns:
        The classification and the controller reference (None when unowned).
    """
    ref = controller_ref(obj)
    if ref is None:
        return Ownership.UNOWNED, None
    if ref.get("uid") == sandbox.get("metadata", {}).get("uid"):
        return Ownership.OWNED, ref
    return Ownership.OTHER, ref


def is_owned_by(obj: Obj | None, sandbox: Obj) -> bool:
    """True when ``obj`` exists and its controller is ``sandbox``."""
    return obj is not None and check_ownership(obj, sandbox)[0] is Ownership.OWNED


def sandbox_controller_ref(sandbox: Obj) -> Obj:
    """The controller reference a child of ``sandbox`` carries."""
    meta = sandbox.get("metadata", {})
    return {
        "apiVersion": c.SANDBOX_API_VERSION,
        "kind": c.KIND_SANDBOX,
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def set_controller_reference(obj: Obj, sandbox: Obj) -> None:
    """Make ``sandbox`` the controller of ``obj`` (in place), like ``ctrl.SetControllerReference``.

    An existing reference to the same object (same group, kind and name) is replaced; other
    references are kept. The caller must have checked that ``obj`` has no other controller.
    """
    ref = sandbox_controller_ref(sandbox)
    meta = obj.setdefault("metadata", {})
    refs: list[Any] = [
        existing
        for existing in meta.get("ownerReferences") or ()
        if not (
            group_of(existing.get("apiVersion", "")) == c.GROUP
            and existing.get("kind") == c.KIND_SANDBOX
            and existing.get("name") == ref["name"]
        )
    ]
    refs.append(ref)
    meta["ownerReferences"] = refs


def may_adopt(obj: Obj, name_hash: str) -> bool:
    """An unowned object may be adopted if marked adoptable or carrying our tracking label."""
    labels = obj.get("metadata", {}).get("labels") or {}
    return (
        labels.get(c.LABEL_ADOPTABLE) == "true"
        or labels.get(c.LABEL_SANDBOX_NAME_HASH) == name_hash
    )


def owned_by_other_message(kind: str, name: str, ref: Obj, sandbox_name: str) -> str:
    """Upstream's text for a child controlled by someone else (``pod "x" is owned by ...``)."""
    return (
        f"{kind} {quote(name)} is owned by {ref.get('kind', '')}/{ref.get('name', '')} "
        f"(UID: {ref.get('uid', '')}), not by sandbox {quote(sandbox_name)}"
    )


def cannot_adopt_message(kind: str, name: str) -> str:
    """Upstream's text for an unowned child without adoption authorization."""
    return (
        f"cannot adopt unowned {kind} {quote(name)}: missing required pool authorization label "
        f"({quote(c.LABEL_ADOPTABLE)}) or sandbox tracking label "
        f"({quote(c.LABEL_SANDBOX_NAME_HASH)})"
    )
