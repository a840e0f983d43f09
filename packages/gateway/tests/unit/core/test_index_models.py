"""SandboxIndex lookups and the request/response models, on plain cached objects."""

from __future__ import annotations

import asyncio
import ipaddress
import urllib.parse

import pytest

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOX_CLAIMS, SANDBOXES
from kube_agent_sandbox.api.rest import PODS
from kube_agent_sandbox.controller.runtime import FakeApi, Obj
from kube_agent_sandbox.gateway.controlplane import models
from kube_agent_sandbox.gateway.controlplane.query import decode_token, encode_token
from kube_agent_sandbox.gateway.index import (
    LOOPBACK_PER_POD,
    NAME_INDEX,
    SandboxIndex,
    loopback_address,
    name_index,
)


def _claim(name: str, ns: str, *, bound: str | None = None, ready: bool = False) -> Obj:
    claim: Obj = {"metadata": {"name": name, "namespace": ns}, "spec": {}}
    status: Obj = {}
    if bound:
        status["sandbox"] = {"name": bound, "podIPs": ["10.1.1.1"]}
    if ready:
        status["conditions"] = [{"type": "Ready", "status": "True"}]
    claim["status"] = status
    return claim


def _index(api: FakeApi, **kwargs: object) -> SandboxIndex:
    claims = api.reader(SANDBOX_CLAIMS, indexes={NAME_INDEX: name_index})
    return SandboxIndex(claims, api.reader(SANDBOXES), api.reader(PODS), **kwargs)  # type: ignore[arg-type]


def test_lookup_joins_claim_sandbox_and_pod() -> None:
    api = FakeApi()
    api.add(SANDBOX_CLAIMS, _claim("s1", "a", bound="pool-x", ready=True))
    api.add(
        SANDBOXES,
        {
            "metadata": {
                "name": "pool-x",
                "namespace": "a",
                "annotations": {c.ANNOTATION_POD_NAME: "pod-x"},
            }
        },
    )
    api.add(
        PODS, {"metadata": {"name": "pod-x", "namespace": "a"}, "status": {"podIP": "10.2.2.2"}}
    )
    api.add(SANDBOX_CLAIMS, _claim("s2", "a"))
    index = _index(api)
    record = index.lookup("s1")
    assert record is not None
    assert record.namespace == "a"
    assert record.ready
    assert not record.suspended
    assert record.pod is not None
    assert index.address(record, 49983) == ("10.2.2.2", 49983)
    assert index.lookup("s1", namespace="b") is None
    pending = index.lookup("s2")
    assert pending is not None
    assert not pending.ready
    assert pending.sandbox is None
    assert index.address(pending, 49983) is None
    assert index.lookup("nope") is None
    assert index.lookup("") is None
    assert {r.sandbox_id for r in index.records("a")} == {"s1", "s2"}


def test_lookup_ambiguity_deletion_and_suspension() -> None:
    api = FakeApi()
    api.add(SANDBOX_CLAIMS, _claim("dup", "a"))
    api.add(SANDBOX_CLAIMS, _claim("dup", "b"))
    gone = _claim("gone", "a")
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    api.add(SANDBOX_CLAIMS, gone)
    api.add(SANDBOX_CLAIMS, _claim("sus", "a", bound="sus", ready=True))
    api.add(
        SANDBOXES,
        {"metadata": {"name": "sus", "namespace": "a"}, "spec": {"operatingMode": "Suspended"}},
    )
    api.add(PODS, {"metadata": {"name": "sus", "namespace": "a"}, "status": {"podIP": "10.3.3.3"}})
    index = _index(api)
    assert index.lookup("dup") is None
    dup_a = index.lookup("dup", namespace="a")
    assert dup_a is not None
    assert dup_a.namespace == "a"
    assert index.lookup("gone") is None
    sus = index.lookup("sus")
    assert sus is not None
    assert sus.suspended
    assert not sus.ready


def test_address_override_maps_ports() -> None:
    api = FakeApi()
    api.add(SANDBOX_CLAIMS, _claim("s1", "a", bound="s1", ready=True))
    api.add(SANDBOXES, {"metadata": {"name": "s1", "namespace": "a"}})
    api.add(PODS, {"metadata": {"name": "s1", "namespace": "a"}, "status": {"podIP": "10.2.2.2"}})
    index = _index(api, pod_address_override="127.0.0.1", pod_port_map={49983: 5000})
    record = index.lookup("s1")
    assert record is not None
    assert index.address(record, 49983) == ("127.0.0.1", 5000)
    assert index.address(record, 8080) == ("127.0.0.1", 8080)


