"""The NetworkPolicy a SandboxTemplate asks for (upstream's template Reconcile).

Pure functions, no I/O: the policy's name, whether the controller manages it, and the spec it
must have. Every Sandbox pod made from a template carries the template-ref-hash label, so one
policy per template, selecting on that label, covers its warm and claimed sandboxes alike.

The desired spec is completed with the defaults the API server fills in (a port without a
protocol is TCP), so the spec read back from the server compares equal to it and an unchanged
template never causes a write.
"""

from __future__ import annotations

import copy
from typing import Any, Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime import Obj, name_of
from kube_agent_sandbox.extensions.common.blueprint import template_ref_hash

__all__ = [
    "DEFAULT_EGRESS",
    "DEFAULT_INGRESS",
    "MANAGED",
    "MAX_NAME_LENGTH",
    "NETWORK_POLICY_SUFFIX",
    "UNMANAGED",
    "desired_network_policy",
    "desired_spec",
    "is_managed",
    "network_policy_name",
    "network_policy_name_problem",
    "template_for_policy_name",
]

MANAGED: Final = "Managed"
UNMANAGED: Final = "Unmanaged"
NETWORK_POLICY_SUFFIX: Final = "-network-policy"
MAX_NAME_LENGTH: Final = 253
"""NetworkPolicy names are DNS subdomains."""

ROUTER_NAMESPACE: Final = c.CONTROLLER_NAMESPACE
ROUTER_POD_LABELS: Final = {"app": "sandbox-router"}
BLOCKED_IPV4: Final = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16")
"""Private and link-local IPv4 ranges (cluster, VPC, cloud metadata) the default policy blocks."""
BLOCKED_IPV6: Final = ("fc00::/7", "fe80::/10")
"""Unique-local and link-local IPv6 ranges the default policy blocks."""
POLICY_TYPES: Final = ("Ingress", "Egress")

DEFAULT_INGRESS: Final[tuple[Obj, ...]] = (
    {
        "from": [
            {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": ROUTER_NAMESPACE}
                },
                "podSelector": {"matchLabels": dict(ROUTER_POD_LABELS)},
            }
        ]
    },
)
"""Only the sandbox router (in ``agent-sandbox-system``) may connect to sandbox pods."""

DEFAULT_EGRESS: Final[tuple[Obj, ...]] = (
    {
        "to": [
            {"ipBlock": {"cidr": "0.0.0.0/0", "except": list(BLOCKED_IPV4)}},
            {"ipBlock": {"cidr": "::/0", "except": list(BLOCKED_IPV6)}},
        ]
    },
)
"""The public internet on any port; no private ranges, hence no cluster DNS either."""


def network_policy_name(template_name: str) -> str:
    """``<template>-network-policy``: the one policy of a template, in its namespace."""
    return f"{template_name}{NETWORK_POLICY_SUFFIX}"


def template_for_policy_name(policy_name: str) -> str | None:
    """The template a policy of this name would belong to, or None for any other name."""
    if not policy_name.endswith(NETWORK_POLICY_SUFFIX):
        return None
    template = policy_name[: -len(NETWORK_POLICY_SUFFIX)]
    return template or None


def network_policy_name_problem(template_name: str) -> str | None:
    """Why the template's policy name cannot exist, or None when it can.

    A template name may be 253 characters long; with the suffix the policy name may not.
    """
    length = len(network_policy_name(template_name))
    if length > MAX_NAME_LENGTH:
        return (
            f"name must be no more than {MAX_NAME_LENGTH} characters (it is the template "
            f"name plus {NETWORK_POLICY_SUFFIX!r}, {length} characters)"
        )
    return None


def is_managed(template: Obj) -> bool:
    """Whether the controller owns the template's policy (``Managed``, the default when empty).

    Only ``Unmanaged`` opts out; the CRD admits no other value.
    """
    spec = template.get("spec") or {}
    return (spec.get("networkPolicyManagement") or MANAGED) != UNMANAGED


def _default_port_protocols(rules: Any) -> Any:
    """Rules with ``protocol: TCP`` on ports that name none, as the API server stores them."""
    if not isinstance(rules, list):
        return rules
    for rule in rules:
        if not isinstance(rule, dict):
            continue
        for port in rule.get("ports") or ():
            if isinstance(port, dict) and not port.get("protocol"):
                port["protocol"] = "TCP"
    return rules


def desired_spec(template: Obj) -> Obj:
    """The NetworkPolicy spec ``template`` asks for (a new object; the template is not touched).

    Without ``spec.networkPolicy`` this is the secure default: ingress only from the sandbox
    router, egress only to public addresses. With it, the template's ``ingress`` and ``egress``
    rules are used as given (an empty list denies all traffic in that direction). Either way
    the policy selects the template's pods by their template-ref-hash label and governs both
    directions.
    """
    custom = (template.get("spec") or {}).get("networkPolicy")
    spec: Obj = {
        "podSelector": {
            "matchLabels": {c.LABEL_SANDBOX_TEMPLATE_REF_HASH: template_ref_hash(name_of(template))}
        },
        "policyTypes": list(POLICY_TYPES),
    }
    if custom is None:
        spec["ingress"] = copy.deepcopy(list(DEFAULT_INGRESS))
        spec["egress"] = copy.deepcopy(list(DEFAULT_EGRESS))
        return spec
    for direction in ("ingress", "egress"):
        rules = custom.get(direction) if isinstance(custom, dict) else None
        if rules is not None:
            spec[direction] = _default_port_protocols(copy.deepcopy(rules))
    return spec


def desired_network_policy(template: Obj, *, owner_ref: Obj) -> Obj:
    """The NetworkPolicy to create for ``template``, controlled by it through ``owner_ref``."""
    meta = template.get("metadata") or {}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": network_policy_name(str(meta.get("name") or "")),
            "namespace": str(meta.get("namespace") or ""),
            "ownerReferences": [owner_ref],
        },
        "spec": desired_spec(template),
    }
