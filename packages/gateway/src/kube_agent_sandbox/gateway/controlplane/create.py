"""``POST /v2/sandboxes`` and ``POST /sandboxes``: a create is a SandboxClaim.

The template names a SandboxWarmPool in the tenant namespace (warm when it has members,
cold otherwise); a SandboxTemplate without a pool gets a zero-replica pool
``shadow-pool-<template>`` (upstream's naming), since a claim selects its template only
through a pool. A template id that names no pool or template but a SandboxSnapshot of the
tenant (``Sandbox.create(<snapshot id>)``) makes a claim annotated with that snapshot, from the
warm pool the snapshot recorded (:mod:`kube_agent_sandbox.gateway.snapshots`): a cold Sandbox
of the source's template running the snapshot's image.

The claim is named by the sandbox id (random, or derived from the ``Idempotency-Key``, below)
and carries the E2B timeout as its lifecycle (or, for ``autoPause``, a ``pause-at`` deadline),
the metadata and the idle policy as annotations; ``envVars`` never go into
``claim.spec.env`` (that forces a cold start): the daemon's ``/init`` delivers them. The
create waits for the claim to be Ready, creates the NetworkPolicy of the outbound rules
(``network.allowOut``/``denyOut``, see :mod:`kube_agent_sandbox.gateway.egress`), copies the
policy annotations onto the Sandbox (where the idle reconciler reads them), initialises the
daemon and answers 201.

Failures after which a sandbox may exist answer ``Should-Retry: false`` unless the
``Idempotency-Key`` makes a retry safe (the retry then finds and waits on the same claim).

Idempotency across replicas: the API server is the arbiter. A create with a key names its
claim :func:`idempotent_sandbox_id` (a keyed hash of tenant namespace and key, in the form of
any other id), so whichever replica creates second gets ``AlreadyExists``, reads that claim and
waits for it as the first create does. The claim keeps a keyed hash of the request body;
the same key with another body is refused (422), as Stripe-style idempotency does. The key
holds as long as its claim: once the sandbox is gone (killed, timed out, failed) the key
creates a new sandbox (a new claim under the same id, with new tokens). Within one process
concurrent creates with one key also share one future (``state.creates``), sparing API calls.
The steps raise a :class:`CreateFailed` subclass that says what went wrong; the handler turns
it into the E2B answer with :func:`create_failure_response`, the one table of status, wording
and retry headers.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from kube_agent_sandbox.api.rest import NETWORK_POLICIES
from kube_agent_sandbox.controller.runtime import ApiError, Obj, Resource
from kube_agent_sandbox.gateway.annotations import (
    ANNOTATION_EGRESS,
    ANNOTATION_ENV_KEPT,
    ANNOTATION_IDEMPOTENCY_KEY,
    ANNOTATION_IDEMPOTENCY_REQUEST,
    ANNOTATION_METADATA,
    ANNOTATION_ON_TIMEOUT,
    ANNOTATION_PUBLIC_TRAFFIC,
    ANNOTATION_TEMPLATE,
    ANNOTATION_TIMEOUT,
    LABEL_GATEWAY_SANDBOX,
    POLICY_ANNOTATIONS,
)
from kube_agent_sandbox.gateway.controlplane.auth import authenticate
from kube_agent_sandbox.gateway.controlplane.body import BodyTooLarge, read_json_object
from kube_agent_sandbox.gateway.controlplane.ids import keyed_sandbox_id, new_sandbox_id
from kube_agent_sandbox.gateway.controlplane.models import (
    IDEMPOTENCY_KEY,
    ON_TIMEOUT_KILL,
    ON_TIMEOUT_PAUSE,
    BadRequest,
    CreateRequest,
    deadline,
    go_duration,
    parse_create,
    sandbox_body,
    stored_egress,
)
from kube_agent_sandbox.gateway.controlplane.timing import SERVER_TIMING, PhaseTimer
from kube_agent_sandbox.gateway.egress import InvalidEgressRules, network_policy, own_namespace
from kube_agent_sandbox.gateway.envvars import describe_failure, store_env
from kube_agent_sandbox.gateway.errors import bad_request, e2b_error
from kube_agent_sandbox.gateway.index import SandboxRecord, condition
from kube_agent_sandbox.gateway.metrics import ENV_STORE
from kube_agent_sandbox.gateway.owned import create_owned
from kube_agent_sandbox.gateway.pausekeeps import claim_opt_in
from kube_agent_sandbox.gateway.snapshots import SnapshotError, snapshot_pool
from kube_agent_sandbox.gateway.state import GatewayState
from kube_agent_sandbox.gateway.tenants import Tenant

logger = logging.getLogger(__name__)

SHADOW_POOL_PREFIX: Final = c.SHADOW_POOL_PREFIX
TERMINAL_REASONS: Final = frozenset(
    {
        c.REASON_TEMPLATE_NOT_FOUND,
        c.REASON_INVALID_METADATA,
        c.REASON_ENV_VARS_INJECTION_REJECTED,
        c.REASON_VOLUME_CLAIM_TEMPLATES_ERROR,
    }
)
RETRY_AFTER_SECONDS: Final = 1
_ID_LABEL: Final = b"idempotent-sandbox-id\x00"
_REQUEST_LABEL: Final = b"idempotent-create-request\x00"


class CreateFailed(Exception):
    """A create that ends with an error answer (see :func:`create_failure_response`)."""


class TemplateNotFound(CreateFailed):
    """No warm pool, shadow pool or SandboxTemplate serves the template."""

    def __init__(self, template: str) -> None:
        super().__init__(f"template '{template}' not found")


class ClusterRefused(CreateFailed):
    """The API server refused a write or read of the create.

    Attributes:
        error: the API error.
        may_exist: whether a sandbox may exist after it (then a retry is not safe).
    """

    def __init__(self, error: ApiError, *, may_exist: bool) -> None:
        super().__init__(error.message)
        self.error = error
        self.may_exist = may_exist


class NoFreeId(CreateFailed):
    """Every fresh sandbox id picked was taken."""

    def __init__(self) -> None:
        super().__init__("could not pick a free sandbox id")


class StillStarting(CreateFailed):
    """Not Ready in time, kept: a retry with the same Idempotency-Key resumes the wait."""

    def __init__(self, sandbox_id: str) -> None:
        super().__init__(f"sandbox {sandbox_id} is still starting, retry")


class NotReadyInTime(CreateFailed):
    """Not Ready in time; its claim was deleted (``deleted``) or could not be."""

    def __init__(self, sandbox_id: str, *, seconds: float, deleted: bool) -> None:
        super().__init__(f"sandbox {sandbox_id} did not become ready within {seconds:g} s")
        self.deleted = deleted


class DeletedWhileStarting(CreateFailed):
    """The claim vanished before it was Ready."""

    def __init__(self, sandbox_id: str) -> None:
        super().__init__(f"sandbox {sandbox_id} was deleted while starting")


class TemplateFailed(CreateFailed):
    """The claim's Ready condition reports a failure no wait can fix."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"cannot start the template: {reason}")


