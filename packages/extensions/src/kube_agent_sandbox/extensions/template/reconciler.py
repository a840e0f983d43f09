"""The SandboxTemplate reconciler (upstream v0.5.6
extensions/controllers/sandboxtemplate_controller.go).

Per template: make sure it carries the ``agents.x-k8s.io/sandbox-template-ref-hash`` label,
then converge its NetworkPolicy ``<template>-network-policy``. ``Managed`` (the default): the
policy is created with a controller reference to the template (so it goes with the template)
and put back by a full Update whenever its spec is not semantically equal to what the template
asks for. ``Unmanaged``: a policy this template controls is deleted. A policy of that name that
the template does not control is never touched.

Reads come from informer caches, writes go to the API server. Like the Sandbox reconciler,
errors are sorted: transient ones (conflicts, server and network errors) raise, so the
queue retries with backoff; ones only a user can fix (a foreign policy in the way, a policy the
API server rejects, a name that is too long) are logged, reported once as a Warning event on
the template and re-checked every minute. Upstream retries both kinds with backoff and emits
no events; docs/concepts/templates.md lists the differences.
"""

from __future__ import annotations

import copy
import logging
from typing import Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOX_TEMPLATES
from kube_agent_sandbox.api.rest import NETWORK_POLICIES
from kube_agent_sandbox.controller.runtime import (
    ApiError,
    Client,
    EventRecorder,
    Obj,
    Reader,
    ReconcileError,
    Request,
    Result,
    TransientError,
    is_controlled_by,
    meta,
    name_of,
    namespace_of,
    quote,
    semantic_equal,
    truncate_note,
    wrap,
)
from kube_agent_sandbox.controller.tracing import NOOP_TRACER, Tracer
from kube_agent_sandbox.extensions.common.blueprint import template_ref_hash
from kube_agent_sandbox.extensions.common.ownership import controller_ref_to
from kube_agent_sandbox.extensions.template.policy import (
    desired_network_policy,
    desired_spec,
    is_managed,
    network_policy_name,
    network_policy_name_problem,
)

log = logging.getLogger(__name__)

DEFAULT_ERROR_REQUEUE: Final = 60.0
"""Seconds before re-checking a template whose error only a user can fix."""


class TemplateReconcileError(TransientError):
    """Raised from ``reconcile`` after a transient error, so the queue retries with backoff."""


def not_controlled_message(policy_name: str, template_name: str) -> str:
    """Upstream's error for a same-name policy the template does not control."""
    return (
        f"refusing to update NetworkPolicy {quote(policy_name)} as it is not controlled by "
        f"SandboxTemplate {quote(template_name)}"
    )


def _span_attributes(template: Obj) -> dict[str, str]:
    return {
        "sandboxtemplate.name": name_of(template),
        "sandboxtemplate.namespace": namespace_of(template),
    }


def _terminating(obj: Obj) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


