"""The Sandbox's side of ownership: its controller reference and its adoption rules.

Every child the controller touches (Pod, Service, PVC) goes through the runtime's three-way
classification (:func:`~kube_agent_sandbox.controller.runtime.check_ownership`, by owner UID),
so a Pod that merely has the right name or labels is never modified or deleted unless this
Sandbox controls it or it was explicitly marked adoptable.
"""

from __future__ import annotations

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime import Obj, controller_reference, quote


def sandbox_controller_ref(sandbox: Obj) -> Obj:
    """The controller reference a child of ``sandbox`` carries."""
    return controller_reference(sandbox, api_version=c.SANDBOX_API_VERSION, kind=c.KIND_SANDBOX)


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
