"""A Sandbox created from a snapshot: the annotations the core Sandbox controller and the
extensions' snapshot resolver exchange.

Upstream's Sandbox schema has no field for it and the core controller must not import the
extensions, so, as for a suspend that keeps the state (:mod:`kube_agent_sandbox.api.keepstate`):

* :data:`ANNOTATION_SNAPSHOT` (the user): the SandboxSnapshot (same namespace) the Sandbox's
  first container starts from, the annotation a claim takes too.
* :data:`ANNOTATION_SNAPSHOT_WAIT` (the resolver): why the Sandbox cannot start from it yet
  (not found, not Ready, Failed); shown in the Sandbox's Ready condition.
* :data:`~kube_agent_sandbox.api.keepstate.ANNOTATION_RESUME_FROM` (the resolver, once the
  snapshot is Ready): the pinned image, the same record a resume after a kept suspend reads.

The core controller makes no Pod for a Sandbox that names a snapshot and has no
``resume-from`` yet (Ready False, :data:`REASON_WAITING_FOR_SNAPSHOT`); only when its own process
runs the resolver (``--extensions`` with ``--snapshot-registry``), so it never waits for nobody.
"""

from __future__ import annotations

from typing import Any, Final

from kube_agent_sandbox.api import constants
from kube_agent_sandbox.api.keepstate import ANNOTATION_RESUME_FROM, ResumeFrom

__all__ = [
    "ANNOTATION_SNAPSHOT",
    "ANNOTATION_SNAPSHOT_WAIT",
    "REASON_WAITING_FOR_SNAPSHOT",
    "awaited_snapshot",
]

ANNOTATION_SNAPSHOT: Final = constants.ANNOTATION_SNAPSHOT
ANNOTATION_SNAPSHOT_WAIT: Final = f"{constants.EXTENSIONS_GROUP}/snapshot-wait"
REASON_WAITING_FOR_SNAPSHOT: Final = "WaitingForSnapshot"
"""The Ready condition's reason while the Sandbox waits for its SandboxSnapshot."""


def awaited_snapshot(sandbox: dict[str, Any]) -> str:
    """The SandboxSnapshot whose image the Sandbox's Pod still waits for (``""``: none).

    None once ``resume-from`` is written, and none for a Sandbox that has had a Pod (its status
    has a ``selector``): the annotation is read once, before the first Pod, as for a claim.
    """
    annotations = (sandbox.get("metadata") or {}).get("annotations") or {}
    if ResumeFrom.parse(annotations.get(ANNOTATION_RESUME_FROM)) is not None:
        return ""
    if (sandbox.get("status") or {}).get("selector"):
        return ""
    return str(annotations.get(ANNOTATION_SNAPSHOT) or "")
