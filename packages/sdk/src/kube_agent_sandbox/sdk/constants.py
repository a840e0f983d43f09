"""The SDK's side of the wire contract with the controllers.

The contract is documented in docs/concepts/compatibility.md (labels and annotations) and
docs/concepts/claims.md (the claim's Ready reasons).

The label, annotation and reason strings come from :mod:`kube_agent_sandbox.api.constants`
(byte-identical to upstream); this module adds what only clients use: the value the SDK writes
in ``agents.x-k8s.io/created-by``, the claim Ready reasons that end a wait, and the REST
coordinates of the kinds the SDK touches.
"""

from __future__ import annotations

from typing import Final

from kube_agent_sandbox.api import constants as api
from kube_agent_sandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_SNAPSHOTS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from kube_agent_sandbox.api.rest import LEASES, PODS, Resource

__all__ = [
    "CLIENT_REQUEST_TIME_ANNOTATION",
    "CREATED_BY_LABEL",
    "CREATED_BY_VALUE",
    "LEASES",
    "PODS",
    "POD_NAME_ANNOTATION",
    "SANDBOXES",
    "SANDBOX_CLAIMS",
    "SANDBOX_SNAPSHOTS",
    "SANDBOX_TEMPLATES",
    "SANDBOX_WARM_POOLS",
    "SNAPSHOT_ANNOTATION",
    "SNAPSHOT_PULL_SECRET_ANNOTATION",
    "SNAPSHOT_WARM_POOL_ANNOTATION",
    "TERMINAL_CLAIM_READY_REASONS",
    "TERMINAL_SANDBOX_READY_REASONS",
    "TRACE_CONTEXT_ANNOTATION",
    "Resource",
]

CREATED_BY_LABEL: Final = api.LABEL_CREATED_BY
"""``agents.x-k8s.io/created-by``: set on every claim the SDK creates."""
CREATED_BY_VALUE: Final = api.CREATED_BY_PYTHON_CLIENT
"""``python-client``: the value upstream's Python SDK writes (the controller allow-lists it)."""
CLIENT_REQUEST_TIME_ANNOTATION: Final = api.ANNOTATION_CLIENT_FIRST_REQUESTED_AT
"""``agents.x-k8s.io/client-first-requested-at``: when the client first asked for the claim."""
POD_NAME_ANNOTATION: Final = api.ANNOTATION_POD_NAME
"""``agents.x-k8s.io/pod-name``: the Sandbox's backing Pod."""
TRACE_CONTEXT_ANNOTATION: Final = api.ANNOTATION_TRACE_CONTEXT
"""``opentelemetry.io/trace-context``: the W3C context (JSON of headers) the SDK writes on what
it creates when tracing is on; the controllers continue the trace from it."""

TERMINAL_CLAIM_READY_REASONS: Final = frozenset(
    {
        api.REASON_INVALID_METADATA,
        api.REASON_ENV_VARS_INJECTION_REJECTED,
        api.REASON_VOLUME_CLAIM_TEMPLATES_ERROR,
        api.REASON_CLAIM_EXPIRED,
        api.REASON_SANDBOX_EXPIRED,
    }
)
"""Claim Ready=False reasons that never heal: a wait fails at once (upstream's set, unchanged)."""

TERMINAL_SANDBOX_READY_REASONS: Final = frozenset(
    {api.REASON_POD_SUCCEEDED, api.REASON_POD_FAILED, api.REASON_SANDBOX_EXPIRED}
)
"""Sandbox Ready=False reasons after which the Sandbox will not become Ready by itself."""

SNAPSHOT_ANNOTATION: Final = api.ANNOTATION_SNAPSHOT
"""``extensions.agents.x-k8s.io/snapshot``: on a claim, the SandboxSnapshot it starts from."""
SNAPSHOT_PULL_SECRET_ANNOTATION: Final = api.ANNOTATION_SNAPSHOT_PULL_SECRET
"""``extensions.agents.x-k8s.io/snapshot-pull-secret``: on such a claim, the registry's pull
Secret."""
SNAPSHOT_WARM_POOL_ANNOTATION: Final = api.ANNOTATION_SNAPSHOT_WARM_POOL
"""``kube-agent-sandbox.io/snapshot-warm-pool``: on a SandboxSnapshot, the warm pool of its
source claim (a claim from the snapshot uses it unless told another)."""
