"""The pydantic models: upstream examples round-trip, defaults, validation errors, registry."""

from __future__ import annotations

import copy
import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from kube_agent_sandbox.api import (
    KINDS,
    ClaimShutdownPolicy,
    Sandbox,
    SandboxClaim,
    SandboxTemplate,
    SandboxWarmPool,
    kind_info,
    model_for,
    parse_object,
    v1alpha1,
    validation_messages,
)
from kube_agent_sandbox.testing.plugin import unavailable
from kube_agent_sandbox.testing.reference import missing_reason, reference_dir, reference_files

_POD_SPEC: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}


def _examples_dir() -> Path:
    examples = reference_dir() / "examples"
    if not reference_files("examples"):
        unavailable(missing_reason("examples"))
    return examples


def _example_names() -> list[str]:
    # A sentinel keeps the parametrized test alive (and failing under CI) when data is absent.
    return [p.name for p in reference_files("examples")] or ["<none>"]


def _sandbox(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {"name": "s", "namespace": "ns"},
        "spec": {"podTemplate": {"spec": copy.deepcopy(_POD_SPEC)}, **spec},
    }


def _errors(model: type[Any], document: dict[str, Any]) -> list[str]:
    with pytest.raises(ValidationError) as info:
        model.model_validate(document)
    return validation_messages(info.value)


# --- upstream examples -----------------------------------------------------------------------


@pytest.mark.parametrize("name", _example_names())
def test_upstream_example_parses_and_dumps_back_unchanged(name: str) -> None:
    path = _examples_dir() / name
    documents = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    assert documents, f"{name} holds no document"
    for document in documents:
        parsed = parse_object(document)
        assert parsed.to_dict() == document


def test_examples_cover_every_v1beta1_kind() -> None:
    kinds = set()
    for path in _examples_dir().glob("*.yaml"):
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if document:
                kinds.add(type(parse_object(document)))
    assert kinds == {Sandbox, SandboxTemplate, SandboxWarmPool, SandboxClaim}


def test_round_trip_keeps_fields_of_a_newer_kubernetes_in_the_pod_spec() -> None:
    document = _sandbox()
    container = document["spec"]["podTemplate"]["spec"]["containers"][0]
    container["someFutureField"] = {"x": 1}
    container["resources"] = {"requests": {"cpu": 1, "memory": "1Gi"}}
    assert Sandbox.model_validate(document).to_dict() == document


def test_round_trip_of_a_full_status() -> None:
    document = _sandbox(operatingMode="Suspended", shutdownTime="2026-01-02T03:04:05Z")
    document["status"] = {
        "serviceFQDN": "s.ns.svc.cluster.local",
        "service": "s",
        "selector": "agents.x-k8s.io/sandbox-name-hash=abc",
        "podIPs": ["10.0.0.1"],
        "nodeName": "node-1",
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "observedGeneration": 3,
                "lastTransitionTime": "2026-01-02T03:04:05Z",
                "reason": "DependenciesReady",
                "message": "",
            }
        ],
    }
    assert Sandbox.model_validate(document).to_dict() == document


# --- defaults --------------------------------------------------------------------------------


def test_sandbox_defaults() -> None:
    sandbox = Sandbox.model_validate(_sandbox())
    assert sandbox.spec.shutdown_policy == "Retain"
    assert sandbox.spec.operating_mode == "Running"
    assert sandbox.spec.service is None
    assert sandbox.spec.shutdown_time is None
    assert sandbox.status is None
    defaulted = sandbox.to_dict(include_defaults=True)["spec"]
    assert defaulted["shutdownPolicy"] == "Retain"
    assert defaulted["operatingMode"] == "Running"
    assert "shutdownPolicy" not in sandbox.to_dict()["spec"]


def test_template_policy_defaults() -> None:
    template = SandboxTemplate.model_validate(
        {"spec": {"podTemplate": {"spec": copy.deepcopy(_POD_SPEC)}}}
    )
    assert template.spec.network_policy_management == "Managed"
    assert template.spec.env_vars_injection_policy == "Disallowed"
    assert template.spec.volume_claim_templates_policy == "Disallowed"
    assert template.spec.network_policy is None


