"""Which snapshots the state keeper made may go: the selection, free of I/O.

Each suspend of an opted-in Sandbox leaves a SandboxSnapshot ``<sandbox>-suspend-<generation>``
(and, after a Memory save fell back, the failed Memory one beside its ``-filesystem``
replacement); each holds an image in the registry. The keeper deletes them (their finalizer
deletes the image) when nothing can need them any more:

* superseded: a newer save of the same Sandbox is the one its ``resume-from`` names, so every
  save of an older generation goes (a failed Memory record goes with the save of its
  generation, never before);
* orphaned: the Sandbox is gone, so all its saves go.

Never deleted, whatever the rule: a snapshot annotated ``extensions.agents.x-k8s.io/keep:
"true"``; one a SandboxClaim or Sandbox names (a claim's ``extensions.agents.x-k8s.io/snapshot``,
a Sandbox's ``resume-from`` or ``suspend-snapshot``) or whose image a Sandbox's template runs;
one not Ready or Failed yet (its Pod may still be committed); one the keeper did not make
(explicit snapshots outlive their Sandbox).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api import keepstate as k
from kube_agent_sandbox.controller.runtime import Obj, is_terminating, meta, name_of
from kube_agent_sandbox.extensions.snapshot import status as s

ANNOTATION_SAVED_ON_SUSPEND: Final = "extensions.agents.x-k8s.io/saved-on-suspend"
"""On a SandboxSnapshot the keeper made: the UID of the Pod it saves."""

_SUFFIX: Final = re.compile(r"-suspend-(\d+)(?:-filesystem)?$")


def generation_of(snapshot_name: str) -> int | None:
    """The Sandbox generation a keeper-made snapshot's name saves (None: not such a name).

    The suffix survives the cut of a long Sandbox name, so it is read from the end.
    """
    found = _SUFFIX.search(snapshot_name)
    return int(found.group(1)) if found else None


def is_saved_on_suspend(snapshot: Obj, sandbox: str) -> bool:
    """Whether the keeper made ``snapshot`` when ``sandbox`` was suspended."""
    annotations = meta(snapshot).get("annotations") or {}
    return (
        ANNOTATION_SAVED_ON_SUSPEND in annotations
        and s.spec_of(snapshot).get("sandboxName") == sandbox
    )


@dataclass
class References:
    """What a namespace's Sandboxes and claims still name or run.

    Attributes:
        names: SandboxSnapshot names (claims' sources, Sandboxes' saves).
        images: Container images of Sandboxes' templates (a Sandbox made from a snapshot runs
            its pinned image, even when its claim is gone).
    """

    names: set[str] = field(default_factory=set)
    images: set[str] = field(default_factory=set)

    def add_claims(self, claims: Iterable[Obj]) -> None:
        """Note the snapshot each claim starts from."""
        for claim in claims:
            source = (meta(claim).get("annotations") or {}).get(c.ANNOTATION_SNAPSHOT)
            if source:
                self.names.add(str(source))

    def add_sandboxes(self, sandboxes: Iterable[Obj]) -> None:
        """Note each Sandbox's saves (the one it resumes from, the one in progress), the
        snapshot it starts from, and the images its template runs."""
        for sandbox in sandboxes:
            annotations = meta(sandbox).get("annotations") or {}
            resume = k.ResumeFrom.parse(annotations.get(k.ANNOTATION_RESUME_FROM))
            if resume is not None:
                self.names.add(resume.snapshot)
                self.images.add(resume.image)
            progress = k.SuspendProgress.parse(annotations.get(k.ANNOTATION_SUSPEND_SNAPSHOT))
            if progress is not None:
                self.names.add(progress.snapshot)
            if annotations.get(c.ANNOTATION_SNAPSHOT):
                self.names.add(str(annotations[c.ANNOTATION_SNAPSHOT]))
            spec = ((sandbox.get("spec") or {}).get("podTemplate") or {}).get("spec") or {}
            for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
                if container.get("image"):
                    self.images.add(str(container["image"]))


def candidates(sandbox: str, snapshots: Iterable[Obj], *, before: int | None) -> list[Obj]:
    """The keeper's final snapshots of ``sandbox`` that a rule lets go, before references.

    Args:
        sandbox: The Sandbox's name.
        snapshots: The namespace's SandboxSnapshots.
        before: Superseded: only saves of a generation below this one; None: the Sandbox is
            gone, all of them.
    """
    found = []
    for snapshot in snapshots:
        generation = generation_of(name_of(snapshot))
        annotations = meta(snapshot).get("annotations") or {}
        if (
            not is_saved_on_suspend(snapshot, sandbox)
            or is_terminating(snapshot)
            or generation is None
            or (before is not None and generation >= before)
            or s.phase_of(snapshot) not in s.FINAL_PHASES
            or annotations.get(k.ANNOTATION_KEEP) == "true"
        ):
            continue
        found.append(snapshot)
    return found


def unreferenced(snapshots: Iterable[Obj], references: References) -> list[Obj]:
    """Those of ``snapshots`` nothing names and no template runs."""
    return [
        snapshot
        for snapshot in snapshots
        if name_of(snapshot) not in references.names
        and str(s.status_of(snapshot).get("image") or "") not in references.images
    ]