class JoinedCreateFailed(CreateFailed):
    """The concurrent create this one joined (same Idempotency-Key) broke off."""

    def __init__(self) -> None:
        super().__init__("a create with this Idempotency-Key failed, retry")


class IdempotencyKeyReused(CreateFailed):
    """The Idempotency-Key was used for a create with another request body."""

    def __init__(self, sandbox_id: str) -> None:
        super().__init__(
            f"this Idempotency-Key was used by a create with another request body "
            f"(sandbox {sandbox_id}); a key can only be retried with the same body"
        )


class StillDeleting(CreateFailed):
    """The sandbox of this Idempotency-Key is being deleted: a retry creates a new one."""

    def __init__(self, sandbox_id: str) -> None:
        super().__init__(
            f"sandbox {sandbox_id} of this Idempotency-Key is still being deleted, retry"
        )


class EgressNotEnforced(CreateFailed):
    """The NetworkPolicy of the sandbox's outbound rules could not be created.

    The gateway never hands out a sandbox whose rules are not in place: its claim is deleted
    (``deleted`` says whether that worked).

    Attributes:
        error: the API error, or None when the cause is not the API server's answer.
        deleted: the claim was deleted.
    """

    def __init__(self, reason: str, *, error: ApiError | None, deleted: bool) -> None:
        gone = "the sandbox was deleted" if deleted else "the sandbox could not be deleted"
        super().__init__(f"cannot enforce the network egress rules: {reason}; {gone}")
        self.error = error
        self.deleted = deleted


