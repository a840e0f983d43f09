"""Permissions as data: what each part of the controller needs from the API server.

Reconcilers, the runtime and the webhook declare the RBAC rules they need next to their code,
the way kubebuilder markers sit next to Go reconcilers. ``rbacgen`` collects the declarations
and writes the ClusterRoles/Roles, so the manifests grant exactly what the code uses and a
forgotten permission shows up as a stale generated file rather than a 403 in production.

A declaration is a :class:`PolicyRule`, usually written with :func:`rule`; a rule read back
from a manifest becomes one with :meth:`PolicyRule.from_dict`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.webhook.crds import CONVERSION_CRD_NAMES

__all__ = [
    "CONVERSION_CRDS",
    "EVENT_RULES",
    "LEADER_ELECTION_RULES",
    "RUNTIME_RULES",
    "VERB_ORDER",
    "WEBHOOK_CLUSTER_RULES",
    "WEBHOOK_NAMESPACED_RULES",
    "PolicyRule",
    "normalize_manifest_rules",
    "normalize_rules",
    "rule",
]

VERB_ORDER: Final = ("create", "delete", "get", "list", "patch", "update", "watch")
"""Verbs are written sorted (as controller-gen does); unknown verbs sort after these."""


@dataclass(frozen=True, slots=True)
class PolicyRule:
    """One RBAC rule: these verbs on these resources of these API groups.

    Args:
        api_groups: API groups (``""`` is the core group).
        resources: plural resource names, ``<resource>/<subresource>`` for subresources.
        verbs: ``get``, ``list``, ``watch``, ``create``, ``update``, ``patch``, ``delete``...
        resource_names: restrict the rule to these object names (never works for ``create``,
            ``list``, ``watch`` or ``deletecollection``: the API server cannot know the name).
    """

    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    resource_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.api_groups or not self.resources or not self.verbs:
            raise ValueError(f"incomplete rule: {self}")
        if self.resource_names:
            unnamed = {"create", "list", "watch", "deletecollection"} & set(self.verbs)
            if unnamed:
                raise ValueError(
                    f"verbs {sorted(unnamed)} cannot be restricted by resourceNames: {self}"
                )

    @classmethod
    def from_dict(cls, manifest_rule: Mapping[str, Any]) -> PolicyRule:
        """Read a rule as a manifest writes it (``apiGroups``, ``resources``, ``verbs``...).

        Args:
            manifest_rule: One entry of a Role's or ClusterRole's ``rules``.

        Returns:
            The rule.

        Raises:
            TypeError: ``manifest_rule`` is not a mapping.
            ValueError: the rule is incomplete or restricts unnamed verbs by name.
        """
        if not isinstance(manifest_rule, Mapping):
            raise TypeError(f"not an RBAC rule: {manifest_rule!r}")
        return cls(
            api_groups=_strings(manifest_rule.get("apiGroups", ())),
            resources=_strings(manifest_rule.get("resources", ())),
            verbs=_strings(manifest_rule.get("verbs", ())),
            resource_names=_strings(manifest_rule.get("resourceNames", ())),
        )

    def to_dict(self) -> dict[str, list[str]]:
        """The rule as a manifest writes it (keys in Kubernetes' field order)."""
        rule: dict[str, list[str]] = {
            "apiGroups": list(self.api_groups),
            "resources": list(self.resources),
        }
        if self.resource_names:
            rule["resourceNames"] = list(self.resource_names)
        rule["verbs"] = list(self.verbs)
        return rule


def rule(
    api_group: str | Iterable[str],
    resources: str | Iterable[str],
    verbs: str | Iterable[str],
    *,
    resource_names: Iterable[str] = (),
) -> PolicyRule:
    """Shorthand for a :class:`PolicyRule`; a single string stands for a one-item list."""
    return PolicyRule(
        api_groups=_strings(api_group),
        resources=_strings(resources),
        verbs=_strings(verbs),
        resource_names=tuple(resource_names),
    )


def normalize_rules(declared: Iterable[PolicyRule]) -> list[PolicyRule]:
    """Merge declarations into the smallest equivalent, deterministically ordered rule list.

    Verbs of the same (group, resource, names) are unioned; resources sharing groups, names and
    verbs are merged into one rule, then groups sharing resources, names and verbs. Output is
    sorted, so the same permissions always produce the same bytes.

    Args:
        declared: rule declarations.

    Returns:
        Normalized rules.

    Raises:
        TypeError: a declaration is not a :class:`PolicyRule`.
    """
    verbs_of: dict[tuple[str, str, tuple[str, ...]], set[str]] = defaultdict(set)
    for policy in declared:
        if not isinstance(policy, PolicyRule):
            raise TypeError(
                f"not a PolicyRule: {policy!r} (use rule(...) or PolicyRule.from_dict(...))"
            )
        names = tuple(sorted(set(policy.resource_names)))
        for group in policy.api_groups:
            for resource in policy.resources:
                verbs_of[(group, resource, names)].update(policy.verbs)

    by_group: dict[tuple[str, tuple[str, ...], tuple[str, ...]], set[str]] = defaultdict(set)
    for (group, resource, names), verbs in verbs_of.items():
        by_group[(group, names, _sorted_verbs(verbs))].add(resource)

    by_resources: dict[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]], set[str]] = (
        defaultdict(set)
    )
    for (group, names, verb_list), resources in by_group.items():
        by_resources[(tuple(sorted(resources)), names, verb_list)].add(group)

    rules = [
        PolicyRule(
            api_groups=tuple(sorted(groups)),
            resources=resource_list,
            verbs=verb_list,
            resource_names=names,
        )
        for (resource_list, names, verb_list), groups in by_resources.items()
    ]
    rules.sort(key=lambda r: (r.api_groups, r.resources, r.resource_names, r.verbs))
    return rules


