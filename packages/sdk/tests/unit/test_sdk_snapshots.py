"""The SDK's snapshot verbs where no cluster is needed: what is refused before any request, and the
CLI's snapshot table (the verbs themselves run for real in test_sdk_snapshots_live.py)."""

from __future__ import annotations

import pytest

from kube_agent_sandbox.sdk import ApiRequestError, ClusterConfig, SandboxClient
from kube_agent_sandbox.sdk.cli import output


def _client() -> SandboxClient:
    # nothing listens there: a request would fail with a connection error, not these
    return SandboxClient(ClusterConfig("https://127.0.0.1:1", verify=False), namespace="ns")


def test_memory_mode_is_sent_to_the_cluster() -> None:
    # Memory is the cluster's to refuse (the node may checkpoint): the request is made, and
    # fails here only because nothing listens.
    with _client() as client, pytest.raises(ApiRequestError, match="create sandboxsnapshots"):
        client.create_snapshot("box", mode="Memory", warm_pool="pool")


def test_an_unknown_mode_or_name_is_a_value_error() -> None:
    with _client() as client:
        with pytest.raises(ValueError, match="Filesystem, Memory"):
            client.create_snapshot("box", mode="full")
        with pytest.raises(ValueError, match="lowercase DNS subdomain"):
            client.create_snapshot("box", name="Not_A_Name")


def test_the_snapshot_table() -> None:
    obj = {
        "metadata": {"name": "s1", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"sandboxName": "box"},
        "status": {
            "phase": "Failed",
            "size": 12,
            "image": "reg/x@sha256:ab",
            "conditions": [{"type": "Ready", "status": "False", "reason": "PushFailed"}],
        },
    }
    rows = [line.split() for line in output.snapshot_table([obj], wide=True).splitlines()]
    assert rows[0] == ["NAME", "PHASE", "REASON", "SOURCE", "SIZE", "AGE", "IMAGE"]
    assert rows[1][:5] == ["s1", "Failed", "PushFailed", "box", "12"]
    assert rows[1][6] == "reg/x@sha256:ab"
    pending = output.snapshot_table([{"metadata": {"name": "s2"}, "spec": {}}]).splitlines()
    assert pending[1].split()[:2] == ["s2", "Pending"]