class EnvNotKept(CreateFailed):
    """The Secret keeping the create's ``envVars`` could not be created; the claim is deleted.

    Attributes:
        error: the API error.
        deleted: the claim was deleted.
    """

    def __init__(self, reason: str, *, error: ApiError, deleted: bool) -> None:
        gone = "the sandbox was deleted" if deleted else "the sandbox could not be deleted"
        super().__init__(f"cannot keep the sandbox's envVars: {reason}; {gone}")
        self.error = error
        self.deleted = deleted


async def enforce_egress(state: GatewayState, record: SandboxRecord) -> bool:
    """Create the NetworkPolicy of the claim's outbound rules (none: nothing to do).

    Idempotent: a policy of the same name and owner (a create joined by Idempotency-Key)
    counts; one an earlier sandbox of the same id left behind is replaced.

    Returns:
        Whether a policy was created or found.

    Raises:
        EgressNotEnforced: the rules are unreadable, the Sandbox is unknown or the API
            server refused the policy; the claim has been deleted.
    """
    try:
        rules = stored_egress(record)
    except InvalidEgressRules as exc:
        reason, error = str(exc), None
    else:
        if rules is None or not rules.restricted:
            return False
        if record.sandbox is None:
            reason, error = "the claim names no Sandbox", None
        else:
            # host names allow the addresses they resolve to now; the leader's refresher
            # follows later changes (an unresolvable name allows nothing until it resolves)
            resolved = await state.resolve_domains(rules.domains) if rules.domains else {}
            policy = network_policy(
                record.sandbox,
                record.sandbox_id,
                rules,
                gateway_namespace=own_namespace(state.options.gateway_namespace),
                resolved=resolved,
            )
            try:
                await create_owned(state.api, NETWORK_POLICIES, record.namespace, policy)
            except ApiError as exc:
                reason, error = exc.message, exc
                if exc.status == 403:
                    reason = f"the gateway may not create NetworkPolicies ({exc.message})"
            else:
                state.egress_refresher.remember(
                    record.namespace, record.sandbox_id, rules, resolved
                )
                return True
    deleted = await _delete_quietly(state, record.namespace, record.sandbox_id)
    raise EgressNotEnforced(reason, error=error, deleted=deleted)


async def resolve_pool(state: GatewayState, namespace: str, template: str) -> str | None:
    """The warm pool serving ``template`` in ``namespace``, or None if there is no template.

    Order: a pool named like the template; a ``shadow-pool-<template>``; a SandboxTemplate of
    that name, for which a zero-replica shadow pool is created. Pools and templates come from
    the gateway's caches; only what the cache lacks (created a moment ago, or no cache) is
    read from the API, so a warm create spends no API call here.
    """
    for name in (template, SHADOW_POOL_PREFIX + template):
        if len(name) > 253:
            continue
        if await _exists(state, SANDBOX_WARM_POOLS, namespace, name):
            return name
    if not await _exists(state, SANDBOX_TEMPLATES, namespace, template):
        return None
    shadow = SHADOW_POOL_PREFIX + template
    pool = {
        "apiVersion": c.EXTENSIONS_API_VERSION,
        "kind": c.KIND_SANDBOX_WARM_POOL,
        "metadata": {"name": shadow, "namespace": namespace},
        "spec": {"replicas": 0, "sandboxTemplateRef": {"name": template}},
    }
    try:
        await state.api.create(SANDBOX_WARM_POOLS, namespace, pool)
        logger.info("created zero-replica pool %s/%s for cold creates", namespace, shadow)
    except ApiError as exc:
        if not exc.already_exists:
            raise
    return shadow


async def _exists(state: GatewayState, resource: Resource, namespace: str, name: str) -> bool:
    """Whether the warm pool or template exists: the cache first, the API on a miss."""
    index = state.index
    cached = index.warm_pool if resource is SANDBOX_WARM_POOLS else index.template
    if cached(namespace, name) is not None:
        return True
    try:
        await state.api.get(resource, namespace, name)
    except ApiError as exc:
        if exc.not_found:
            return False
        raise
    return True