def test_warm_pool_defaults() -> None:
    pool = SandboxWarmPool.model_validate({"spec": {"sandboxTemplateRef": {"name": "t"}}})
    assert pool.spec.replicas == 1
    assert pool.spec.update_strategy is None
    with_strategy = SandboxWarmPool.model_validate(
        {"spec": {"sandboxTemplateRef": {"name": "t"}, "updateStrategy": {}}}
    )
    assert with_strategy.spec.update_strategy is not None
    assert with_strategy.spec.update_strategy.type == "OnReplenish"


def test_claim_lifecycle_default_applies_only_when_lifecycle_is_present() -> None:
    bare = SandboxClaim.model_validate({"spec": {"warmPoolRef": {"name": "p"}}})
    assert bare.spec.lifecycle is None
    with_lifecycle = SandboxClaim.model_validate(
        {"spec": {"warmPoolRef": {"name": "p"}, "lifecycle": {}}}
    )
    assert with_lifecycle.spec.lifecycle is not None
    assert with_lifecycle.spec.lifecycle.shutdown_policy == ClaimShutdownPolicy.RETAIN
    assert with_lifecycle.spec.lifecycle.ttl_seconds_after_finished is None


def test_v1alpha1_defaults() -> None:
    sandbox = v1alpha1.Sandbox.model_validate(
        {"spec": {"podTemplate": {"spec": copy.deepcopy(_POD_SPEC)}}}
    )
    assert sandbox.spec.replicas == 1
    assert sandbox.spec.shutdown_policy == "Retain"
    claim = v1alpha1.SandboxClaim.model_validate({"spec": {"sandboxTemplateRef": {"name": "t"}}})
    assert claim.spec.warmpool == "default"


def test_api_version_and_kind_default_to_the_class_and_are_always_dumped() -> None:
    pool = SandboxWarmPool.model_validate({"spec": {"sandboxTemplateRef": {"name": "t"}}})
    dumped = pool.to_dict()
    assert dumped["apiVersion"] == "extensions.agents.x-k8s.io/v1beta1"
    assert dumped["kind"] == "SandboxWarmPool"
    assert v1alpha1.SandboxWarmPool.api_version_string() == "extensions.agents.x-k8s.io/v1alpha1"


def test_models_accept_python_names() -> None:
    claim = SandboxClaim.model_validate(
        {"spec": {"warm_pool_ref": {"name": "p"}, "lifecycle": {"shutdown_policy": "Delete"}}}
    )
    assert claim.to_dict()["spec"] == {
        "warmPoolRef": {"name": "p"},
        "lifecycle": {"shutdownPolicy": "Delete"},
    }


def test_times_are_rendered_like_kubernetes() -> None:
    sandbox = Sandbox.model_validate(_sandbox(shutdownTime="2026-01-02T03:04:05.987+01:00"))
    assert sandbox.spec.shutdown_time == datetime.datetime(
        2026, 1, 2, 2, 4, 5, 987000, tzinfo=datetime.UTC
    )
    assert sandbox.to_dict()["spec"]["shutdownTime"] == "2026-01-02T02:04:05Z"


def test_name_and_namespace_shortcuts() -> None:
    sandbox = Sandbox.model_validate(_sandbox())
    assert (sandbox.name, sandbox.namespace) == ("s", "ns")
    assert SandboxClaim.model_validate({"spec": {"warmPoolRef": {"name": "p"}}}).name is None


# --- validation errors name the field and the reason -----------------------------------------


def test_bogus_operating_mode_names_the_field() -> None:
    messages = _errors(Sandbox, _sandbox(operatingMode="Bogus"))
    assert len(messages) == 1
    assert messages[0].startswith("spec.operatingMode: ")
    assert "'Running' or 'Suspended'" in messages[0]


def test_validation_error_text_of_pydantic_also_names_the_path() -> None:
    with pytest.raises(ValidationError) as info:
        Sandbox.model_validate(_sandbox(operatingMode="Bogus"))
    assert "spec.operatingMode" in str(info.value)


