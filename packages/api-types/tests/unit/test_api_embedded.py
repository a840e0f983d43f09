"""Embedded Kubernetes types: the schema snapshot, its CRD rendering and the dict validator."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kube_agent_sandbox.api.embedded import (
    NETWORK_POLICY_INGRESS_RULE,
    OBJECT_META,
    PERSISTENT_VOLUME_CLAIM_SPEC,
    POD_SPEC,
    kubernetes_version,
    structural_schema,
    validate_against_schema,
)
from kube_agent_sandbox.api.embedded.definitions import ROOT_DEFINITIONS, SNAPSHOT_PATH
from kube_agent_sandbox.api.embedded.schema import QUANTITY_PATTERN
from kube_agent_sandbox.api.embedded.snapshot import build_snapshot


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    if not isinstance(node, dict):
        return []
    found = [(path, node)]
    for name, child in node.get("properties", {}).items():
        found += _walk(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        found += _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        found += _walk(node["additionalProperties"], f"{path}{{}}")
    return found


def test_snapshot_is_kubernetes_1_36_and_holds_the_roots() -> None:
    snapshot = json.loads(SNAPSHOT_PATH.read_text(encoding="utf-8"))
    assert kubernetes_version() == "v1.36.3"
    for name in ROOT_DEFINITIONS:
        assert name in snapshot["schemas"]
    assert "description" not in json.dumps(snapshot)


def test_pod_spec_schema_is_self_contained_and_cleaned() -> None:
    text = json.dumps(structural_schema(POD_SPEC))
    for absent in ("$ref", "allOf", "oneOf", "x-kubernetes-patch", "x-kubernetes-unions"):
        assert absent not in text


def test_pod_spec_rendering_of_known_types() -> None:
    schema = structural_schema(POD_SPEC)
    container = schema["properties"]["containers"]
    assert container["x-kubernetes-list-type"] == "map"
    assert container["x-kubernetes-list-map-keys"] == ["name"]
    item = container["items"]
    assert item["required"] == ["name"]
    port = item["properties"]["ports"]["items"]["properties"]
    assert port["protocol"]["default"] == "TCP"
    assert port["containerPort"] == {"format": "int32", "type": "integer"}
    http_port = item["properties"]["livenessProbe"]["properties"]["httpGet"]["properties"]["port"]
    assert http_port == {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": True,
    }
    cpu = item["properties"]["resources"]["properties"]["limits"]["additionalProperties"]
    assert cpu["pattern"] == QUANTITY_PATTERN
    assert cpu["x-kubernetes-int-or-string"] is True
    assert "default" not in item["properties"]["resources"]
    env_from = item["properties"]["envFrom"]["items"]["properties"]
    assert env_from["configMapRef"]["x-kubernetes-map-type"] == "atomic"
    volume = schema["properties"]["volumes"]["items"]["properties"]
    assert "default" not in volume["azureDisk"]["properties"]["cachingMode"]
    assert volume["azureDisk"]["properties"]["fsType"]["default"] == "ext4"
    ephemeral = volume["ephemeral"]["properties"]["volumeClaimTemplate"]["properties"]
    assert ephemeral["metadata"] == {"type": "object"}


def test_every_required_list_is_sorted_and_declared() -> None:
    for name in (POD_SPEC, PERSISTENT_VOLUME_CLAIM_SPEC, NETWORK_POLICY_INGRESS_RULE):
        for path, node in _walk(structural_schema(name)):
            required = node.get("required", [])
            assert required == sorted(required), path
            assert set(required) <= set(node.get("properties", {})), path


def test_structural_schema_returns_a_fresh_copy() -> None:
    first = structural_schema(POD_SPEC)
    first["properties"].clear()
    assert structural_schema(POD_SPEC)["properties"]


def test_unknown_definition_raises() -> None:
    with pytest.raises(KeyError):
        structural_schema("io.k8s.api.core.v1.NoSuchThing")


# --- the validator ---------------------------------------------------------------------------


def _violations(value: Any, name: str = POD_SPEC) -> list[str]:
    return [str(v) for v in validate_against_schema(value, structural_schema(name))]


def test_valid_pod_spec_has_no_violation() -> None:
    pod = {
        "containers": [
            {
                "name": "c",
                "image": "busybox",
                "resources": {"requests": {"cpu": 1, "memory": "512Mi"}},
                "readinessProbe": {"httpGet": {"path": "/", "port": 8888}},
                "livenessProbe": {"tcpSocket": {"port": "http"}},
            }
        ],
        "restartPolicy": "Never",
        "securityContext": {"runAsUser": 1000},
        "nodeSelector": {"a": "b"},
    }
    assert _violations(pod) == []


def test_unknown_fields_and_nulls_are_accepted() -> None:
    assert _violations({"containers": [{"name": "c", "brandNew": [1, 2]}], "future": True}) == []
    assert _violations({"containers": [{"name": "c", "image": None}], "hostname": None}) == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ([], "must be an object, not array"),
        ({"containers": [{"name": 5}]}, "containers[0].name: must be a string, not integer"),
        (
            {"containers": [{"name": "c"}], "nodeSelector": {"a": 1}},
            "nodeSelector.a: must be a string",
        ),
        (
            {"containers": [{"name": "c"}], "priority": 1.5},
            "priority: must be an integer, not number",
        ),
        ({"containers": [{"name": "c"}], "hostPID": 1}, "hostPID: must be a boolean, not integer"),
        (
            {"containers": [{"name": "c", "livenessProbe": {"httpGet": {}}}]},
            "containers[0].livenessProbe.httpGet.port: required field is missing",
        ),
        (
            {"containers": [{"name": "c", "livenessProbe": {"httpGet": {"port": [80]}}}]},
            "must be an integer or a string, not array",
        ),
        (
            {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1 core"}}}]},
            "'1 core' is not a valid quantity",
        ),
    ],
)
def test_violations_name_the_path(value: Any, expected: str) -> None:
    violations = _violations(value)
    assert any(expected in v for v in violations), violations


def test_scalar_checks_of_the_validator() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "t": {"type": "string", "format": "date-time"},
            "e": {"type": "string", "enum": ["A", "B"]},
            "n": {"type": "integer", "minimum": 0, "maximum": 3},
            "p": {"type": "string", "pattern": "^x"},
            "f": {"type": "number"},
        },
    }
    assert (
        validate_against_schema(
            {"t": "2026-01-01T00:00:00Z", "e": "A", "n": 3, "p": "xy", "f": 1.5}, schema
        )
        == []
    )
    messages = [
        str(v)
        for v in validate_against_schema(
            {"t": "soon", "e": "C", "n": 4, "p": "yx", "f": "1"}, schema
        )
    ]
    assert messages == [
        "t: must be an RFC 3339 date-time, not 'soon'",
        "e: unsupported value 'C': must be one of 'A', 'B'",
        "n: must be less than or equal to 3",
        "p: 'yx' does not match ^x",
        "f: must be a number, not string",
    ]
    assert [str(v) for v in validate_against_schema({"n": -1}, schema)] == [
        "n: must be greater than or equal to 0"
    ]


def test_object_meta_validation() -> None:
    assert _violations({"name": "a", "labels": {"x": "y"}}, OBJECT_META) == []
    assert _violations({"labels": {"x": 1}}, OBJECT_META) == [
        "labels.x: must be a string, not integer"
    ]


def test_long_error_lists_are_truncated_in_the_model_error() -> None:
    from pydantic import ValidationError

    from kube_agent_sandbox.api import Sandbox

    containers = [{"image": "x"} for _ in range(12)]
    with pytest.raises(ValidationError) as info:
        Sandbox.model_validate({"spec": {"podTemplate": {"spec": {"containers": containers}}}})
    assert "and 2 more" in str(info.value)


# --- the snapshot tool -----------------------------------------------------------------------


def test_build_snapshot_collects_the_closure_and_drops_descriptions() -> None:
    ref = "#/components/schemas/"
    documents: list[dict[str, Any]] = [
        {
            "components": {
                "schemas": {
                    POD_SPEC: {"description": "d", "properties": {"a": {"$ref": ref + "A"}}},
                    "A": {"properties": {"b": {"allOf": [{"$ref": ref + "B"}]}}},
                    "B": {"type": "string", "description": "gone"},
                    "Unused": {"type": "string"},
                }
            }
        },
        {
            "components": {
                "schemas": {
                    name: {"type": "object"} for name in ROOT_DEFINITIONS if name != POD_SPEC
                }
            }
        },
    ]
    snapshot = build_snapshot(documents, kubernetes_version="v0.0.0")
    assert snapshot["kubernetesVersion"] == "v0.0.0"
    assert set(snapshot["schemas"]) == {*ROOT_DEFINITIONS, "A", "B"}
    assert snapshot["schemas"]["B"] == {"type": "string"}
    assert "description" not in snapshot["schemas"][POD_SPEC]


def test_build_snapshot_fails_on_a_missing_definition() -> None:
    with pytest.raises(KeyError, match="not found"):
        build_snapshot([{"components": {"schemas": {}}}], kubernetes_version="v0")
