"""The SandboxTemplate controller manages one NetworkPolicy per template.

Observable contract: the template is labelled with its own name hash; in `Managed` mode (the
default) a NetworkPolicy `<template>-network-policy` controlled by the template selects the
template's pods and holds either the default secure rules or the template's own rules; a hand
edit of its spec is reverted; `Unmanaged` removes an owned policy and never touches a foreign
one; deleting the template garbage-collects the policy through its ownerReference.
"""

from __future__ import annotations

from typing import Any

import pytest

from kube_agent_sandbox.conformance import manifests as m
from kube_agent_sandbox.conformance.client import Kube
from kube_agent_sandbox.conformance.plugin import Settings
from kube_agent_sandbox.conformance.tests.extensions import support as s

NP_API = "networking.k8s.io/v1"


def default_policy(template: str) -> dict[str, Any]:
    """The default secure policy (buildDefaultNetworkPolicySpec) for ``template``."""
    return {
        "podSelector": {
            "matchLabels": {"agents.x-k8s.io/sandbox-template-ref-hash": m.name_hash(template)}
        },
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


def wait_policy(kube: Kube, namespace: str, name: str, check: Any = None) -> dict[str, Any]:
    """Wait for NetworkPolicy ``name`` (passing ``check`` when given)."""
    found = kube.wait_for(
        NP_API,
        "NetworkPolicy",
        name,
        namespace,
        lambda p: p is not None and (check is None or check(p)),
        what=f"NetworkPolicy {name}",
    )
    assert found is not None
    return found


@pytest.mark.spec("4.1", "2.1", "2.6")
def test_default_policy_is_created_and_owned_by_the_template(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """A template without rules gets the default secure policy, controlled by it, and its label."""
    template = s.create_template(kube, namespace, "test-template", image=settings.image)
    policy = wait_policy(kube, namespace, "test-template-network-policy")
    assert policy["spec"] == default_policy("test-template")
    assert policy["metadata"]["ownerReferences"] == [s.owner("SandboxTemplate", template)]
    labelled = kube.wait_for(
        s.EXT_API,
        "SandboxTemplate",
        "test-template",
        namespace,
        lambda t: s.TEMPLATE_REF_HASH_LABEL in m.labels_of(t),
        what="the template's own name-hash label",
    )
    # NameHash("test-template") is a test vector of the spec's conventions.
    assert m.labels_of(labelled)[s.TEMPLATE_REF_HASH_LABEL] == "69155462"


@pytest.mark.spec("4.1")
def test_template_rules_replace_the_default_rules(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """User rules keep the podSelector and policyTypes; an empty list denies that direction."""
    rules = {
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]}],
        "egress": [{"to": [{"ipBlock": {"cidr": "203.0.113.0/24"}}]}],
    }
    s.create_template(kube, namespace, "custom", image=settings.image, networkPolicy=rules)
    policy = wait_policy(kube, namespace, "custom-network-policy")
    assert policy["spec"] == {
        "podSelector": {"matchLabels": {s.TEMPLATE_REF_HASH_LABEL: m.name_hash("custom")}},
        "policyTypes": ["Ingress", "Egress"],
        **rules,
    }
    kube.patch(
        s.EXT_API,
        "SandboxTemplate",
        "custom",
        namespace,
        {"spec": {"networkPolicy": {"ingress": None, "egress": []}}},
    )
    denied = wait_policy(
        kube,
        namespace,
        "custom-network-policy",
        lambda p: not p["spec"].get("ingress") and not p["spec"].get("egress"),
    )
    assert denied["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert denied["spec"]["podSelector"] == policy["spec"]["podSelector"]


@pytest.mark.spec("4.1")
def test_hand_edited_policy_spec_is_repaired(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """Drift in the managed policy's spec is reverted (metadata edits are not the controller's)."""
    s.create_template(kube, namespace, "drift", image=settings.image)
    wait_policy(kube, namespace, "drift-network-policy")
    kube.patch(
        NP_API,
        "NetworkPolicy",
        "drift-network-policy",
        namespace,
        {"metadata": {"labels": {"edited": "yes"}}, "spec": {"egress": [{}]}},
    )
    repaired = wait_policy(
        kube,
        namespace,
        "drift-network-policy",
        lambda p: p["spec"] == default_policy("drift"),
    )
    assert m.labels_of(repaired).get("edited") == "yes"


@pytest.mark.spec("4.1")
def test_unmanaged_template_has_no_policy_and_switching_deletes_the_owned_one(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """`Unmanaged` creates nothing; switching to it deletes the owned policy; back re-creates."""
    s.create_template(
        kube, namespace, "hands-off", image=settings.image, networkPolicyManagement="Unmanaged"
    )
    s.create_template(kube, namespace, "switch", image=settings.image)
    wait_policy(kube, namespace, "switch-network-policy")
    # The managed template got its policy, so the unmanaged one (created first) was seen.
    kube.wait_for(
        s.EXT_API,
        "SandboxTemplate",
        "hands-off",
        namespace,
        lambda t: s.TEMPLATE_REF_HASH_LABEL in m.labels_of(t),
        what="the unmanaged template to be reconciled",
    )
    assert kube.get_or_none(NP_API, "NetworkPolicy", "hands-off-network-policy", namespace) is None

    kube.patch(
        s.EXT_API,
        "SandboxTemplate",
        "switch",
        namespace,
        {"spec": {"networkPolicyManagement": "Unmanaged"}},
    )
    kube.wait_gone(NP_API, "NetworkPolicy", "switch-network-policy", namespace)
    kube.patch(
        s.EXT_API,
        "SandboxTemplate",
        "switch",
        namespace,
        {"spec": {"networkPolicyManagement": "Managed"}},
    )
    again = wait_policy(kube, namespace, "switch-network-policy")
    assert again["spec"] == default_policy("switch")


@pytest.mark.spec("4.1")
def test_a_foreign_policy_with_the_name_is_never_changed(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """A same-name policy not controlled by the template is left as it is, managed or not."""
    foreign = kube.create(
        {
            "apiVersion": NP_API,
            "kind": "NetworkPolicy",
            "metadata": {"name": "taken-network-policy"},
            "spec": {"podSelector": {"matchLabels": {"x": "y"}}, "policyTypes": ["Ingress"]},
        },
        namespace=namespace,
    )
    s.create_template(kube, namespace, "taken", image=settings.image)
    # Another template's policy proves the controller has been working meanwhile.
    s.create_template(kube, namespace, "free", image=settings.image)
    wait_policy(kube, namespace, "free-network-policy")

    def untouched() -> bool:
        current = kube.get(NP_API, "NetworkPolicy", "taken-network-policy", namespace)
        same = current["metadata"]["resourceVersion"] == foreign["metadata"]["resourceVersion"]
        return same and not current["metadata"].get("ownerReferences")

    kube.consistently(untouched, seconds=3, what="the foreign policy stays unchanged")
    kube.patch(
        s.EXT_API,
        "SandboxTemplate",
        "taken",
        namespace,
        {"spec": {"networkPolicyManagement": "Unmanaged"}},
    )
    kube.consistently(untouched, seconds=3, what="Unmanaged leaves the foreign policy alone")


@pytest.mark.spec("4.1")
def test_deleting_the_template_deletes_its_policy(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """The policy's ownerReference makes it go with its template."""
    s.create_template(kube, namespace, "doomed", image=settings.image)
    wait_policy(kube, namespace, "doomed-network-policy")
    kube.delete(s.EXT_API, "SandboxTemplate", "doomed", namespace)
    kube.wait_gone(NP_API, "NetworkPolicy", "doomed-network-policy", namespace)


@pytest.mark.spec("1.3")
def test_template_policies_have_their_defaults(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """networkPolicyManagement Managed, envVarsInjectionPolicy and volumeClaimTemplatesPolicy
    Disallowed when not given."""
    template = s.create_template(kube, namespace, "tpl", image=settings.image)
    assert template["spec"]["networkPolicyManagement"] == "Managed"
    assert template["spec"]["envVarsInjectionPolicy"] == "Disallowed"
    assert template["spec"]["volumeClaimTemplatesPolicy"] == "Disallowed"
    assert "status" not in template