@pytest.mark.parametrize(
    ("mutation", "path", "reason"),
    [
        ({"shutdownPolicy": "Later"}, "spec.shutdownPolicy", "'Delete' or 'Retain'"),
        ({"service": "yes"}, "spec.service", "valid boolean"),
        ({"shutdownTime": 1700000000}, "spec.shutdownTime", "RFC 3339"),
        ({"shutdownTime": "2026-01-02T03:04:05"}, "spec.shutdownTime", "timezone"),
        ({"shutdownTime": "tomorrow"}, "spec.shutdownTime", "datetime"),
        ({"operatingMod": "Running"}, "spec.operatingMod", "Extra inputs are not permitted"),
        (
            {"volumeClaimTemplates": [{"metadata": {"name": "w"}}]},
            "spec.volumeClaimTemplates[0].spec",
            "Field required",
        ),
        (
            {"podTemplate": {"metadata": {"labels": {"a": 1}}, "spec": _POD_SPEC}},
            "spec.podTemplate.metadata.labels.a",
            "valid string",
        ),
    ],
)
def test_bad_sandbox_spec_fields(mutation: dict[str, Any], path: str, reason: str) -> None:
    messages = _errors(Sandbox, _sandbox(**mutation))
    assert any(m.startswith(f"{path}: ") and reason in m for m in messages), messages


@pytest.mark.parametrize(
    ("pod_spec", "detail"),
    [
        ({"containers": [{"image": "x"}]}, "containers[0].name: required field is missing"),
        ({}, "containers: required field is missing"),
        (
            {"containers": [{"name": "c", "resources": {"limits": {"cpu": "lots"}}}]},
            "containers[0].resources.limits.cpu: 'lots' is not a valid quantity",
        ),
        (
            {"containers": [{"name": "c", "resources": {"limits": {"cpu": 0.5}}}]},
            "containers[0].resources.limits.cpu: must be an integer or a string, not number",
        ),
        (
            {"containers": [{"name": "c", "ports": [{"containerPort": "80"}]}]},
            "containers[0].ports[0].containerPort: must be an integer, not string",
        ),
        (
            {"containers": [{"name": "c", "ports": [{"containerPort": 2**31}]}]},
            "containers[0].ports[0].containerPort: 2147483648 is out of range for int32",
        ),
        ({"containers": "c"}, "containers: must be an array, not string"),
        ({"containers": [{"name": "c"}], "hostNetwork": "yes"}, "hostNetwork: must be a boolean"),
    ],
)
def test_bad_pod_spec_names_the_nested_field(pod_spec: dict[str, Any], detail: str) -> None:
    document = _sandbox()
    document["spec"]["podTemplate"]["spec"] = pod_spec
    messages = _errors(Sandbox, document)
    assert len(messages) == 1
    assert messages[0].startswith("spec.podTemplate.spec: invalid PodSpec: ")
    assert detail in messages[0]


def test_missing_spec_and_required_references() -> None:
    assert _errors(Sandbox, {"metadata": {"name": "x"}}) == ["spec: Field required"]
    assert _errors(Sandbox, {"spec": {}}) == ["spec.podTemplate: Field required"]
    assert _errors(SandboxClaim, {"spec": {"warmPoolRef": {}}}) == [
        "spec.warmPoolRef.name: Field required"
    ]
    assert _errors(SandboxWarmPool, {"spec": {"replicas": 1}}) == [
        "spec.sandboxTemplateRef: Field required"
    ]
    assert _errors(v1alpha1.SandboxWarmPool, {"spec": {"sandboxTemplateRef": {"name": "t"}}}) == [
        "spec.replicas: Field required"
    ]


