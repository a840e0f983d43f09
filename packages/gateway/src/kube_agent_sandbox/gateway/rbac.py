"""What the gateway may do in the cluster, as data (manifests are generated from it).

The gateway reads claims, Sandboxes, Pods, warm pools, templates and its API-key Secrets
through informers; it creates, patches and deletes only SandboxClaims, creates a zero-replica
warm pool for a template that has none, patches Sandboxes (resume, pause, policy
annotations), creates the Secret keeping a sandbox's ``envVars`` (owned by its claim), creates
the NetworkPolicy enforcing a sandbox's outbound rules (owned by its Sandbox) and renews
heartbeat Leases. The data plane's exec fallback runs commands through ``pods/exec``; the web
console reads one sandbox's ``pods/log`` and lists its Events.
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
    rule("", "pods", ("get", "list", "watch")),
    # the web console's details of one sandbox: its Pod's last log lines and recent Events
    rule("", "pods/log", ("get",)),
    rule("", "events", ("list",)),
    # the exec fallback (envd over pods/exec for images without a daemon); a WebSocket exec is
    # a GET, authorised as "create" since Kubernetes 1.31 and as "get" before
    rule("", "pods/exec", ("create", "get")),
    rule("", "secrets", ("get", "list", "watch", "create")),
    # the NetworkPolicy of a sandbox's E2B outbound rules (garbage-collected with its Sandbox)
    rule("networking.k8s.io", "networkpolicies", ("create",)),
    rule("coordination.k8s.io", "leases", ("get", "create", "update")),
)
"""The gateway's ClusterRole rules (bind with a RoleBinding per tenant namespace to scope it)."""
