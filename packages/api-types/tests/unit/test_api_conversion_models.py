"""Converted objects are valid objects of their target version (pydantic models, extra=forbid).

The models reject unknown fields, so this catches a converter that leaves a field of the source
version behind (``replicas`` in v1beta1, ``operatingMode`` in v1alpha1, ...) or writes one with
the wrong shape.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kube_agent_sandbox.api.conversion import convert
from kube_agent_sandbox.api.registry import parse_object

Obj = dict[str, Any]

CORE_B = "agents.x-k8s.io/v1beta1"
EXT_B = "extensions.agents.x-k8s.io/v1beta1"

POD_TEMPLATE: Obj = {
    "metadata": {"labels": {"app": "agent"}, "annotations": {"a": "b"}},
    "spec": {
        "containers": [
            {
                "name": "agent",
                "image": "registry.example/agent:1",
                "ports": [{"containerPort": 8888}],
                "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}},
            }
        ]
    },
}
VCT: Obj = {
    "metadata": {"name": "workspace"},
    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
}
CONDITIONS = [
    {
        "type": "Ready",
        "status": "True",
        "reason": "DependenciesReady",
        "message": "Pod is Ready; Service Exists",
        "lastTransitionTime": "2026-12-01T00:00:00Z",
        "observedGeneration": 1,
    }
]
META: Obj = {"name": "obj", "namespace": "default", "labels": {"team": "x"}}

BETA_OBJECTS: list[Obj] = [
    {
        "apiVersion": CORE_B,
        "kind": "Sandbox",
        "metadata": META,
        "spec": {
            "podTemplate": POD_TEMPLATE,
            "volumeClaimTemplates": [VCT],
            "service": True,
            "shutdownTime": "2026-12-02T00:00:00Z",
            "shutdownPolicy": "Delete",
            "operatingMode": "Suspended",
        },
        "status": {
            "serviceFQDN": "obj.default.svc.cluster.local",
            "service": "obj",
            "conditions": CONDITIONS,
            "selector": "agents.x-k8s.io/sandbox-name-hash=1234abcd",
            "podIPs": ["10.0.0.7"],
            "nodeName": "node-1",
        },
    },
    {
        "apiVersion": CORE_B,
        "kind": "Sandbox",
        "metadata": META,
        "spec": {"podTemplate": POD_TEMPLATE, "operatingMode": "Running"},
    },
    {
        "apiVersion": EXT_B,
        "kind": "SandboxTemplate",
        "metadata": META,
        "spec": {
            "podTemplate": POD_TEMPLATE,
            "volumeClaimTemplates": [VCT],
            "service": False,
            "networkPolicy": {
                "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "router"}}}]}],
                "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}],
            },
            "networkPolicyManagement": "Managed",
            "envVarsInjectionPolicy": "Overrides",
            "volumeClaimTemplatesPolicy": "Allowed",
        },
    },
    {
        "apiVersion": EXT_B,
        "kind": "SandboxWarmPool",
        "metadata": META,
        "spec": {
            "replicas": 3,
            "sandboxTemplateRef": {"name": "tmpl"},
            "updateStrategy": {"type": "Recreate"},
        },
        "status": {"replicas": 3, "readyReplicas": 2, "selector": "a=b"},
    },
    {
        "apiVersion": EXT_B,
        "kind": "SandboxWarmPool",
        "metadata": META,
        "spec": {"sandboxTemplateRef": {"name": "tmpl"}},
    },
    {
        "apiVersion": EXT_B,
        "kind": "SandboxClaim",
        "metadata": META,
        "spec": {
            "warmPoolRef": {"name": "shadow-pool-tmpl"},
            "lifecycle": {
                "shutdownTime": "2026-12-02T00:00:00Z",
                "ttlSecondsAfterFinished": 60,
                "shutdownPolicy": "DeleteForeground",
            },
            "additionalPodMetadata": {"labels": {"user": "alice"}},
            "env": [{"name": "MODE", "value": "fast", "containerName": "agent"}],
            "volumeClaimTemplates": [VCT],
        },
        "status": {"conditions": CONDITIONS, "sandbox": {"name": "obj", "podIPs": ["10.0.0.8"]}},
    },
    {
        "apiVersion": EXT_B,
        "kind": "SandboxClaim",
        "metadata": META,
        "spec": {"warmPoolRef": {"name": "pool-a"}},
        "status": {"sandbox": {"name": "pool-a-x7k2q"}},
    },
]


def ids(obj: Obj) -> str:
    return f"{obj['kind']}-{obj['spec'].get('operatingMode') or len(json.dumps(obj))}"


@pytest.mark.parametrize("beta", BETA_OBJECTS, ids=[ids(o) for o in BETA_OBJECTS])
def test_converted_objects_validate_against_the_target_models(beta: Obj) -> None:
    parse_object(beta)
    alpha_version = beta["apiVersion"].replace("v1beta1", "v1alpha1")

    alpha = convert(beta, alpha_version)
    alpha_model = parse_object(alpha)
    assert alpha_model.api_version == alpha_version

    again = convert(alpha, beta["apiVersion"])
    beta_model = parse_object(again)
    assert beta_model.api_version == beta["apiVersion"]

    # And the object born in v1alpha1 (carrying the state annotation) validates both ways.
    assert parse_object(convert(again, alpha_version)).api_version == alpha_version


def test_models_reject_a_leftover_field() -> None:
    # The check above can fail: a v1beta1 field left on a v1alpha1 Sandbox is rejected.
    alpha = convert(BETA_OBJECTS[0], "agents.x-k8s.io/v1alpha1")
    alpha["spec"]["operatingMode"] = "Suspended"
    with pytest.raises(ValueError, match="operatingMode"):
        parse_object(alpha)
