"""What the gateway may do in the cluster, as data (manifests are generated from it).

The gateway reads claims, Sandboxes, Pods, warm pools, templates and its API-key Secrets
through informers; it creates, patches and deletes SandboxClaims, creates a zero-replica warm
pool for a template that has none, creates, reads and deletes SandboxSnapshots (E2B's
snapshots, the console's Snapshot action), patches Sandboxes (resume, pause, policy
annotations), creates the Secret keeping a sandbox's ``envVars`` (owned by its claim), creates
the NetworkPolicy enforcing a sandbox's outbound rules (owned by its Sandbox; patched when the
addresses of its allowOut host names change) and renews heartbeat Leases. The data plane's
exec fallback runs commands through ``pods/exec``; the web console reads one sandbox's
``pods/log`` and lists its Events.

Secrets are split off (issue 21): the cluster-wide role (:data:`RBAC_RULES`) holds no right
on Secrets at all. The API-key informer lists and watches the key Secrets of the gateway's own
namespace only (:data:`KEYS_RBAC_RULES`, a Role there: RBAC cannot narrow a list by label, so
a cluster-wide list would read every Secret of the cluster). Reading and creating the
``<id>-env`` Secrets is :data:`TENANT_RBAC_RULES`, a ClusterRole bound with a RoleBinding in
each tenant namespace (by ``agent-sandbox-gateway keys create``: :mod:`.tenant_rbac`), so a
namespace nobody made a tenant gets no Secret written by the gateway (a
``kubernetes.io/service-account-token`` Secret would mint a token of any ServiceAccount there).
"""

from __future__ import annotations

from typing import Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.rbac import PolicyRule, rule

RBAC_RULES: Final[tuple[PolicyRule, ...]] = (
    rule(
        c.EXTENSIONS_GROUP,
        "sandboxclaims",
        ("get", "list", "watch", "create", "patch", "delete"),
    ),
    rule(c.EXTENSIONS_GROUP, "sandboxwarmpools", ("get", "list", "watch", "create")),
    rule(c.EXTENSIONS_GROUP, "sandboxtemplates", ("get", "list", "watch")),
    rule(c.GROUP, "sandboxes", ("get", "list", "watch", "patch")),
    # E2B's snapshot API and the console's Snapshot action: read on demand, not cached
    rule(c.EXTENSIONS_GROUP, "sandboxsnapshots", ("get", "list", "create", "delete")),
    rule("", "pods", ("get", "list", "watch")),
    # the web console's details of one sandbox: its Pod's last log lines and recent Events
    rule("", "pods/log", ("get",)),
    rule("", "events", ("list",)),
    # the exec fallback (envd over pods/exec for images without a daemon); a WebSocket exec is
    # a GET, authorised as "create" since Kubernetes 1.31 and as "get" before
    rule("", "pods/exec", ("create", "get")),
    # the NetworkPolicy of a sandbox's E2B outbound rules (garbage-collected with its Sandbox);
    # patch: update_network and the addresses of its allowOut host names (resolved again every
    # minute); delete: update_network clearing every rule
    rule("networking.k8s.io", "networkpolicies", ("create", "patch", "delete")),
    rule("coordination.k8s.io", "leases", ("get", "create", "update")),
)
"""The gateway's cluster-wide ClusterRole rules (bind with a RoleBinding per tenant namespace
instead of the ClusterRoleBinding to scope it further)."""

KEYS_RBAC_RULES: Final[tuple[PolicyRule, ...]] = (
    # the API-key informer: the key Secrets of the gateway's own namespace
    rule("", "secrets", ("list", "watch")),
)
"""The rules of the Role in the gateway's own namespace (where its API keys are)."""

TENANT_RBAC_RULES: Final[tuple[PolicyRule, ...]] = (
    # a sandbox's envVars: the ``<id>-env`` Secret, created with the claim and read back for
    # the /init of a resumed pod (owned by the claim); names are per sandbox, so no
    # resourceNames (and Kubernetes cannot restrict a create by name)
    rule("", "secrets", ("get", "create")),
)
"""The rules of the tenant ClusterRole, bound by a RoleBinding in each tenant namespace."""