def normalize_manifest_rules(manifest_rules: Iterable[Mapping[str, Any]]) -> list[PolicyRule]:
    """:func:`normalize_rules` of rules read from a manifest (see :meth:`PolicyRule.from_dict`).

    Args:
        manifest_rules: The ``rules`` list of a Role or ClusterRole.

    Returns:
        Normalized rules.

    Raises:
        TypeError: an entry is not a mapping.
        ValueError: an entry is not a valid rule.
    """
    return normalize_rules(PolicyRule.from_dict(r) for r in manifest_rules)


def _sorted_verbs(verbs: Iterable[str]) -> tuple[str, ...]:
    known = {verb: index for index, verb in enumerate(VERB_ORDER)}
    return tuple(sorted(set(verbs), key=lambda v: (known.get(v, len(known)), v)))


def _strings(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    return tuple(str(v) for v in value)


# --- What the process needs besides its reconcilers ----------------------------------------

LEADER_ELECTION_RULES: Final = (
    # runtime/leaderelection.py: the Lease is created once (create cannot be limited by name),
    # then read and renewed (update with resourceVersion) by name only; it is released on
    # shutdown with an update, never deleted, patched, listed or watched.
    rule("coordination.k8s.io", "leases", "create"),
    rule(
        "coordination.k8s.io",
        "leases",
        ("get", "update"),
        resource_names=(c.LEADER_ELECTION_ID,),
    ),
)
"""Leader election on the ``a3317529.agent-sandbox.x-k8s.io`` Lease."""

EVENT_RULES: Final = (
    # runtime/events.py writes events.k8s.io/v1 Events: create, then patch for series counts.
    rule("events.k8s.io", "events", ("create", "patch")),
)
"""The event recorder."""

RUNTIME_RULES: Final = (*LEADER_ELECTION_RULES, *EVENT_RULES)
"""Everything the controller runtime itself needs, whatever reconcilers run."""

CONVERSION_CRDS: Final = CONVERSION_CRD_NAMES
"""CRDs whose conversion webhook ``caBundle`` the controller patches at startup."""

WEBHOOK_CLUSTER_RULES: Final = (
    rule(
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        # webhook/crds.py: GET each CRD, merge-PATCH its conversion clientConfig.
        ("get", "patch"),
        resource_names=CONVERSION_CRDS,
    ),
)
"""Cluster-scoped needs of webhook certificate management (``--manage-webhook-certs``)."""

WEBHOOK_NAMESPACED_RULES: Final = (
    # webhook/certs.py: GET the shared Secret by name, CREATE it when missing; never updated
    # (no rotation), so no patch/update.
    rule("", "secrets", "create"),
    rule("", "secrets", "get", resource_names=(c.WEBHOOK_SECRET_NAME,)),
)
"""Needs in ``--webhook-namespace``: the ``agent-sandbox-webhook-certs`` Secret only."""
