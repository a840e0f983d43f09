"""Reaching into a running sandbox: exec, files, port-forward, through the Kubernetes API."""

from __future__ import annotations

import base64
import secrets

import pytest

from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.node.workload import (
    SandboxHandle,
    http_get_through_port_forward,
    sandbox_manifest,
)

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

SLEEP = ["python3", "-c", "import time; time.sleep(3600)"]


@pytest.fixture
def sandbox(cluster: ClusterAccess, namespace: str, python_image: str) -> SandboxHandle:
    handle = SandboxHandle.create(
        cluster.api_client(),
        namespace,
        sandbox_manifest("shell", image=python_image, command=SLEEP),
    )
    handle.wait_condition("Ready")
    return handle


def test_exec_returns_stdout_stderr_and_exit_code(sandbox: SandboxHandle) -> None:
    result = sandbox.exec(
        [
            "python3",
            "-c",
            "import sys; print(6 * 7); print('warn', file=sys.stderr); sys.exit(3)",
        ]
    )
    assert result.stdout == "42\n"
    assert result.stderr == "warn\n"
    assert result.exit_code == 3


def test_exec_of_a_successful_command_reports_exit_code_zero(sandbox: SandboxHandle) -> None:
    result = sandbox.exec(["python3", "-c", "import platform; print(platform.python_version())"])
    assert result.exit_code == 0
    assert result.stdout.startswith("3.")


def test_a_written_file_is_read_back(sandbox: SandboxHandle) -> None:
    content = secrets.token_bytes(4096)
    encoded = base64.b64encode(content).decode()
    write = sandbox.exec(
        [
            "python3",
            "-c",
            "import base64, sys; open('/tmp/blob', 'wb').write(base64.b64decode(sys.argv[1]))",
            encoded,
        ]
    )
    assert write.exit_code == 0, write.stderr
    read = sandbox.exec(
        [
            "python3",
            "-c",
            "import base64; print(base64.b64encode(open('/tmp/blob', 'rb').read()).decode())",
        ]
    )
    assert read.exit_code == 0, read.stderr
    assert base64.b64decode(read.stdout.strip()) == content


def test_reading_a_missing_file_fails_with_a_non_zero_exit_code(sandbox: SandboxHandle) -> None:
    result = sandbox.exec(["cat", "/tmp/does-not-exist"])
    assert result.exit_code != 0
    assert "No such file" in result.stderr


def test_port_forward_reaches_a_server_in_the_sandbox(
    cluster: ClusterAccess, namespace: str, python_image: str
) -> None:
    token = secrets.token_hex(8)
    server = (
        "import http.server, os; os.makedirs('/srv', exist_ok=True); "
        f"open('/srv/token', 'w').write('{token}'); os.chdir('/srv'); "
        "http.server.ThreadingHTTPServer(('0.0.0.0', 8080), "
        "http.server.SimpleHTTPRequestHandler).serve_forever()"
    )
    manifest = sandbox_manifest(
        "web",
        image=python_image,
        command=["python3", "-c", server],
        ports=[8080],
        readiness_probe={"tcpSocket": {"port": 8080}, "periodSeconds": 1},
    )
    handle = SandboxHandle.create(cluster.api_client(), namespace, manifest)
    handle.wait_condition("Ready")

    response = http_get_through_port_forward(
        cluster.api_client(), namespace, handle.name, 8080, path="/token"
    )
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200")
    assert body.decode() == token
