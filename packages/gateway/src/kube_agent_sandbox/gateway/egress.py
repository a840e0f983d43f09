"""E2B outbound rules (``network.allowOut`` / ``denyOut``) as a Kubernetes NetworkPolicy.

E2B's semantics (its OpenAPI ``SandboxNetworkConfig``): without ``denyOut`` every
destination is allowed; a destination in ``denyOut`` is blocked unless it is also in
``allowOut`` ("allowed entries always take precedence over denied entries"); ``"0.0.0.0/0"``
(the SDKs' ``ALL_TRAFFIC``) in ``denyOut`` blocks everything, and ``allowInternetAccess:
false`` means exactly that. Entries are IP addresses or CIDR blocks; E2B also accepts domain
names in ``allowOut``, which a NetworkPolicy cannot match, so this gateway refuses them (400)
rather than silently allowing or blocking nothing.

Enforcement: one NetworkPolicy ``<sandbox id>-egress`` in the tenant namespace, selecting the
sandbox's pod by the label its Sandbox controller always sets
(``agents.x-k8s.io/sandbox-name-hash``), owned by the Sandbox (garbage-collected with it),
with ``policyTypes: [Egress]`` only, so inbound traffic (the gateway reaching sandboxd and
user ports) is untouched. It allows:

* ``0.0.0.0/0`` minus the denied blocks (``except``; a NetworkPolicy has allow rules only),
  plus every allowed block that overlaps a denied one;
* DNS (UDP and TCP 53) to the cluster DNS pods (``k8s-app: kube-dns`` in ``kube-system``);
* the gateway's own pods, when the gateway knows its namespace (sandboxd's heartbeats).

Only IPv4 is accepted (E2B sandboxes are IPv4-only); a restricted sandbox has no IPv6
egress. Documented in ``docs/guides/gateway.md`` ("Outbound network rules").
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.namehash import name_hash
from kube_agent_sandbox.gateway.annotations import LABEL_EGRESS_SANDBOX

ALL_TRAFFIC: Final = "0.0.0.0/0"
"""E2B's ``ALL_TRAFFIC``: in ``denyOut`` it blocks every destination."""

MAX_RULES: Final = 500
"""At most this many entries per list (they end up in one object and one annotation)."""

DNS_NAMESPACE: Final = "kube-system"
DNS_POD_LABELS: Final = {"k8s-app": "kube-dns"}
"""The cluster DNS pods (CoreDNS keeps kube-dns's label) sandboxes may always query."""

GATEWAY_POD_LABELS: Final = {"app": "agent-sandbox-gateway"}
"""The gateway's pod labels in ``manifests/components/gateway/deployment.yaml``."""

NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"
SERVICE_ACCOUNT_NAMESPACE_FILE: Final = Path(
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
)
POLICY_SUFFIX: Final = "-egress"

_HOSTNAME: Final = re.compile(
    r"^(\*\.)?([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.)*[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.?$",
    re.IGNORECASE,
)


class InvalidEgressRules(ValueError):
    """A ``network`` egress option the gateway refuses (the message names the bad entry)."""


@dataclass(frozen=True)
class EgressRules:
    """Normalized outbound rules of one sandbox.

    Attributes:
        allow_out: IPv4 CIDR blocks always reachable (canonical, in request order).
        deny_out: IPv4 CIDR blocks blocked unless also allowed.
    """

    allow_out: tuple[str, ...] = ()
    deny_out: tuple[str, ...] = ()

    @property
    def restricted(self) -> bool:
        """Whether anything is blocked (without ``denyOut``, E2B allows every destination)."""
        return bool(self.deny_out)

    @property
    def internet_access(self) -> bool:
        """False when ``denyOut`` blocks everything (E2B's ``allowInternetAccess: false``)."""
        return ALL_TRAFFIC not in self.deny_out

    def to_json(self) -> str:
        """The annotation value: ``{"allowOut": [...], "denyOut": [...]}``."""
        return json.dumps(
            {"allowOut": list(self.allow_out), "denyOut": list(self.deny_out)},
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str | None) -> EgressRules | None:
        """The rules of an annotation value, or None when absent.

        Raises:
            InvalidEgressRules: if the stored value is not valid rules (edited by hand).
        """
        if not text:
            return None
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise InvalidEgressRules(f"stored egress rules are not JSON: {exc}") from exc
        if not isinstance(value, dict):
            raise InvalidEgressRules("stored egress rules are not a JSON object")
        return cls(
            allow_out=_entries(value.get("allowOut"), "allowOut", allow=True),
            deny_out=_entries(value.get("denyOut"), "denyOut", allow=False),
        )


def _entries(value: Any, what: str, *, allow: bool) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise InvalidEgressRules(f"network.{what} must be a list of strings")
    if len(value) > MAX_RULES:
        raise InvalidEgressRules(f"network.{what} has more than {MAX_RULES} entries")
    out: list[str] = []
    for item in value:
        block = parse_entry(item, what, allow=allow)
        if block not in out:
            out.append(block)
    return tuple(out)


