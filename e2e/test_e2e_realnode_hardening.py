"""The deployed controller runs hardened on the real node: non-root, read-only root, no caps.

``manifests/controller/deployment.yaml`` asks for it (``runAsNonRoot``, user 65532,
``readOnlyRootFilesystem``, no privilege escalation, every capability dropped, the
RuntimeDefault seccomp profile) and the Dockerfile sets ``USER 65532:65532``; this checks the
pod as the kubelet and runc actually run it: the spec the apiserver stored, then, inside the
container, the uid, a write to ``/`` and to the installed packages failing, and no effective
capability.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.node.cluster import CONTROLLER_DEPLOYMENT, CONTROLLER_NAMESPACE

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

NON_ROOT_UID = 65532


def _controller_pod(cluster: ClusterAccess) -> dict[str, Any]:
    pods = json.loads(
        cluster.kubectl(
            "-n", CONTROLLER_NAMESPACE, "get", "pods", "-l", f"app={CONTROLLER_DEPLOYMENT}",
            "-o", "json",
        ).stdout
    )["items"]  # fmt: skip
    running = [p for p in pods if p["status"].get("phase") == "Running"]
    assert len(running) == 1, [p["metadata"]["name"] for p in pods]
    return dict(running[0])


def _exec(cluster: ClusterAccess, pod: str, code: str) -> tuple[int, str]:
    """Run Python code in the controller container; (exit status, stdout + stderr)."""
    done = cluster.kubectl(
        "-n", CONTROLLER_NAMESPACE, "exec", pod, "-c", CONTROLLER_DEPLOYMENT, "--",
        "python3", "-c", code,
        check=False,
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def test_controller_pod_spec_is_hardened(
    cluster: ClusterAccess, real_node_environment: object
) -> None:
    pod = _controller_pod(cluster)
    pod_security = pod["spec"].get("securityContext") or {}
    assert pod_security.get("runAsNonRoot") is True
    assert pod_security.get("runAsUser") == NON_ROOT_UID
    assert (pod_security.get("seccompProfile") or {}).get("type") == "RuntimeDefault"
    [container] = [c for c in pod["spec"]["containers"] if c["name"] == CONTROLLER_DEPLOYMENT]
    security = container.get("securityContext") or {}
    assert security.get("readOnlyRootFilesystem") is True
    assert security.get("allowPrivilegeEscalation") is False
    assert (security.get("capabilities") or {}).get("drop") == ["ALL"]


def test_controller_container_is_non_root_and_read_only(
    cluster: ClusterAccess, real_node_environment: object
) -> None:
    name = _controller_pod(cluster)["metadata"]["name"]

    status, out = _exec(cluster, name, "import os; print(os.getuid(), os.getgid())")
    assert status == 0, out
    uid, gid = (int(v) for v in out.split())
    assert uid == NON_ROOT_UID != 0
    assert gid == NON_ROOT_UID

    for path in ("/probe", "/usr/local/lib/probe", "/etc/probe"):
        status, out = _exec(cluster, name, f"open({path!r}, 'w').write('x')")
        assert status != 0, f"{path} is writable in the controller container"
        assert "Read-only file system" in out or "Permission denied" in out, out
    # the one writable path the deployment mounts (webhook certificates)
    status, out = _exec(cluster, name, "open('/tmp/probe', 'w').write('x'); print('ok')")
    assert status == 0, out
    assert "ok" in out, out

    status, out = _exec(
        cluster,
        name,
        "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')][0])",
    )
    assert status == 0, out
    assert int(out.strip(), 16) == 0, f"effective capabilities: {out.strip()}"
    status, out = _exec(cluster, name, "print(open('/proc/self/status').read())")
    assert status == 0, out
    assert "NoNewPrivs:\t1" in out, "privilege escalation is possible"
