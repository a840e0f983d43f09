"""Name hash test vectors and spot checks of the well-known strings (spec "Conventions", 2)."""

from __future__ import annotations

import pytest

from kube_agent_sandbox.api import constants
from kube_agent_sandbox.api.namehash import name_hash


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", "811c9dc5"),
        ("a", "e40c292c"),
        ("my-sandbox", "374de8f5"),
        ("sandbox-name", "ab179450"),
        ("test-pool", "59733166"),
        ("test-template", "69155462"),
        ("pool", "91dd7983"),
        ("warmpool-0", "5317cfd3"),
        ("template-0", "cd01fec6"),
    ],
)
def test_name_hash_vectors(value: str, expected: str) -> None:
    assert name_hash(value) == expected


def test_name_hash_is_eight_lower_hex_digits_for_non_ascii() -> None:
    digest = name_hash("sändbox-ü")
    assert len(digest) == 8
    assert digest == digest.lower()
    int(digest, 16)
    assert digest != name_hash("sandbox-u")


@pytest.mark.parametrize(
    ("actual", "expected"),
    [
        (constants.GROUP, "agents.x-k8s.io"),
        (constants.EXTENSIONS_GROUP, "extensions.agents.x-k8s.io"),
        (constants.SANDBOX_API_VERSION, "agents.x-k8s.io/v1beta1"),
        (constants.LABEL_SANDBOX_NAME_HASH, "agents.x-k8s.io/sandbox-name-hash"),
        (constants.LABEL_WARM_POOL_SANDBOX, "agents.x-k8s.io/warm-pool-sandbox"),
        (constants.LABEL_SANDBOX_TEMPLATE_REF_HASH, "agents.x-k8s.io/sandbox-template-ref-hash"),
        (constants.LABEL_CLAIM_UID, "agents.x-k8s.io/claim-uid"),
        (constants.ANNOTATION_POD_NAME, "agents.x-k8s.io/pod-name"),
        (constants.ANNOTATION_TRACE_CONTEXT, "opentelemetry.io/trace-context"),
        (constants.ANNOTATION_SAFE_TO_EVICT, "cluster-autoscaler.kubernetes.io/safe-to-evict"),
        (
            constants.ANNOTATION_V1ALPHA1_SANDBOXCLAIM_STATE,
            "api.agents.x-k8s.io/v1alpha1-sandboxclaim-state",
        ),
        (
            constants.ANNOTATION_V1BETA1_VCT_POLICY,
            "api.agents.x-k8s.io/v1beta1-volume-claim-templates-policy",
        ),
        (constants.SHADOW_POOL_PREFIX, "shadow-pool-"),
        (constants.LEADER_ELECTION_ID, "a3317529.agent-sandbox.x-k8s.io"),
        (constants.WEBHOOK_SERVICE_NAME, "agent-sandbox-webhook-service"),
        (constants.CONTROLLER_NAMESPACE, "agent-sandbox-system"),
        (constants.CONVERSION_PATH, "/convert"),
        (constants.REASON_DEPENDENCIES_READY, "DependenciesReady"),
        (constants.REASON_ENV_VARS_INJECTION_REJECTED, "EnvVarsInjectionRejected"),
        (constants.CONDITION_SUSPENDED, "Suspended"),
        # Added by upstream v0.5.5/v0.5.6 (api/v1beta1/sandbox_types.go).
        (constants.CONDITION_POD_SCHEDULED, "PodScheduled"),
        (constants.REASON_POD_SCHEDULED, "PodScheduled"),
        (constants.REASON_POD_SCHEDULING_UNKNOWN, "PodSchedulingUnknown"),
        (constants.REASON_MULTIPLE_PODS, "MultiplePods"),
        (constants.REASON_SANDBOX_CREATE_PENDING, "SandboxCreatePending"),
        (
            constants.ANNOTATION_CLIENT_FIRST_REQUESTED_AT,
            "agents.x-k8s.io/client-first-requested-at",
        ),
        (constants.EVENT_REPORTER_SANDBOX_CONTROLLER, "sandbox-controller"),
        (constants.EVENT_ACTION_RECONCILING, "Reconciling"),
    ],
)
def test_constants_match_the_spec(actual: str, expected: str) -> None:
    assert actual == expected


@pytest.mark.parametrize(
    ("key", "reserved"),
    [
        ("agents.x-k8s.io/claim-uid", True),
        ("extensions.agents.x-k8s.io/anything", True),
        ("opentelemetry.io/trace-context", True),
        ("app", False),
        ("example.com/agents.x-k8s.io", False),
    ],
)
def test_is_system_key(key: str, reserved: bool) -> None:
    assert constants.is_system_key(key) is reserved


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("python-client", "python-client"),
        ("go-client", "go-client"),
        ("controller", "controller"),
        ("kubectl", "unknown"),
        ("", "unknown"),
    ],
)
def test_normalize_created_by(value: str, expected: str) -> None:
    assert constants.normalize_created_by(value) == expected