@pytest.mark.parametrize(
    ("model", "document", "path"),
    [
        (
            SandboxWarmPool,
            {"spec": {"replicas": -1, "sandboxTemplateRef": {"name": "t"}}},
            "spec.replicas",
        ),
        (
            SandboxWarmPool,
            {"spec": {"replicas": "3", "sandboxTemplateRef": {"name": "t"}}},
            "spec.replicas",
        ),
        (
            SandboxWarmPool,
            {"spec": {"replicas": 2**31, "sandboxTemplateRef": {"name": "t"}}},
            "spec.replicas",
        ),
        (
            SandboxWarmPool,
            {"spec": {"replicas": True, "sandboxTemplateRef": {"name": "t"}}},
            "spec.replicas",
        ),
        (
            SandboxWarmPool,
            {"spec": {"sandboxTemplateRef": {"name": "t"}, "updateStrategy": {"type": "Rolling"}}},
            "spec.updateStrategy.type",
        ),
        (
            SandboxClaim,
            {"spec": {"warmPoolRef": {"name": "p"}, "lifecycle": {"shutdownPolicy": "Never"}}},
            "spec.lifecycle.shutdownPolicy",
        ),
        (
            SandboxClaim,
            {"spec": {"warmPoolRef": {"name": "p"}, "lifecycle": {"ttlSecondsAfterFinished": -5}}},
            "spec.lifecycle.ttlSecondsAfterFinished",
        ),
        (
            SandboxClaim,
            {"spec": {"warmPoolRef": {"name": "p"}, "env": [{"name": "A"}]}},
            "spec.env[0].value",
        ),
        (
            SandboxTemplate,
            {"spec": {"podTemplate": {"spec": _POD_SPEC}, "envVarsInjectionPolicy": "Sometimes"}},
            "spec.envVarsInjectionPolicy",
        ),
        (
            SandboxTemplate,
            {"spec": {"podTemplate": {"spec": _POD_SPEC}, "volumeClaimTemplatesPolicy": "Maybe"}},
            "spec.volumeClaimTemplatesPolicy",
        ),
        (
            SandboxTemplate,
            {"spec": {"podTemplate": {"spec": _POD_SPEC}, "networkPolicyManagement": "Auto"}},
            "spec.networkPolicyManagement",
        ),
        (
            SandboxTemplate,
            {
                "spec": {
                    "podTemplate": {"spec": _POD_SPEC},
                    "networkPolicy": {"ingress": [{"ports": [{"port": True}]}]},
                }
            },
            "spec.networkPolicy.ingress[0]",
        ),
        (
            SandboxTemplate,
            {"spec": {"podTemplate": {"spec": _POD_SPEC}, "networkPolicy": {"podSelector": {}}}},
            "spec.networkPolicy.podSelector",
        ),
        (
            v1alpha1.Sandbox,
            {"spec": {"podTemplate": {"spec": _POD_SPEC}, "replicas": 2}},
            "spec.replicas",
        ),
        (
            v1alpha1.Sandbox,
            {"spec": {"podTemplate": {"spec": _POD_SPEC}, "operatingMode": "Running"}},
            "spec.operatingMode",
        ),
        (
            v1alpha1.SandboxClaim,
            {"spec": {"warmPoolRef": {"name": "p"}}},
            "spec.sandboxTemplateRef",
        ),
    ],
)
def test_bad_values_of_each_kind(model: type[Any], document: dict[str, Any], path: str) -> None:
    messages = _errors(model, document)
    assert any(m.startswith((f"{path}: ", f"{path}.")) for m in messages), messages


@pytest.mark.parametrize(
    ("condition_change", "path"),
    [
        ({"status": "Maybe"}, "status.conditions[0].status"),
        ({"reason": ""}, "status.conditions[0].reason"),
        ({"reason": "has spaces"}, "status.conditions[0].reason"),
        ({"type": "not a type!"}, "status.conditions[0].type"),
        ({"message": "x" * 32769}, "status.conditions[0].message"),
        ({"observedGeneration": -1}, "status.conditions[0].observedGeneration"),
        ({"lastTransitionTime": None}, "status.conditions[0].lastTransitionTime"),
    ],
)
def test_bad_conditions(condition_change: dict[str, Any], path: str) -> None:
    condition = {
        "type": "Ready",
        "status": "True",
        "lastTransitionTime": "2026-01-02T03:04:05Z",
        "reason": "DependenciesReady",
        "message": "",
    }
    condition.update(condition_change)
    document = _sandbox()
    document["status"] = {"conditions": [condition]}
    messages = _errors(Sandbox, document)
    assert any(m.startswith(f"{path}: ") for m in messages), messages


def test_wrong_api_version_or_kind_is_rejected() -> None:
    wrong_version = _sandbox()
    wrong_version["apiVersion"] = "agents.x-k8s.io/v1alpha1"
    assert _errors(Sandbox, wrong_version) == [
        "apiVersion must be agents.x-k8s.io/v1beta1, not agents.x-k8s.io/v1alpha1"
    ]
    wrong_kind = _sandbox()
    wrong_kind["kind"] = "SandboxClaim"
    assert _errors(Sandbox, wrong_kind) == ["kind must be Sandbox, not SandboxClaim"]


# --- registry --------------------------------------------------------------------------------


