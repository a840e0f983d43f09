"""Spec §3.3: the Sandbox's pod — its name, labels, annotations and owner."""

from __future__ import annotations

import pytest

from kube_agent_sandbox.conformance import manifests as m
from kube_agent_sandbox.conformance.client import Kube
from kube_agent_sandbox.conformance.plugin import Settings

SANDBOX = "agents.x-k8s.io/v1beta1"


@pytest.mark.spec("3.3", "2.6")
def test_pod_is_named_after_the_sandbox_and_controlled_by_it(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """The pod has the Sandbox's name and a controller ownerReference to it."""
    created = kube.create(
        m.sandbox("box", template=m.pod_template(image=settings.image)), namespace=namespace
    )
    pod = kube.wait_for("v1", "Pod", "box", namespace, lambda p: p is not None)
    assert pod is not None
    owner = m.controller_ref(pod)
    assert owner == {
        "apiVersion": SANDBOX,
        "kind": "Sandbox",
        "name": "box",
        "uid": created["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
