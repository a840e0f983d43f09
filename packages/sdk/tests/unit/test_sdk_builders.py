"""Request building: Sandbox and SandboxClaim bodies, wire-contract labels and annotations."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from kube_agent_sandbox.api import Sandbox
from kube_agent_sandbox.sdk import builders

NOW = datetime.datetime(2026, 8, 5, 21, 16, 33, 123456, tzinfo=datetime.UTC)
POD_TEMPLATE = {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}
MANIFEST = """
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata:
  name: from-yaml
  labels: {team: a}
spec:
  podTemplate:
    spec:
      containers: [{name: main, image: busybox}]
"""


def test_sandbox_from_dict_gets_created_by_and_generate_name() -> None:
    body = builders.sandbox_body({"spec": {"podTemplate": POD_TEMPLATE}})
    assert body["apiVersion"] == "agents.x-k8s.io/v1beta1"
    assert body["kind"] == "Sandbox"
    assert body["metadata"]["generateName"] == "sandbox-"
    assert body["metadata"]["labels"] == {"agents.x-k8s.io/created-by": "python-client"}


def test_sandbox_from_model_yaml_text_and_path_agree(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(MANIFEST)
    from_text = builders.sandbox_body(MANIFEST)
    from_path = builders.sandbox_body(path)
    model = Sandbox.model_validate(from_text)
    from_model = builders.sandbox_body(model)
    assert from_text == from_path == from_model
    assert from_text["metadata"]["name"] == "from-yaml"
    assert from_text["metadata"]["labels"]["team"] == "a"


def test_sandbox_overrides_name_namespace_labels_and_expiry() -> None:
    body = builders.sandbox_body(
        MANIFEST,
        name="other",
        namespace="ns1",
        labels={"x": "y"},
        shutdown_after_seconds=60,
        now=NOW,
    )
    assert body["metadata"]["name"] == "other"
    assert body["metadata"]["namespace"] == "ns1"
    assert body["metadata"]["labels"] == {
        "team": "a",
        "x": "y",
        "agents.x-k8s.io/created-by": "python-client",
    }
    assert body["spec"]["shutdownTime"] == "2026-08-05T21:17:33Z"


def test_sandbox_keeps_a_callers_created_by() -> None:
    body = builders.sandbox_body(
        {
            "metadata": {"name": "a", "labels": {"agents.x-k8s.io/created-by": "me"}},
            "spec": {"podTemplate": POD_TEMPLATE},
        }
    )
    assert body["metadata"]["labels"]["agents.x-k8s.io/created-by"] == "me"


@pytest.mark.parametrize(
    ("source", "match"),
    [
        ({"spec": {}}, "podTemplate"),
        ({"kind": "Pod", "spec": {"podTemplate": POD_TEMPLATE}}, "expected agents.x-k8s.io"),
        ("a: [", "not a YAML manifest"),
        ("---\na: 1\n---\nb: 2\n", "exactly one object"),
        ({"spec": {"podTemplate": POD_TEMPLATE, "operatingMode": "Paused"}}, "operatingMode"),
    ],
)
def test_bad_sandbox_sources_are_clear_value_errors(source: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        builders.sandbox_body(source)  # type: ignore[arg-type]


def test_bad_name_and_type_rejected() -> None:
    with pytest.raises(ValueError, match="invalid sandbox name"):
        builders.sandbox_body(MANIFEST, name="Not_Valid")
    with pytest.raises(TypeError):
        builders.sandbox_body(42)  # type: ignore[arg-type]


def test_claim_body_wire_contract() -> None:
    body = builders.claim_body("pool-a", name="c1", namespace="ns", now=NOW)
    assert body == {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxClaim",
        "metadata": {
            "name": "c1",
            "namespace": "ns",
            "labels": {"agents.x-k8s.io/created-by": "python-client"},
            "annotations": {
                "agents.x-k8s.io/client-first-requested-at": "2026-08-05T21:16:33.123456+00:00"
            },
        },
        "spec": {"warmPoolRef": {"name": "pool-a"}},
    }


def test_claim_body_keeps_a_callers_request_time_and_forces_created_by() -> None:
    body = builders.claim_body(
        "p",
        labels={"agents.x-k8s.io/created-by": "someone", "a": "b"},
        annotations={"agents.x-k8s.io/client-first-requested-at": "2020-01-01T00:00:00Z"},
    )
    assert body["metadata"]["labels"] == {"a": "b", "agents.x-k8s.io/created-by": "python-client"}
    assert body["metadata"]["annotations"] == {
        "agents.x-k8s.io/client-first-requested-at": "2020-01-01T00:00:00Z"
    }
    assert body["metadata"]["name"].startswith("sandbox-claim-")
    assert len(body["metadata"]["name"]) == len("sandbox-claim-") + 8


def test_claim_body_options() -> None:
    body = builders.claim_body(
        "p",
        env={"A": "1"},
        pod_labels={"l": "v"},
        pod_annotations={"note": "free text"},
        shutdown_after_seconds=3600,
        ttl_seconds_after_finished=5,
        volume_claim_templates=[
            {"metadata": {"name": "ws"}, "spec": {"accessModes": ["ReadWriteOnce"]}}
        ],
        now=NOW,
    )
    spec = body["spec"]
    assert spec["env"] == [{"name": "A", "value": "1"}]
    assert spec["additionalPodMetadata"] == {
        "labels": {"l": "v"},
        "annotations": {"note": "free text"},
    }
    assert spec["lifecycle"] == {
        "shutdownTime": "2026-08-05T22:16:33Z",
        "shutdownPolicy": "Delete",
        "ttlSecondsAfterFinished": 5,
    }
    assert spec["volumeClaimTemplates"][0]["metadata"]["name"] == "ws"
    listed = builders.claim_body("p", env=[{"name": "B", "value": "2", "containerName": "main"}])
    assert listed["spec"]["env"] == [{"name": "B", "value": "2", "containerName": "main"}]
    timed = builders.claim_body("p", shutdown_time=NOW, shutdown_policy="Retain")
    assert timed["spec"]["lifecycle"] == {
        "shutdownTime": "2026-08-05T21:16:33Z",
        "shutdownPolicy": "Retain",
    }


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"warm_pool": ""}, "non-empty"),
        ({"warm_pool": "Bad_Pool"}, "warm pool name"),
        ({"warm_pool": "p", "labels": {"bad key!": "v"}}, "invalid label key"),
        ({"warm_pool": "p", "pod_labels": {"k": "x" * 64}}, "invalid pod label value"),
        ({"warm_pool": "p", "shutdown_after_seconds": 0}, "positive int"),
        ({"warm_pool": "p", "shutdown_after_seconds": True}, "positive int"),
        ({"warm_pool": "p", "shutdown_after_seconds": 1.5}, "positive int"),
        ({"warm_pool": "p", "shutdown_policy": "Never"}, "shutdown_policy"),
        ({"warm_pool": "p", "ttl_seconds_after_finished": -1}, "non-negative"),
        (
            {"warm_pool": "p", "shutdown_after_seconds": 5, "shutdown_time": NOW},
            "not both",
        ),
        ({"warm_pool": "p", "env": [{"name": "A"}]}, "invalid SandboxClaim"),
        ({"warm_pool": "p", "namespace": "Bad"}, "invalid namespace"),
    ],
)
def test_bad_claim_options_are_value_errors(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        builders.claim_body(**kwargs)  # type: ignore[arg-type]


def test_patches_and_shutdown_extension() -> None:
    assert builders.operating_mode_patch("Suspended") == {"spec": {"operatingMode": "Suspended"}}
    with pytest.raises(ValueError, match="Running or Suspended"):
        builders.operating_mode_patch("Paused")
    assert builders.shutdown_patch(None) == {"spec": {"shutdownTime": None}}
    assert builders.shutdown_patch(NOW, policy="Delete") == {
        "spec": {"shutdownTime": "2026-08-05T21:16:33Z", "shutdownPolicy": "Delete"}
    }
    with pytest.raises(ValueError, match="timezone-aware"):
        builders.shutdown_patch(datetime.datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="Delete or Retain"):
        builders.shutdown_patch(NOW, policy="DeleteForeground")
    later = {"spec": {"shutdownTime": "2026-08-05T22:00:00Z"}}
    assert builders.extended_shutdown_time(later, 60, now=NOW) == datetime.datetime(
        2026, 8, 5, 22, 1, tzinfo=datetime.UTC
    )
    past = {"spec": {"shutdownTime": "2020-01-01T00:00:00Z"}}
    assert builders.extended_shutdown_time(past, 60, now=NOW) == NOW + datetime.timedelta(
        seconds=60
    )
    assert builders.extended_shutdown_time({}, 1, now=NOW) == NOW + datetime.timedelta(seconds=1)
    with pytest.raises(ValueError, match="positive"):
        builders.extended_shutdown_time({}, 0, now=NOW)
