"""Sandboxes whose containers really run, for the real-node profile.

The real-node tests need containers that do something the API can see: a readiness probe that
runs a command, a main process that exits with a chosen code, a process that leaves a mark on
a volume and reports it in its log. They need only `/bin/sh` in the run's image
(`--conformance-image`); the tests never exec into pods themselves, so they read everything
through the API (conditions, pod status, pod logs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kube_agent_sandbox.conformance import manifests as m
from kube_agent_sandbox.conformance.client import ApiError, Kube

Obj = dict[str, Any]

SANDBOX_API = "agents.x-k8s.io/v1beta1"
SLEEP_FOREVER = "exec sleep 3600"


def shell_container(script: str, **extra: Any) -> Obj:
    """Container ``main`` running ``script`` with ``/bin/sh -c`` (image set by the caller)."""
    return {
        "name": "main",
        "command": ["/bin/sh", "-c", script],
        "imagePullPolicy": "IfNotPresent",
        **extra,
    }


def running_sandbox(
    name: str,
    image: str,
    script: str,
    *,
    restart_policy: str | None = None,
    volumes: Sequence[Mapping[str, Any]] = (),
    **container_extra: Any,
) -> Obj:
    """A Sandbox manifest whose one container runs ``script`` from ``image``."""
    main = shell_container(script, image=image, **container_extra)
    extra: Obj = {"terminationGracePeriodSeconds": 1}
    if restart_policy:
        extra["restartPolicy"] = restart_policy
    template = m.pod_template(containers=[main], **extra)
    spec: Obj = {}
    if volumes:
        spec["volumeClaimTemplates"] = [dict(v) for v in volumes]
    return m.sandbox(name, template=template, **spec)


def wait_log(
    kube: Kube, namespace: str, pod: str, fragment: str, *, timeout: float | None = None
) -> str:
    """Wait until the pod's log contains ``fragment``; return the log."""
    last = [""]

    def probe() -> str | None:
        try:
            last[0] = kube.pod_log(pod, namespace)
        except ApiError:  # the container has not started yet
            return None
        return last[0] if fragment in last[0] else None

    found: str = kube.wait_until(
        probe, timeout=timeout, what=f"{fragment!r} in the log of {pod}", describe=lambda: last[0]
    )
    return found
