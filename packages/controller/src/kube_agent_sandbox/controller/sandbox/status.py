"""When and how the Sandbox status is written (spec section 3.1 step 8).

The status is the controller's only output most clients read, and writing it is the
controller's most frequent API call. So: no write when nothing changed semantically, no write
for a change of ``nodeName`` alone while the Sandbox is not Ready (it rides along with the next
write, normally the Ready transition), and the write is a merge patch of the status subresource
without a resourceVersion (this controller is the sole status writer).
"""

from __future__ import annotations

from typing import Any

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime.mergepatch import create_merge_patch
from kube_agent_sandbox.controller.runtime.types import Obj
from kube_agent_sandbox.controller.sandbox.conditions import is_condition_true
from kube_agent_sandbox.controller.sandbox.semantic import is_empty, semantic_equal

STATUS_FIELDS = ("serviceFQDN", "service", "conditions", "selector", "podIPs", "nodeName")


def normalized(status: Any) -> Obj:
    """The status as Go would serialise it: fields with empty values omitted."""
    if not isinstance(status, dict):
        return {}
    return {k: v for k, v in status.items() if not is_empty(v)}


def node_name_only_change(old: Obj, new: Obj) -> bool:
    """True when ``nodeName`` is the only semantic difference between two statuses."""
    if (old.get("nodeName") or "") == (new.get("nodeName") or ""):
        return False
    scratch = dict(new)
    scratch["nodeName"] = old.get("nodeName")
    return semantic_equal(old, scratch)


def status_patch(old: Any, new: Any) -> Obj | None:
    """The status merge patch to send, or None when no write is due.

    Args:
        old: The status as read at the start of the reconcile.
        new: The status computed by the reconcile.

    Returns:
        ``{"status": {...}}`` or None.
    """
    old_n, new_n = normalized(old), normalized(new)
    if semantic_equal(old_n, new_n):
        return None
    if node_name_only_change(old_n, new_n) and not is_condition_true(
        new_n.get("conditions"), c.CONDITION_READY
    ):
        return None
    diff = create_merge_patch(old_n, new_n)
    if not diff:
        return None
    return {"status": diff}
