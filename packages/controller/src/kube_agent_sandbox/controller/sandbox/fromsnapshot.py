"""The core side of a Sandbox created from a snapshot: no Pod until the image is resolved.

A Sandbox annotated ``extensions.agents.x-k8s.io/snapshot: <SandboxSnapshot>`` starts its first
container from the snapshot's image. The extensions' resolver reads the snapshot and writes
``resume-from`` (``kube_agent_sandbox.api.fromsnapshot``); the Pod is then made as on a resume
after a kept suspend (:func:`~kube_agent_sandbox.controller.sandbox.keepstate.apply_resume_from`).
Until then no Pod is made, so none ever runs the template's image by mistake. Only when this
process runs the resolver (``resolver=True``): without it the annotation is ignored (logged) and
the Pod comes from the template, as upstream's would.
"""

from __future__ import annotations

import logging

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api import fromsnapshot as f
from kube_agent_sandbox.controller.runtime import (
    FALSE,
    Obj,
    meta,
    name_of,
    namespace_of,
    new_condition,
)

log = logging.getLogger(__name__)


def waiting_condition(sandbox: Obj, *, resolver: bool) -> Obj | None:
    """The Ready condition of a Sandbox whose Pod waits for its snapshot's image.

    Args:
        sandbox: A running Sandbox that has no Pod.
        resolver: Whether this process runs the extensions' snapshot resolver.

    Returns:
        None when the Pod may be made now (no snapshot named, its image resolved, a Pod made
        before, or no resolver); else Ready False with reason ``WaitingForSnapshot`` and what
        it waits for.
    """
    snapshot = f.awaited_snapshot(sandbox)
    if not snapshot:
        return None
    if not resolver:
        log.info(
            "sandbox %s/%s names SandboxSnapshot %s, but this controller runs no snapshot "
            "extension (--extensions --snapshot-registry): its Pod runs the template's image",
            namespace_of(sandbox),
            name_of(sandbox),
            snapshot,
        )
        return None
    message = f"the Pod waits for SandboxSnapshot {snapshot}"
    wait = str((meta(sandbox).get("annotations") or {}).get(f.ANNOTATION_SNAPSHOT_WAIT) or "")
    if wait:
        message += f": {wait}"
    return new_condition(
        c.CONDITION_READY,
        FALSE,
        f.REASON_WAITING_FOR_SNAPSHOT,
        message,
        observed_generation=int(meta(sandbox).get("generation") or 0),
    )