def parse_entry(entry: str, what: str, *, allow: bool) -> str:
    """One ``allowOut``/``denyOut`` entry as a canonical IPv4 CIDR block.

    ``8.8.8.8`` becomes ``8.8.8.8/32``; host bits are cleared (``10.1.2.3/8`` ->
    ``10.0.0.0/8``), as E2B's Go parser does.

    Raises:
        InvalidEgressRules: a domain name, an IPv6 address, or not an address at all.
    """
    text = entry.strip()
    try:
        network = ipaddress.ip_network(text, strict=False)
    except ValueError:
        network = None
    if network is not None:
        if network.version != 4:
            raise InvalidEgressRules(
                f"network.{what} entry {entry!r} is an IPv6 address; this gateway supports"
                " IPv4 addresses and CIDR blocks only (E2B sandboxes are IPv4-only)"
            )
        return str(network)
    if text and _HOSTNAME.fullmatch(text) and not text.replace(".", "").isdigit():
        if not allow:
            raise InvalidEgressRules(
                f"network.{what} entry {entry!r} is a domain name; deny rules take IP"
                " addresses or CIDR blocks only"
            )
        raise InvalidEgressRules(
            f"network.{what} entry {entry!r} is a domain name; domain rules are not supported"
            " by this gateway (it enforces egress with Kubernetes NetworkPolicies, which match"
            " IP addresses only): use IP addresses or CIDR blocks"
        )
    raise InvalidEgressRules(f"network.{what} entry {entry!r} is not an IPv4 address or CIDR block")


def parse_egress(network: Any, *, allow_internet_access: Any = None) -> EgressRules | None:
    """The outbound rules of a create body, or None when it sets none.

    Args:
        network: the body's ``network`` (already checked to be an object or None).
        allow_internet_access: the body's top-level ``allowInternetAccess``; ``false``
            adds ``0.0.0.0/0`` to ``denyOut``, as on E2B.

    Raises:
        InvalidEgressRules: on a malformed list or entry.
    """
    if allow_internet_access is not None and not isinstance(allow_internet_access, bool):
        raise InvalidEgressRules("allowInternetAccess must be a boolean")
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    if isinstance(network, Mapping):
        allow = _entries(network.get("allowOut"), "allowOut", allow=True)
        deny = _entries(network.get("denyOut"), "denyOut", allow=False)
    if allow_internet_access is False and ALL_TRAFFIC not in deny:
        deny = (*deny, ALL_TRAFFIC)
    if not allow and not deny:
        return None
    return EgressRules(allow_out=allow, deny_out=deny)


def policy_name(sandbox_id: str) -> str:
    """The NetworkPolicy of a sandbox."""
    return f"{sandbox_id}{POLICY_SUFFIX}"


def allowed_blocks(rules: EgressRules) -> list[dict[str, Any]]:
    """The ``ipBlock`` peers the sandbox may reach: everything not denied, plus the allowed.

    An allowed block that overlaps no denied one is reachable anyway and is left out.
    """
    denied = list(ipaddress.collapse_addresses(ipaddress.IPv4Network(d) for d in rules.deny_out))
    peers: list[dict[str, Any]] = []
    everything = ipaddress.IPv4Network(ALL_TRAFFIC)
    if everything not in denied:
        # ``except`` entries must lie strictly inside ``cidr``: true for all but 0.0.0.0/0
        peers.append({"ipBlock": {"cidr": ALL_TRAFFIC, "except": [str(d) for d in denied]}})
    for text in rules.allow_out:
        block = ipaddress.IPv4Network(text)
        if any(block.overlaps(d) for d in denied):
            peers.append({"ipBlock": {"cidr": text}})
    return peers


def network_policy(
    sandbox: Mapping[str, Any],
    sandbox_id: str,
    rules: EgressRules,
    *,
    gateway_namespace: str | None,
) -> dict[str, Any]:
    """The NetworkPolicy enforcing ``rules`` on ``sandbox``'s pod, owned by the Sandbox.

    Args:
        sandbox: the Sandbox bound to the claim (its name picks the pod, its uid owns).
        sandbox_id: the E2B sandbox id (the claim's name), which names the policy.
        rules: the rules; must be :attr:`EgressRules.restricted`.
        gateway_namespace: where the gateway's pods run (their heartbeat endpoint stays
            reachable), or None when unknown.
    """
    meta = sandbox["metadata"]
    egress: list[dict[str, Any]] = []
    peers = allowed_blocks(rules)
    if peers:
        egress.append({"to": peers})
    egress.append(
        {
            "to": [
                {
                    "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: DNS_NAMESPACE}},
                    "podSelector": {"matchLabels": dict(DNS_POD_LABELS)},
                }
            ],
            "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
        }
    )
    if gateway_namespace:
        egress.append(
            {
                "to": [
                    {
                        "namespaceSelector": {
                            "matchLabels": {NAMESPACE_NAME_LABEL: gateway_namespace}
                        },
                        "podSelector": {"matchLabels": dict(GATEWAY_POD_LABELS)},
                    }
                ]
            }
        )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": policy_name(sandbox_id),
            "namespace": meta["namespace"],
            "labels": {LABEL_EGRESS_SANDBOX: sandbox_id},
            "ownerReferences": [
                {
                    "apiVersion": c.SANDBOX_API_VERSION,
                    "kind": c.KIND_SANDBOX,
                    "name": meta["name"],
                    "uid": meta["uid"],
                }
            ],
        },
        "spec": {
            "podSelector": {"matchLabels": {c.LABEL_SANDBOX_NAME_HASH: name_hash(meta["name"])}},
            "policyTypes": ["Egress"],
            "egress": egress,
        },
    }


def own_namespace(configured: str | None = None) -> str | None:
    """The gateway's namespace: ``configured``, else its service account's, else None."""
    if configured:
        return configured
    try:
        return SERVICE_ACCOUNT_NAMESPACE_FILE.read_text().strip() or None
    except OSError:
        return None