def claim_manifest(
    sandbox_id: str,
    namespace: str,
    *,
    pool: str,
    spec: CreateRequest,
    idempotency_key: str | None,
    now: datetime,
    request_fingerprint: str | None = None,
    trace_context: str = "",
    snapshot: str | None = None,
    kept_state: Mapping[str, str] | None = None,
) -> Obj:
    """The SandboxClaim of a create (``trace_context``: the W3C context the controllers
    continue, with tracing on; ``snapshot``: the SandboxSnapshot its Sandbox starts from;
    ``kept_state``: the ``snapshot-on-suspend`` annotations, passed to its Sandbox, of what its
    suspends keep, :func:`~kube_agent_sandbox.gateway.pausekeeps.claim_opt_in`)."""
    annotations = {
        ANNOTATION_TEMPLATE: spec.template_id,
        ANNOTATION_TIMEOUT: str(spec.timeout),
        ANNOTATION_ON_TIMEOUT: ON_TIMEOUT_PAUSE if spec.auto_pause else ON_TIMEOUT_KILL,
        ANNOTATION_METADATA: json.dumps(spec.metadata, sort_keys=True, separators=(",", ":")),
        **policy_annotations(spec, now=now),
        # a resume must find the <id>-env Secret, or fail rather than start without it
        ANNOTATION_ENV_KEPT: "true" if spec.env_vars else "false",
    }
    if not spec.allow_public_traffic:
        annotations[ANNOTATION_PUBLIC_TRAFFIC] = "false"
    if spec.egress is not None:
        annotations[ANNOTATION_EGRESS] = spec.egress.to_json()
    if idempotency_key:
        annotations[ANNOTATION_IDEMPOTENCY_KEY] = idempotency_key
    if request_fingerprint:
        annotations[ANNOTATION_IDEMPOTENCY_REQUEST] = request_fingerprint
    if trace_context:
        annotations[c.ANNOTATION_TRACE_CONTEXT] = trace_context
    if snapshot:
        annotations[c.ANNOTATION_SNAPSHOT] = snapshot
    annotations.update(kept_state or {})
    claim_spec: dict[str, Any] = {"warmPoolRef": {"name": pool}}
    if not spec.auto_pause:
        claim_spec["lifecycle"] = {
            "shutdownTime": deadline(now, spec.timeout),
            "shutdownPolicy": "Delete",
        }
    return {
        "apiVersion": c.EXTENSIONS_API_VERSION,
        "kind": c.KIND_SANDBOX_CLAIM,
        "metadata": {
            "name": sandbox_id,
            "namespace": namespace,
            "labels": {LABEL_GATEWAY_SANDBOX: "true"},
            "annotations": annotations,
        },
        "spec": claim_spec,
    }


def policy_annotations(spec: CreateRequest, *, now: datetime) -> dict[str, str]:
    """The idle-shutdown policy of a create (``docs/guides/idle-shutdown.md``, "The policy")."""
    out: dict[str, str] = {}
    if spec.auto_pause:
        out[c.ANNOTATION_PAUSE_AT] = deadline(now, spec.timeout)
    if spec.auto_resume:
        out[c.ANNOTATION_AUTO_RESUME] = "true"
    if spec.idle_timeout:
        out[c.ANNOTATION_IDLE_TIMEOUT] = go_duration(spec.idle_timeout)
    return out


def claim_failure(claim: Obj) -> str | None:
    """The message of a Ready condition no wait can fix, or None."""
    ready = condition(claim, c.CONDITION_READY)
    if ready is None or ready.get("status") == "True":
        return None
    if ready.get("reason") in TERMINAL_REASONS:
        return str(ready.get("message") or ready.get("reason"))
    return None


async def copy_policy_to_sandbox(state: GatewayState, record: SandboxRecord) -> None:
    """Put the claim's policy annotations on its Sandbox (the idle reconciler reads them)."""
    if record.sandbox is None:
        return
    wanted = {k: v for k, v in record.annotations.items() if k in POLICY_ANNOTATIONS}
    have = record.sandbox["metadata"].get("annotations") or {}
    patch = {k: v for k, v in wanted.items() if have.get(k) != v}
    if not patch:
        return
    await state.api.patch(
        SANDBOXES,
        record.namespace,
        record.sandbox["metadata"]["name"],
        {"metadata": {"annotations": patch}},
    )


