# Generated from _async/test_sdk_lifecycle.py by scripts/unasync_sdk.py: do not edit.
"""SDK lifecycle calls against a real kube-apiserver with the Sandbox controller (kwok nodes).

Hand-written for the async client; ``_sync/test_sdk_lifecycle.py`` is generated from this file
by ``scripts/unasync_sdk.py``, so the sync client runs the same scenarios.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from kube_agent_sandbox.sdk import (
    ApiRequestError,
    ClusterConfig,
    ConflictError,
    ExecFailedError,
    NotFoundError,
    PermissionDeniedError,
    SandboxClient,
    SandboxTimeoutError,
    get_metrics,
)
from kube_agent_sandbox.sdk.constants import SANDBOXES

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("sandbox_controller")]

WAIT = 90.0  # seconds: a generous bound on a loaded machine, never asserted on


def manifest(name: str, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {"name": name},
        "spec": {
            "podTemplate": {
                "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}
            },
            **spec,
        },
    }
    return body


def ready_status(obj: dict[str, Any]) -> str:
    for cond in obj["status"]["conditions"]:
        if cond["type"] == "Ready":
            return str(cond["status"])
    return ""


def test_create_wait_get_list_watch_delete(sdk_config: ClusterConfig, namespace: str) -> None:
    with SandboxClient(sdk_config) as client:
        box = client.create_sandbox(manifest("life"), timeout=WAIT)
        assert box.name == "life"
        assert box.namespace == namespace
        obj = client.get("life")
        assert ready_status(obj) == "True"
        assert obj["metadata"]["labels"]["agents.x-k8s.io/created-by"] == "python-client"
        state = box.status()
        assert state.ready
        assert state.reason == "DependenciesReady"
        names = [o["metadata"]["name"] for o in client.list_sandboxes()]
        assert names == ["life"]
        selected = client.list_sandboxes(label_selector="agents.x-k8s.io/created-by=nobody")
        assert selected == []
        seen = []
        for kind, event in client.watch(timeout=2):
            seen.append((kind, event["metadata"]["name"]))
            break
        assert seen == [("ADDED", "life")]
        client.delete("life", wait=True, timeout=WAIT)
        with pytest.raises(NotFoundError):
            client.get("life")
        client.delete("life", missing_ok=True)
        with pytest.raises(NotFoundError):
            client.delete("life")


def test_create_from_yaml_with_generated_name(sdk_config: ClusterConfig) -> None:
    text = (
        "apiVersion: agents.x-k8s.io/v1beta1\nkind: Sandbox\nspec:\n  podTemplate:\n"
        "    spec:\n      containers: [{name: main, image: registry.k8s.io/pause:3.10}]\n"
    )
    with SandboxClient(sdk_config) as client:
        box = client.create_sandbox(text, labels={"team": "sdk"}, timeout=WAIT)
        assert box.name.startswith("sandbox-")
        obj = client.get(box.name)
        assert obj["metadata"]["labels"]["team"] == "sdk"


def test_suspend_resume_and_latency_metrics(sdk_config: ClusterConfig) -> None:
    with SandboxClient(sdk_config) as client:
        client.create_sandbox(manifest("sleepy"), timeout=WAIT)
        before = get_metrics()
        suspended = client.suspend("sleepy", timeout=WAIT)
        assert suspended["spec"]["operatingMode"] == "Suspended"
        assert any(
            c["type"] == "Suspended" and c["status"] == "True"
            for c in suspended["status"]["conditions"]
        )
        again = client.suspend("sleepy", timeout=WAIT)  # a no-op: nothing recorded
        assert again["spec"]["operatingMode"] == "Suspended"
        resumed = client.resume("sleepy", timeout=WAIT)
        assert ready_status(resumed) == "True"
        after = get_metrics()
        assert _count(after, "sandbox_client_suspend_latency_ms") == (
            _count(before, "sandbox_client_suspend_latency_ms") + 1
        )
        assert _count(after, "sandbox_client_resume_latency_ms") == (
            _count(before, "sandbox_client_resume_latency_ms") + 1
        )


def _count(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(f'{name}_count{{status="success"}}'):
            return float(line.split()[-1])
    return 0.0


def test_shutdown_time_set_extend_clear(sdk_config: ClusterConfig) -> None:
    with SandboxClient(sdk_config) as client:
        client.create_sandbox(manifest("timed"), wait=False)
        when = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
        obj = client.set_shutdown_time("timed", when, policy="Delete")
        assert obj["spec"]["shutdownTime"] == when.strftime("%Y-%m-%dT%H:%M:%SZ")
        assert obj["spec"]["shutdownPolicy"] == "Delete"
        extended = client.extend_shutdown("timed", 600)
        new = datetime.datetime.fromisoformat(
            extended["spec"]["shutdownTime"].replace("Z", "+00:00")
        )
        assert new - when.replace(microsecond=0) == datetime.timedelta(seconds=600)
        cleared = client.set_shutdown_time("timed", None)
        assert "shutdownTime" not in cleared["spec"]


def test_wait_ready_times_out_with_the_last_reason(sdk_config: ClusterConfig) -> None:
    with SandboxClient(sdk_config) as client:
        spec = manifest("stuck")
        spec["spec"]["podTemplate"]["spec"]["nodeSelector"] = {"no-such-node": "true"}
        client.create_sandbox(spec, wait=False)
        with pytest.raises(SandboxTimeoutError, match="not Ready after 3s") as info:
            client.wait_ready("stuck", timeout=3)
        assert isinstance(info.value, TimeoutError)


def test_context_manager_deletes_what_it_created(sdk_config: ClusterConfig) -> None:
    with SandboxClient(sdk_config) as client:
        client.create_sandbox(manifest("temp-a"), wait=False)
        client.create_sandbox(manifest("temp-b"), wait=False)
    with SandboxClient(sdk_config) as other:
        remaining = [
            o["metadata"]["name"]
            for o in other.list_sandboxes()
            if not o["metadata"].get("deletionTimestamp")
        ]
        assert remaining == []


def test_errors_are_typed(sdk_config: ClusterConfig) -> None:
    with SandboxClient(sdk_config) as client:
        with pytest.raises(NotFoundError):
            client.get("missing")
        with pytest.raises(NotFoundError):
            client.wait_ready("missing", timeout=1)
        client.create_sandbox(manifest("dup"), wait=False)
        with pytest.raises(ConflictError):
            client.create_sandbox(manifest("dup"), wait=False)
        with pytest.raises(ApiRequestError) as invalid:
            client._request(  # a body the API server refuses (CEL/schema)
                "POST",
                SANDBOXES,
                client.namespace,
                verb="create",
                body={
                    "apiVersion": "agents.x-k8s.io/v1beta1",
                    "kind": "Sandbox",
                    "metadata": {"name": "bad"},
                    "spec": {},
                },
            )
        assert invalid.value.status_code == 422
        with pytest.raises(ValueError, match="podTemplate"):
            client.create_sandbox({"spec": {}})


def test_permission_denied_names_verb_and_resource(
    unprivileged_config: ClusterConfig,
) -> None:
    with SandboxClient(unprivileged_config) as client:
        with pytest.raises(PermissionDeniedError) as info:
            client.create_sandbox(manifest("nope"), wait=False)
        assert info.value.verb == "create"
        assert info.value.resource == "sandboxes.agents.x-k8s.io"
        with pytest.raises(PermissionDeniedError) as listed:
            client.list_sandboxes()
        assert listed.value.verb == "list"


def test_claim_objects_carry_the_wire_contract(sdk_config: ClusterConfig) -> None:
    with SandboxClient(sdk_config) as client:
        box = client.claim_sandbox(
            "pool-a",
            wait=False,
            env={"A": "1"},
            pod_labels={"team": "sdk"},
            pod_annotations={"note": "hi"},
            shutdown_after_seconds=3600,
        )
        assert box.claim_name is not None
        claim = client.get_claim(box.claim_name)
        meta = claim["metadata"]
        assert meta["labels"]["agents.x-k8s.io/created-by"] == "python-client"
        requested = meta["annotations"]["agents.x-k8s.io/client-first-requested-at"]
        assert datetime.datetime.fromisoformat(requested).tzinfo is not None
        assert claim["spec"]["warmPoolRef"] == {"name": "pool-a"}
        assert claim["spec"]["env"] == [{"name": "A", "value": "1"}]
        assert claim["spec"]["additionalPodMetadata"] == {
            "labels": {"team": "sdk"},
            "annotations": {"note": "hi"},
        }
        assert claim["spec"]["lifecycle"]["shutdownPolicy"] == "Delete"
        names = [c["metadata"]["name"] for c in client.list_claims()]
        assert names == [box.claim_name]
        box.terminate(wait=True, timeout=WAIT)
        with pytest.raises(NotFoundError):
            client.get_claim(box.claim_name)
        box.terminate()  # idempotent


def test_exec_without_a_container_runtime_is_a_typed_error(
    sdk_config: ClusterConfig,
) -> None:
    # kwok pods have no containers: the API server's exec upgrade fails, and the SDK reports it
    # as one of its own errors (the real exec path is covered by the e2e suite).
    with SandboxClient(sdk_config) as client:
        client.create_sandbox(manifest("nocontainer"), timeout=WAIT)
        with pytest.raises(ExecFailedError, match="exec failed"):
            client.exec("nocontainer", ["true"], timeout=20)
        with pytest.raises(NotFoundError):
            client.exec("missing", ["true"], timeout=20)
