"""Informer resilience on a real control plane: etcd compaction (410 Gone) and restarts.

These tests run their own etcd + kube-apiserver (no controller-manager needed) so they can make
the API server compact history every second and restart it without disturbing the session
cluster other tests share. Secrets bypass the watch cache (``--watch-cache-sizes=secrets#0``):
the cache would otherwise serve old resourceVersions from memory for minutes after compaction.
ConfigMaps keep the watch cache, as in production, for the restart test.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest
from informer_events import record_events

from kube_agent_sandbox.controller.runtime import (
    ApiClient,
    ApiError,
    Informer,
    Obj,
    Resource,
    RuntimeMetrics,
    load_kubeconfig,
)
from kube_agent_sandbox.testing.cluster import LocalCluster
from kube_agent_sandbox.testing.clusteroptions import LocalClusterOptions
from kube_agent_sandbox.testing.plugin import unavailable
from kube_agent_sandbox.testing.prerequisites import PrerequisiteError
from kube_agent_sandbox.testing.waiting import eventually

pytestmark = pytest.mark.integration

CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
SECRETS = Resource("", "v1", "secrets", "Secret")
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)


@pytest.fixture(scope="module")
def control_plane() -> Iterator[LocalCluster]:
    cluster = LocalCluster(
        LocalClusterOptions(
            control_plane_only=True,
            apiserver_args=["--etcd-compaction-interval=1s", "--watch-cache-sizes=secrets#0"],
        )
    )
    try:
        cluster.start()
    except PrerequisiteError as err:
        unavailable(str(err))  # skips locally, fails under CI=true
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
async def client(control_plane: LocalCluster) -> AsyncIterator[ApiClient]:
    assert control_plane.access is not None
    api = ApiClient(load_kubeconfig(str(control_plane.access.kubeconfig)), metrics=RuntimeMetrics())
    try:
        yield api
    finally:
        await api.close()


@pytest.fixture
async def ns(client: ApiClient, request: pytest.FixtureRequest) -> str:
    name = "rt-" + str(request.node.name).replace("_", "-")[:40].strip("-").lower()
    await client.create(NAMESPACES, "", {"metadata": {"name": name}})
    return name


def cm(name: str) -> Obj:
    return {"metadata": {"name": name, "labels": {"t": "1"}}, "data": {"v": "1"}}


def secret(name: str) -> Obj:
    return {"metadata": {"name": name, "labels": {"t": "1"}}, "stringData": {"v": "1"}}


async def wait_compacted(client: ApiClient, ns: str, rv: str) -> None:
    """Wait until a watch from ``rv`` is refused with 410 (history compacted)."""
    async with asyncio.timeout(60):
        while True:
            await client.create(SECRETS, ns, {"metadata": {"generateName": "tick-"}})
            try:
                async for _ in client.watch(SECRETS, ns, resource_version=rv, timeout_seconds=1):
                    pass
            except ApiError as exc:
                if exc.gone:
                    return
                raise
            await asyncio.sleep(0.5)


async def test_watch_from_compacted_resource_version_is_gone(client: ApiClient, ns: str) -> None:
    first = await client.create(SECRETS, ns, secret("first"))
    await wait_compacted(client, ns, first["metadata"]["resourceVersion"])
    with pytest.raises(ApiError) as info:
        async for _ in client.watch(
            SECRETS, ns, resource_version=first["metadata"]["resourceVersion"]
        ):
            pass
    assert info.value.status == 410


async def test_informer_relists_after_410_and_delivers_missed_deletions(
    client: ApiClient, ns: str
) -> None:
    for name in ("keep", "vanish", "change"):
        await client.create(SECRETS, ns, secret(name))
    inf = Informer(client, SECRETS, namespace=ns, label_selector="t=1", retry_backoff=0.05)
    events = record_events(inf)
    inf.start()
    async with asyncio.timeout(30):
        await inf.wait_for_sync()
    await inf.stop()  # disconnected: the cache keeps its objects and resourceVersion
    old_rv = inf.resource_version
    assert old_rv is not None
    events.clear()
    await client.delete(SECRETS, ns, "vanish")
    await client.patch(SECRETS, ns, "change", {"stringData": {"v": "changed"}})
    await client.create(SECRETS, ns, secret("born"))
    await wait_compacted(client, ns, old_rv)

    inf.start()  # resumes from old_rv, gets 410, relists
    try:
        await eventually(lambda: inf.relists == 2, within=60)
        assert sorted(events) == [("add", "born"), ("delete", "vanish"), ("update", "change")]
        assert inf.get(ns, "vanish") is None
        assert inf.get(ns, "change")["data"] == {"v": "Y2hhbmdlZA=="}  # type: ignore[index]
        assert sorted(o["metadata"]["name"] for o in inf.list()) == ["born", "change", "keep"]
    finally:
        await inf.stop()


async def test_apiserver_restart_loses_no_object(
    client: ApiClient, ns: str, control_plane: LocalCluster
) -> None:
    await asyncio.gather(*(client.create(CONFIGMAPS, ns, cm(f"pre{i}")) for i in range(50)))
    inf = Informer(client, CONFIGMAPS, namespace=ns, label_selector="t=1", retry_backoff=0.1)
    inf.start()
    try:
        async with asyncio.timeout(30):
            await inf.wait_for_sync()
        # changes right before the restart
        await client.delete(CONFIGMAPS, ns, "pre0")
        await client.create(CONFIGMAPS, ns, cm("just-before"))
        # Same port, certificates and flags; returns once /readyz answers. Called on this
        # (the main) thread on purpose: the harness ties each child's life to the thread that
        # started it, and an asyncio.to_thread worker ends with the test's event loop.
        control_plane.restart("kube-apiserver")

        async def ready() -> None:
            async with asyncio.timeout(60):
                while True:
                    try:
                        await client.list(CONFIGMAPS, ns, limit=1)
                        return
                    except (ApiError, OSError):
                        await asyncio.sleep(0.2)

        await ready()
        # changes right after the restart
        await client.delete(CONFIGMAPS, ns, "pre1")
        await client.patch(CONFIGMAPS, ns, "pre2", {"data": {"v": "after"}})
        await client.create(CONFIGMAPS, ns, cm("just-after"))

        async def server_names() -> set[str]:
            page = await client.list(CONFIGMAPS, ns, label_selector="t=1")
            return {o["metadata"]["name"] for o in page["items"]}

        expected = await server_names()
        assert "pre0" not in expected
        assert "just-after" in expected
        await eventually(lambda: {o["metadata"]["name"] for o in inf.list()} == expected, within=60)
        await eventually(
            lambda: (inf.get(ns, "pre2") or {}).get("data") == {"v": "after"}, within=60
        )
    finally:
        await inf.stop()
