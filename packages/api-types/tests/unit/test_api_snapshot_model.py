"""SandboxSnapshot: the model's defaults and checks, and conversion between its two versions."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from kube_agent_sandbox.api.conversion import convert
from kube_agent_sandbox.api.registry import parse_object
from kube_agent_sandbox.api.v1beta1 import SandboxSnapshot, SnapshotMode


def _snapshot(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxSnapshot",
        "metadata": {"name": "snap", "namespace": "ns"},
        "spec": {"sandboxName": "box", **spec},
    }


def test_mode_defaults_to_filesystem() -> None:
    snapshot = SandboxSnapshot.model_validate(_snapshot())
    assert snapshot.spec.mode == SnapshotMode.FILESYSTEM
    assert snapshot.spec.repository is None


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"mode": "Full"}, "mode"),
        ({"repository": "Upper/Case"}, "repository"),
        ({"tag": "-bad"}, "tag"),
        ({"sandboxName": ""}, "sandboxName"),
    ],
)
def test_bad_spec_names_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        SandboxSnapshot.model_validate(_snapshot(**spec))
    assert field in str(caught.value)


def test_status_round_trips_camel_case() -> None:
    document = _snapshot()
    document["status"] = {
        "phase": "Ready",
        "digest": "sha256:" + "a" * 64,
        "size": 1234,
        "containerID": "abc",
        "sourceSandbox": "box",
        "startTime": "2026-01-01T00:00:00Z",
    }
    dumped = parse_object(document).model_dump(mode="json", by_alias=True, exclude_none=True)
    assert dumped["status"]["containerID"] == "abc"
    assert dumped["status"]["size"] == 1234


def test_versions_convert_both_ways_unchanged() -> None:
    beta = _snapshot(mode="Filesystem", tag="t1")
    beta["status"] = {"phase": "Committing", "node": "n1"}
    alpha = convert(beta, "extensions.agents.x-k8s.io/v1alpha1")
    assert alpha["apiVersion"] == "extensions.agents.x-k8s.io/v1alpha1"
    assert {k: v for k, v in alpha.items() if k != "apiVersion"} == {
        k: v for k, v in beta.items() if k != "apiVersion"
    }
    assert convert(alpha, "extensions.agents.x-k8s.io/v1beta1") == beta
    parse_object(alpha)
