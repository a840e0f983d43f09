"""The CEL rules the generated CRDs carry, evaluated with a CEL implementation (cel-python).

Every ``x-kubernetes-validations`` rule in the generated CRDs must have cases here, so a new
rule without tests fails :func:`test_every_generated_rule_is_tested`.
"""

from __future__ import annotations

import copy
from typing import Any

import celpy
import pytest
from celpy.adapter import json_to_cel

from kube_agent_sandbox.api.crdgen import build_crd
from kube_agent_sandbox.api.registry import KINDS
from kube_agent_sandbox.api.v1beta1.sandbox import VOLUME_CLAIM_TEMPLATES_IMMUTABLE
from kube_agent_sandbox.api.v1beta1.sandbox_snapshot import SNAPSHOT_SPEC_IMMUTABLE

_VCT: list[dict[str, Any]] = [
    {
        "metadata": {"name": "workspace"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
]


def _spec(vct: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"podTemplate": {"spec": {"containers": [{"name": "c"}]}}, **extra}
    if vct is not None:
        spec["volumeClaimTemplates"] = copy.deepcopy(vct)
    return spec


def _rules_in_generated_crds() -> list[tuple[str, str]]:
    found = []

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            for rule in node.get("x-kubernetes-validations", []):
                found.append((where, rule["rule"]))
            for key, value in node.items():
                walk(value, f"{where}.{key}")
        elif isinstance(node, list):
            for value in node:
                walk(value, where)

    for info in KINDS:
        walk(build_crd(info), info.kind)
    return found


def _evaluate(rule: str, new: Any, old: Any) -> bool:
    env = celpy.Environment()
    program = env.program(env.compile(rule))
    result = program.evaluate({"self": json_to_cel(new), "oldSelf": json_to_cel(old)})
    return bool(result)


_TESTED_RULES = {VOLUME_CLAIM_TEMPLATES_IMMUTABLE.rule, SNAPSHOT_SPEC_IMMUTABLE.rule}


def test_every_generated_rule_is_tested() -> None:
    rules = _rules_in_generated_crds()
    spec = "spec.versions.schema.openAPIV3Schema.properties.spec"
    # A SandboxSnapshot's rule once per served version.
    assert [where for where, _ in rules] == [
        f"Sandbox.{spec}",
        f"SandboxSnapshot.{spec}",
        f"SandboxSnapshot.{spec}",
    ]
    assert {rule for _, rule in rules} == _TESTED_RULES


def _modified(vct: list[dict[str, Any]]) -> list[dict[str, Any]]:
    changed = copy.deepcopy(vct)
    changed[0]["spec"]["resources"]["requests"]["storage"] = "2Gi"
    return changed


@pytest.mark.parametrize(
    ("old", "new", "accepted"),
    [
        (_spec(_VCT), _spec(_VCT), True),
        (_spec(), _spec(), True),
        (_spec(_VCT), _spec(_VCT, operatingMode="Suspended"), True),
        (_spec(), _spec(service=True), True),
        (_spec(_VCT), _spec(_modified(_VCT)), False),
        (_spec(), _spec(_VCT), False),
        (_spec(_VCT), _spec(), False),
        (_spec(_VCT), _spec(_VCT + _VCT), False),
        (_spec([]), _spec(), False),
    ],
    ids=[
        "unchanged",
        "unset-unchanged",
        "other-field-changed",
        "other-field-set",
        "set-to-modified",
        "unset-to-set",
        "set-to-unset",
        "item-added",
        "empty-to-unset",
    ],
)
def test_volume_claim_templates_immutability(
    old: dict[str, Any], new: dict[str, Any], accepted: bool
) -> None:
    assert _evaluate(VOLUME_CLAIM_TEMPLATES_IMMUTABLE.rule, new, old) is accepted


def test_rule_message_is_upstreams() -> None:
    assert VOLUME_CLAIM_TEMPLATES_IMMUTABLE.message == "volumeClaimTemplates is immutable"


@pytest.mark.parametrize(
    ("new", "accepted"),
    [
        ({"sandboxName": "a", "mode": "Filesystem"}, True),
        ({"sandboxName": "b", "mode": "Filesystem"}, False),
        ({"sandboxName": "a", "mode": "Memory"}, False),
        ({"sandboxName": "a", "mode": "Filesystem", "tag": "t"}, False),
    ],
    ids=["unchanged", "source-changed", "mode-changed", "tag-added"],
)
def test_snapshot_spec_immutability(new: dict[str, Any], accepted: bool) -> None:
    old = {"sandboxName": "a", "mode": "Filesystem"}
    assert _evaluate(SNAPSHOT_SPEC_IMMUTABLE.rule, new, old) is accepted
