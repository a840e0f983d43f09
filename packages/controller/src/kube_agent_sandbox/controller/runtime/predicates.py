"""Predicates that filter a watch's events, as controller-runtime's ``predicate`` package offers.

A predicate is called as ``(None, new)`` on add, ``(old, new)`` on update and ``(old, None)`` on
delete; the event is handled when it returns True (see
:data:`~kube_agent_sandbox.controller.runtime.types.Predicate`).
"""

from __future__ import annotations

from kube_agent_sandbox.controller.runtime.objects import meta
from kube_agent_sandbox.controller.runtime.types import Obj


def generation_changed(old: Obj | None, new: Obj | None) -> bool:
    """Creates and deletes pass; an update passes when ``metadata.generation`` changed.

    controller-runtime's ``GenerationChangedPredicate``: status-only writes do not bump the
    generation of an object with a status subresource, so they are filtered out.
    """
    if old is None or new is None:
        return True
    return meta(old).get("generation") != meta(new).get("generation")