@dataclass(frozen=True)
class Idempotency:
    """The ``Idempotency-Key`` of a create, with what it derives.

    Attributes:
        key: the header's value.
        sandbox_id: the id (claim name) every replica gives this tenant's create with the key.
        fingerprint: a keyed hash of the request body (kept on the claim).
    """

    key: str
    sandbox_id: str
    fingerprint: str


def idempotent_sandbox_id(state: GatewayState, namespace: str, key: str) -> str:
    """The sandbox id of a create with ``key`` in ``namespace`` (the same on every replica)."""
    return keyed_sandbox_id(state.tokens.digest(_ID_LABEL, namespace, key))


def request_fingerprint(state: GatewayState, namespace: str, body: Mapping[str, Any]) -> str:
    """A keyed hash of a create's JSON body (key order and spacing do not count)."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return state.tokens.digest(_REQUEST_LABEL, namespace, canonical).hex()


def idempotency(
    state: GatewayState, namespace: str, key: str, body: Mapping[str, Any]
) -> Idempotency:
    """What the ``Idempotency-Key`` ``key`` of a create with ``body`` derives."""
    return Idempotency(
        key=key,
        sandbox_id=idempotent_sandbox_id(state, namespace, key),
        fingerprint=request_fingerprint(state, namespace, body),
    )


def _check_same_request(claim: Obj, idem: Idempotency) -> None:
    """Refuse a create whose body differs from the one that made ``claim`` with the key."""
    kept = (claim["metadata"].get("annotations") or {}).get(ANNOTATION_IDEMPOTENCY_REQUEST)
    if kept is not None and kept != idem.fingerprint:
        raise IdempotencyKeyReused(idem.sandbox_id)


async def _existing_claim(
    state: GatewayState, namespace: str, name: str, *, ask_api: bool
) -> Obj | None:
    """The claim ``name`` (being deleted or not): the cache, then (``ask_api``) the API."""
    cached = state.index.claims.get(namespace, name)
    if cached is not None or not ask_api:
        return cached
    try:
        return await state.api.get(SANDBOX_CLAIMS, namespace, name)
    except ApiError as exc:
        if exc.not_found:
            return None
        raise ClusterRefused(exc, may_exist=False) from exc  # the key makes a retry safe


async def _wait_deleted(state: GatewayState, namespace: str, sandbox_id: str) -> None:
    """Wait until the cache no longer holds the claim; StillDeleting on timeout."""
    try:
        await state.index.wait_for(
            sandbox_id,
            lambda _record: state.index.claims.get(namespace, sandbox_id) is None,
            namespace=namespace,
            within=state.options.create_timeout_seconds,
        )
    except TimeoutError:
        raise StillDeleting(sandbox_id) from None


async def _wait_ready(
    state: GatewayState, sandbox_id: str, namespace: str, *, keep: bool
) -> SandboxRecord:
    """Wait for the claim to be Ready; on failure clean up (unless ``keep``) and raise."""

    seen = False

    def settled(record: SandboxRecord | None) -> bool:
        # the cache may not show the claim just created yet: only a seen claim can vanish
        nonlocal seen
        if record is None:
            return seen
        seen = True
        return record.ready or claim_failure(record.claim) is not None

    try:
        record = await state.index.wait_for(
            sandbox_id,
            settled,
            namespace=namespace,
            within=state.options.create_timeout_seconds,
        )
    except TimeoutError:
        if keep:
            # the same Idempotency-Key resumes this wait; nothing leaks
            raise StillStarting(sandbox_id) from None
        deleted = await _delete_quietly(state, namespace, sandbox_id)
        raise NotReadyInTime(
            sandbox_id, seconds=state.options.create_timeout_seconds, deleted=deleted
        ) from None
    if record is None:
        raise DeletedWhileStarting(sandbox_id)
    failure = claim_failure(record.claim)
    if failure is not None and not record.ready:
        await _delete_quietly(state, namespace, sandbox_id)
        raise TemplateFailed(failure)
    return record


async def _delete_quietly(state: GatewayState, namespace: str, sandbox_id: str) -> bool:
    try:
        await state.api.delete(SANDBOX_CLAIMS, namespace, sandbox_id)
    except ApiError as exc:
        if exc.not_found:
            return True
        logger.warning("could not delete claim %s/%s: %s", namespace, sandbox_id, exc)
        return False
    return True


async def _start(
    state: GatewayState,
    tenant: Tenant,
    spec: CreateRequest,
    idem: Idempotency | None,
    *,
    timer: PhaseTimer,
) -> SandboxRecord:
    """Create (or, with an Idempotency-Key, find) the claim and wait until it is Ready."""
    if idem is not None:
        return await _start_idempotent(state, tenant, spec, idem, timer=timer)
    namespace = tenant.namespace
    source = await _pool(state, namespace, spec)
    timer.mark("resolve")
    now = datetime.now(UTC)
    for _attempt in range(3):
        sandbox_id = new_sandbox_id()
        with state.tracer.span("create_claim", {"sandbox.claim.name": sandbox_id}):
            claim = claim_manifest(
                sandbox_id,
                namespace,
                pool=source.pool,
                spec=spec,
                idempotency_key=None,
                now=now,
                trace_context=state.tracer.trace_context(),
                snapshot=source.snapshot,
                kept_state=claim_opt_in(state.options, memory=spec.auto_pause_memory),
            )
            try:
                created = await state.api.create(SANDBOX_CLAIMS, namespace, claim)
            except ApiError as exc:
                if exc.already_exists:
                    continue
                raise ClusterRefused(exc, may_exist=False) from exc
        return await _started(state, tenant, spec, created, source.pool, keep=False, timer=timer)
    raise NoFreeId


async def _start_idempotent(
    state: GatewayState,
    tenant: Tenant,
    spec: CreateRequest,
    idem: Idempotency,
    *,
    timer: PhaseTimer,
) -> SandboxRecord:
    """Create the claim named by the key, or join the one another create (any replica) made.

    The API server decides: of the creates of one name, one succeeds and the others get
    ``AlreadyExists``, read that claim and wait for it. A claim being deleted is waited out
    (then the key makes a new sandbox).
    """
    namespace, sandbox_id = tenant.namespace, idem.sandbox_id
    source: Source | None = None
    for attempt in range(3):
        existing = await _existing_claim(state, namespace, sandbox_id, ask_api=attempt > 0)
        if existing is not None and existing["metadata"].get("deletionTimestamp"):
            await _wait_deleted(state, namespace, sandbox_id)
            continue
        if existing is not None:
            _check_same_request(existing, idem)
            record = await _wait_ready(state, sandbox_id, namespace, keep=True)
            timer.mark("ready")
            return record
        if source is None:
            source = await _pool(state, namespace, spec)
            timer.mark("resolve")
        with state.tracer.span("create_claim", {"sandbox.claim.name": sandbox_id}):
            claim = claim_manifest(
                sandbox_id,
                namespace,
                pool=source.pool,
                spec=spec,
                idempotency_key=idem.key,
                now=datetime.now(UTC),
                request_fingerprint=idem.fingerprint,
                trace_context=state.tracer.trace_context(),
                snapshot=source.snapshot,
                kept_state=claim_opt_in(state.options, memory=spec.auto_pause_memory),
            )
            try:
                created = await state.api.create(SANDBOX_CLAIMS, namespace, claim)
            except ApiError as exc:
                if exc.already_exists:  # another create with the key (maybe another replica)
                    continue
                raise ClusterRefused(exc, may_exist=False) from exc
        return await _started(state, tenant, spec, created, source.pool, keep=True, timer=timer)
    raise StillDeleting(sandbox_id)


@dataclass(frozen=True, slots=True)
class Source:
    """Where a create's sandbox comes from: a warm pool, and the snapshot it starts from."""

    pool: str
    snapshot: str | None = None


