"""Making a namespace a tenant of the gateway: the RoleBinding of its tenant role.

The gateway's cluster-wide role holds no ``get`` or ``create`` on Secrets (issue 21); the
``<id>-env`` Secrets of a tenant's sandboxes need the ``agent-sandbox-gateway-tenant``
ClusterRole bound in the tenant namespace. ``agent-sandbox-gateway keys create`` binds it
(whoever creates a tenant's keys may grant that much there), and ``keys bind`` binds it alone,
for namespaces whose keys predate the split.

The binding is idempotent: an existing one that already names the gateway's ServiceAccount is
left alone, one without it gets the subject added (``roleRef`` is immutable, so a binding of
that name to another role is an error, never overwritten).
"""

from __future__ import annotations

from typing import Final

from kube_agent_sandbox.controller.runtime import ApiError, Client, Obj, Resource

ROLE_BINDINGS: Final = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
TENANT_ROLE: Final = "agent-sandbox-gateway-tenant"
"""The ClusterRole of a tenant namespace (``rbacgen`` writes it)."""
BINDING_NAME: Final = TENANT_ROLE
DEFAULT_GATEWAY_NAMESPACE: Final = "agent-sandbox-system"
DEFAULT_SERVICE_ACCOUNT: Final = "agent-sandbox-gateway"


class BindingConflict(ValueError):
    """A RoleBinding of the tenant binding's name refers to another role."""


def _subject(gateway_namespace: str, service_account: str) -> dict[str, str]:
    return {"kind": "ServiceAccount", "name": service_account, "namespace": gateway_namespace}


def tenant_binding(namespace: str, gateway_namespace: str, service_account: str) -> Obj:
    """The RoleBinding granting the gateway's ServiceAccount the tenant role in ``namespace``."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {
            "name": BINDING_NAME,
            "namespace": namespace,
            "labels": {"app": DEFAULT_SERVICE_ACCOUNT},
        },
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": TENANT_ROLE,
        },
        "subjects": [_subject(gateway_namespace, service_account)],
    }


async def bind_tenant(
    api: Client,
    namespace: str,
    *,
    gateway_namespace: str = DEFAULT_GATEWAY_NAMESPACE,
    service_account: str = DEFAULT_SERVICE_ACCOUNT,
) -> bool:
    """Bind the tenant role to the gateway in ``namespace``; False if it already was.

    Raises:
        BindingConflict: a binding of that name refers to another role.
        ApiError: the API server refused (e.g. 403: the caller may not bind it there).
    """
    body = tenant_binding(namespace, gateway_namespace, service_account)
    try:
        await api.create(ROLE_BINDINGS, namespace, body)
    except ApiError as exc:
        if not exc.already_exists:
            raise
    else:
        return True
    existing = await api.get(ROLE_BINDINGS, namespace, BINDING_NAME)
    role = existing.get("roleRef") or {}
    if (role.get("kind"), role.get("name")) != ("ClusterRole", TENANT_ROLE):
        raise BindingConflict(
            f"RoleBinding {namespace}/{BINDING_NAME} refers to {role.get('kind')}"
            f" {role.get('name')}, not ClusterRole {TENANT_ROLE}: delete or rename it"
        )
    subjects = list(existing.get("subjects") or [])
    wanted = _subject(gateway_namespace, service_account)
    if any({k: s.get(k) for k in wanted} == wanted for s in subjects):
        return False
    version = existing["metadata"]["resourceVersion"]
    await api.update(
        ROLE_BINDINGS,
        namespace,
        BINDING_NAME,
        {
            **existing,
            "metadata": {**existing["metadata"], "resourceVersion": version},
            "subjects": [*subjects, wanted],
        },
    )
    return True
