"""Well-known strings shared with upstream agent-sandbox: groups, labels, annotations, conditions.

Objects written by the upstream Go controller or SDK must work with ours and the other way
round, so every string here is byte-identical to upstream v0.5.6 (v0.5.4 plus the strings
v0.5.5/v0.5.6 added: the PodScheduled condition and its reasons, the MultiplePods and
SandboxCreatePending reasons, the client-first-requested-at annotation and the Sandbox
controller's event reporter).
"""

from __future__ import annotations

from typing import Final

# --- API groups and versions ------------------------------------------------------------------
GROUP: Final = "agents.x-k8s.io"
EXTENSIONS_GROUP: Final = "extensions.agents.x-k8s.io"
V1BETA1: Final = "v1beta1"
V1ALPHA1: Final = "v1alpha1"
SANDBOX_API_VERSION: Final = f"{GROUP}/{V1BETA1}"
EXTENSIONS_API_VERSION: Final = f"{EXTENSIONS_GROUP}/{V1BETA1}"

KIND_SANDBOX: Final = "Sandbox"
KIND_SANDBOX_TEMPLATE: Final = "SandboxTemplate"
KIND_SANDBOX_WARM_POOL: Final = "SandboxWarmPool"
KIND_SANDBOX_CLAIM: Final = "SandboxClaim"
KIND_SANDBOX_SNAPSHOT: Final = "SandboxSnapshot"

# --- Labels -----------------------------------------------------------------------------------
LABEL_SANDBOX_NAME_HASH: Final = "agents.x-k8s.io/sandbox-name-hash"
LABEL_WARM_POOL_SANDBOX: Final = "agents.x-k8s.io/warm-pool-sandbox"
LABEL_SANDBOX_TEMPLATE_REF_HASH: Final = "agents.x-k8s.io/sandbox-template-ref-hash"
LABEL_LAUNCH_TYPE: Final = "agents.x-k8s.io/launch-type"
LABEL_CREATED_BY: Final = "agents.x-k8s.io/created-by"
LABEL_SANDBOX_POD_TEMPLATE_HASH: Final = "agents.x-k8s.io/sandbox-pod-template-hash"  # deprecated
LABEL_SANDBOX_TEMPLATE_HASH: Final = "agents.x-k8s.io/sandbox-template-hash"
LABEL_CLAIM_UID: Final = "agents.x-k8s.io/claim-uid"
LABEL_ADOPTABLE: Final = "agents.x-k8s.io/adoptable"
LABEL_SANDBOX_NAME_LEGACY: Final = "agents.x-k8s.io/sandbox-name"  # deprecated label on claims

LAUNCH_TYPE_COLD: Final = "cold"
LAUNCH_TYPE_WARM: Final = "warm"

CREATED_BY_GO_CLIENT: Final = "go-client"
CREATED_BY_PYTHON_CLIENT: Final = "python-client"
CREATED_BY_CONTROLLER: Final = "controller"
CREATED_BY_UNKNOWN: Final = "unknown"
_CREATED_BY_ALLOWED: Final = frozenset(
    {CREATED_BY_GO_CLIENT, CREATED_BY_PYTHON_CLIENT, CREATED_BY_CONTROLLER}
)

# --- Annotations ------------------------------------------------------------------------------
ANNOTATION_POD_NAME: Final = "agents.x-k8s.io/pod-name"
ANNOTATION_SANDBOX_TEMPLATE_REF: Final = "agents.x-k8s.io/sandbox-template-ref"
ANNOTATION_PROPAGATED_LABELS: Final = "agents.x-k8s.io/propagated-labels"
ANNOTATION_PROPAGATED_ANNOTATIONS: Final = "agents.x-k8s.io/propagated-annotations"
ANNOTATION_SANDBOX_NAME: Final = "agents.x-k8s.io/sandbox-name"
ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT: Final = "agents.x-k8s.io/controller-first-observed-at"
ANNOTATION_CLAIM_FIRST_READY_AT: Final = "agents.x-k8s.io/claim-first-ready-at"
ANNOTATION_WEBHOOK_FIRST_OBSERVED_AT: Final = "agents.x-k8s.io/webhook-first-observed-at"
ANNOTATION_CLIENT_FIRST_REQUESTED_AT: Final = "agents.x-k8s.io/client-first-requested-at"
ANNOTATION_CREATION_LATENCY_RECORDED: Final = "agents.x-k8s.io/creation-latency-recorded"
ANNOTATION_TRACE_CONTEXT: Final = "opentelemetry.io/trace-context"
ANNOTATION_SAFE_TO_EVICT: Final = "cluster-autoscaler.kubernetes.io/safe-to-evict"

