"""The headless Service of a Sandbox: desired ports, the Service to create, drift detection.

Pure functions (upstream v0.5.6 controllers/sandbox_controller.go, reconcileService). Port naming
follows upstream exactly, because clients look ports up by name: the first explicit container-port
name wins, unnamed ports get ``p-<port>-<protocol>`` with ``-2``, ``-3``... on conflict.
"""

from __future__ import annotations

import re
from typing import Any, Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime import Obj
from kube_agent_sandbox.controller.sandbox.ownership import sandbox_controller_ref

MAX_SERVICE_NAME_LENGTH: Final = 63
_DNS_LABEL_RE: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def service_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a Service, or None if it can.

    Sandbox names are DNS subdomains (up to 253 characters, dots allowed) while Service names
    must be DNS labels of at most 63 characters. The API server would reject the create with
    422; checking first gives a clear message and saves the request.
    """
    if len(name) > MAX_SERVICE_NAME_LENGTH:
        return (
            f"must be no more than {MAX_SERVICE_NAME_LENGTH} characters "
            f"(the Service is named after the Sandbox, which has {len(name)})"
        )
    if not _DNS_LABEL_RE.match(name):
        return "must be a DNS label (lowercase alphanumerics and '-', no dots)"
    return None


def _container_ports(container: Obj) -> list[Obj]:
    return list(container.get("ports") or ())


def service_ports_for_sandbox(sandbox: Obj) -> list[Obj] | None:
    """Service ports derived from the pod template's container ports (None when there are none).

    Ports of ``containers`` and of native sidecars (``initContainers`` with
    ``restartPolicy: Always``) are deduplicated by (port, protocol) and sorted by port, then
    protocol.
    """
    spec = sandbox.get("spec", {}).get("podTemplate", {}).get("spec") or {}
    containers = list(spec.get("containers") or ())
    containers += [
        ic for ic in spec.get("initContainers") or () if ic.get("restartPolicy") == "Always"
    ]
    names: dict[tuple[int, str], str] = {}
    reserved: set[str] = set()
    for container in containers:
        for cport in _container_ports(container):
            number = int(cport.get("containerPort") or 0)
            if number == 0:
                continue
            key = (number, str(cport.get("protocol") or "TCP"))
            names.setdefault(key, "")
            explicit = cport.get("name") or ""
            if not explicit or names[key] or explicit in reserved:
                continue
            names[key] = explicit
            reserved.add(explicit)
    if not names:
        return None
    ports: list[Obj] = []
    for number, protocol in sorted(names):
        name = names[(number, protocol)] or _generated_port_name(number, protocol, reserved)
        reserved.add(name)
        ports.append({"name": name, "protocol": protocol, "port": number, "targetPort": number})
    return ports


def _generated_port_name(port: int, protocol: str, reserved: set[str]) -> str:
    base = f"p-{port}-{protocol.lower()}"
    if base not in reserved:
        return base
    suffix = 2
    while f"{base}-{suffix}" in reserved:
        suffix += 1
    return f"{base}-{suffix}"


def _port_key(port: Any) -> tuple[Any, ...]:
    target = port.get("targetPort")
    return (
        port.get("name") or "",
        port.get("protocol") or "",
        port.get("port") or 0,
        (type(target).__name__, target) if target is not None else None,
    )


def service_ports_equal(current: list[Obj] | None, desired: list[Obj] | None) -> bool:
    """Compare ports by name, protocol, port and targetPort only (other fields are not ours)."""
    current = current or []
    desired = desired or []
    if len(current) != len(desired):
        return False
    return all(_port_key(a) == _port_key(b) for a, b in zip(current, desired, strict=True))


def desired_service(sandbox: Obj, name_hash: str, ports: list[Obj] | None) -> Obj:
    """The headless Service to create for ``sandbox``."""
    meta = sandbox.get("metadata", {})
    spec: Obj = {"clusterIP": "None", "selector": {c.LABEL_SANDBOX_NAME_HASH: name_hash}}
    if ports:
        spec["ports"] = ports
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": meta.get("name", ""),
            "namespace": meta.get("namespace", ""),
            "labels": {c.LABEL_SANDBOX_NAME_HASH: name_hash},
            "ownerReferences": [sandbox_controller_ref(sandbox)],
        },
        "spec": spec,
    }


def service_fqdn(service: Obj, cluster_domain: str) -> str:
    """``<name>.<namespace>.svc.<cluster domain>``."""
    meta = service.get("metadata", {})
    return f"{meta.get('name', '')}.{meta.get('namespace', '')}.svc.{cluster_domain}"