async def _pool(state: GatewayState, namespace: str, spec: CreateRequest) -> Source:
    """The warm pool of the create's template or, when no template has that name, of the
    snapshot of that id (TemplateNotFound/TemplateFailed/ClusterRefused otherwise)."""
    try:
        pool = await resolve_pool(state, namespace, spec.template_id)
    except ApiError as exc:
        raise ClusterRefused(exc, may_exist=False) from exc
    if pool is not None:
        return Source(pool)
    try:
        pool = await snapshot_pool(state, namespace, spec.template_id)
    except SnapshotError as exc:
        raise TemplateFailed(str(exc)) from exc
    if pool is None:
        raise TemplateNotFound(spec.template_id)
    return Source(pool, snapshot=spec.template_id)


async def _started(
    state: GatewayState,
    tenant: Tenant,
    spec: CreateRequest,
    created: Obj,
    pool: str,
    *,
    keep: bool,
    timer: PhaseTimer,
) -> SandboxRecord:
    """After the claim was created: keep the environment and wait until it is Ready."""
    timer.mark("claim")
    sandbox_id, namespace = created["metadata"]["name"], tenant.namespace
    if spec.env_vars:
        try:
            await store_env(state.api, created, spec.env_vars)
        except ApiError as exc:
            # never hand out a sandbox whose environment a resume would lose
            logger.error("sandbox %s/%s: envVars not kept: %s", namespace, sandbox_id, exc)
            state.metrics.env_failures_total.labels(ENV_STORE).inc()
            deleted = await _delete_quietly(state, namespace, sandbox_id)
            raise EnvNotKept(describe_failure(namespace, exc), error=exc, deleted=deleted) from exc
        timer.mark("env")
    logger.info(
        "tenant %s: creating sandbox %s/%s from pool %s", tenant.key_id, namespace, sandbox_id, pool
    )
    with state.tracer.span("wait_for_claim_ready", {"sandbox.claim.name": sandbox_id}):
        record = await _wait_ready(state, sandbox_id, namespace, keep=keep)
    timer.mark("ready")
    return record