def test_loopback_override_gives_each_pod_its_own_address() -> None:
    api = FakeApi()
    for name in ("s1", "s2"):
        api.add(SANDBOX_CLAIMS, _claim(name, "a", bound=name, ready=True))
        api.add(SANDBOXES, {"metadata": {"name": name, "namespace": "a"}})
        pod = {"name": name, "namespace": "a", "uid": f"uid-{name}"}
        # The same IP: a new pod may get a deleted pod's; the UID tells them apart.
        api.add(PODS, {"metadata": pod, "status": {"podIP": "10.0.0.7"}})
    index = _index(api, pod_address_override=LOOPBACK_PER_POD, pod_port_map={49983: 5000})
    first, second = index.lookup("s1"), index.lookup("s2")
    assert first is not None
    assert second is not None
    assert index.address(first, 49983) == (loopback_address("uid-s1"), 5000)
    assert index.address(second, 8080) == (loopback_address("uid-s2"), 8080)
    assert loopback_address("uid-s1") != loopback_address("uid-s2")


def test_loopback_address_is_a_stable_host_address_under_127() -> None:
    for uid in ("3f1c9e2a-0000-4000-8000-000000000001", "x", "uid-s1"):
        address = ipaddress.ip_address(loopback_address(uid))
        assert address.is_loopback
        assert str(address) == loopback_address(uid)  # stable: the harness computes it too
        assert not str(address).endswith((".0", ".255"))
    with pytest.raises(ValueError, match="without a UID"):
        loopback_address("")


async def test_wait_for_wakes_on_notify() -> None:
    api = FakeApi()
    index = _index(api)

    async def later() -> None:
        await asyncio.sleep(0.05)
        api.add(SANDBOX_CLAIMS, _claim("s1", "a"))
        index.notify()

    task = asyncio.create_task(later())
    record = await index.wait_for("s1", lambda r: r is not None, within=5)
    await task
    assert record is not None
    with pytest.raises(TimeoutError):
        await index.wait_for("s1", lambda r: r is None, within=0.05)


def test_split_metadata_and_durations() -> None:
    stored, idle = models.split_metadata(
        {"a": "1", "idle_timeout": "900", "kube-agent-sandbox.io/secret": "x"}
    )
    assert stored == {"a": "1"}
    assert idle == 900
    assert models.split_metadata({"idle_timeout": "0"}) == ({}, 0)
    for bad in ("59", "-1", "1.5", "x"):
        with pytest.raises(models.BadRequest):
            models.split_metadata({"idle_timeout": bad})
    assert models.go_duration(900) == "15m"
    assert models.go_duration(7200) == "2h"
    assert models.go_duration(61) == "61s"


def test_parse_create_defaults() -> None:
    spec = models.parse_create({"templateID": "Base"}, default_timeout=300)
    assert spec.template_id == "base"
    assert spec.timeout == 300
    assert not spec.auto_pause
    assert spec.env_vars == {}
    ignored = models.parse_create(
        {"templateID": "b", "mcp": {}, "network": {"allowOut": []}, "timeout": 15.0},
        default_timeout=300,
    )
    assert ignored.timeout == 15
    with pytest.raises(models.BadRequest, match="timeout"):
        models.parse_create({"templateID": "b", "timeout": True}, default_timeout=300)
    with pytest.raises(models.BadRequest, match="timeout"):
        models.parse_create({"templateID": "b", "timeout": 10**9}, default_timeout=300)
    with pytest.raises(models.BadRequest, match="autoResume"):
        models.parse_create({"templateID": "b", "autoResume": True}, default_timeout=300)


def test_metadata_filter_decodes_the_sdk_encoding() -> None:
    meta = {"team name": "a&b=c", "k": "v%"}
    quoted = {urllib.parse.quote(k): urllib.parse.quote(v) for k, v in meta.items()}
    assert models.parse_metadata_filter(urllib.parse.urlencode(quoted)) == meta
    assert models.parse_metadata_filter("") == {}
    with pytest.raises(models.BadRequest):
        models.parse_metadata_filter("novalue")
    assert models.parse_states(None) == {"running", "paused"}
    assert models.parse_states("running") == {"running"}
    with pytest.raises(models.BadRequest):
        models.parse_states("running,zombie")


def test_next_token_round_trip_and_garbage() -> None:
    key = ("2026-12-01T21:00:00Z", "abc")
    assert decode_token(encode_token(key)) == key
    for bad in ("!!", "bm90IGpzb24", encode_token(("a", "b")) + "xx", "WzFd"):
        with pytest.raises(models.BadRequest):
            decode_token(bad)
