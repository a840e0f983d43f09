"""The SandboxTemplate controller against a real kube-apiserver.

The controller runs in-process with the Sandbox controller, as a ServiceAccount bound to the
core ClusterRole and to the extensions ClusterRole built from ``RBAC_RULES``, so a missing
permission fails here as it would in a cluster. The kube-controller-manager of the local
cluster garbage-collects the policy of a deleted template through its ownerReference.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.namehash import name_hash
from kube_agent_sandbox.api.resources import SANDBOX_TEMPLATES
from kube_agent_sandbox.api.rest import NETWORK_POLICIES
from kube_agent_sandbox.controller.runtime import Manager, Obj
from kube_agent_sandbox.testing.nsapi import NamespaceApi

pytestmark = pytest.mark.integration


DEFAULT_SPEC = {
    "podSelector": {"matchLabels": {c.LABEL_SANDBOX_TEMPLATE_REF_HASH: "69155462"}},
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
"""The policy upstream's template Reconcile writes, for a template named ``test-template`` (NameHash
69155462)."""


def _pod_template() -> Obj:
    return {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}


@dataclass
class Env(NamespaceApi):
    """An admin client, the test's namespace and helpers."""

    manager: Manager

    def controller_puts(self) -> float:
        """PUT requests the controller process has sent (the template controller's Updates)."""
        total = 0.0
        for metric in self.manager.registry.collect():
            for sample in metric.samples:
                if sample.name == "rest_client_requests_total" and (
                    sample.labels.get("method") == "PUT"
                ):
                    total += sample.value
        return total

    async def create_template(self, name: str, **spec: Any) -> Obj:
        body = {"metadata": {"name": name}, "spec": {"podTemplate": _pod_template(), **spec}}
        return await self.create(SANDBOX_TEMPLATES, body)

    async def until_policy(self, name: str, check: Callable[[Obj], bool], what: str) -> Obj:
        async def probe() -> Obj | None:
            policy = await self.get(NETWORK_POLICIES, name)
            return policy if policy is not None and check(policy) else None

        return await self.until(probe, what)

    async def until_labelled(self, name: str) -> Obj:
        async def probe() -> Obj | None:
            template = await self.get(SANDBOX_TEMPLATES, name)
            labels = ((template or {}).get("metadata") or {}).get("labels") or {}
            return template if labels.get(c.LABEL_SANDBOX_TEMPLATE_REF_HASH) else None

        return await self.until(probe, f"template {name} to be labelled")

    async def template_warnings(self, name: str) -> list[str]:
        return [
            str(e.get("note"))
            for e in await self.events_regarding("SandboxTemplate", name)
            if e.get("type") == "Warning"
        ]

    async def until_warning(self, name: str, note: str) -> None:
        async def probe() -> bool:
            return note in await self.template_warnings(name)

        await self.until(probe, f"Warning {note!r} on template {name}")


@pytest.fixture
async def env(cluster: Any, namespace: str, extensions_controller: list[Any]) -> AsyncIterator[Env]:
    async with Env.connect(cluster.kubeconfig, namespace, manager=extensions_controller[0]) as e:
        yield e


def _owner_refs(policy: Obj) -> list[Obj]:
    return list(policy["metadata"].get("ownerReferences") or [])


