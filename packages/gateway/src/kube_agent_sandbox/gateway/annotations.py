"""Labels and annotations only the gateway writes (the idle ones live in api.constants).

All sit under the project's own domain (``kube-agent-sandbox.io``), never upstream's
``agents.x-k8s.io``, so objects stay valid for the upstream controller.
"""

from __future__ import annotations

from typing import Final

from kube_agent_sandbox.api.constants import (
    ANNOTATION_AUTO_RESUME,
    ANNOTATION_IDLE_TIMEOUT,
    ANNOTATION_PAUSE_AT,
    PROJECT_PREFIX,
)

LABEL_GATEWAY_SANDBOX: Final = f"{PROJECT_PREFIX}/gateway-sandbox"
"""On SandboxClaims the gateway created (value ``"true"``); the gateway caches only these."""

LABEL_API_KEY_TENANT: Final = f"{PROJECT_PREFIX}/gateway-api-key-tenant"
"""On the Secrets (in the gateway's own namespace) holding an API key's hash: the tenant
namespace the key grants."""

LABEL_API_KEY: Final = f"{PROJECT_PREFIX}/gateway-api-key"
"""On the Secrets of the old layout (value ``"true"``): a key's hash stored in its tenant
namespace, which the gateway no longer reads (``agent-sandbox-gateway keys migrate``)."""

ANNOTATION_METADATA: Final = f"{PROJECT_PREFIX}/e2b-metadata"
"""The E2B ``metadata`` map as one JSON object (reserved keys removed)."""

ANNOTATION_TEMPLATE: Final = f"{PROJECT_PREFIX}/e2b-template"
"""The E2B ``templateID`` the sandbox was created from."""

ANNOTATION_TIMEOUT: Final = f"{PROJECT_PREFIX}/e2b-timeout"
"""The sandbox's E2B timeout in seconds (the TTL a resume restarts)."""

ANNOTATION_ON_TIMEOUT: Final = f"{PROJECT_PREFIX}/e2b-on-timeout"
"""``kill`` (default) or ``pause``: what the E2B timeout does."""

ANNOTATION_PUBLIC_TRAFFIC: Final = f"{PROJECT_PREFIX}/e2b-allow-public-traffic"
"""``"false"`` when the sandbox's user ports need the traffic token (E2B ``network``
``allowPublicTraffic: false``); absent or anything else: public, E2B's default."""

ANNOTATION_EGRESS: Final = f"{PROJECT_PREFIX}/e2b-egress"
"""The E2B outbound rules (``network.allowOut``/``denyOut``, ``allowInternetAccess``) as
``{"allowOut": [...], "denyOut": [...]}`` of canonical IPv4 CIDR blocks; absent: none."""

LABEL_EGRESS_SANDBOX: Final = f"{PROJECT_PREFIX}/e2b-egress-sandbox"
"""On the NetworkPolicy enforcing a sandbox's outbound rules: the E2B sandbox id."""

ANNOTATION_IDEMPOTENCY_KEY: Final = f"{PROJECT_PREFIX}/e2b-idempotency-key"
"""The ``Idempotency-Key`` of the create that made this claim (de-duplication per tenant)."""

ANNOTATION_IDEMPOTENCY_REQUEST: Final = f"{PROJECT_PREFIX}/e2b-idempotency-request"
"""A keyed hash of the request body of that create: a retry with another body is refused."""

ANNOTATION_API_KEY_NAME: Final = f"{PROJECT_PREFIX}/gateway-api-key-name"
"""A human-readable name of an API key (on its Secret)."""

ANNOTATION_API_KEY_CREATED: Final = f"{PROJECT_PREFIX}/gateway-api-key-created-at"
"""When the API key was created (RFC 3339, on its Secret)."""

POLICY_ANNOTATIONS: Final = (ANNOTATION_PAUSE_AT, ANNOTATION_AUTO_RESUME, ANNOTATION_IDLE_TIMEOUT)
"""The idle-shutdown policy the gateway sets on the claim and copies onto its Sandbox."""

METADATA_IDLE_TIMEOUT: Final = "idle_timeout"
"""The Novita-compatible metadata key of the idle timeout, in seconds."""

RESERVED_METADATA_PREFIX: Final = f"{PROJECT_PREFIX}/"
"""Metadata keys under this prefix are vendor options, removed before storage."""

LABEL_ENV_SECRET: Final = f"{PROJECT_PREFIX}/gateway-env"
"""On the Secret (owned by the claim) keeping a sandbox's ``envVars`` for re-inits."""

ANNOTATION_ENV_KEPT: Final = f"{PROJECT_PREFIX}/gateway-env-kept"
"""On a claim created with ``envVars``: its ``<id>-env`` Secret must exist (a resume without it
fails instead of starting the pod with no environment)."""

LABEL_SNAPSHOT_SANDBOX: Final = f"{PROJECT_PREFIX}/e2b-snapshot-of"
"""On a SandboxSnapshot the gateway took: the E2B sandbox id it was taken of (the
``sandboxID`` filter of ``list_snapshots``)."""
