"""Annotated field types for the Kubernetes objects the Agent Sandbox API embeds.

Decision: an embedded PodSpec, PersistentVolumeClaimSpec, NetworkPolicy rule or ObjectMeta is a
**plain JSON dict** in our models, validated against Kubernetes' own published schema of that
type (the snapshot in ``k8s_openapi.json``, the schema the CRDs embed) and otherwise left
exactly as given. We do not parse it into the ``kubernetes`` package's pydantic models
(``V1PodSpec`` ...), because those

* forbid unknown fields, so an object written against a newer cluster (new PodSpec fields)
  would not load at all;
* type quantities as strict strings, so ordinary manifests (``cpu: 1``) would be rejected;
* re-render values on output, so a read-modify-write would change documents it did not touch.

Keeping the dict means every manifest dumps back exactly as it was read (no field lost or
invented), values that Kubernetes accepts are accepted, and the controller can pass the dict
straight to the API. Unknown fields are kept and not checked; known ones are checked by type,
required-ness, int-or-string and quantity syntax. Code that wants typed access can build a
``kubernetes.client`` model from the dict itself.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

from kube_agent_sandbox.api.embedded.definitions import (
    NETWORK_POLICY_EGRESS_RULE,
    NETWORK_POLICY_INGRESS_RULE,
    OBJECT_META,
    PERSISTENT_VOLUME_CLAIM_SPEC,
    POD_SPEC,
)
from kube_agent_sandbox.api.embedded.schema import structural_schema
from kube_agent_sandbox.api.embedded.validation import validate_against_schema

_MAX_REPORTED = 10


@functools.cache
def _validation_schema(definition: str) -> Mapping[str, Any]:
    """One shared, never mutated copy of a definition's schema for validation."""
    return structural_schema(definition)


@dataclass(frozen=True)
class EmbeddedKubeType:
    """Marker: this ``dict`` field holds the Kubernetes type ``definition``.

    Attributes:
        definition: Kubernetes OpenAPI definition name, e.g. ``io.k8s.api.core.v1.PodSpec``.
        opaque: emit ``type: object`` in the CRD instead of the full schema (how CRDs treat
            top-level ``metadata``); the value is still validated.
    """

    definition: str
    opaque: bool = False

    @property
    def short_name(self) -> str:
        """The type's own name, e.g. ``PodSpec``."""
        return self.definition.rsplit(".", 1)[-1]

    def _validate(self, value: dict[str, Any]) -> dict[str, Any]:
        violations = validate_against_schema(value, _validation_schema(self.definition))
        if violations:
            shown = "; ".join(str(v) for v in violations[:_MAX_REPORTED])
            more = len(violations) - _MAX_REPORTED
            if more > 0:
                shown += f"; and {more} more"
            raise PydanticCustomError(
                "kubernetes_schema",
                "invalid {kind}: {details}",
                {"kind": self.short_name, "details": shown},
            )
        return value

    def __get_pydantic_core_schema__(
        self, source_type: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        """Validate as a dict, then against the Kubernetes schema."""
        return core_schema.no_info_after_validator_function(self._validate, handler(source_type))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        """Emit Kubernetes' own schema for the type (what the CRD embeds)."""
        if self.opaque:
            return {"type": "object"}
        return structural_schema(self.definition)


PodSpec = Annotated[dict[str, Any], EmbeddedKubeType(POD_SPEC)]
"""A core/v1 PodSpec as a JSON dict."""

PersistentVolumeClaimSpec = Annotated[
    dict[str, Any], EmbeddedKubeType(PERSISTENT_VOLUME_CLAIM_SPEC)
]
"""A core/v1 PersistentVolumeClaimSpec as a JSON dict."""

NetworkPolicyIngressRule = Annotated[dict[str, Any], EmbeddedKubeType(NETWORK_POLICY_INGRESS_RULE)]
"""A networking/v1 NetworkPolicyIngressRule as a JSON dict."""

NetworkPolicyEgressRule = Annotated[dict[str, Any], EmbeddedKubeType(NETWORK_POLICY_EGRESS_RULE)]
"""A networking/v1 NetworkPolicyEgressRule as a JSON dict."""

ObjectMeta = Annotated[dict[str, Any], EmbeddedKubeType(OBJECT_META, opaque=True)]
"""A meta/v1 ObjectMeta (an object's ``metadata``) as a JSON dict."""