class TestTemplateController:
    extensions = ("template",)

    async def test_default_policy_has_the_exact_spec_content(self, env: Env) -> None:
        template = await env.create_template("test-template")
        policy = await env.until_policy(
            "test-template-network-policy", lambda _: True, "the default policy"
        )
        assert policy["spec"] == DEFAULT_SPEC
        assert _owner_refs(policy) == [
            {
                "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
                "kind": "SandboxTemplate",
                "name": "test-template",
                "uid": template["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        labelled = await env.until_labelled("test-template")
        assert labelled["metadata"]["labels"] == {c.LABEL_SANDBOX_TEMPLATE_REF_HASH: "69155462"}

    async def test_custom_rules_and_no_rewrites_of_server_defaults(self, env: Env) -> None:
        custom = {
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]}],
            "egress": [{"to": [{"ipBlock": {"cidr": "203.0.113.0/24"}}], "ports": [{"port": 443}]}],
        }
        await env.create_template("custom", networkPolicy=custom)
        policy = await env.until_policy("custom-network-policy", lambda _: True, "custom policy")
        assert policy["spec"] == {
            "podSelector": {
                "matchLabels": {c.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash("custom")}
            },
            "policyTypes": ["Ingress", "Egress"],
            "ingress": custom["ingress"],
            "egress": [
                {
                    "to": [{"ipBlock": {"cidr": "203.0.113.0/24"}}],
                    "ports": [{"port": 443, "protocol": "TCP"}],
                }
            ],
        }
        # Another reconcile of the unchanged template writes nothing. (The server would turn
        # a needless Update into a no-op, so count the controller's PUTs, not versions.)
        version = policy["metadata"]["resourceVersion"]
        puts = env.controller_puts()
        await env.patch(SANDBOX_TEMPLATES, "custom", {"metadata": {"annotations": {"poke": "1"}}})
        # the Unmanaged marker template proves the controller has processed events since
        await env.create_template("marker", networkPolicyManagement="Unmanaged")
        await env.until_labelled("marker")
        again = await env.get(NETWORK_POLICIES, "custom-network-policy")
        assert again is not None
        assert again["metadata"]["resourceVersion"] == version
        assert env.controller_puts() == puts

        # Empty egress denies all egress: the server stores it as absent.
        await env.patch(
            SANDBOX_TEMPLATES,
            "custom",
            {"spec": {"networkPolicy": {"ingress": None, "egress": []}}},
        )
        denied = await env.until_policy(
            "custom-network-policy",
            lambda p: "ingress" not in p["spec"] and not p["spec"].get("egress"),
            "deny-all policy",
        )
        assert denied["spec"]["policyTypes"] == ["Ingress", "Egress"]

    async def test_hand_edited_policy_is_repaired(self, env: Env) -> None:
        await env.create_template("test-template")
        name = "test-template-network-policy"
        await env.until_policy(name, lambda _: True, "the default policy")
        await env.patch(
            NETWORK_POLICIES,
            name,
            {"metadata": {"labels": {"edited": "yes"}}, "spec": {"egress": [{}]}},
        )
        repaired = await env.until_policy(
            name, lambda p: p["spec"] == DEFAULT_SPEC, "the edit to be reverted"
        )
        assert repaired["metadata"]["labels"] == {"edited": "yes"}  # only the spec is ours

    async def test_switch_to_unmanaged_deletes_the_owned_policy(self, env: Env) -> None:
        await env.create_template("switch")
        await env.until_policy("switch-network-policy", lambda _: True, "the default policy")
        await env.patch(
            SANDBOX_TEMPLATES, "switch", {"spec": {"networkPolicyManagement": "Unmanaged"}}
        )
        await env.until_gone(NETWORK_POLICIES, "switch-network-policy")
        # and back
        await env.patch(SANDBOX_TEMPLATES, "switch", {"spec": {"networkPolicyManagement": None}})
        await env.until_policy("switch-network-policy", lambda _: True, "the policy again")

    async def test_foreign_policy_is_untouched_and_others_are_reconciled(self, env: Env) -> None:
        foreign_spec = {"podSelector": {"matchLabels": {"x": "y"}}, "policyTypes": ["Ingress"]}
        foreign = await env.client.create(
            NETWORK_POLICIES,
            env.namespace,
            {"metadata": {"name": "taken-network-policy"}, "spec": foreign_spec},
        )
        await env.create_template("taken")
        message = (
            'refusing to update NetworkPolicy "taken-network-policy" as it is not controlled '
            'by SandboxTemplate "taken"'
        )
        await env.until_warning("taken", message)
        # The controller keeps working on other templates.
        await env.create_template("free")
        await env.until_policy("free-network-policy", lambda _: True, "another template's policy")
        still = await env.get(NETWORK_POLICIES, "taken-network-policy")
        assert still is not None
        assert still["metadata"]["resourceVersion"] == foreign["metadata"]["resourceVersion"]
        assert _owner_refs(still) == []

        # Unmanaged leaves it alone as well.
        await env.patch(
            SANDBOX_TEMPLATES, "taken", {"spec": {"networkPolicyManagement": "Unmanaged"}}
        )
        await env.create_template("marker", networkPolicyManagement="Unmanaged")
        await env.until_labelled("marker")
        still = await env.get(NETWORK_POLICIES, "taken-network-policy")
        assert still is not None
        assert still["metadata"]["resourceVersion"] == foreign["metadata"]["resourceVersion"]

        # Once the foreign policy is gone, the (again Managed) template takes the name.
        await env.patch(
            SANDBOX_TEMPLATES, "taken", {"spec": {"networkPolicyManagement": "Managed"}}
        )
        await env.client.delete(NETWORK_POLICIES, env.namespace, "taken-network-policy")
        owned = await env.until_policy(
            "taken-network-policy", lambda p: bool(_owner_refs(p)), "the template's own policy"
        )
        assert owned["spec"]["podSelector"] == {
            "matchLabels": {c.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash("taken")}
        }

    async def test_policy_the_server_rejects_is_reported(self, env: Env) -> None:
        await env.create_template(
            "bad-cidr", networkPolicy={"egress": [{"to": [{"ipBlock": {"cidr": "not-a-cidr"}}]}]}
        )

        async def probe() -> list[str]:
            return [
                n
                for n in await env.template_warnings("bad-cidr")
                if n.startswith('failed to create NetworkPolicy "bad-cidr-network-policy": ')
            ]

        [note] = await env.until(probe, "a Warning about the rejected policy")
        assert "not-a-cidr" in note
        assert await env.get(NETWORK_POLICIES, "bad-cidr-network-policy") is None
        # Fixing the template fixes the policy.
        await env.patch(
            SANDBOX_TEMPLATES,
            "bad-cidr",
            {"spec": {"networkPolicy": {"egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}]}}},
        )
        await env.until_policy("bad-cidr-network-policy", lambda _: True, "the fixed policy")

    async def test_deleting_the_template_garbage_collects_the_policy(self, env: Env) -> None:
        await env.create_template("doomed")
        await env.until_policy("doomed-network-policy", lambda _: True, "the default policy")
        await env.client.delete(SANDBOX_TEMPLATES, env.namespace, "doomed")
        await env.until_gone(NETWORK_POLICIES, "doomed-network-policy")
