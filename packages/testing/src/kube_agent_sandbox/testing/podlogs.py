"""Give a kwok pod a log: lines in a file on this host, served by kwok as its container's log.

Needs a local cluster started with ``LocalClusterOptions(pod_logs=True)`` (the pytest plugin's
``--cluster-pod-logs``): kwok then answers the API server's ``pods/log`` requests like a
kubelet, from the file that a ``Logs`` object (kwok.x-k8s.io/v1alpha1, named after the pod)
points at. kwok reads it as a container runtime's log (CRI format), so each line is written
with a timestamp and its stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from kube_agent_sandbox.testing.access import ClusterAccess

KWOK_API_VERSION = "kwok.x-k8s.io/v1alpha1"


def cri_log(
    lines: Sequence[str], *, start: datetime, stream: Literal["stdout", "stderr"] = "stdout"
) -> str:
    """``lines`` as a CRI log file: ``<RFC 3339 time> <stream> F <line>``, one microsecond apart.

    Args:
        lines: Log lines, without newlines.
        start: Time of the first line (timezone-aware).
        stream: The stream every line came from.

    Raises:
        ValueError: If a line holds a newline, or ``start`` has no timezone.
    """
    if start.tzinfo is None:
        raise ValueError("start must be timezone-aware")
    out = []
    for i, line in enumerate(lines):
        if "\n" in line or "\r" in line:
            raise ValueError(f"log line {i} holds a line break: {line!r}")
        when = (start + timedelta(microseconds=i)).astimezone(UTC)
        out.append(f"{when.strftime('%Y-%m-%dT%H:%M:%S.%f')}000Z {stream} F {line}\n")
    return "".join(out)


def logs_rule(namespace: str, pod: str, logs_file: Path) -> dict[str, Any]:
    """The ``Logs`` object that serves ``logs_file`` as the log of every container of a pod."""
    if not logs_file.is_absolute():
        raise ValueError(f"kwok needs an absolute log file path, not {str(logs_file)!r}")
    return {
        "apiVersion": KWOK_API_VERSION,
        "kind": "Logs",
        "metadata": {"name": pod, "namespace": namespace},
        "spec": {"logs": [{"logsFile": str(logs_file)}]},
    }


def serve_pod_log(
    access: ClusterAccess, namespace: str, pod: str, lines: Sequence[str], logs_file: Path
) -> Path:
    """Write ``lines`` to ``logs_file`` and make kwok serve it as the pod's log.

    kwok learns of the ``Logs`` object through a watch, so the first request may still fail
    for a moment: wait for the lines (e.g. by polling ``kubectl logs``).

    Args:
        access: The local cluster (started with ``pod_logs=True``).
        namespace: The pod's namespace.
        pod: The pod's name (it need not exist yet).
        lines: The log lines.
        logs_file: Absolute path of the file to write.

    Returns:
        ``logs_file``.
    """
    rule = logs_rule(namespace, pod, logs_file)
    logs_file.parent.mkdir(parents=True, exist_ok=True)
    logs_file.write_text(cri_log(lines, start=datetime.now(UTC)))
    access.apply(rule)
    return logs_file