class TemplateReconciler:
    """Converges one SandboxTemplate: its label and its NetworkPolicy.

    Args:
        client: Writes against the API server.
        templates: Cache of SandboxTemplates.
        network_policies: Cache of NetworkPolicies.
        recorder: Receives a Warning event when an error needs a user (optional).
        error_requeue_after: Seconds before re-checking such an error.
        tracer: Receives the ``ReconcileSandboxTemplate`` span (tracing off by default).
    """

    def __init__(
        self,
        client: Client,
        *,
        templates: Reader,
        network_policies: Reader,
        recorder: EventRecorder | None = None,
        error_requeue_after: float = DEFAULT_ERROR_REQUEUE,
        tracer: Tracer = NOOP_TRACER,
    ) -> None:
        self._client = client
        self._templates = templates
        self._policies = network_policies
        self._recorder = recorder
        self._error_requeue_after = error_requeue_after
        self._tracer = tracer
        # Last Warning note per template, so a persisting error is reported once.
        self._last_warning: dict[tuple[str, str], str] = {}

    async def reconcile(self, request: Request) -> Result:
        """Converge the SandboxTemplate named by ``request``.

        Returns:
            Nothing to do again, or a re-check after an error only a user can fix.

        Raises:
            TemplateReconcileError: after a transient error (retried with backoff).
        """
        key = (request.namespace, request.name)
        template = self._templates.get(request.namespace, request.name)
        if template is None:
            self._last_warning.pop(key, None)
            return Result()
        with self._tracer.object_span("ReconcileSandboxTemplate", template, _span_attributes):
            try:
                await self._reconcile_template(template)
            except ReconcileError as error:
                if error.transient:
                    log.info("sandboxtemplate %s: %s (will retry with backoff)", request, error)
                    raise TemplateReconcileError(error.message) from error
                log.warning("sandboxtemplate %s: %s (retrying slowly)", request, error)
                self._warn(key, template, error.message)
                return Result(requeue_after=self._error_requeue_after)
        self._last_warning.pop(key, None)
        return Result()

    def _warn(self, key: tuple[str, str], template: Obj, message: str) -> None:
        if self._recorder is None or self._last_warning.get(key) == message:
            return
        self._last_warning[key] = message
        self._recorder.event(
            template,
            type_="Warning",
            reason=c.REASON_RECONCILER_ERROR,
            action=c.EVENT_ACTION_RECONCILING,
            note=truncate_note(message),
        )

    async def _reconcile_template(self, template: Obj) -> None:
        if _terminating(template):
            return  # garbage collection removes the policy with the template
        if not await self._ensure_label(template):
            return  # deleted meanwhile
        if is_managed(template):
            await self._ensure_policy(template)
        else:
            await self._release_policy(template)

    async def _ensure_label(self, template: Obj) -> bool:
        """Label the template with its ref hash (a merge patch); False if it is gone."""
        name = name_of(template)
        want = template_ref_hash(name)
        labels = meta(template).get("labels") or {}
        if labels.get(c.LABEL_SANDBOX_TEMPLATE_REF_HASH) == want:
            return True
        patch = {"metadata": {"labels": {c.LABEL_SANDBOX_TEMPLATE_REF_HASH: want}}}
        try:
            await self._client.patch(SANDBOX_TEMPLATES, namespace_of(template), name, patch)
        except ApiError as exc:
            if exc.not_found:
                return False
            raise wrap(exc, "failed to label SandboxTemplate") from exc
        except Exception as exc:
            raise wrap(exc, "failed to label SandboxTemplate") from exc
        return True

    async def _release_policy(self, template: Obj) -> None:
        """``Unmanaged``: delete the policy if this template controls it; leave any other."""
        namespace = namespace_of(template)
        policy_name = network_policy_name(name_of(template))
        policy = self._policies.get(namespace, policy_name)
        if policy is None or not is_controlled_by(policy, template) or _terminating(policy):
            return
        uid = meta(policy).get("uid")
        try:
            await self._client.delete(
                NETWORK_POLICIES,
                namespace,
                policy_name,
                preconditions={"uid": str(uid)} if uid else None,
            )
        except ApiError as exc:
            if exc.not_found:
                return
            raise wrap(exc, f"failed to delete NetworkPolicy {quote(policy_name)}") from exc
        except Exception as exc:
            raise wrap(exc, f"failed to delete NetworkPolicy {quote(policy_name)}") from exc
        log.info("deleted NetworkPolicy %s/%s (template is Unmanaged)", namespace, policy_name)

    async def _ensure_policy(self, template: Obj) -> None:
        """``Managed``: create the policy, or Update it when its spec drifted."""
        namespace = namespace_of(template)
        template_name = name_of(template)
        policy_name = network_policy_name(template_name)
        problem = network_policy_name_problem(template_name)
        if problem is not None:
            raise ReconcileError(
                f"cannot create NetworkPolicy {quote(policy_name)}: {problem}", transient=False
            )
        policy = self._policies.get(namespace, policy_name)
        if policy is None:
            await self._create(template, policy_name)
            return
        if not is_controlled_by(policy, template):
            raise ReconcileError(
                not_controlled_message(policy_name, template_name), transient=False
            )
        if _terminating(policy):
            return  # its deletion event brings the template back; then it is created anew
        desired = desired_spec(template)
        if semantic_equal(policy.get("spec"), desired):
            return
        body = copy.deepcopy(policy)
        body["spec"] = desired
        try:
            await self._client.update(NETWORK_POLICIES, namespace, policy_name, body)
        except ApiError as exc:
            if exc.not_found:
                return  # deleted meanwhile: its deletion event brings the template back
            raise wrap(exc, f"failed to update NetworkPolicy {quote(policy_name)}") from exc
        except Exception as exc:
            raise wrap(exc, f"failed to update NetworkPolicy {quote(policy_name)}") from exc
        log.info("updated NetworkPolicy %s/%s to the template's rules", namespace, policy_name)

    async def _create(self, template: Obj, policy_name: str) -> None:
        namespace = namespace_of(template)
        owner = controller_ref_to(template, kind=c.KIND_SANDBOX_TEMPLATE)
        body = desired_network_policy(template, owner_ref=owner)
        try:
            await self._client.create(NETWORK_POLICIES, namespace, body)
        except ApiError as exc:
            if exc.already_exists:
                # The cache has not seen the policy yet (typically ours, created one pass
                # earlier). Its ADDED event reconciles the template again, whoever owns it:
                # through the owner watch, or the watch on same-name foreign policies.
                log.debug("NetworkPolicy %s/%s not in the cache yet", namespace, policy_name)
                return
            raise wrap(exc, f"failed to create NetworkPolicy {quote(policy_name)}") from exc
        except Exception as exc:
            raise wrap(exc, f"failed to create NetworkPolicy {quote(policy_name)}") from exc
        log.info("created NetworkPolicy %s/%s", namespace, policy_name)
