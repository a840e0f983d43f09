"""E2B outbound rules on a real kube-apiserver: the gateway (as its own ServiceAccount)
creates the sandbox's NetworkPolicy, the API server accepts it, and the garbage collector
deletes it with the sandbox. kwok has no CNI: enforcement itself is not tested here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import pytest
from e2b import ALL_TRAFFIC, Sandbox
from e2b.exceptions import InvalidArgumentException, SandboxException
from gateway_stack import GatewayStack

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.namehash import name_hash
from kube_agent_sandbox.controller.runtime import ApiClient, load_kubeconfig
from kube_agent_sandbox.gateway import tenants
from kube_agent_sandbox.gateway.egress_refresh import EgressRefresher
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.gateway import (
    kwok_template_spec,
    wait_warm_pool_ready,
    warm_template,
)
from kube_agent_sandbox.testing.waiting import ObjectRef, wait_for_deletion, wait_for_object


@pytest.fixture
def sdk_env(monkeypatch: pytest.MonkeyPatch, gateway_stack: GatewayStack) -> str:
    """Point the SDK at the gateway (both planes on one URL)."""
    monkeypatch.setenv("E2B_API_URL", gateway_stack.url)
    monkeypatch.setenv("E2B_SANDBOX_URL", gateway_stack.url)
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    monkeypatch.delenv("E2B_DEBUG", raising=False)
    monkeypatch.delenv("E2B_DOMAIN", raising=False)
    return gateway_stack.url


def test_sdk_egress_rules_become_a_network_policy(
    cluster: ClusterAccess, namespace: str, gateway_stack: GatewayStack, sdk_env: str
) -> None:
    cluster.apply(
        warm_template(
            "base",
            template_spec=kwok_template_spec("e2b-base:test"),
            replicas=1,
            namespace=namespace,
        )
    )
    key = tenants.generate_key()
    cluster.apply(tenants.key_secret(namespace, key, gateway_namespace=namespace))
    wait_warm_pool_ready(cluster, "base", namespace=namespace, replicas=1, what="a warm sandbox")
    deadline = time.monotonic() + 30
    while gateway_stack.state.tenants.authenticate(key) is None:
        assert time.monotonic() < deadline, "the gateway never saw the API key"
        time.sleep(0.1)

    # a wildcard domain is refused before anything is created
    with pytest.raises((InvalidArgumentException, SandboxException), match="wildcard"):
        Sandbox.create(
            "base",
            timeout=60,
            network={"allow_out": ["*.pypi.org"], "deny_out": [ALL_TRAFFIC]},
            api_key=key,
        )

    # a host name allows the addresses it resolves to (localhost: from /etc/hosts, offline)
    sbx = Sandbox.create(
        "base",
        timeout=60,
        network={"allow_out": ["1.1.1.1", "10.1.0.0/16", "localhost"], "deny_out": [ALL_TRAFFIC]},
        api_key=key,
    )
    api = cluster.api_client()
    policy = wait_for_object(
        api,
        ObjectRef("networking.k8s.io/v1", "NetworkPolicy", f"{sbx.sandbox_id}-egress", namespace),
        lambda _: True,
        timeout=10,
    )
    claim = wait_for_object(
        api,
        ObjectRef(c.EXTENSIONS_API_VERSION, c.KIND_SANDBOX_CLAIM, sbx.sandbox_id, namespace),
        lambda _: True,
        timeout=10,
    )
    sandbox_name = claim["status"]["sandbox"]["name"]
    owner = policy["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == (c.KIND_SANDBOX, sandbox_name)
    spec = policy["spec"]
    assert spec["podSelector"]["matchLabels"] == {
        c.LABEL_SANDBOX_NAME_HASH: name_hash(sandbox_name)
    }
    assert spec["policyTypes"] == ["Egress"]
    assert spec["egress"][0]["to"] == [
        {"ipBlock": {"cidr": "1.1.1.1/32"}},
        {"ipBlock": {"cidr": "10.1.0.0/16"}},
        {"ipBlock": {"cidr": "127.0.0.1/32"}},
    ]

    # new addresses of the host name are patched in, with the gateway's own rights
    async def moved(names: Sequence[str]) -> dict[str, tuple[str, ...]]:
        return dict.fromkeys(names, ("192.0.2.7",))

    async def refresh() -> int:
        index = gateway_stack.state.index
        config = load_kubeconfig(str(gateway_stack.state.options.kubeconfig))
        async with ApiClient(config) as client:
            refresher = EgressRefresher(
                lambda: client,
                lambda: [index.record(claim) for claim in index.claims.list()],
                lambda: moved,
                gateway_namespace=lambda: None,
            )
            return await refresher.refresh()

    assert asyncio.run(refresh()) >= 1
    policy = wait_for_object(
        api,
        ObjectRef("networking.k8s.io/v1", "NetworkPolicy", f"{sbx.sandbox_id}-egress", namespace),
        lambda _: True,
        timeout=10,
    )
    assert policy["spec"]["egress"][0]["to"] == [
        {"ipBlock": {"cidr": "1.1.1.1/32"}},
        {"ipBlock": {"cidr": "10.1.0.0/16"}},
        {"ipBlock": {"cidr": "192.0.2.7/32"}},
    ]
    info = sbx.get_info()
    assert info.sandbox_id == sbx.sandbox_id

    # update_network replaces the rules in place (the gateway's own rights: patch, delete)
    policy_ref = ObjectRef(
        "networking.k8s.io/v1", "NetworkPolicy", f"{sbx.sandbox_id}-egress", namespace
    )
    sbx.update_network({"allow_out": ["8.8.8.8"], "deny_out": [ALL_TRAFFIC]})
    policy = wait_for_object(
        api,
        policy_ref,
        lambda p: p["spec"]["egress"][0]["to"] == [{"ipBlock": {"cidr": "8.8.8.8/32"}}],
        timeout=10,
    )
    assert sbx.get_info().sandbox_id == sbx.sandbox_id
    sbx.update_network({})
    wait_for_deletion(api, policy_ref, timeout=10)
    sbx.update_network({"allow_internet_access": False})
    wait_for_object(api, policy_ref, lambda _: True, timeout=10)

    sbx.kill()
    wait_for_deletion(
        api,
        ObjectRef("networking.k8s.io/v1", "NetworkPolicy", f"{sbx.sandbox_id}-egress", namespace),
        timeout=60,
    )