# Conversion round-trip and migration annotations (upstream v0.5.6 *_conversion.go files).
ANNOTATION_V1ALPHA1_SANDBOX_STATE: Final = "api.agents.x-k8s.io/v1alpha1-sandbox-state"
ANNOTATION_V1ALPHA1_SANDBOXCLAIM_STATE: Final = "api.agents.x-k8s.io/v1alpha1-sandboxclaim-state"
ANNOTATION_V1ALPHA1_SANDBOXTEMPLATE_STATE: Final = (
    "api.agents.x-k8s.io/v1alpha1-sandboxtemplate-state"
)
ANNOTATION_V1ALPHA1_SANDBOXWARMPOOL_STATE: Final = (
    "api.agents.x-k8s.io/v1alpha1-sandboxwarmpool-state"
)
ANNOTATION_V1BETA1_VCT_POLICY: Final = "api.agents.x-k8s.io/v1beta1-volume-claim-templates-policy"
ANNOTATION_MIGRATION_SHADOW: Final = "agents.x-k8s.io/migration-shadow"
ANNOTATION_MIGRATION_SOURCE_TEMPLATE: Final = "agents.x-k8s.io/migration-source-template"
ANNOTATION_STORAGE_MIGRATED_AT: Final = "agents.x-k8s.io/storage-migrated-at"

SHADOW_POOL_PREFIX: Final = "shadow-pool-"

# --- Enum values used by conversion (docs/reference/api.md) ---------------------------------------
OPERATING_MODE_RUNNING: Final = "Running"
OPERATING_MODE_SUSPENDED: Final = "Suspended"
# Sandbox spec.shutdownPolicy: what happens to an expired Sandbox (docs/concepts/lifecycle.md).
SHUTDOWN_POLICY_DELETE: Final = "Delete"
SHUTDOWN_POLICY_RETAIN: Final = "Retain"
# v1alpha1 SandboxClaim spec.warmpool: these two (and "") mean "no specific pool".
WARM_POOL_POLICY_NONE: Final = "none"
WARM_POOL_POLICY_DEFAULT: Final = "default"
VOLUME_CLAIM_TEMPLATES_POLICIES: Final = frozenset({"Disallowed", "Allowed", "Overrides"})

# Keys under these prefixes (and the trace annotation) are never copied from a user's pod
# template to a Pod: they belong to the controllers.
SYSTEM_PREFIXES: Final = (f"{GROUP}/", f"{EXTENSIONS_GROUP}/")
SYSTEM_ANNOTATIONS: Final = frozenset({ANNOTATION_TRACE_CONTEXT})

# --- This project's own annotations (beyond upstream; never under agents.x-k8s.io) ----------
# Idle shutdown (docs/guides/idle-shutdown.md): policy on the Sandbox (defaulted from its
# template, copied from its claim), heartbeat in a coordination.k8s.io Lease of the same name.
PROJECT_PREFIX: Final = "kube-agent-sandbox.io"
ANNOTATION_IDLE_TIMEOUT: Final = f"{PROJECT_PREFIX}/idle-timeout"
ANNOTATION_ON_IDLE: Final = f"{PROJECT_PREFIX}/on-idle"
ANNOTATION_AUTO_RESUME: Final = f"{PROJECT_PREFIX}/auto-resume"
ANNOTATION_BUSY_CPU_MILLICORES: Final = f"{PROJECT_PREFIX}/busy-cpu-millicores"
ANNOTATION_SUSPENDED_BY: Final = f"{PROJECT_PREFIX}/suspended-by"
ANNOTATION_PAUSE_AT: Final = f"{PROJECT_PREFIX}/pause-at"
ON_IDLE_SUSPEND: Final = "Suspend"
ON_IDLE_DELETE: Final = "Delete"
SUSPENDED_BY_IDLE: Final = "idle"
SUSPENDED_BY_TIMEOUT: Final = "timeout"
# Heartbeat Leases carry this label (value "true"), so the idle reconciler caches only them and
# not every node or leader-election Lease of the cluster.
LABEL_HEARTBEAT: Final = f"{PROJECT_PREFIX}/heartbeat"

