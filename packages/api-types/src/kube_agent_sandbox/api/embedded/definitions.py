"""Names of the Kubernetes OpenAPI definitions the Agent Sandbox API embeds.

Kept apart from the loader so the snapshot tool and the models agree on one list.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

POD_SPEC: Final = "io.k8s.api.core.v1.PodSpec"
PERSISTENT_VOLUME_CLAIM_SPEC: Final = "io.k8s.api.core.v1.PersistentVolumeClaimSpec"
NETWORK_POLICY_INGRESS_RULE: Final = "io.k8s.api.networking.v1.NetworkPolicyIngressRule"
NETWORK_POLICY_EGRESS_RULE: Final = "io.k8s.api.networking.v1.NetworkPolicyEgressRule"
OBJECT_META: Final = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"

ROOT_DEFINITIONS: Final = (
    POD_SPEC,
    PERSISTENT_VOLUME_CLAIM_SPEC,
    NETWORK_POLICY_INGRESS_RULE,
    NETWORK_POLICY_EGRESS_RULE,
    OBJECT_META,
)

SNAPSHOT_PATH: Final = Path(__file__).with_name("k8s_openapi.json")
