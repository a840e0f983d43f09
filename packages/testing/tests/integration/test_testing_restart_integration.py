"""LocalCluster.restart: a restarted component keeps its data, address, certificates and flags.

Runs its own control plane (etcd + kube-apiserver), so restarting it disturbs no other test.
Its extra apiserver flag also checks, on the real command line, that ``apiserver_args`` merge
by name with the harness's flags.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from kube_agent_sandbox.testing.cluster import LocalCluster
from kube_agent_sandbox.testing.clusteroptions import LocalClusterOptions
from kube_agent_sandbox.testing.flags import flag_name
from kube_agent_sandbox.testing.plugin import unavailable
from kube_agent_sandbox.testing.prerequisites import PrerequisiteError

pytestmark = pytest.mark.integration

OVERRIDE = "--max-requests-inflight=900"  # the harness passes --max-requests-inflight=1000


@pytest.fixture(scope="module")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(
        LocalClusterOptions(
            control_plane_only=True,
            workdir=tmp_path_factory.mktemp("restart-cluster"),
            apiserver_args=[OVERRIDE],
        )
    )
    try:
        cluster.start()
    except PrerequisiteError as err:
        unavailable(str(err))
    try:
        yield cluster
    finally:
        cluster.stop()


def _process(cluster: LocalCluster, name: str) -> tuple[int, list[str]]:
    [process] = [p for p in cluster.processes() if p.name == name]
    raw = Path(f"/proc/{process.pid}/cmdline").read_bytes()
    return process.pid, [a.decode() for a in raw.split(b"\0") if a]


def _core(kubeconfig: Path) -> client.CoreV1Api:
    api = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
    return client.CoreV1Api(api)


def _namespace(name: str) -> client.V1Namespace:
    return client.V1Namespace(metadata=client.V1ObjectMeta(name=name))


def _configmap(name: str) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data={"k": name})


def test_apiserver_flags_are_merged_by_name(control_plane: LocalCluster) -> None:
    _, argv = _process(control_plane, "kube-apiserver")
    assert Path(argv[0]).name == "kube-apiserver"
    flags = argv[1:]
    names = [flag_name(f) for f in flags]
    assert len(names) == len(set(names)), names
    assert OVERRIDE in flags
    assert "--max-requests-inflight=1000" not in flags


def test_apiserver_restart_keeps_objects_and_the_kubeconfig(
    control_plane: LocalCluster, tmp_path: Path
) -> None:
    access = control_plane.access
    assert access is not None
    kubeconfig_text = access.kubeconfig.read_text()
    user_kubeconfig = control_plane.kubeconfig_for("restart-user", path=tmp_path / "user.yaml")
    core = _core(access.kubeconfig)  # made before the restart, used after it
    core.create_namespace(_namespace("restart-apiserver"))
    core.create_namespaced_config_map("restart-apiserver", _configmap("before"))
    old_pid, old_argv = _process(control_plane, "kube-apiserver")
    server = control_plane.server

    control_plane.restart("kube-apiserver")

    new_pid, new_argv = _process(control_plane, "kube-apiserver")
    assert new_pid != old_pid
    assert not Path(f"/proc/{old_pid}").exists()
    assert new_argv == old_argv  # same port, certificates, etcd and flags
    assert control_plane.server == server
    assert access.kubeconfig.read_text() == kubeconfig_text
    # Objects survive; the client made before the restart reads and writes.
    assert core.read_namespaced_config_map("before", "restart-apiserver").data == {"k": "before"}
    core.create_namespaced_config_map("restart-apiserver", _configmap("after"))
    # The same kubeconfig file works for a new client and for kubectl.
    fresh = _core(access.kubeconfig).list_namespaced_config_map("restart-apiserver")
    assert {c.metadata.name for c in fresh.items if c.metadata} == {"before", "after"}
    out = access.kubectl("-n", "restart-apiserver", "get", "configmap", "before", "-o", "name")
    assert out.stdout.strip() == "configmap/before"
    # A client certificate issued before the restart still authenticates.
    user = access.kubectl(
        "--kubeconfig", str(user_kubeconfig), "auth", "whoami",
        "-o", "jsonpath={.status.userInfo.username}",
    )  # fmt: skip
    assert user.stdout.strip() == "restart-user"
    assert access.log_files["kube-apiserver"] == control_plane.processes()[1].log_path


def test_etcd_restart_keeps_objects(control_plane: LocalCluster) -> None:
    access = control_plane.access
    assert access is not None
    core = _core(access.kubeconfig)
    core.create_namespace(_namespace("restart-etcd"))
    core.create_namespaced_config_map("restart-etcd", _configmap("before"))
    old_pid, old_argv = _process(control_plane, "etcd")
    apiserver_pid, _ = _process(control_plane, "kube-apiserver")

    control_plane.restart("etcd")

    new_pid, new_argv = _process(control_plane, "etcd")
    assert new_pid != old_pid
    assert new_argv == old_argv
    assert _process(control_plane, "kube-apiserver")[0] == apiserver_pid  # not restarted
    assert [p.name for p in control_plane.processes()] == ["etcd", "kube-apiserver"]
    assert core.read_namespaced_config_map("before", "restart-etcd").data == {"k": "before"}
    core.create_namespaced_config_map("restart-etcd", _configmap("after"))
    assert core.read_namespaced_config_map("after", "restart-etcd").data == {"k": "after"}


@pytest.mark.parametrize("component", ["kwok", "kube-scheduler", "nope", ""])
def test_restart_refuses_components_it_cannot_restart(
    control_plane: LocalCluster, component: str
) -> None:
    before = control_plane.pids()
    with pytest.raises(
        ValueError, match="restartable components of this cluster: etcd, kube-apiserver"
    ):
        control_plane.restart(component)
    assert control_plane.pids() == before
