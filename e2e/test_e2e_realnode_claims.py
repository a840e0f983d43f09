"""Claims on a real node: a warm pool of real containers, a claim takes one, Python runs in it.

The controller is deployed with ``--extensions`` (``manifests/overlays/extensions``). A
SandboxTemplate runs a Python image; its SandboxWarmPool keeps two Sandboxes whose containers
are already running; a SandboxClaim adopts one of them, and code runs in the claimed pod through
the exec API. The pod is the pool member's pod, not a new one: the claim did not start a
container, which is what makes a warm claim fast.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.node.workload import exec_in_pod
from kube_agent_sandbox.testing.waiting import ObjectRef, condition_status, wait_for_object

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

_log = logging.getLogger(__name__)
POOL_SIZE = 2


def _template(image: str) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python3", "-c", "import time; time.sleep(86400)"],
    }
    return {
        "apiVersion": c.EXTENSIONS_API_VERSION,
        "kind": c.KIND_SANDBOX_TEMPLATE,
        "metadata": {"name": "python"},
        "spec": {
            "podTemplate": {"spec": {"containers": [container], "terminationGracePeriodSeconds": 1}}
        },
    }


def _pool() -> dict[str, Any]:
    return {
        "apiVersion": c.EXTENSIONS_API_VERSION,
        "kind": c.KIND_SANDBOX_WARM_POOL,
        "metadata": {"name": "python-pool"},
        "spec": {"replicas": POOL_SIZE, "sandboxTemplateRef": {"name": "python"}},
    }


def _claim(name: str) -> dict[str, Any]:
    return {
        "apiVersion": c.EXTENSIONS_API_VERSION,
        "kind": c.KIND_SANDBOX_CLAIM,
        "metadata": {"name": name},
        "spec": {"warmPoolRef": {"name": "python-pool"}},
    }


def test_a_claim_from_a_warm_pool_runs_python_in_the_pools_container(
    cluster: ClusterAccess, namespace: str, python_image: str
) -> None:
    api = cluster.api_client()
    cluster.apply([_template(python_image), _pool()], namespace=namespace)
    pool_ref = ObjectRef(
        c.EXTENSIONS_API_VERSION, c.KIND_SANDBOX_WARM_POOL, "python-pool", namespace
    )
    wait_for_object(
        api,
        pool_ref,
        lambda o: (o.get("status") or {}).get("readyReplicas") == POOL_SIZE,
        timeout=240,
        what=f"{POOL_SIZE} Ready members",
    )

    sent = time.monotonic()
    cluster.apply(_claim("agent-task"), namespace=namespace)
    claim = wait_for_object(
        api,
        ObjectRef(c.EXTENSIONS_API_VERSION, c.KIND_SANDBOX_CLAIM, "agent-task", namespace),
        lambda o: condition_status(o, "Ready") == "True",
        timeout=120,
        what="Ready",
    )
    _log.info("claim->Ready on the real node: %.0f ms", (time.monotonic() - sent) * 1000)

    sandbox_name = claim["status"]["sandbox"]["name"]
    assert sandbox_name.startswith("python-pool-"), "the claim was not served from the pool"
    assert claim["status"]["sandbox"]["podIPs"]
    sandbox = wait_for_object(
        api,
        ObjectRef(c.SANDBOX_API_VERSION, c.KIND_SANDBOX, sandbox_name, namespace),
        lambda o: True,
        timeout=30,
        what="present",
    )
    pod_name = sandbox["metadata"]["annotations"][c.ANNOTATION_POD_NAME]
    assert pod_name == sandbox_name
    pod = wait_for_object(
        api,
        ObjectRef("v1", "Pod", pod_name, namespace),
        lambda o: c.LABEL_WARM_POOL_SANDBOX not in (o["metadata"].get("labels") or {}),
        timeout=60,
        what="relabelled for its claim",
    )
    restarts = pod["status"]["containerStatuses"][0]["restartCount"]
    assert restarts == 0, "adoption must not restart the warm container"

    result = exec_in_pod(
        api,
        namespace,
        pod_name,
        ["python3", "-c", "import socket; print('claimed', socket.gethostname(), 6 * 7)"],
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout.split() == ["claimed", pod_name, "42"]

    # The pool replaces the adopted member with a fresh, running container.
    wait_for_object(
        api,
        pool_ref,
        lambda o: (o.get("status") or {}).get("readyReplicas") == POOL_SIZE,
        timeout=240,
        what="refilled",
    )
