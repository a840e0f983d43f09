"""E2B outbound rules (``network.allowOut`` / ``denyOut``) as a Kubernetes NetworkPolicy.

E2B's semantics (its OpenAPI ``SandboxNetworkConfig``): without ``denyOut`` every
destination is allowed; a destination in ``denyOut`` is blocked unless it is also in
``allowOut`` ("allowed entries always take precedence over denied entries"); ``"0.0.0.0/0"``
(the SDKs' ``ALL_TRAFFIC``) in ``denyOut`` blocks everything, and ``allowInternetAccess:
false`` means exactly that. Entries are IP addresses or CIDR blocks, and in ``allowOut`` also
host names. A NetworkPolicy matches addresses only, so a host name allows the IPv4 addresses
it resolves to, from the gateway, when the policy is made and again every
:data:`DNS_REFRESH_SECONDS` (:mod:`.egress_refresh`): a coarser rule than E2B's, which filters
on the TLS SNI / HTTP Host of each connection (every service on those addresses is reachable,
and an address the sandbox's resolver picks that the gateway's did not is blocked until the
next refresh). Wildcards (``*.example.com``) name no addresses and are refused (400), as are
host names in ``denyOut``.

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

import asyncio
import ipaddress
import json
import logging
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.namehash import name_hash
from kube_agent_sandbox.gateway.annotations import LABEL_EGRESS_SANDBOX

log = logging.getLogger(__name__)

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
DNS_REFRESH_SECONDS: Final = 60.0
"""How often the addresses of ``allowOut`` host names are resolved again."""
DNS_TIMEOUT_SECONDS: Final = 5.0

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
        allow_out: IPv4 CIDR blocks (canonical) and host names (lower case, no final dot)
            always reachable, in request order.
        deny_out: IPv4 CIDR blocks blocked unless also allowed.
    """

    allow_out: tuple[str, ...] = ()
    deny_out: tuple[str, ...] = ()

    @property
    def domains(self) -> tuple[str, ...]:
        """The host names of ``allow_out`` (their addresses are resolved, not stored)."""
        return tuple(entry for entry in self.allow_out if not _is_block(entry))

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
    ``10.0.0.0/8``), as E2B's Go parser does. A host name (``allowOut`` only) is kept in lower
    case without its final dot.

    Raises:
        InvalidEgressRules: a host name in ``denyOut``, a wildcard, an IPv6 address, or not an
            address at all.
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
        if text.startswith("*."):
            raise InvalidEgressRules(
                f"network.{what} entry {entry!r} is a wildcard domain; this gateway enforces"
                " egress with Kubernetes NetworkPolicies, which match addresses, and a wildcard"
                " resolves to none: list the host names"
            )
        return text.lower().rstrip(".")
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


def _is_block(entry: str) -> bool:
    try:
        ipaddress.IPv4Network(entry)
    except ValueError:
        return False
    return True


Resolved = Mapping[str, Sequence[str]]
"""The IPv4 addresses of each ``allowOut`` host name (none: it did not resolve)."""


def allowed_blocks(rules: EgressRules, resolved: Resolved | None = None) -> list[dict[str, Any]]:
    """The ``ipBlock`` peers the sandbox may reach: everything not denied, plus the allowed
    blocks and the ``/32`` of each address the allowed host names resolved to.

    An allowed block that overlaps no denied one is reachable anyway and is left out.
    """
    denied = list(ipaddress.collapse_addresses(ipaddress.IPv4Network(d) for d in rules.deny_out))
    peers: list[dict[str, Any]] = []
    everything = ipaddress.IPv4Network(ALL_TRAFFIC)
    if everything not in denied:
        # ``except`` entries must lie strictly inside ``cidr``: true for all but 0.0.0.0/0
        peers.append({"ipBlock": {"cidr": ALL_TRAFFIC, "except": [str(d) for d in denied]}})
    blocks: list[str] = []
    for entry in rules.allow_out:
        if _is_block(entry):
            blocks.append(entry)
        else:
            blocks.extend(f"{address}/32" for address in (resolved or {}).get(entry, ()))
    seen: set[str] = set()
    for text in blocks:
        block = ipaddress.IPv4Network(text)
        if text not in seen and any(block.overlaps(d) for d in denied):
            seen.add(text)
            peers.append({"ipBlock": {"cidr": text}})
    return peers


async def resolve_domains(domains: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """The IPv4 addresses of each host name, sorted; a name that does not resolve (or not in
    :data:`DNS_TIMEOUT_SECONDS`) gets none and is logged, so one bad name blocks nothing else."""
    loop = asyncio.get_running_loop()

    async def one(name: str) -> tuple[str, ...]:
        try:
            async with asyncio.timeout(DNS_TIMEOUT_SECONDS):
                infos = await loop.getaddrinfo(
                    name, None, family=socket.AF_INET, type=socket.SOCK_STREAM
                )
        except (OSError, TimeoutError) as exc:
            log.warning("egress host name %s does not resolve: %s", name, exc or "timed out")
            return ()
        return tuple(sorted({str(info[4][0]) for info in infos}, key=ipaddress.IPv4Address))

    found = await asyncio.gather(*(one(name) for name in domains))
    return dict(zip(domains, found, strict=True))


def network_policy(
    sandbox: Mapping[str, Any],
    sandbox_id: str,
    rules: EgressRules,
    *,
    gateway_namespace: str | None,
    resolved: Resolved | None = None,
) -> dict[str, Any]:
    """The NetworkPolicy enforcing ``rules`` on ``sandbox``'s pod, owned by the Sandbox.

    Args:
        sandbox: the Sandbox bound to the claim (its name picks the pod, its uid owns).
        sandbox_id: the E2B sandbox id (the claim's name), which names the policy.
        rules: the rules; must be :attr:`EgressRules.restricted`.
        gateway_namespace: where the gateway's pods run (their heartbeat endpoint stays
            reachable), or None when unknown.
        resolved: the addresses of the rules' host names (:func:`resolve_domains`).
    """
    meta = sandbox["metadata"]
    egress: list[dict[str, Any]] = []
    peers = allowed_blocks(rules, resolved)
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