def test_registry_lists_every_kind_with_both_versions() -> None:
    assert [(k.group, k.kind, k.plural, k.short_names) for k in KINDS] == [
        ("agents.x-k8s.io", "Sandbox", "sandboxes", ("sandbox",)),
        ("extensions.agents.x-k8s.io", "SandboxTemplate", "sandboxtemplates", ("sandboxtemplate",)),
        ("extensions.agents.x-k8s.io", "SandboxWarmPool", "sandboxwarmpools", ("swp",)),
        ("extensions.agents.x-k8s.io", "SandboxClaim", "sandboxclaims", ("sandboxclaim",)),
        ("extensions.agents.x-k8s.io", "SandboxSnapshot", "sandboxsnapshots", ("sbsnap",)),
    ]
    for info in KINDS:
        assert [m.__kube_version__ for m in info.versions] == ["v1beta1", "v1alpha1"]
        assert info.storage_model.__kube_version__ == "v1beta1"
        assert info.model("v1alpha1").__kube_deprecated__


def test_registry_lookups() -> None:
    assert model_for("agents.x-k8s.io/v1beta1", "Sandbox") is Sandbox
    assert model_for("extensions.agents.x-k8s.io/v1alpha1", "SandboxClaim") is v1alpha1.SandboxClaim
    assert kind_info("extensions.agents.x-k8s.io", "SandboxWarmPool").plural == "sandboxwarmpools"
    with pytest.raises(KeyError):
        model_for("agents.x-k8s.io/v1", "Sandbox")
    with pytest.raises(KeyError):
        kind_info("agents.x-k8s.io", "SandboxClaim")
    with pytest.raises(KeyError):
        parse_object({"kind": "Sandbox"})


def test_deprecation_warnings_are_upstreams_sentences() -> None:
    assert kind_info("agents.x-k8s.io", "Sandbox").deprecation_warning("v1alpha1") == (
        "agents.x-k8s.io/v1alpha1 Sandbox is deprecated; "
        "use agents.x-k8s.io/v1beta1 Sandbox instead"
    )
    assert kind_info("extensions.agents.x-k8s.io", "SandboxTemplate").deprecation_warning(
        "v1alpha1"
    ) == (
        "extensions.agents.x-k8s.io/v1alpha1 SandboxTemplate is deprecated; "
        "use extensions.agents.x-k8s.io/v1beta1 SandboxTemplate instead"
    )


def test_unknown_class_keyword_is_a_type_error() -> None:
    from kube_agent_sandbox.api.base import KubeModel

    with pytest.raises(TypeError, match="unknown class keywords"):

        class Broken(KubeModel, validation=()):
            pass


# --- SandboxWarmPool status.observedGeneration (upstream v0.5.6 sandboxwarmpool_types.go) -------

_POOL_SPEC: dict[str, Any] = {"sandboxTemplateRef": {"name": "t"}}


def test_warm_pool_observed_generation_round_trips_in_v1beta1() -> None:
    document = {
        "spec": _POOL_SPEC,
        "status": {"replicas": 2, "readyReplicas": 1, "selector": "a=b", "observedGeneration": 4},
    }
    pool = SandboxWarmPool.model_validate(document)
    assert pool.status is not None
    assert pool.status.observed_generation == 4
    dumped = pool.model_dump(by_alias=True, exclude_none=True)
    assert dumped["status"]["observedGeneration"] == 4
    absent = SandboxWarmPool.model_validate({"spec": _POOL_SPEC, "status": {}})
    assert "observedGeneration" not in absent.model_dump(by_alias=True, exclude_none=True)["status"]


@pytest.mark.parametrize("value", [-1, "4", True, 4.0])
def test_warm_pool_observed_generation_rejects_bad_values(value: Any) -> None:
    messages = _errors(
        SandboxWarmPool, {"spec": _POOL_SPEC, "status": {"observedGeneration": value}}
    )
    assert [m.split(":", 1)[0] for m in messages] == ["status.observedGeneration"]


def test_v1alpha1_warm_pool_status_has_no_observed_generation() -> None:
    assert "observed_generation" not in v1alpha1.SandboxWarmPoolStatus.model_fields
    document = {
        "spec": {**_POOL_SPEC, "replicas": 1},
        "status": {"replicas": 1, "observedGeneration": 4},
    }
    messages = _errors(v1alpha1.SandboxWarmPool, document)
    assert [m.split(":", 1)[0] for m in messages] == ["status.observedGeneration"]
