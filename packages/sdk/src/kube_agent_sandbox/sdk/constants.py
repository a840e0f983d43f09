"""The SDK's side of the wire contract with the controllers.

The contract is documented in docs/concepts/compatibility.md (labels and annotations) and
docs/concepts/claims.md (the claim's Ready reasons).

The label, annotation and reason strings come from :mod:`kube_agent_sandbox.api.constants`
(byte-identical to upstream); this module adds what only clients use: the value the SDK writes
in ``agents.x-k8s.io/created-by``, the claim Ready reasons that end a wait, and the REST
coordinates of the kinds the SDK touches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from kube_agent_sandbox.api import constants as api

CREATED_BY_LABEL: Final = api.LABEL_CREATED_BY
"""``agents.x-k8s.io/created-by``: set on every claim the SDK creates."""
CREATED_BY_VALUE: Final = api.CREATED_BY_PYTHON_CLIENT
"""``python-client``: the value upstream's Python SDK writes (the controller allow-lists it)."""
CLIENT_REQUEST_TIME_ANNOTATION: Final = api.ANNOTATION_CLIENT_FIRST_REQUESTED_AT
"""``agents.x-k8s.io/client-first-requested-at``: when the client first asked for the claim."""
POD_NAME_ANNOTATION: Final = api.ANNOTATION_POD_NAME
"""``agents.x-k8s.io/pod-name``: the Sandbox's backing Pod."""

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


@dataclass(frozen=True)
class Resource:
    """REST coordinates of a kind.

    Attributes:
        group: API group (``""`` for the core group).
        version: API version.
        plural: resource name in URLs.
        kind: the kind.
        namespaced: whether objects live in a namespace.
    """

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """``group/version`` (or ``v1`` for the core group)."""
        return f"{self.group}/{self.version}" if self.group else self.version


SANDBOXES: Final = Resource(api.GROUP, api.V1BETA1, "sandboxes", api.KIND_SANDBOX)
SANDBOX_CLAIMS: Final = Resource(
    api.EXTENSIONS_GROUP, api.V1BETA1, "sandboxclaims", api.KIND_SANDBOX_CLAIM
)
SANDBOX_TEMPLATES: Final = Resource(
    api.EXTENSIONS_GROUP, api.V1BETA1, "sandboxtemplates", api.KIND_SANDBOX_TEMPLATE
)
SANDBOX_WARM_POOLS: Final = Resource(
    api.EXTENSIONS_GROUP, api.V1BETA1, "sandboxwarmpools", api.KIND_SANDBOX_WARM_POOL
)
PODS: Final = Resource("", "v1", "pods", "Pod")
LEASES: Final = Resource("coordination.k8s.io", "v1", "leases", "Lease")
"""Heartbeat Leases of idle-managed Sandboxes (see :meth:`AsyncSandboxClient.keepalive`)."""
