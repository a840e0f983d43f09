"""E2B outbound rules: validation, the NetworkPolicy they become, and the create path."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Sequence
from typing import Any

import pytest
from gateway_fakes import Gateway, claim_of

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.namehash import name_hash
from kube_agent_sandbox.api.resources import SANDBOX_CLAIMS, SANDBOXES
from kube_agent_sandbox.api.rest import NETWORK_POLICIES
from kube_agent_sandbox.controller.runtime import ApiError
from kube_agent_sandbox.gateway.annotations import ANNOTATION_EGRESS, LABEL_EGRESS_SANDBOX
from kube_agent_sandbox.gateway.egress import (
    ALL_TRAFFIC,
    EgressRules,
    InvalidEgressRules,
    allowed_blocks,
    network_policy,
    parse_egress,
    resolve_domains,
)
from kube_agent_sandbox.gateway.rbac import RBAC_RULES

SANDBOX = {"metadata": {"name": "pool-abc", "namespace": "tenant-a", "uid": "u-1"}}


# -- validation ------------------------------------------------------------------------------
def test_entries_are_normalized_to_ipv4_cidr_blocks() -> None:
    rules = parse_egress(
        {
            "allowOut": ["1.1.1.1", " 8.8.8.0/24", "10.1.2.3/8", "1.1.1.1/32"],
            "denyOut": [ALL_TRAFFIC],
        }
    )
    assert rules == EgressRules(
        allow_out=("1.1.1.1/32", "8.8.8.0/24", "10.0.0.0/8"), deny_out=(ALL_TRAFFIC,)
    )
    assert rules.restricted
    assert not rules.internet_access


def test_no_rules_and_allow_internet_access() -> None:
    assert parse_egress(None) is None
    assert parse_egress({}) is None
    assert parse_egress({"allowOut": None, "denyOut": []}) is None
    assert parse_egress({}, allow_internet_access=True) is None
    assert parse_egress(None, allow_internet_access=False) == EgressRules(deny_out=(ALL_TRAFFIC,))
    # without denyOut, E2B allows every destination: stored, but nothing to enforce
    allow_only = parse_egress({"allowOut": ["1.1.1.1"]})
    assert allow_only is not None
    assert not allow_only.restricted


@pytest.mark.parametrize(
    ("network", "words"),
    [
        ({"allowOut": ["*.example.com"]}, ["'*.example.com'", "wildcard", "host names"]),
        ({"denyOut": ["example.com"]}, ["network.denyOut", "'example.com'", "domain"]),
        ({"allowOut": ["2001:db8::/32"]}, ["'2001:db8::/32'", "IPv6"]),
        ({"denyOut": ["1.2.3.4/33"]}, ["'1.2.3.4/33'", "not an IPv4 address"]),
        ({"denyOut": ["1.2.3.999"]}, ["'1.2.3.999'", "not an IPv4 address"]),
        ({"denyOut": ["a b"]}, ["'a b'"]),
        ({"allowOut": "1.1.1.1"}, ["network.allowOut must be a list of strings"]),
        ({"denyOut": [1]}, ["network.denyOut must be a list of strings"]),
    ],
)
def test_bad_entries_are_named(network: dict[str, Any], words: list[str]) -> None:
    with pytest.raises(InvalidEgressRules) as caught:
        parse_egress(network)
    for word in words:
        assert word in str(caught.value)


def test_host_names_are_kept_in_allow_out() -> None:
    rules = parse_egress(
        {
            "allowOut": ["PyPI.org.", "1.1.1.1", "pypi.org", "files.pythonhosted.org"],
            "denyOut": [ALL_TRAFFIC],
        }
    )
    assert rules is not None
    assert rules.allow_out == ("pypi.org", "1.1.1.1/32", "files.pythonhosted.org")
    assert rules.domains == ("pypi.org", "files.pythonhosted.org")
    assert EgressRules.from_json(rules.to_json()) == rules


def test_host_names_allow_the_addresses_they_resolved_to() -> None:
    rules = EgressRules(
        allow_out=("pypi.org", "1.1.1.1/32", "gone.example"), deny_out=(ALL_TRAFFIC,)
    )
    resolved = {"pypi.org": ("151.101.0.223", "1.1.1.1"), "gone.example": ()}
    peers = allowed_blocks(rules, resolved)
    assert peers == [
        {"ipBlock": {"cidr": "151.101.0.223/32"}},
        {"ipBlock": {"cidr": "1.1.1.1/32"}},
    ]
    assert _reachable(peers, "151.101.0.223")
    assert not _reachable(peers, "151.101.0.224")
    # not resolved yet: the host name allows nothing (never everything)
    assert allowed_blocks(rules) == [{"ipBlock": {"cidr": "1.1.1.1/32"}}]


async def test_resolve_domains_gives_ipv4_addresses_and_nothing_for_a_bad_name() -> None:
    found = await resolve_domains(["localhost", "no-such-host.invalid"])
    assert found == {"localhost": ("127.0.0.1",), "no-such-host.invalid": ()}


def test_allow_internet_access_must_be_a_boolean() -> None:
    with pytest.raises(InvalidEgressRules, match="allowInternetAccess"):
        parse_egress(None, allow_internet_access="no")


def test_annotation_round_trip() -> None:
    rules = EgressRules(allow_out=("1.1.1.1/32",), deny_out=(ALL_TRAFFIC,))
    assert json.loads(rules.to_json()) == {"allowOut": ["1.1.1.1/32"], "denyOut": [ALL_TRAFFIC]}
    assert EgressRules.from_json(rules.to_json()) == rules
    assert EgressRules.from_json(None) is None
    with pytest.raises(InvalidEgressRules):
        EgressRules.from_json('{"denyOut": ["example.com"]}')


# -- the NetworkPolicy -----------------------------------------------------------------------
def _reachable(peers: list[dict[str, Any]], address: str) -> bool:
    """Whether a destination matches one of the ipBlock peers (NetworkPolicy semantics)."""
    ip = ipaddress.IPv4Address(address)
    for peer in peers:
        block = peer["ipBlock"]
        if ip in ipaddress.IPv4Network(block["cidr"]) and not any(
            ip in ipaddress.IPv4Network(e) for e in block.get("except", ())
        ):
            return True
    return False


def test_deny_all_with_an_allow_list_is_a_whitelist() -> None:
    peers = allowed_blocks(EgressRules(allow_out=("1.1.1.1/32",), deny_out=(ALL_TRAFFIC,)))
    assert peers == [{"ipBlock": {"cidr": "1.1.1.1/32"}}]
    assert _reachable(peers, "1.1.1.1")
    assert not _reachable(peers, "8.8.8.8")


def test_deny_list_with_allowed_holes() -> None:
    rules = EgressRules(
        allow_out=("10.1.0.0/16", "192.168.0.1/32"), deny_out=("10.0.0.0/8", "10.0.0.0/9")
    )
    peers = allowed_blocks(rules)
    # denied blocks are collapsed; an allowed block outside every denied one is left out
    assert peers == [
        {"ipBlock": {"cidr": ALL_TRAFFIC, "except": ["10.0.0.0/8"]}},
        {"ipBlock": {"cidr": "10.1.0.0/16"}},
    ]
    assert _reachable(peers, "8.8.8.8")
    assert _reachable(peers, "192.168.0.1")
    assert _reachable(peers, "10.1.2.3")  # allow wins over deny
    assert not _reachable(peers, "10.2.0.1")


def test_deny_all_without_allow_keeps_only_dns() -> None:
    policy = network_policy(
        SANDBOX, "sbx1", EgressRules(deny_out=(ALL_TRAFFIC,)), gateway_namespace=None
    )
    assert policy["spec"]["egress"] == [
        {
            "to": [
                {
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": "kube-system"}
                    },
                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                }
            ],
            "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
        }
    ]


def test_policy_selects_the_sandbox_pod_and_is_owned_by_the_sandbox() -> None:
    rules = EgressRules(allow_out=("1.1.1.1/32",), deny_out=(ALL_TRAFFIC,))
    policy = network_policy(SANDBOX, "sbx1", rules, gateway_namespace="agent-sandbox-system")
    assert policy["apiVersion"] == "networking.k8s.io/v1"
    assert policy["kind"] == "NetworkPolicy"
    meta = policy["metadata"]
    assert meta["name"] == "sbx1-egress"
    assert meta["namespace"] == "tenant-a"
    assert meta["labels"] == {LABEL_EGRESS_SANDBOX: "sbx1"}
    assert meta["ownerReferences"] == [
        {"apiVersion": c.SANDBOX_API_VERSION, "kind": "Sandbox", "name": "pool-abc", "uid": "u-1"}
    ]
    spec = policy["spec"]
    assert spec["podSelector"] == {
        "matchLabels": {c.LABEL_SANDBOX_NAME_HASH: name_hash("pool-abc")}
    }
    assert spec["policyTypes"] == ["Egress"]  # ingress (the gateway reaching sandboxd) untouched
    assert spec["egress"][0] == {"to": [{"ipBlock": {"cidr": "1.1.1.1/32"}}]}
    assert spec["egress"][2] == {
        "to": [
            {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": "agent-sandbox-system"}
                },
                "podSelector": {"matchLabels": {"app": "agent-sandbox-gateway"}},
            }
        ]
    }


def test_the_gateway_role_may_create_and_patch_network_policies() -> None:
    for verb in ("create", "patch"):
        assert any("networkpolicies" in r.resources and verb in r.verbs for r in RBAC_RULES)


# -- the create endpoint ---------------------------------------------------------------------
async def _create(gateway: Gateway, **body: Any) -> Any:
    return await gateway.client.post(
        "/v2/sandboxes",
        json={"templateID": "base", "timeout": 60, **body},
        headers=gateway.headers(),
    )


async def test_create_stores_the_rules_and_creates_the_network_policy(gateway: Gateway) -> None:
    response = await _create(gateway, network={"allowOut": ["1.1.1.1"], "denyOut": [ALL_TRAFFIC]})
    assert response.status_code == 201, response.text
    sid = response.json()["sandboxID"]
    claim = claim_of(gateway.api, sid)
    assert json.loads(claim["metadata"]["annotations"][ANNOTATION_EGRESS]) == {
        "allowOut": ["1.1.1.1/32"],
        "denyOut": [ALL_TRAFFIC],
    }
    policy = gateway.api.obj(NETWORK_POLICIES, f"{sid}-egress", claim["metadata"]["namespace"])
    assert policy is not None
    sandbox_name = claim["status"]["sandbox"]["name"]
    sandbox = gateway.api.obj(SANDBOXES, sandbox_name, claim["metadata"]["namespace"])
    assert sandbox is not None
    assert policy["metadata"]["ownerReferences"][0]["uid"] == sandbox["metadata"]["uid"]
    assert policy["spec"]["podSelector"]["matchLabels"] == {
        c.LABEL_SANDBOX_NAME_HASH: name_hash(sandbox_name)
    }
    assert policy["spec"]["egress"][0] == {"to": [{"ipBlock": {"cidr": "1.1.1.1/32"}}]}

    info = await gateway.client.get(f"/sandboxes/{sid}", headers=gateway.headers())
    assert info.status_code == 200, info.text
    assert info.json()["allowInternetAccess"] is False
    assert info.json()["network"] == {"allowOut": ["1.1.1.1/32"], "denyOut": [ALL_TRAFFIC]}


async def test_create_without_deny_rules_creates_no_policy(gateway: Gateway) -> None:
    for body in ({}, {"network": {"allowOut": ["1.1.1.1"]}}, {"allowInternetAccess": True}):
        response = await _create(gateway, **body)
        assert response.status_code == 201, response.text
    assert gateway.api.objects(NETWORK_POLICIES) == []


async def test_allow_internet_access_false_denies_everything(gateway: Gateway) -> None:
    response = await _create(gateway, allowInternetAccess=False)
    assert response.status_code == 201, response.text
    sid = response.json()["sandboxID"]
    policy = gateway.api.obj(NETWORK_POLICIES, f"{sid}-egress", "tenant-a")
    assert policy is not None
    assert [rule.get("ports") for rule in policy["spec"]["egress"]] == [
        [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    ]


async def test_bad_rules_answer_400_naming_the_entry(gateway: Gateway) -> None:
    response = await _create(
        gateway, network={"allowOut": ["*.pypi.org"], "denyOut": [ALL_TRAFFIC]}
    )
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == 400
    assert "'*.pypi.org'" in body["message"]
    assert "wildcard" in body["message"]
    assert gateway.api.objects(SANDBOX_CLAIMS) == []


async def test_host_names_become_their_addresses_and_follow_changes(gateway: Gateway) -> None:
    answers = {"pypi.org": ("151.101.0.223",)}

    async def resolver(names: Sequence[str]) -> dict[str, tuple[str, ...]]:
        return {name: answers.get(name, ()) for name in names}

    gateway.state.resolve_domains = resolver
    response = await _create(
        gateway, network={"allowOut": ["pypi.org", "1.1.1.1"], "denyOut": [ALL_TRAFFIC]}
    )
    assert response.status_code == 201, response.text
    sid = response.json()["sandboxID"]
    claim = claim_of(gateway.api, sid)
    # the annotation keeps the host name, never its addresses of the moment
    assert json.loads(claim["metadata"]["annotations"][ANNOTATION_EGRESS])["allowOut"] == [
        "pypi.org",
        "1.1.1.1/32",
    ]

    def allowed() -> list[Any]:
        policy = gateway.api.obj(NETWORK_POLICIES, f"{sid}-egress", "tenant-a")
        assert policy is not None
        return list(policy["spec"]["egress"][0]["to"])

    assert allowed() == [
        {"ipBlock": {"cidr": "151.101.0.223/32"}},
        {"ipBlock": {"cidr": "1.1.1.1/32"}},
    ]
    refresher = gateway.state.egress_refresher
    assert await refresher.refresh() == 0  # unchanged: no write
    answers["pypi.org"] = ("151.101.64.223", "151.101.128.223")
    assert await refresher.refresh() == 1
    assert allowed() == [
        {"ipBlock": {"cidr": "151.101.64.223/32"}},
        {"ipBlock": {"cidr": "151.101.128.223/32"}},
        {"ipBlock": {"cidr": "1.1.1.1/32"}},
    ]
    assert await refresher.refresh() == 0


async def test_a_refused_policy_deletes_the_sandbox(gateway: Gateway) -> None:
    gateway.api.fail("create", "networkpolicies", ApiError(403, "Forbidden", "no"))
    response = await _create(gateway, network={"denyOut": ["10.0.0.0/8"]})
    assert response.status_code == 500
    message = response.json()["message"]
    assert "may not create NetworkPolicies" in message
    assert "the sandbox was deleted" in message
    assert gateway.api.objects(SANDBOX_CLAIMS) == []


# -- update_network --------------------------------------------------------------------------
async def _update(gateway: Gateway, sid: str, key: str | None = None, **body: Any) -> Any:
    return await gateway.client.put(
        f"/sandboxes/{sid}/network", json=body, headers=gateway.headers(key)
    )


def _policy(gateway: Gateway, sid: str) -> dict[str, Any] | None:
    return gateway.api.obj(NETWORK_POLICIES, f"{sid}-egress", "tenant-a")


async def test_update_network_replaces_the_rules_in_place(gateway: Gateway) -> None:
    response = await _create(gateway, network={"allowOut": ["1.1.1.1"], "denyOut": [ALL_TRAFFIC]})
    sid = response.json()["sandboxID"]
    before = _policy(gateway, sid)
    assert before is not None

    updated = await _update(gateway, sid, allowOut=["8.8.8.8"], denyOut=[ALL_TRAFFIC])
    assert updated.status_code == 204, updated.text
    after = _policy(gateway, sid)
    assert after is not None
    assert after["metadata"]["uid"] == before["metadata"]["uid"]  # patched, not recreated
    assert after["spec"]["egress"][0] == {"to": [{"ipBlock": {"cidr": "8.8.8.8/32"}}]}
    claim = claim_of(gateway.api, sid)
    assert json.loads(claim["metadata"]["annotations"][ANNOTATION_EGRESS]) == {
        "allowOut": ["8.8.8.8/32"],
        "denyOut": [ALL_TRAFFIC],
    }
    info = await gateway.client.get(f"/sandboxes/{sid}", headers=gateway.headers())
    assert info.json()["network"] == {"allowOut": ["8.8.8.8/32"], "denyOut": [ALL_TRAFFIC]}


async def test_update_network_without_rules_removes_the_policy(gateway: Gateway) -> None:
    response = await _create(gateway, allowInternetAccess=False)
    sid = response.json()["sandboxID"]
    assert _policy(gateway, sid) is not None
    # E2B: a field left out is cleared
    updated = await _update(gateway, sid)
    assert updated.status_code == 204, updated.text
    assert _policy(gateway, sid) is None
    claim = claim_of(gateway.api, sid)
    assert ANNOTATION_EGRESS not in claim["metadata"].get("annotations", {})
    # and back: a sandbox without a policy gets one (the Python SDK's spelling of the field)
    updated = await _update(gateway, sid, allow_internet_access=False)
    assert updated.status_code == 204, updated.text
    policy = _policy(gateway, sid)
    assert policy is not None
    assert policy["metadata"]["ownerReferences"][0]["kind"] == c.KIND_SANDBOX


async def test_update_network_refuses_bad_rules_and_other_tenants(gateway: Gateway) -> None:
    response = await _create(gateway, network={"denyOut": ["10.0.0.0/8"]})
    sid = response.json()["sandboxID"]
    bad = await _update(gateway, sid, allowOut=["*.example.com"], denyOut=[ALL_TRAFFIC])
    assert bad.status_code == 400
    assert "wildcard" in bad.json()["message"]
    other = await _update(gateway, sid, key=gateway.other_key, denyOut=[ALL_TRAFFIC])
    assert other.status_code == 404
    policy = _policy(gateway, sid)
    assert policy is not None
    assert policy["spec"]["egress"][0]["to"] == [
        {"ipBlock": {"cidr": ALL_TRAFFIC, "except": ["10.0.0.0/8"]}}
    ]
    missing = await _update(gateway, "no-such-sandbox", denyOut=[ALL_TRAFFIC])
    assert missing.status_code == 404