def create_failure_response(failure: CreateFailed) -> Response:
    """The E2B answer to a failed create: status, message and retry headers per failure."""
    message = str(failure)
    match failure:
        case TemplateNotFound():
            return e2b_error(404, message, should_retry=False)
        case TemplateFailed():
            return e2b_error(400, message)
        case StillStarting() | JoinedCreateFailed() | StillDeleting():
            return e2b_error(503, message, should_retry=True, retry_after=RETRY_AFTER_SECONDS)
        case NotReadyInTime(deleted=deleted):
            retry_after = RETRY_AFTER_SECONDS if deleted else None
            return e2b_error(503, message, should_retry=deleted, retry_after=retry_after)
        case IdempotencyKeyReused():
            return e2b_error(422, message, should_retry=False)
        case DeletedWhileStarting():
            return e2b_error(500, message, should_retry=False)
        case NoFreeId():
            return e2b_error(500, message, should_retry=True)
        case ClusterRefused(error=error, may_exist=may_exist):
            return _cluster_refusal(error, may_exist=may_exist)
        case EnvNotKept(error=error, deleted=deleted):
            if error.status in (429, 500, 503, 504) and deleted:
                return e2b_error(503, message, should_retry=True, retry_after=RETRY_AFTER_SECONDS)
            return e2b_error(500, message, should_retry=False)
        case EgressNotEnforced(error=error, deleted=deleted):
            if error is not None and error.status in (429, 500, 503, 504) and deleted:
                return e2b_error(503, message, should_retry=True, retry_after=RETRY_AFTER_SECONDS)
            if error is not None and error.status in (400, 422):
                return e2b_error(400, message, should_retry=False)
            return e2b_error(500, message, should_retry=False)
    return e2b_error(500, message, should_retry=False)


def _cluster_refusal(exc: ApiError, *, may_exist: bool) -> Response:
    if exc.status in (429, 500, 503, 504):
        return e2b_error(
            503,
            f"the cluster is busy: {exc.message}",
            should_retry=not may_exist,
            retry_after=RETRY_AFTER_SECONDS,
        )
    if exc.status == 403:
        return e2b_error(500, f"the gateway may not do this: {exc.message}", should_retry=False)
    if exc.status in (400, 422):
        return e2b_error(400, f"the cluster refused the sandbox: {exc.message}", should_retry=False)
    return e2b_error(500, f"cluster error: {exc.message}", should_retry=False)


