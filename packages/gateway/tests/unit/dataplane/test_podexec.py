"""The exec transport against a stand-in apiserver exec endpoint (WebSocket, v5/v4 channels)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs

import pytest
from dataplane_fakes import serve

from kube_agent_sandbox.controller.runtime import ClusterConfig
from kube_agent_sandbox.gateway.dataplane.podexec import PodExec, PodExecError, container_of

SUCCESS = json.dumps({"status": "Success"}).encode()


def failure(code: int) -> bytes:
    causes = [{"reason": "ExitCode", "message": str(code)}]
    return json.dumps(
        {"status": "Failure", "reason": "NonZeroExitCode", "details": {"causes": causes}}
    ).encode()


class FakeExecEndpoint:
    """``/api/v1/namespaces/NS/pods/NAME/exec``: ``cat`` echoes stdin, ``fail`` exits 3."""

    def __init__(self, *, protocols: tuple[str, ...] = ("v5.channel.k8s.io",)) -> None:
        self.protocols = protocols
        self.seen: dict[str, Any] = {}
        self.resizes: list[dict[str, int]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            return
        await receive()
        headers = dict(scope["headers"])
        self.seen = {
            "path": scope["path"],
            "query": parse_qs(scope["query_string"].decode()),
            "authorization": headers.get(b"authorization", b"").decode(),
            "accept": headers.get(b"accept"),
        }
        if headers.get(b"authorization") != b"Bearer secret-token":
            await send({"type": "websocket.close", "code": 1008})  # 403 on the handshake
            return
        offered = scope.get("subprotocols") or []
        chosen = next((p for p in self.protocols if p in offered), None)
        await send({"type": "websocket.accept", "subprotocol": chosen})
        command = self.seen["query"]["command"]
        if command[0] == "fail":
            await send({"type": "websocket.send", "bytes": b"\x02" + b"bad\n"})
            await send({"type": "websocket.send", "bytes": b"\x03" + failure(3)})
        else:
            while True:
                message = await receive()
                if message["type"] == "websocket.disconnect":
                    return
                data = message.get("bytes") or b""
                if data == b"\xff\x00":  # v5: stdin closed
                    break
                if data[:1] == b"\x00":
                    await send({"type": "websocket.send", "bytes": b"\x01" + data[1:]})
                if data[:1] == b"\x04":
                    self.resizes.append(json.loads(data[1:]))
            await send({"type": "websocket.send", "bytes": b"\x03" + SUCCESS})
        await send({"type": "websocket.close", "code": 1000})


@pytest.fixture
async def endpoint() -> AsyncIterator[tuple[FakeExecEndpoint, PodExec]]:
    fake = FakeExecEndpoint()
    async with serve(fake) as port:
        config = ClusterConfig(
            host=f"http://127.0.0.1:{port}", static_headers={"Authorization": "Bearer secret-token"}
        )
        pod_exec = PodExec(config)
        yield fake, pod_exec
        await pod_exec.aclose()


async def test_stdin_is_streamed_and_closed_and_the_exit_code_read(
    endpoint: tuple[FakeExecEndpoint, PodExec],
) -> None:
    fake, pod_exec = endpoint
    payload = bytes(range(256)) * 2048  # spans several stdin frames
    async with pod_exec.open(
        "ns-a", "pod-1", ["cat", "--", "a b"], container="sandbox", stdin=True
    ) as stream:
        assert stream.can_close_stdin
        await stream.write(payload)
        await stream.close_stdin()
        out = []
        while (chunk := await stream.read()) is not None:
            assert chunk[0] == 1
            out.append(chunk[1])
    assert b"".join(out) == payload
    assert stream.exit_code == 0
    assert fake.seen["path"] == "/api/v1/namespaces/ns-a/pods/pod-1/exec"
    assert fake.seen["query"]["command"] == ["cat", "--", "a b"]
    assert fake.seen["query"]["container"] == ["sandbox"]
    assert fake.seen["query"]["stdin"] == ["true"]
    assert fake.seen["accept"] in (None, b"*/*")  # kubelets answer application/json with 406


async def test_a_tty_has_no_stderr_stream_and_takes_resizes(
    endpoint: tuple[FakeExecEndpoint, PodExec],
) -> None:
    fake, pod_exec = endpoint
    async with pod_exec.open("ns-a", "pod-1", ["bash"], stdin=True, tty=True) as stream:
        await stream.resize(100, 40)
        await stream.write(b"typed")
        assert await stream.read() == (1, b"typed")
        await stream.close_stdin()
        assert await stream.read() is None
    assert fake.seen["query"]["tty"] == ["true"]
    assert "stderr" not in fake.seen["query"]  # the kubelet refuses stderr with a TTY
    assert fake.resizes == [{"Width": 100, "Height": 40}]


async def test_run_collects_a_failure(endpoint: tuple[FakeExecEndpoint, PodExec]) -> None:
    _, pod_exec = endpoint
    output = await pod_exec.run("ns-a", "pod-1", ["fail"])
    assert output.exit_code == 3
    assert output.stderr == b"bad\n"


async def test_refused_upgrade_is_a_clear_error(endpoint: tuple[FakeExecEndpoint, PodExec]) -> None:
    _, pod_exec = endpoint
    pod_exec.config.static_headers = {"Authorization": "Bearer wrong"}
    with pytest.raises(PodExecError) as refused:
        await pod_exec.run("ns-a", "pod-1", ["cat"])
    assert refused.value.status == 403


async def test_unreachable_apiserver_is_a_clear_error() -> None:
    from dataplane_fakes import free_port

    pod_exec = PodExec(ClusterConfig(host=f"http://127.0.0.1:{free_port()}"))
    with pytest.raises(PodExecError, match="exec failed"):
        await pod_exec.run("ns", "pod", ["true"])
    await pod_exec.aclose()


async def test_v4_cannot_close_stdin() -> None:
    fake = FakeExecEndpoint(protocols=("v4.channel.k8s.io",))
    async with serve(fake) as port:
        config = ClusterConfig(
            host=f"http://127.0.0.1:{port}", static_headers={"Authorization": "Bearer secret-token"}
        )
        pod_exec = PodExec(config)
        async with pod_exec.open("ns", "pod", ["cat"], stdin=True) as stream:
            assert not stream.can_close_stdin
        await pod_exec.aclose()


def test_container_of() -> None:
    assert container_of({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}}) == "a"
    assert container_of({}) is None
