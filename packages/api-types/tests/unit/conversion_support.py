"""Shared helpers of the v1alpha1 <-> v1beta1 conversion tests: apiVersions, state reader."""

from __future__ import annotations

import json
from typing import Any

Obj = dict[str, Any]

CORE_A = "agents.x-k8s.io/v1alpha1"
CORE_B = "agents.x-k8s.io/v1beta1"
EXT_A = "extensions.agents.x-k8s.io/v1alpha1"
EXT_B = "extensions.agents.x-k8s.io/v1beta1"


def state_of(obj: Obj, annotation: str) -> Obj:
    value = json.loads(obj["metadata"]["annotations"][annotation])
    assert isinstance(value, dict)
    return value
