"""Env injection into a cold-started Sandbox's pod spec: policies, targets, texts.

Upstream v0.5.6 extensions/controllers/sandboxclaim_controller.go, injectEnvs.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kube_agent_sandbox.extensions.claim.envinject import (
    EnvInjectionError,
    EnvInjectionRejectedError,
    inject_env,
)

REJECTED_POLICY = (
    "environment variable injection rejected: environment variable injection is not allowed by "
    "the template policy"
)


def _spec() -> dict[str, Any]:
    return {
        "initContainers": [{"name": "init", "image": "i"}],
        "containers": [
            {"name": "main", "image": "m", "env": [{"name": "KEEP", "value": "1"}]},
            {"name": "side", "image": "s"},
        ],
    }


@pytest.mark.parametrize("policy", ["Allowed", "Overrides"])
def test_empty_env_is_a_no_op_under_any_policy(policy: str) -> None:
    spec = _spec()
    for p in (policy, "Disallowed", ""):
        inject_env(spec, [], policy=p)
    assert spec == _spec()


@pytest.mark.parametrize("policy", ["Disallowed", "", "allowed", "Unknown"])
def test_policy_rejects(policy: str) -> None:
    spec = _spec()
    with pytest.raises(EnvInjectionRejectedError) as info:
        inject_env(spec, [{"name": "A", "value": "1"}], policy=policy)
    assert str(info.value) == REJECTED_POLICY
    assert spec == _spec()


@pytest.mark.parametrize(
    ("env", "policy", "expected"),
    [
        pytest.param(
            [{"name": "A", "value": "1"}],
            "Allowed",
            {"main": [{"name": "KEEP", "value": "1"}, {"name": "A", "value": "1"}]},
            id="default-goes-to-first-container",
        ),
        pytest.param(
            [
                {"name": "I", "value": "i", "containerName": "init"},
                {"name": "S", "value": "s", "containerName": "side"},
                {"name": "M", "value": "m", "containerName": "main"},
                {"name": "D", "value": "d"},
            ],
            "Allowed",
            {
                "init": [{"name": "I", "value": "i"}],
                "main": [
                    {"name": "KEEP", "value": "1"},
                    {"name": "M", "value": "m"},
                    {"name": "D", "value": "d"},
                ],
                "side": [{"name": "S", "value": "s"}],
            },
            id="by-container-name-named-before-defaults",
        ),
        pytest.param(
            [{"name": "KEEP", "value": "2"}, {"name": "NEW", "value": "n"}],
            "Overrides",
            {"main": [{"name": "KEEP", "value": "2"}, {"name": "NEW", "value": "n"}]},
            id="override-replaces-in-place",
        ),
        pytest.param(
            [{"name": "KEEP", "value": ""}],
            "Overrides",
            {"main": [{"name": "KEEP"}]},
            id="empty-value-omitted-like-go",
        ),
        pytest.param(
            [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}],
            "Overrides",
            {"main": [{"name": "KEEP", "value": "1"}, {"name": "A", "value": "2"}]},
            id="repeated-name-last-wins-under-overrides",
        ),
    ],
)
def test_injection(
    env: list[dict[str, Any]], policy: str, expected: dict[str, list[dict[str, Any]]]
) -> None:
    spec = _spec()
    inject_env(spec, env, policy=policy)
    got = {
        c["name"]: c["env"]
        for c in (*spec.get("initContainers", []), *spec["containers"])
        if "env" in c
    }
    assert got == expected


def test_override_of_a_value_from_source_is_replaced_by_name_and_value() -> None:
    spec = _spec()
    spec["containers"][0]["env"] = [
        {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
    ]
    inject_env(spec, [{"name": "SECRET", "value": "plain"}], policy="Overrides")
    assert spec["containers"][0]["env"] == [{"name": "SECRET", "value": "plain"}]


def test_envfrom_allowed_under_overrides() -> None:
    spec = _spec()
    spec["containers"][0]["envFrom"] = [{"configMapRef": {"name": "cm"}}]
    inject_env(spec, [{"name": "A", "value": "1"}], policy="Overrides")
    assert spec["containers"][0]["env"][-1] == {"name": "A", "value": "1"}


@pytest.mark.parametrize(
    ("mutate", "env", "policy", "error", "message"),
    [
        pytest.param(
            None,
            [{"name": "V", "value": "1", "containerName": "ghost"}],
            "Allowed",
            EnvInjectionError,
            'target container "ghost" not found in template for environment variable "V"',
            id="missing-container",
        ),
        pytest.param(
            None,
            [
                {"name": "OK", "value": "1", "containerName": "main"},
                {"name": "V1", "value": "1", "containerName": "ghost"},
                {"name": "V2", "value": "1", "containerName": "ghost"},
                {"name": "W", "value": "1", "containerName": "other"},
            ],
            "Overrides",
            EnvInjectionError,
            'target container "ghost" not found in template for environment variable "V1"',
            id="first-missing-container-first-var",
        ),
        pytest.param(
            None,
            [{"name": "KEEP", "value": "2"}],
            "Allowed",
            EnvInjectionError,
            "environment variable override is not allowed by the template policy for variable "
            '"KEEP"',
            id="override-under-allowed",
        ),
        pytest.param(
            None,
            [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}],
            "Allowed",
            EnvInjectionError,
            'environment variable override is not allowed by the template policy for variable "A"',
            id="repeated-name-under-allowed",
        ),
        pytest.param(
            lambda s: s["containers"][1].__setitem__("envFrom", [{"secretRef": {"name": "x"}}]),
            [{"name": "A", "value": "1", "containerName": "side"}],
            "Allowed",
            EnvInjectionRejectedError,
            'environment variable injection rejected: container "side" uses EnvFrom sources; '
            "Allowed policy cannot safely prevent overriding EnvFrom-provided variables",
            id="envfrom-under-allowed",
        ),
        pytest.param(
            lambda s: s["initContainers"][0].__setitem__("envFrom", [{"secretRef": {}}]),
            [{"name": "A", "value": "1", "containerName": "init"}],
            "Allowed",
            EnvInjectionRejectedError,
            'environment variable injection rejected: container "init" uses EnvFrom sources; '
            "Allowed policy cannot safely prevent overriding EnvFrom-provided variables",
            id="envfrom-on-init-container",
        ),
    ],
)
def test_errors(
    mutate: Any,
    env: list[dict[str, Any]],
    policy: str,
    error: type[Exception],
    message: str,
) -> None:
    spec = _spec()
    if mutate is not None:
        mutate(spec)
    with pytest.raises(error) as info:
        inject_env(spec, env, policy=policy)
    assert type(info.value) is error
    assert str(info.value) == message


def test_envfrom_on_an_untargeted_container_does_not_matter() -> None:
    spec = _spec()
    spec["containers"][1]["envFrom"] = [{"secretRef": {"name": "x"}}]
    inject_env(spec, [{"name": "A", "value": "1"}], policy="Allowed")
    assert spec["containers"][0]["env"][-1] == {"name": "A", "value": "1"}


def test_no_containers_drops_defaults_like_upstream() -> None:
    spec: dict[str, Any] = {"initContainers": [{"name": "init"}]}
    before = copy.deepcopy(spec)
    inject_env(spec, [{"name": "A", "value": "1"}], policy="Allowed")
    assert spec == before


def test_container_name_in_both_lists_gets_the_variable_twice() -> None:
    spec: dict[str, Any] = {"initContainers": [{"name": "x"}], "containers": [{"name": "x"}]}
    inject_env(spec, [{"name": "A", "value": "1", "containerName": "x"}], policy="Allowed")
    assert spec["initContainers"][0]["env"] == [{"name": "A", "value": "1"}]
    assert spec["containers"][0]["env"] == [{"name": "A", "value": "1"}]
