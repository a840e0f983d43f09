"""What a pause keeps: the ``snapshot-on-suspend`` annotations the gateway writes.

On E2B a pause (and an auto-pause) keeps the memory unless asked not to (``memory: false``;
``autoPauseMemory: false`` at create). Here the cluster's state keeper does the saving
(:mod:`kube_agent_sandbox.api.keepstate`), so the gateway only chooses the opt-in:

* ``--pause-keeps-memory`` (needs ``--pause-keeps-filesystem``): ``Memory`` with the fallback
  ``Filesystem``, so a node that cannot checkpoint still keeps the files (the Sandbox's
  ``suspend-snapshot`` progress then says ``mode: Filesystem``, and a ``MemoryNotKept`` Event
  names what the node lacks);
* else ``--pause-keeps-filesystem``: ``Filesystem``;
* else nothing: only the volumes outlive the Pod.

The choice is written on the claim at create (passed to its Sandbox: what auto-pause keeps)
and on the Sandbox in a pause's own write (what that pause keeps); a resume puts the claim's
back, so one ``memory: false`` pause does not change what later auto-pauses keep.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from kube_agent_sandbox.api import keepstate as k
from kube_agent_sandbox.gateway.config import GatewayOptions

KEPT_HEADER: Final = "X-Agent-Sandbox-Kept"
"""The answer to a pause: what it asked the cluster to keep (:data:`KEPT_MEMORY`,
:data:`KEPT_FILES` or :data:`KEPT_VOLUMES`); the outcome is on the Sandbox."""
KEPT_MEMORY: Final = "memory"
KEPT_FILES: Final = "filesystem"
KEPT_VOLUMES: Final = "volumes"

_KEYS: Final = (k.ANNOTATION_SNAPSHOT_ON_SUSPEND, k.ANNOTATION_SNAPSHOT_ON_SUSPEND_FALLBACK)


def kept(options: GatewayOptions, *, memory: bool) -> str:
    """What a suspend asking for ``memory`` (or not) keeps under these options."""
    if not options.pause_keeps_filesystem:
        return KEPT_VOLUMES
    return KEPT_MEMORY if memory and options.pause_keeps_memory else KEPT_FILES


def opt_in(options: GatewayOptions, *, memory: bool) -> dict[str, str | None]:
    """The annotations of a suspend asking for ``memory`` (None: remove; ``{}``: leave all)."""
    what = kept(options, memory=memory)
    if what == KEPT_MEMORY:
        return {
            k.ANNOTATION_SNAPSHOT_ON_SUSPEND: k.MODE_MEMORY,
            k.ANNOTATION_SNAPSHOT_ON_SUSPEND_FALLBACK: k.MODE_FILESYSTEM,
        }
    if what == KEPT_FILES:
        return {
            k.ANNOTATION_SNAPSHOT_ON_SUSPEND: k.MODE_FILESYSTEM,
            k.ANNOTATION_SNAPSHOT_ON_SUSPEND_FALLBACK: None,
        }
    return {}


def claim_opt_in(options: GatewayOptions, *, memory: bool) -> dict[str, str]:
    """The annotations of a new claim (what its auto-pauses keep)."""
    return {key: v for key, v in opt_in(options, memory=memory).items() if v is not None}


def restored_opt_in(claim_annotations: Mapping[str, str]) -> dict[str, str | None]:
    """The claim's opt-in, to put back on its Sandbox at a resume (``{}``: the claim has none,
    so the Sandbox keeps what its pauses wrote, as before claims carried it)."""
    if k.ANNOTATION_SNAPSHOT_ON_SUSPEND not in claim_annotations:
        return {}
    return {key: claim_annotations.get(key) for key in _KEYS}
