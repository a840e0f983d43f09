"""NamespaceApi: get-or-None, and the bounds and error message of its polling loop."""

from __future__ import annotations

from typing import ClassVar, cast

import pytest

from kube_agent_sandbox.controller.runtime import ApiClient, ApiError, FakeApi, Resource
from kube_agent_sandbox.testing.nsapi import EVENTS, NamespaceApi

CONFIG_MAPS = Resource(group="", version="v1", plural="configmaps", kind="ConfigMap")


class FastApi(NamespaceApi):
    poll: ClassVar[float] = 0.001
    wait: ClassVar[float] = 0.005  # five probes


def api_on(fake: FakeApi, namespace: str = "ns") -> FastApi:
    return FastApi(cast(ApiClient, fake), namespace)


async def test_get_returns_none_on_404_and_the_object_otherwise() -> None:
    api = api_on(FakeApi())
    assert await api.get(CONFIG_MAPS, "absent") is None
    created = await api.create(CONFIG_MAPS, {"metadata": {"name": "cm"}, "data": {"k": "v"}})
    assert created["apiVersion"] == "v1"
    assert created["kind"] == "ConfigMap"
    found = await api.get(CONFIG_MAPS, "cm")
    assert found is not None
    assert found["data"] == {"k": "v"}
    assert found["metadata"]["namespace"] == "ns"


async def test_get_raises_other_errors() -> None:
    fake = FakeApi()
    fake.fail("get", "configmaps", ApiError(403, "Forbidden", "no"))
    with pytest.raises(ApiError) as caught:
        await api_on(fake).get(CONFIG_MAPS, "cm")
    assert caught.value.status == 403


async def test_delete_says_whether_the_object_existed() -> None:
    api = api_on(FakeApi())
    await api.create(CONFIG_MAPS, {"metadata": {"name": "cm"}})
    assert await api.delete(CONFIG_MAPS, "cm") is True
    assert await api.get(CONFIG_MAPS, "cm") is None
    assert await api.delete(CONFIG_MAPS, "cm") is False


async def test_until_returns_the_first_truthy_probe_result() -> None:
    seen: list[int] = []

    async def probe() -> int | None:
        seen.append(len(seen))
        return len(seen) if len(seen) == 3 else None

    assert await api_on(FakeApi()).until(probe, "three probes") == 3
    assert seen == [0, 1, 2]


async def test_until_is_bounded_and_names_the_last_value_seen() -> None:
    calls: list[int] = []

    async def probe() -> list[str]:
        calls.append(1)
        return []  # falsy: never done

    with pytest.raises(AssertionError) as caught:
        await api_on(FakeApi()).until(probe, "something that never happens")
    assert str(caught.value) == "gave up waiting for something that never happens; last seen: []"
    assert len(calls) == 5


async def test_events_regarding_selects_by_kind_and_name() -> None:
    api = api_on(FakeApi())
    for index, (kind, name) in enumerate(
        [("Sandbox", "a"), ("SandboxClaim", "a"), ("Sandbox", "b")]
    ):
        await api.create(
            EVENTS, {"metadata": {"name": f"e{index}"}, "regarding": {"kind": kind, "name": name}}
        )
    found = await api.events_regarding("Sandbox", "a")
    assert [e["metadata"]["name"] for e in found] == ["e0"]
