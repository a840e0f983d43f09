"""Finished and Ready of a pod that reached a terminal phase.

Without real containers (kwok nodes) nothing ever exits, so this test plays the kubelet: it
writes the terminal phase into the pod's status, as a kubelet reports a container that exited.
On a node with a real kubelet that write would be overwritten, so the test runs only on
simulated (kwok) nodes; the real-node profile checks the same with a container that exits.
"""

from __future__ import annotations

import pytest

from kube_agent_sandbox.conformance import manifests as m
from kube_agent_sandbox.conformance.client import Kube
from kube_agent_sandbox.conformance.tests.core.support import (
    condition_view,
    create_sandbox,
    wait_pod,
    wait_ready,
    wait_sandbox,
)

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"


@pytest.mark.spec("3.7", "3.9")
@pytest.mark.parametrize(
    ("phase", "message"),
    [("Succeeded", "Pod completed successfully"), ("Failed", "Pod failed")],
)
def test_terminal_pod_phase_finishes_the_sandbox(
    kube: Kube, namespace: str, workload_image: str, phase: str, message: str
) -> None:
    """Finished True and Ready False with reason ``Pod<phase>``; the pod is never replaced."""
    name = f"done-{phase.lower()}"
    create_sandbox(
        kube,
        namespace,
        name,
        image=workload_image,
        template=m.pod_template(image=workload_image, restartPolicy="Never"),
    )
    pod = wait_pod(kube, namespace, name, lambda p: bool(p["spec"].get("nodeName")))
    node = kube.get("v1", "Node", pod["spec"]["nodeName"])
    if KWOK_NODE_ANNOTATION not in m.annotations_of(node):
        pytest.skip("needs a simulated (kwok) node; the real-node profile covers real exits")
    wait_ready(kube, namespace, name)
    kube.patch_status(
        "v1",
        "Pod",
        name,
        namespace,
        {
            "phase": phase,
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "PodCompleted"},
                {"type": "ContainersReady", "status": "False", "reason": "PodCompleted"},
            ],
        },
    )
    reason = f"Pod{phase}"
    sandbox = wait_sandbox(
        kube,
        namespace,
        name,
        lambda s: m.has_condition(s, "Finished", "True", reason),
        what=f"Finished True / {reason}",
    )
    assert condition_view(m.condition(sandbox, "Finished")) == ("True", reason, message)
    assert condition_view(m.condition(sandbox, "Ready")) == ("False", reason, message)
    # Finished first appears after the others, so it is appended at the end.
    assert m.condition_types(sandbox) == ["Suspended", "PodScheduled", "Ready", "Finished"]
    generation = sandbox["metadata"]["generation"]
    assert all(c["observedGeneration"] == generation for c in m.conditions(sandbox))
    kube.consistently(
        lambda: kube.get("v1", "Pod", name, namespace)["metadata"]["uid"] == pod["metadata"]["uid"],
        seconds=3,
        what="the finished pod is neither restarted nor replaced",
    )
