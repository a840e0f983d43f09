"""Secure defaults, template hashes and the semantic blueprint comparison.

See docs/concepts/templates.md and upstream v0.5.6: extensions/controllers/utils.go
ApplySandboxSecureDefaults and extensions/controllers/sandboxwarmpool_controller.go isSandboxStale.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kube_agent_sandbox.api.namehash import name_hash
from kube_agent_sandbox.extensions.common.blueprint import (
    apply_secure_defaults,
    blueprint_hash,
    blueprint_matches,
    pod_template_hash,
    template_ref_hash,
    update_strategy,
)


def _template(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "podTemplate": {
            "metadata": {"labels": {"app": "x"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        }
    }
    base.update(spec)
    return {"metadata": {"name": "tpl"}, "spec": base}


def test_secure_defaults_under_the_default_policy() -> None:
    pod: dict[str, Any] = {}
    apply_secure_defaults(_template(), pod)
    assert pod == {
        "automountServiceAccountToken": False,
        "dnsPolicy": "None",
        "dnsConfig": {"nameservers": ["8.8.8.8", "1.1.1.1"]},
    }


@pytest.mark.parametrize(
    "spec",
    [
        {"networkPolicyManagement": "Unmanaged"},
        {"networkPolicy": {"egress": []}},
    ],
)
def test_custom_or_unmanaged_policy_leaves_dns_alone(spec: dict[str, Any]) -> None:
    pod: dict[str, Any] = {}
    apply_secure_defaults(_template(**spec), pod)
    assert pod == {"automountServiceAccountToken": False}


def test_explicit_values_are_kept() -> None:
    pod: dict[str, Any] = {"automountServiceAccountToken": True, "dnsPolicy": "ClusterFirst"}
    apply_secure_defaults(_template(), pod)
    assert pod == {"automountServiceAccountToken": True, "dnsPolicy": "ClusterFirst"}


def test_hashes_are_stable_and_sensitive() -> None:
    one, two = _template(), _template()
    assert template_ref_hash("tpl") == name_hash("tpl")
    assert blueprint_hash(one) == blueprint_hash(two)
    assert pod_template_hash(one) == pod_template_hash(two)
    two["spec"]["service"] = True
    assert blueprint_hash(one) != blueprint_hash(two)
    assert pod_template_hash(one) == pod_template_hash(two)
    # key order does not matter: the hash is over canonical JSON
    reordered = {"metadata": {"name": "tpl"}, "spec": dict(reversed(list(one["spec"].items())))}
    assert blueprint_hash(reordered) == blueprint_hash(one)


def _sandbox_spec_from(template: dict[str, Any]) -> dict[str, Any]:
    spec = copy.deepcopy(template["spec"])
    apply_secure_defaults(template, spec["podTemplate"]["spec"])
    return spec


def test_blueprint_matches_what_the_template_makes() -> None:
    template = _template(volumeClaimTemplates=[{"metadata": {"name": "d"}, "spec": {}}])
    spec = _sandbox_spec_from(template)
    assert blueprint_matches(template, spec)
    # metadata of the pod template and of VCTs is not compared
    spec["podTemplate"]["metadata"] = {"labels": {"other": "y"}}
    spec["volumeClaimTemplates"][0]["metadata"]["labels"] = {"z": "1"}
    assert blueprint_matches(template, spec)


def test_quantities_compare_semantically() -> None:
    template = _template()
    template["spec"]["podTemplate"]["spec"]["containers"][0]["resources"] = {
        "limits": {"memory": "1Gi"}
    }
    spec = _sandbox_spec_from(template)
    spec["podTemplate"]["spec"]["containers"][0]["resources"]["limits"]["memory"] = "1024Mi"
    assert blueprint_matches(template, spec)


@pytest.mark.parametrize(
    "change",
    [
        lambda s: s["podTemplate"]["spec"]["containers"][0].update(image="alpine"),
        lambda s: s.update(service=False),
        lambda s: s.update(volumeClaimTemplates=[{"metadata": {"name": "e"}, "spec": {}}]),
    ],
)
def test_spec_changes_make_a_sandbox_stale(change: Any) -> None:
    template = _template()
    spec = _sandbox_spec_from(template)
    change(spec)
    assert not blueprint_matches(template, spec)


@pytest.mark.parametrize(
    ("pool_spec", "strategy"),
    [
        ({}, "OnReplenish"),
        ({"updateStrategy": {"type": "Recreate"}}, "Recreate"),
        ({"updateStrategy": {"type": "OnReplenish"}}, "OnReplenish"),
        ({"updateStrategy": {"type": "Bogus"}}, "OnReplenish"),
        ({"updateStrategy": {}}, "OnReplenish"),
    ],
)
def test_update_strategy(pool_spec: dict[str, Any], strategy: str) -> None:
    assert update_strategy({"spec": pool_spec}) == strategy