# Snapshots (docs/guides/snapshots.md). A claim names the SandboxSnapshot it starts from with
# ANNOTATION_SNAPSHOT (upstream's claim schema stays unchanged). A SandboxSnapshot taken by the
# gateway, the SDK or the CLI records the warm pool of its source claim, so a sandbox made from
# it uses the same pool (hence the same template) without the caller naming one.
ANNOTATION_SNAPSHOT: Final = f"{EXTENSIONS_GROUP}/snapshot"
ANNOTATION_SNAPSHOT_PULL_SECRET: Final = f"{EXTENSIONS_GROUP}/snapshot-pull-secret"
ANNOTATION_SNAPSHOT_WARM_POOL: Final = f"{PROJECT_PREFIX}/snapshot-warm-pool"

# --- Condition types and reasons --------------------------------------------------------------
CONDITION_READY: Final = "Ready"
CONDITION_SUSPENDED: Final = "Suspended"
CONDITION_FINISHED: Final = "Finished"
CONDITION_POD_SCHEDULED: Final = "PodScheduled"

# Suspended
REASON_NOT_SUSPENDED: Final = "NotSuspended"
REASON_POD_TERMINATING: Final = "PodTerminating"
REASON_POD_NOT_OWNED: Final = "PodNotOwned"
REASON_POD_TERMINATED: Final = "PodTerminated"
REASON_POD_STATE_UNKNOWN: Final = "PodStateUnknown"
REASON_POD_NOT_TERMINATED: Final = "PodNotTerminated"  # deprecated upstream, never written
# PodScheduled (v0.5.6): the pod's own reason is copied; these two are the fallbacks.
REASON_POD_SCHEDULED: Final = "PodScheduled"
REASON_POD_SCHEDULING_UNKNOWN: Final = "PodSchedulingUnknown"
# Ready (Sandbox)
REASON_DEPENDENCIES_READY: Final = "DependenciesReady"
REASON_DEPENDENCIES_NOT_READY: Final = "DependenciesNotReady"
REASON_SANDBOX_SUSPENDED: Final = "SandboxSuspended"
REASON_POD_SUCCEEDED: Final = "PodSucceeded"
REASON_POD_FAILED: Final = "PodFailed"
REASON_RECONCILER_ERROR: Final = "ReconcilerError"
REASON_SANDBOX_EXPIRED: Final = "SandboxExpired"
REASON_MULTIPLE_PODS: Final = "MultiplePods"
# Ready (SandboxClaim)
REASON_SANDBOX_NOT_READY: Final = "SandboxNotReady"
REASON_SANDBOX_MISSING: Final = "SandboxMissing"
REASON_TEMPLATE_NOT_FOUND: Final = "TemplateNotFound"
REASON_WARM_POOL_NOT_FOUND: Final = "WarmPoolNotFound"
REASON_INVALID_METADATA: Final = "InvalidMetadata"
REASON_ENV_VARS_INJECTION_REJECTED: Final = "EnvVarsInjectionRejected"
REASON_VOLUME_CLAIM_TEMPLATES_ERROR: Final = "VolumeClaimTemplatesError"
REASON_ADOPTION_CONFLICT: Final = "AdoptionConflict"
REASON_CLAIM_EXPIRED: Final = "ClaimExpired"
REASON_SANDBOX_CREATE_PENDING: Final = "SandboxCreatePending"

# --- Other fixed names ------------------------------------------------------------------------
FIELD_OWNER_SANDBOX_CONTROLLER: Final = "sandbox-controller"
# Event reporter of the core Sandbox controller (v0.5.6) and the action of its Warning events.
EVENT_REPORTER_SANDBOX_CONTROLLER: Final = "sandbox-controller"
EVENT_ACTION_RECONCILING: Final = "Reconciling"
LEADER_ELECTION_ID: Final = "a3317529.agent-sandbox.x-k8s.io"
WEBHOOK_SECRET_NAME: Final = "agent-sandbox-webhook-certs"
WEBHOOK_SERVICE_NAME: Final = "agent-sandbox-webhook-service"
CONTROLLER_NAMESPACE: Final = "agent-sandbox-system"
CONVERSION_PATH: Final = "/convert"


def is_system_key(key: str) -> bool:
    """True for label/annotation keys reserved to the controllers (never propagated to Pods)."""
    return key.startswith(SYSTEM_PREFIXES) or key in SYSTEM_ANNOTATIONS


def normalize_created_by(value: str) -> str:
    """Map a created-by label value onto upstream's allow-list (anything else is ``unknown``)."""
    return value if value in _CREATED_BY_ALLOWED else CREATED_BY_UNKNOWN
