"""``metav1.Condition``, the status condition every Agent Sandbox kind reports.

Written here rather than taken from ``kubernetes.client.V1Condition`` because the CRD schema of a
condition carries validations (type/reason patterns, lengths, status enum) that Kubernetes
declares as Go markers and its OpenAPI (hence the Python client) does not have.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from annotated_types import Ge
from pydantic import Strict, StringConstraints

from kube_agent_sandbox.api.base import KubeModel, KubeTime
from kube_agent_sandbox.api.markers import INT64

CONDITION_TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
"""A qualified name, as ``metav1.Condition.type`` requires."""

CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
"""A CamelCase reason, as ``metav1.Condition.reason`` requires."""


class ConditionStatus(StrEnum):
    """Status of a condition."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(KubeModel):
    """One aspect of an object's current state (``metav1.Condition``).

    Attributes:
        type: e.g. ``Ready``.
        status: ``True``, ``False`` or ``Unknown``.
        observed_generation: the ``metadata.generation`` the condition was computed from.
        last_transition_time: when ``status`` last changed.
        reason: CamelCase machine-readable reason.
        message: human-readable details.
    """

    type: Annotated[str, StringConstraints(max_length=316, pattern=CONDITION_TYPE_PATTERN)]
    status: ConditionStatus
    observed_generation: Annotated[int, Strict(), Ge(0), INT64] | None = None
    last_transition_time: KubeTime
    reason: Annotated[
        str, StringConstraints(min_length=1, max_length=1024, pattern=CONDITION_REASON_PATTERN)
    ]
    message: Annotated[str, StringConstraints(max_length=32768)]