async def create_sandbox(request: Request, state: GatewayState) -> Response:
    """Handle a create (both spellings), in a server span with tracing on."""
    attributes = {"http.request.method": request.method, "url.path": request.url.path}
    with state.tracer.server_span("POST /sandboxes", request.headers, attributes):
        response = await _create_sandbox(request, state)
        state.tracer.set_status_code(response.status_code)
        return response


async def _create_sandbox(request: Request, state: GatewayState) -> Response:
    tenant = authenticate(request, state)
    if isinstance(tenant, Response):
        return tenant
    try:
        body = await read_json_object(request, required=True)
        spec = parse_create(body, default_timeout=state.options.default_timeout_seconds)
    except BodyTooLarge as exc:
        return e2b_error(413, str(exc), should_retry=False)
    except BadRequest as exc:
        return bad_request(str(exc))
    idempotency_key = request.headers.get("idempotency-key")
    if idempotency_key is not None and IDEMPOTENCY_KEY.fullmatch(idempotency_key) is None:
        return bad_request("Idempotency-Key must be 1-255 lowercase letters, digits or hyphens")
    idem = None
    if idempotency_key is not None:
        idem = idempotency(state, tenant.namespace, idempotency_key, body)
    timer = PhaseTimer()
    try:
        record = await start_sandbox(state, tenant, spec, idem, timer=timer)
    except CreateFailed as failed:
        return create_failure_response(failed)
    body_out = sandbox_body(record, tokens=state.tokens, domain=state.options.domain)
    return JSONResponse(body_out, status_code=201, headers={SERVER_TIMING: timer.header()})


async def start_sandbox(
    state: GatewayState,
    tenant: Tenant,
    spec: CreateRequest,
    idem: Idempotency | None,
    *,
    timer: PhaseTimer,
) -> SandboxRecord:
    """Everything a create does after parsing: the Ready claim, its outbound rules, its policy
    on the Sandbox and the daemon's ``/init`` (a create, and each sandbox of a fork).

    Raises:
        CreateFailed: the sandbox could not be started (see :func:`create_failure_response`).
    """
    record = await _deduplicated(state, tenant, spec, idem, timer=timer)
    ready = timer.elapsed()
    if await enforce_egress(state, record):
        timer.mark("egress")
    try:
        await copy_policy_to_sandbox(state, record)
    except ApiError as exc:
        logger.warning("sandbox %s: policy annotations not copied: %s", record.sandbox_id, exc)
    timer.mark("policy")
    await state.init_sandbox(record, env_vars=spec.env_vars)
    timer.mark("init")
    logger.info(
        "sandbox %s/%s created: ready after %.0f ms, answered after %.0f ms (%s)",
        record.namespace,
        record.sandbox_id,
        ready * 1000,
        timer.elapsed() * 1000,
        timer.summary(),
    )
    return record


async def _deduplicated(
    state: GatewayState,
    tenant: Tenant,
    spec: CreateRequest,
    idem: Idempotency | None,
    *,
    timer: PhaseTimer,
) -> SandboxRecord:
    """Run :func:`_start`, joining a concurrent create of this process with the same key."""
    if idem is None:
        return await _start(state, tenant, spec, None, timer=timer)
    slot = (tenant.namespace, idem.key)
    running = state.creates.get(slot)
    if running is not None:
        fingerprint, first = running
        if fingerprint != idem.fingerprint:
            raise IdempotencyKeyReused(idem.sandbox_id)
        try:
            sandbox_id = await asyncio.shield(first)
        except CreateFailed:
            raise
        except Exception as exc:  # the first create broke off: a retry with the key is safe
            raise JoinedCreateFailed from exc
        record = await _wait_ready(state, sandbox_id, tenant.namespace, keep=True)
        timer.mark("ready")
        return record
    future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    state.creates[slot] = (idem.fingerprint, future)
    try:
        record = await _start(state, tenant, spec, idem, timer=timer)
    except BaseException as exc:
        future.set_exception(exc if isinstance(exc, Exception) else RuntimeError("cancelled"))
        future.exception()  # mark retrieved: joiners re-raise it themselves
        raise
    else:
        future.set_result(record.sandbox_id)
        return record
    finally:
        state.creates.pop(slot, None)
