"""The core side of a suspend that keeps the filesystem: when to keep the Pod, what to run after.

The extensions' state keeper saves a suspended, opted-in Sandbox's container as a
SandboxSnapshot and reports through annotations (``kube_agent_sandbox.api.keepstate``). This
module only reads them, so the core controller needs no import of the extensions:

* :func:`kept_condition`: a suspended Sandbox's owned Pod is kept while the Sandbox opts in and
  the report does not say ``Saved`` for this generation and this Pod. Only when this process
  runs the keeper (``keeper=True``): without it nobody would ever report, so the opt-in is
  ignored (logged) and the Pod goes as upstream's would.
* :func:`apply_resume_from`: the Pod created on resume runs the saved image.
"""

from __future__ import annotations

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api import keepstate as k
from kube_agent_sandbox.controller.runtime import FALSE, Obj, meta, new_condition, uid_of


def opt_in(sandbox: Obj) -> str:
    """The Sandbox's ``snapshot-on-suspend`` value (``""``: not opted in)."""
    return str((meta(sandbox).get("annotations") or {}).get(k.ANNOTATION_SNAPSHOT_ON_SUSPEND) or "")


def kept_condition(sandbox: Obj, pod: Obj, *, keeper: bool) -> Obj | None:
    """The Suspended condition of a suspended Sandbox whose owned, running Pod is kept.

    Args:
        sandbox: The suspended Sandbox.
        pod: Its owned Pod, not terminating.
        keeper: Whether this process runs the state keeper.

    Returns:
        None when the Pod may be deleted now (no opt-in, no keeper, or the state is saved);
        else the condition saying why it stays (saving, or the save failed and why).
    """
    if not keeper or not opt_in(sandbox):
        return None
    annotations = meta(sandbox).get("annotations") or {}
    generation = int(meta(sandbox).get("generation") or 0)
    pod_uid = uid_of(pod) or ""
    progress = k.SuspendProgress.parse(annotations.get(k.ANNOTATION_SUSPEND_SNAPSHOT))
    if progress is not None and progress.about(generation, pod_uid):
        if progress.phase == k.PHASE_SAVED:
            saved = k.ResumeFrom.parse(annotations.get(k.ANNOTATION_RESUME_FROM))
            if saved is not None and saved.pod == pod_uid:
                return None
        if progress.phase == k.PHASE_FAILED:
            return new_condition(
                c.CONDITION_SUSPENDED,
                FALSE,
                k.REASON_STATE_NOT_SAVED,
                f"the Pod is kept and the Sandbox stays usable: {progress.message}",
                observed_generation=generation,
            )
        message = f"the Pod is kept until SandboxSnapshot {progress.snapshot} is Ready"
    else:
        message = "the Pod is kept until its filesystem is saved in a SandboxSnapshot"
    return new_condition(
        c.CONDITION_SUSPENDED, FALSE, k.REASON_SAVING_STATE, message, observed_generation=generation
    )


def apply_resume_from(sandbox: Obj, pod_spec: Obj) -> bool:
    """Run the saved container from its snapshot's image (in place); whether it applied.

    It applies when the container still exists in the pod template with the image it had when
    it was saved (a template changed since means the user wants the new image).
    """
    saved = k.ResumeFrom.parse(
        (meta(sandbox).get("annotations") or {}).get(k.ANNOTATION_RESUME_FROM)
    )
    if saved is None:
        return False
    for container in pod_spec.get("containers") or []:
        if container.get("name") == saved.container and container.get("image") == saved.base:
            container["image"] = saved.image
            if saved.pull_secret:
                pulls = pod_spec.setdefault("imagePullSecrets", [])
                if {"name": saved.pull_secret} not in pulls:
                    pulls.append({"name": saved.pull_secret})
            return True
    return False
