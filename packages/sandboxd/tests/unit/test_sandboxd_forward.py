"""sandboxd's port forwarder: loopback-only services become reachable on the pod address."""

from __future__ import annotations

import asyncio

import pytest

from kube_agent_sandbox.sandboxd import port_forward

TCP_TABLE = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  0  0 1 1 0 0
   1: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000  0  0 2 1 0 0
   2: 0100007F:0050 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  0  0 3 1 0 0
   3: 0A00000A:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000  0  0 4 1 0 0
   4: 0100007F:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000  0  0 5 1 0 0
   5: garbage
"""
TCP6_TABLE = """\
  sl  local_address                         remote_address                        st
   0: 00000000000000000000000001000000:1F92 00000000000000000000000000000000:0000 0A
   1: 0000000000000000FFFF00000100007F:1F93 00000000000000000000000000000000:0000 0A
   2: 00000000000000000000000000000000:1F94 00000000000000000000000000000000:0000 0A
"""


def test_parse_listeners_decodes_proc_net_tcp() -> None:
    assert port_forward.parse_listeners(TCP_TABLE) == [
        ("127.0.0.1", 8080),
        ("0.0.0.0", 22),
        ("10.0.0.10", 8081),
        ("127.0.0.1", 8081),
    ]
    assert port_forward.parse_listeners(TCP6_TABLE) == [
        ("::1", 8082),
        ("127.0.0.1", 8083),  # IPv4-mapped
        ("::", 8084),
    ]


def test_loopback_only_ports() -> None:
    listeners = port_forward.parse_listeners(TCP_TABLE) + port_forward.parse_listeners(TCP6_TABLE)
    assert port_forward.loopback_only_ports(listeners) == {8080, 8082, 8083}
    # The forwarder's own listener on the pod address does not make a port "public".
    assert port_forward.loopback_only_ports(listeners, own_addresses=["10.0.0.10"]) == {
        8080,
        8081,
        8082,
        8083,
    }


def test_pod_addresses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POD_IP", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("SANDBOXD_FORWARD_ADDRESSES", "10.1.2.3, 10.1.2.4")
    assert port_forward.pod_addresses() == ["10.1.2.3", "10.1.2.4"]
    monkeypatch.delenv("SANDBOXD_FORWARD_ADDRESSES")
    monkeypatch.setenv("POD_IP", "10.9.9.9")
    assert port_forward.pod_addresses() == ["10.9.9.9"]
    monkeypatch.delenv("POD_IP")
    assert port_forward.pod_addresses() == []  # outside a pod: never guess an interface


async def test_forwarder_relays_and_follows_the_service() -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read(100)
        writer.write(b"echo:" + data)
        await writer.drain()
        writer.close()

    service = await asyncio.start_server(echo, host="127.0.0.1", port=0)
    port = service.sockets[0].getsockname()[1]
    # 127.0.0.2 stands in for the pod address (any loopback alias works without a pod).
    forwarder = port_forward.PortForwarder(["127.0.0.2"], interval=0.1)
    try:
        await forwarder.sync_once()
        assert port in forwarder.servers
        reader, writer = await asyncio.open_connection("127.0.0.2", port)
        writer.write(b"ping")
        await writer.drain()
        assert await asyncio.wait_for(reader.read(100), 5) == b"echo:ping"
        writer.close()

        service.close()
        await service.wait_closed()
        await forwarder.sync_once()
        assert port not in forwarder.servers
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.2", port)
    finally:
        service.close()
        await forwarder.stop()


async def test_excluded_ports_and_no_addresses() -> None:
    service = await asyncio.start_server(lambda r, w: None, host="127.0.0.1", port=0)
    port = service.sockets[0].getsockname()[1]
    try:
        excluded = port_forward.PortForwarder(["127.0.0.2"], exclude={port})
        await excluded.sync_once()
        assert port not in excluded.servers
        idle = port_forward.PortForwarder([])
        idle.start()  # nothing to do without addresses
        assert idle._task is None
    finally:
        service.close()
        await service.wait_closed()
