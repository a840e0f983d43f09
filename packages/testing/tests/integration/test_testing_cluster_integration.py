"""The session cluster is a real Kubernetes: auth, RBAC, scheduling onto kwok, GC, waits.

Runs against whichever provider the session uses (the local cluster by default).
"""

from __future__ import annotations

import json
import ssl
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, dynamic
from kubernetes.client.exceptions import ApiException

from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.controller_runner import ControllerRunner
from kube_agent_sandbox.testing.kubeconfig import read_server_and_ca
from kube_agent_sandbox.testing.waiting import ObjectRef, WaitTimeoutError

pytestmark = pytest.mark.integration


def _pod(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "main", "image": "busybox"}], **spec},
    }


def _owner_ref(owner: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
    }


def test_pod_is_scheduled_on_a_kwok_node_and_becomes_ready(
    cluster: ClusterAccess, namespace: str
) -> None:
    """The scheduler binds the pod to a kwok node; kwok makes it Running and Ready."""
    cluster.apply(_pod("ready", namespace))
    pod = cluster.wait_for_condition(ObjectRef("v1", "Pod", "ready", namespace), "Ready")
    node = client.CoreV1Api(cluster.api_client()).read_node(pod["spec"]["nodeName"])
    assert node.metadata.annotations.get("kwok.x-k8s.io/node") == "fake"
    assert pod["status"]["phase"] == "Running"
    assert pod["status"]["podIP"]


def test_unschedulable_pod_reports_podscheduled_false(
    cluster: ClusterAccess, namespace: str
) -> None:
    """Waiting on the boolean status also works for False."""
    cluster.apply(_pod("nowhere", namespace, nodeSelector={"no-such-label": "x"}))
    pod = cluster.wait_for_condition(
        ObjectRef("v1", "Pod", "nowhere", namespace), "PodScheduled", status="False"
    )
    assert "nodeName" not in pod["spec"]


def test_deleting_the_owner_garbage_collects_the_pod(
    cluster: ClusterAccess, namespace: str
) -> None:
    """kube-controller-manager's garbage collector deletes a pod whose owner is gone."""
    (owner,) = cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "owner", "namespace": namespace},
        }
    )
    pod = _pod("owned", namespace)
    pod["metadata"]["ownerReferences"] = [_owner_ref(owner)]
    cluster.apply(pod)
    cluster.wait_for_condition(pod, "Ready")
    cluster.kubectl("delete", "configmap", "owner", "-n", namespace, "--wait=false")
    cluster.wait_for_deletion(pod, timeout=90)


def test_custom_resource_owner_is_garbage_collected_too(
    cluster: ClusterAccess, agent_sandbox_crds: list[str], namespace: str
) -> None:
    """The GC knows our CRDs from the start (they are installed before it starts)."""
    (owner,) = cluster.apply(
        {
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": "SandboxTemplate",
            "metadata": {"name": "owner", "namespace": namespace},
            "spec": {"podTemplate": {"spec": {"containers": [{"name": "m", "image": "b"}]}}},
        }
    )
    pod = _pod("owned-by-cr", namespace)
    pod["metadata"]["ownerReferences"] = [_owner_ref(owner)]
    cluster.apply(pod)
    cluster.wait_for_condition(pod, "Ready")
    cluster.kubectl("delete", "sandboxtemplate", "owner", "-n", namespace, "--wait=false")
    cluster.wait_for_deletion(pod, timeout=90)


def test_wait_for_condition_times_out_with_the_last_seen_object(
    cluster: ClusterAccess, namespace: str
) -> None:
    """A condition that never appears ends in WaitTimeoutError carrying the object."""
    (cm,) = cluster.apply(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": namespace}}
    )
    with pytest.raises(WaitTimeoutError) as caught:
        cluster.wait_for_condition(cm, "Ready", timeout=1)
    assert caught.value.last_seen is not None
    assert caught.value.last_seen["metadata"]["uid"] == cm["metadata"]["uid"]


def test_wait_for_deletion_of_an_absent_object_returns(
    cluster: ClusterAccess, namespace: str
) -> None:
    """An object that does not exist counts as deleted."""
    cluster.wait_for_deletion(ObjectRef("v1", "ConfigMap", "never-created", namespace))


def test_admin_is_a_client_certificate_user_in_system_masters(cluster: ClusterAccess) -> None:
    """The admin kubeconfig authenticates by certificate; RBAC is on."""
    if cluster.provider != "local":
        pytest.skip("identity of the admin depends on the provider")
    review = json.loads(cluster.kubectl("auth", "whoami", "-o", "json").stdout)
    assert review["status"]["userInfo"]["username"] == "admin"
    assert "system:masters" in review["status"]["userInfo"]["groups"]


