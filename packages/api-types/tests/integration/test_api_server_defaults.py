"""The models against a real apiserver running the generated CRDs.

Two promises of the models are checked where only a server can check them:

1. the defaults the models declare are exactly the ones the apiserver applies (a minimal object
   of each kind, created through the API, comes back equal to the model's
   ``to_dict(include_defaults=True)``);
2. what the apiserver returns (managed fields, timestamps, uid, status written through the
   status subresource) parses into the models and dumps back unchanged.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kube_agent_sandbox.api import parse_object
from kube_agent_sandbox.testing.access import ClusterAccess

pytestmark = pytest.mark.integration

_POD_SPEC = {"containers": [{"name": "main", "image": "busybox"}]}


def _minimal_objects() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "agents.x-k8s.io/v1beta1",
            "kind": "Sandbox",
            "metadata": {"name": "defaults-sandbox"},
            "spec": {"podTemplate": {"spec": _POD_SPEC}},
        },
        {
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": "SandboxTemplate",
            "metadata": {"name": "defaults-template"},
            "spec": {"podTemplate": {"spec": _POD_SPEC}},
        },
        {
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": "SandboxWarmPool",
            "metadata": {"name": "defaults-pool"},
            "spec": {"sandboxTemplateRef": {"name": "defaults-template"}, "updateStrategy": {}},
        },
        {
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": "SandboxClaim",
            "metadata": {"name": "defaults-claim"},
            "spec": {"warmPoolRef": {"name": "defaults-pool"}, "lifecycle": {}},
        },
        {
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": "SandboxClaim",
            "metadata": {"name": "defaults-claim-no-lifecycle"},
            "spec": {"warmPoolRef": {"name": "defaults-pool"}},
        },
    ]


@pytest.mark.parametrize("document", _minimal_objects(), ids=lambda d: d["metadata"]["name"])
def test_server_defaults_equal_model_defaults(
    cluster: ClusterAccess, agent_sandbox_crds: list[str], namespace: str, document: dict[str, Any]
) -> None:
    model = parse_object(document)
    (stored,) = cluster.apply([document], namespace=namespace)
    assert stored["spec"] == model.to_dict(include_defaults=True)["spec"]


def test_server_objects_round_trip_through_the_models(
    cluster: ClusterAccess, agent_sandbox_crds: list[str], namespace: str
) -> None:
    cluster.apply([_minimal_objects()[0]], namespace=namespace)
    fetched = cluster.kubectl(
        "get",
        "sandboxes.agents.x-k8s.io",
        "defaults-sandbox",
        "-n",
        namespace,
        "-o",
        "json",
        "--show-managed-fields",
    )
    stored = json.loads(fetched.stdout)
    assert stored["metadata"]["managedFields"]
    assert stored["metadata"]["creationTimestamp"]
    assert parse_object(stored).to_dict() == stored

    stored["status"] = {
        "serviceFQDN": f"defaults-sandbox.{namespace}.svc.cluster.local",
        "podIPs": ["10.0.0.7"],
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "observedGeneration": 1,
                "lastTransitionTime": "2026-01-01T00:00:00Z",
                "reason": "DependenciesNotReady",
                "message": "Pod does not exist",
            }
        ],
    }
    result = cluster.kubectl(
        "replace", "--subresource=status", "-o", "json", "-f", "-", input=json.dumps(stored)
    )
    with_status = json.loads(result.stdout)
    assert with_status["status"]["conditions"][0]["reason"] == "DependenciesNotReady"
    assert parse_object(with_status).to_dict() == with_status
