"""The gateway's exec fallback in a real container: an image without any envd daemon.

kwok runs no containers, so only the real node shows ``pods/exec`` end to end. The sandbox
runs the plain Python image (``sleep infinity``, no ``sandboxd``); its template marks the pods
``kube-agent-sandbox.io/envd: exec``, so the gateway serves the envd calls of the unmodified
``e2b`` SDK over the Kubernetes exec API (WebSocket ``v5.channel.k8s.io`` through the
apiserver). The gateway runs on the host as a ServiceAccount bound only to its generated
ClusterRole, which must therefore allow ``pods/exec``. A second replica (the same HMAC secret,
as the Deployment's replicas share one) takes the stdin, PTY input and resizes of commands the
first one started: they go through a FIFO in the container, not the first replica's memory.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import e2b
import pytest

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.controller_runner import ControllerRunner
from kube_agent_sandbox.testing.gateway import (
    create_key,
    start_gateway,
    wait_warm_pool_ready,
    warm_template,
)

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

_log = logging.getLogger(__name__)
TEMPLATE = "plain"
MIB = 1024 * 1024
Record = Callable[[str, object], None]


def _template_spec(image: str) -> dict[str, Any]:
    container = {
        "name": "sandbox",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sleep", "infinity"],
    }
    return {
        "podTemplate": {
            "metadata": {"annotations": {f"{c.PROJECT_PREFIX}/envd": "exec"}},
            "spec": {"containers": [container], "terminationGracePeriodSeconds": 1},
        }
    }


@pytest.fixture
def gateway(
    cluster: ClusterAccess,
    namespace: str,
    controller_runner: ControllerRunner,
    python_image: str,
    tmp_path: Path,
) -> dict[str, str]:
    """A warm template without a daemon, two gateway replicas (their generated RBAC, one HMAC
    secret) and a tenant key."""
    cluster.apply(
        warm_template(TEMPLATE, template_spec=_template_spec(python_image)), namespace=namespace
    )
    _process, url = start_gateway(
        controller_runner, namespace=namespace, workdir=tmp_path, watch_namespace=namespace
    )
    _second, second_url = start_gateway(
        controller_runner,
        namespace=namespace,
        workdir=tmp_path,
        watch_namespace=namespace,
        name="gateway-2",
        secret_file=tmp_path / "hmac-key",
    )
    key = create_key(cluster.kubeconfig, namespace, gateway_namespace=namespace)
    wait_warm_pool_ready(cluster, TEMPLATE, namespace=namespace, timeout=240)
    return {"url": url, "second_url": second_url, "key": key}


def test_e2b_sdk_commands_and_files_over_pods_exec(
    gateway: dict[str, str], record_property: Record
) -> None:
    config = {"api_url": gateway["url"], "sandbox_url": gateway["url"], "api_key": gateway["key"]}
    sandbox = e2b.Sandbox.create(template=TEMPLATE, timeout=120, **config)
    try:
        result = sandbox.commands.run("echo hi; echo err >&2; whoami; cat /etc/hostname")
        out = result.stdout.split()
        assert out[:2] == ["hi", "root"]  # the container's user: exec has no setuid
        assert result.stderr == "err\n"
        with pytest.raises(e2b.CommandExitException) as failed:
            sandbox.commands.run("echo oops >&2; exit 4")
        assert (failed.value.exit_code, failed.value.stderr) == (4, "oops\n")
        samples = []
        for _ in range(5):
            t0 = time.monotonic()
            sandbox.commands.run("true")
            samples.append(time.monotonic() - t0)
        record_property("exec_fallback_command_round_trip_min_seconds", round(min(samples), 4))

        sandbox.files.write("/tmp/notes/a.txt", "written over pods/exec\n")
        assert sandbox.commands.run("cat /tmp/notes/a.txt").stdout == "written over pods/exec\n"
        assert [e.name for e in sandbox.files.list("/tmp/notes")] == ["a.txt"]
        assert sandbox.files.exists("/tmp/notes/a.txt") is True
        assert sandbox.files.exists("/tmp/nope") is False
        # Reading what a command wrote, then writing and checking with a command: each
        # direction on its own.
        made = sandbox.commands.run(
            "head -c 1048576 /dev/urandom > /tmp/r.bin; sha256sum /tmp/r.bin"
        )
        read_back = bytes(sandbox.files.read("/tmp/r.bin", format="bytes"))
        assert len(read_back) == MIB
        assert hashlib.sha256(read_back).hexdigest() == made.stdout.split()[0]
        payload = bytes(range(256)) * 4096  # 1 MiB, every byte value
        t0 = time.monotonic()
        sandbox.files.write("/tmp/blob.bin", payload)
        write_seconds = time.monotonic() - t0
        check = sandbox.commands.run("wc -c < /tmp/blob.bin; sha256sum /tmp/blob.bin")
        size, digest = check.stdout.split()[:2]
        assert (int(size), digest) == (MIB, hashlib.sha256(payload).hexdigest())
        t0 = time.monotonic()
        assert bytes(sandbox.files.read("/tmp/blob.bin", format="bytes")) == payload
        read_seconds = time.monotonic() - t0
        record_property("exec_fallback_file_write_mib_per_second", round(1 / write_seconds, 2))
        record_property("exec_fallback_file_read_mib_per_second", round(1 / read_seconds, 2))
        assert sandbox.is_running() is True
        _log.warning(
            "exec fallback on the real node: command min %.0f ms, 1 MiB write %.2fs read %.2fs",
            min(samples) * 1000,
            write_seconds,
            read_seconds,
        )
    finally:
        assert sandbox.kill() is True


def test_stdin_and_a_pty_through_another_gateway_replica(gateway: dict[str, str]) -> None:
    """Started through replica one; input, EOF and resizes through replica two."""
    one = {"api_url": gateway["url"], "sandbox_url": gateway["url"], "api_key": gateway["key"]}
    two = {
        "api_url": gateway["second_url"],
        "sandbox_url": gateway["second_url"],
        "api_key": gateway["key"],
    }
    sandbox = e2b.Sandbox.create(template=TEMPLATE, timeout=120, **one)
    try:
        other = e2b.Sandbox.connect(sandbox.sandbox_id, **two)
        handle = sandbox.commands.run("cat; echo done", background=True, stdin=True)
        other.commands.send_stdin(handle.pid, "through replica two, ")
        sandbox.commands.send_stdin(handle.pid, "and one\n")
        other.commands.close_stdin(handle.pid)
        assert handle.wait().stdout == "through replica two, and one\ndone\n"
        with pytest.raises(e2b.NotFoundException):
            other.commands.send_stdin(handle.pid, "late")

        terminal = sandbox.pty.create(e2b.PtySize(rows=24, cols=80))
        other.pty.resize(terminal.pid, e2b.PtySize(rows=33, cols=99))
        other.pty.send_stdin(terminal.pid, b"stty size; exit 3\n")
        seen = bytearray()
        with pytest.raises(e2b.CommandExitException) as ended:
            terminal.wait(on_pty=seen.extend)
        assert ended.value.exit_code == 3
        assert b"33 99" in seen
    finally:
        assert sandbox.kill() is True
