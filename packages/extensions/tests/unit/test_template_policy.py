"""The template's NetworkPolicy as pure data: name, management and desired spec.

Upstream v0.5.6 extensions/controllers/sandboxtemplate_controller.go, Reconcile and
buildDefaultNetworkPolicySpec; docs/concepts/templates.md.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kube_agent_sandbox.api.namehash import name_hash
from kube_agent_sandbox.extensions.template.policy import (
    desired_network_policy,
    desired_spec,
    is_managed,
    network_policy_name,
    network_policy_name_problem,
    template_for_policy_name,
)

HASH_KEY = "agents.x-k8s.io/sandbox-template-ref-hash"


def _template(name: str = "test-template", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"podTemplate": {"spec": {"containers": [{"name": "c"}]}}}
    body.update(spec)
    return {"metadata": {"name": name, "namespace": "ns", "uid": "u-1"}, "spec": body}


def test_default_policy_is_exactly_the_spec_listing() -> None:
    assert desired_spec(_template()) == {
        "podSelector": {"matchLabels": {HASH_KEY: "69155462"}},
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [
            {
                "from": [
                    {
                        "namespaceSelector": {
                            "matchLabels": {"kubernetes.io/metadata.name": "agent-sandbox-system"}
                        },
                        "podSelector": {"matchLabels": {"app": "sandbox-router"}},
                    }
                ]
            }
        ],
        "egress": [
            {
                "to": [
                    {
                        "ipBlock": {
                            "cidr": "0.0.0.0/0",
                            "except": [
                                "10.0.0.0/8",
                                "172.16.0.0/12",
                                "192.168.0.0/16",
                                "169.254.0.0/16",
                            ],
                        }
                    },
                    {"ipBlock": {"cidr": "::/0", "except": ["fc00::/7", "fe80::/10"]}},
                ]
            }
        ],
    }


def test_default_policy_is_a_fresh_object_each_time() -> None:
    first = desired_spec(_template())
    first["egress"][0]["to"][0]["ipBlock"]["except"].append("0.0.0.0/32")
    assert "0.0.0.0/32" not in desired_spec(_template())["egress"][0]["to"][0]["ipBlock"]["except"]


def test_custom_rules_replace_the_defaults_with_the_same_selector_and_types() -> None:
    ingress = [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]}]
    egress = [{"to": [{"ipBlock": {"cidr": "1.2.3.4/32"}}], "ports": [{"port": 443}]}]
    template = _template(networkPolicy={"ingress": ingress, "egress": egress})
    before = copy.deepcopy(template)
    spec = desired_spec(template)
    assert spec == {
        "podSelector": {"matchLabels": {HASH_KEY: "69155462"}},
        "policyTypes": ["Ingress", "Egress"],
        "ingress": ingress,
        # the API server stores a port without protocol as TCP: the desired spec says so too
        "egress": [
            {
                "to": [{"ipBlock": {"cidr": "1.2.3.4/32"}}],
                "ports": [{"port": 443, "protocol": "TCP"}],
            }
        ],
    }
    assert template == before  # the cached template is never changed


def test_explicit_protocols_are_kept() -> None:
    egress = [{"ports": [{"port": 53, "protocol": "UDP"}, {"port": "dns", "protocol": "SCTP"}]}]
    spec = desired_spec(_template(networkPolicy={"egress": egress}))
    assert spec["egress"] == egress


@pytest.mark.parametrize(
    ("custom", "ingress", "egress"),
    [
        ({}, None, None),  # both directions denied
        ({"ingress": []}, [], None),
        ({"egress": []}, None, []),
    ],
)
def test_empty_custom_rules_deny_that_direction(
    custom: dict[str, Any], ingress: list[Any] | None, egress: list[Any] | None
) -> None:
    spec = desired_spec(_template(networkPolicy=custom))
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec.get("ingress") == ingress
    assert spec.get("egress") == egress


@pytest.mark.parametrize(
    ("management", "managed"),
    [(None, True), ("", True), ("Managed", True), ("Unmanaged", False)],
)
def test_management_defaults_to_managed(management: str | None, managed: bool) -> None:
    template = _template()
    if management is not None:
        template["spec"]["networkPolicyManagement"] = management
    assert is_managed(template) is managed


def test_template_without_spec_is_managed_with_the_default_policy() -> None:
    template = {"metadata": {"name": "t"}}
    assert is_managed(template)
    assert desired_spec(template)["podSelector"] == {"matchLabels": {HASH_KEY: name_hash("t")}}


def test_names() -> None:
    assert network_policy_name("tpl") == "tpl-network-policy"
    assert template_for_policy_name("tpl-network-policy") == "tpl"
    assert template_for_policy_name("-network-policy") is None
    assert template_for_policy_name("tpl-policy") is None


def test_policy_name_length() -> None:
    assert network_policy_name_problem("a" * 238) is None  # 238 + 15 = 253
    problem = network_policy_name_problem("a" * 239)
    assert problem == (
        "name must be no more than 253 characters (it is the template name plus "
        "'-network-policy', 254 characters)"
    )


def test_desired_object_is_controlled_by_the_template() -> None:
    ref = {"kind": "SandboxTemplate", "uid": "u-1", "controller": True}
    policy = desired_network_policy(_template("tpl"), owner_ref=ref)
    assert policy["apiVersion"] == "networking.k8s.io/v1"
    assert policy["kind"] == "NetworkPolicy"
    assert policy["metadata"] == {
        "name": "tpl-network-policy",
        "namespace": "ns",
        "ownerReferences": [ref],
    }
    assert policy["spec"] == desired_spec(_template("tpl"))
