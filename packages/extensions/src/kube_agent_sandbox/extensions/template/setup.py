"""What the SandboxTemplate controller watches and caches, and the RBAC rules it needs.

Upstream's ``SetupWithManager``: SandboxTemplates are the primary resource and NetworkPolicies
they control trigger a reconcile of their template (so a hand edit or deletion is repaired at
once). In addition, a policy named ``<template>-network-policy`` that no template controls
triggers a reconcile of that template when it exists: a template blocked by such a foreign
policy recovers as soon as the policy is deleted, instead of at its next re-check.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOX_TEMPLATES
from kube_agent_sandbox.api.rest import NETWORK_POLICIES
from kube_agent_sandbox.controller.rbac import PolicyRule, rule
from kube_agent_sandbox.controller.runtime import (
    ControllerBuilder,
    Mapper,
    Obj,
    Reader,
    Request,
    name_of,
    namespace_of,
)
from kube_agent_sandbox.controller.tracing import tracer_for
from kube_agent_sandbox.extensions.common.ownership import controlled_by_kind
from kube_agent_sandbox.extensions.template.policy import template_for_policy_name
from kube_agent_sandbox.extensions.template.reconciler import TemplateReconciler

if TYPE_CHECKING:
    from collections.abc import Iterable

    from kube_agent_sandbox.controller.config import ControllerOptions
    from kube_agent_sandbox.controller.runtime import Manager

log = logging.getLogger(__name__)

CONTROLLER_NAME: Final = "sandboxtemplate"
EVENT_REPORTER: Final = "sandboxtemplate-controller"

RBAC_RULES: Final[tuple[PolicyRule, ...]] = (
    # Templates are read from the cache and labelled with a merge patch.
    rule(
        c.EXTENSIONS_GROUP,
        SANDBOX_TEMPLATES.plural,
        ("get", "list", "watch", "patch", "update"),
    ),
    # A controller reference with blockOwnerDeletion needs update on the owner's finalizers
    # (the OwnerReferencesPermissionEnforcement admission plugin).
    rule(
        c.EXTENSIONS_GROUP,
        f"{SANDBOX_TEMPLATES.plural}/finalizers",
        ("get", "patch", "update"),
    ),
    rule(
        NETWORK_POLICIES.group,
        NETWORK_POLICIES.plural,
        ("get", "list", "watch", "create", "update", "delete"),
    ),
    rule("", "events", ("create", "patch")),
    rule("events.k8s.io", "events", ("create", "patch")),
)
"""Permissions of the SandboxTemplate controller (docs/reference/rbac.md, the template's share)."""


def foreign_policy_mapper(templates: Reader) -> Mapper:
    """Map a policy named like a template's but controlled by no template to that template.

    Policies a template controls are mapped by the owner handler already; names of templates
    that do not exist map to nothing.
    """

    def mapper(policy: Obj) -> Iterable[Request]:
        if controlled_by_kind(policy, kind=c.KIND_SANDBOX_TEMPLATE) is not None:
            return []
        template = template_for_policy_name(name_of(policy))
        namespace = namespace_of(policy)
        if template is None or templates.get(namespace, template) is None:
            return []
        return [Request(namespace, template)]

    return mapper


def setup(
    manager: Manager, options: ControllerOptions, *, namespace: str | None = None
) -> TemplateReconciler:
    """Register the SandboxTemplate controller and its caches.

    Args:
        manager: The process manager (informers, controllers, events).
        options: Parsed flags; uses ``effective_template_workers`` and ``enable_tracing``.
        namespace: Watch only this namespace (tests sharing a cluster); all when None.

    Returns:
        The reconciler (tests drive it directly).
    """
    templates = manager.informer(SANDBOX_TEMPLATES, namespace=namespace)
    policies = manager.informer(NETWORK_POLICIES, namespace=namespace)
    reconciler = TemplateReconciler(
        manager.client,
        templates=templates,
        network_policies=policies,
        recorder=manager.event_recorder(EVENT_REPORTER),
        tracer=tracer_for(enabled=options.enable_tracing),
    )
    (
        ControllerBuilder(manager, CONTROLLER_NAME)
        .for_resource(SANDBOX_TEMPLATES)
        .owns(NETWORK_POLICIES)
        .watches(NETWORK_POLICIES, foreign_policy_mapper(templates))
        .with_workers(options.effective_template_workers)
        .complete(reconciler)
    )
    log.info(
        "sandboxtemplate controller registered",
        extra={"workers": options.effective_template_workers},
    )
    return reconciler
