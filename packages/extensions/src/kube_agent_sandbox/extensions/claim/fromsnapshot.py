"""A claim created from a snapshot: its Sandbox runs the snapshot's image.

Upstream's schemas stay as they are, so a claim names its snapshot with an annotation,
``extensions.agents.x-k8s.io/snapshot: <SandboxSnapshot name>`` (same namespace). Such a claim
never adopts a warm Sandbox (that one runs the template's image); its cold Sandbox is the
template's with the first container's ``image`` replaced by the snapshot's pinned reference
``registry/repository@sha256:...``. The Pod pulls it with the template's ``imagePullSecrets``,
plus the Secret named by ``extensions.agents.x-k8s.io/snapshot-pull-secret`` on the claim
when set (a ``kubernetes.io/dockerconfigjson`` Secret of the registry, in the claim's namespace).
"""

from __future__ import annotations

from typing import Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api import keepstate as k
from kube_agent_sandbox.api.resources import SANDBOX_SNAPSHOTS
from kube_agent_sandbox.controller.runtime import ApiError, Client, Obj, meta, quote
from kube_agent_sandbox.extensions.claim.errors import ReconcilerError, SnapshotNotReadyError

ANNOTATION_SNAPSHOT: Final = c.ANNOTATION_SNAPSHOT
ANNOTATION_SNAPSHOT_PULL_SECRET: Final = k.ANNOTATION_SNAPSHOT_PULL_SECRET
KEPT_STATE_ANNOTATIONS: Final = (
    k.ANNOTATION_SNAPSHOT_ON_SUSPEND,
    k.ANNOTATION_SNAPSHOT_ON_SUSPEND_FALLBACK,
    k.ANNOTATION_SNAPSHOT_PULL_SECRET,
)
"""What a claim or its template passes to its Sandbox for a suspend that keeps its state."""


def snapshot_of(claim: Obj) -> str:
    """The SandboxSnapshot the claim starts from (``""``: none)."""
    return str((meta(claim).get("annotations") or {}).get(ANNOTATION_SNAPSHOT) or "")


async def snapshot_image(client: Client, namespace: str, name: str) -> str:
    """The pinned image of a Ready SandboxSnapshot.

    Raises:
        SnapshotNotReadyError: It does not exist, is not Ready (yet), or has no image.
        ReconcilerError: It cannot be read.
    """
    try:
        snapshot = await client.get(SANDBOX_SNAPSHOTS, namespace, name)
    except ApiError as exc:
        if exc.not_found:
            raise SnapshotNotReadyError(f"SandboxSnapshot {quote(name)} not found") from exc
        raise ReconcilerError(f"failed to read SandboxSnapshot {quote(name)}: {exc}") from exc
    status = snapshot.get("status") or {}
    phase = status.get("phase") or "Pending"
    image = status.get("image")
    if phase != "Ready" or not image:
        raise SnapshotNotReadyError(f"SandboxSnapshot {quote(name)} is {phase}, not Ready")
    return str(image)


def apply_snapshot(sandbox: Obj, claim: Obj, image: str) -> None:
    """Run the Sandbox's first container from ``image`` (and pull with the claim's Secret).

    Raises:
        ReconcilerError: The template has no container to replace.
    """
    pod_spec = sandbox["spec"]["podTemplate"].setdefault("spec", {})
    containers = pod_spec.get("containers") or []
    if not containers:
        raise ReconcilerError("the template has no container to start from the snapshot")
    containers[0]["image"] = image
    secret = (meta(claim).get("annotations") or {}).get(ANNOTATION_SNAPSHOT_PULL_SECRET)
    if secret:
        pulls = pod_spec.setdefault("imagePullSecrets", [])
        if {"name": secret} not in pulls:
            pulls.append({"name": str(secret)})


def kept_state_annotations(claim: Obj, template: Obj | None) -> dict[str, str]:
    """The keep-state annotations the claim's Sandbox gets: the claim's, else its template's.

    Key by key, so a claim may opt in while its template names the pull Secret. Only set
    values: a claim and template without them leave a Sandbox's own (the gateway's) alone.
    """
    found: dict[str, str] = {}
    for source in (template, claim):  # the claim last: it wins
        annotations = (meta(source).get("annotations") or {}) if source is not None else {}
        for key in KEPT_STATE_ANNOTATIONS:
            if annotations.get(key):
                found[key] = str(annotations[key])
    return found