def test_anonymous_requests_are_forbidden(cluster: ClusterAccess) -> None:
    """TLS with our CA, no credentials: authorization denies the anonymous user."""
    server, ca = read_server_and_ca(cluster.kubeconfig)
    context = ssl.create_default_context(cadata=ca.decode() if ca else None)
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(f"{server}/api/v1/namespaces", context=context, timeout=10)
    assert caught.value.code in (401, 403)


def _client_for(kubeconfig: Path) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))


def test_identity_without_roles_is_forbidden(
    cluster: ClusterAccess, controller_runner: ControllerRunner, namespace: str
) -> None:
    """RBAC is enforced for runner identities."""
    identity = controller_runner.identity("nobody", namespace=namespace)
    with pytest.raises(ApiException) as caught:
        _client_for(identity.kubeconfig).list_namespaced_pod(namespace)
    assert caught.value.status == 403
    assert identity.username in str(caught.value.body)


def test_identity_gets_exactly_its_roles(
    cluster: ClusterAccess, controller_runner: ControllerRunner, namespace: str
) -> None:
    """A ClusterRole from manifests, bound to the identity: allowed verbs only."""
    role_name = f"{namespace}-pod-reader"
    rbac = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": role_name},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
    }
    identity = controller_runner.identity(
        "reader", namespace=namespace, cluster_roles=[role_name], rbac=rbac
    )
    api = _client_for(identity.kubeconfig)
    assert api.list_namespaced_pod(namespace).items == []
    with pytest.raises(ApiException) as caught:
        api.create_namespaced_config_map(namespace, {"metadata": {"name": "x"}, "data": {}})
    assert caught.value.status == 403


def test_runner_runs_an_async_controller_as_the_identity(
    cluster: ClusterAccess, controller_runner: ControllerRunner, namespace: str
) -> None:
    """The in-process runner hands the identity's kubeconfig to the coroutine."""
    identity = controller_runner.identity("ctl", namespace=namespace, cluster_roles=["view"])
    seen: list[str] = []
    done = threading.Event()

    async def controller(kubeconfig: Path) -> None:
        api = _client_for(kubeconfig)
        seen.extend(p.metadata.name for p in api.list_namespaced_pod(namespace).items)
        seen.append(str(kubeconfig))
        done.set()
        import asyncio

        await asyncio.Event().wait()  # run until cancelled, like a controller

    cluster.apply(_pod("seen-by-controller", namespace))
    running = controller_runner.start(controller, identity=identity)
    assert done.wait(60)
    assert seen == ["seen-by-controller", str(identity.kubeconfig)]
    assert running.alive()
    running.stop()
    assert not running.alive()


def test_runner_reraises_the_controller_error(
    cluster: ClusterAccess, controller_runner: ControllerRunner, namespace: str
) -> None:
    """A crashing controller fails the test instead of dying silently."""
    identity = controller_runner.identity("crash", namespace=namespace)

    async def controller(kubeconfig: Path) -> None:
        raise RuntimeError(f"boom with {kubeconfig.name}")

    running = controller_runner.start(controller, identity=identity)
    with pytest.raises(RuntimeError, match="boom with"):
        running.stop()


def test_runner_runs_a_command_with_the_identity_kubeconfig(
    cluster: ClusterAccess, controller_runner: ControllerRunner, namespace: str
) -> None:
    """Command mode: KUBECONFIG and {kubeconfig} point at the identity."""
    identity = controller_runner.identity("cmd", namespace=namespace)
    kubectl = cluster.bin_dir / "kubectl" if cluster.bin_dir else Path("kubectl")
    process = controller_runner.start_command(
        [str(kubectl), "--kubeconfig={kubeconfig}", "auth", "whoami", "-o", "json"],
        identity=identity,
        name="whoami",
    )
    assert process.wait(60) == 0
    review = json.loads(process.log_path.read_text())
    assert review["status"]["userInfo"]["username"] == identity.username


def test_apply_returns_server_objects_and_rejects_invalid(
    cluster: ClusterAccess, namespace: str
) -> None:
    """apply() goes through the apiserver: defaults come back, invalid objects fail."""
    (cm,) = cluster.apply(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}},
        namespace=namespace,
    )
    assert cm["metadata"]["namespace"] == namespace
    assert cm["metadata"]["uid"]
    from kube_agent_sandbox.testing.access import KubectlError

    with pytest.raises(KubectlError, match="Invalid"):
        cluster.apply(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Not_Valid"}},
            namespace=namespace,
        )
    dyn = dynamic.DynamicClient(cluster.api_client())
    stored = dyn.resources.get(api_version="v1", kind="ConfigMap").get(
        name="a", namespace=namespace
    )
    assert stored.data.k == "v"
