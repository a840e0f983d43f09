"""Label selector strings (``app=x,tier!=db,!legacy``) matched against an object's labels.

The in-memory API server filters LIST and WATCH with it; kept apart from
:mod:`~kube_agent_sandbox.controller.runtime.fake` because it is a pure function of the object
and the selector.
"""

from __future__ import annotations

from kube_agent_sandbox.controller.runtime.types import Obj


def label_selector_matches(obj: Obj, selector: str | None) -> bool:
    """Whether ``obj``'s labels satisfy a label selector string (none matches everything).

    Equality-based terms only, comma-separated: ``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``.
    """
    if not selector:
        return True
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in selector.split(","):
        term = term.strip()
        if not term:
            continue
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in term:
            k, v = term.split("=", 1)
            if labels.get(k.strip().rstrip("=")) != v.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True
