"""The ``agent-sandbox`` CLI's argument handling, output and exit codes, against a fake client.

The client itself is tested for real in the integration tests; here a fake records what the
CLI asked for and answers with canned objects or errors.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from kube_agent_sandbox.sdk import (
    ExecResult,
    NotFoundError,
    PermissionDeniedError,
    SandboxClaimFailedError,
    SandboxTimeoutError,
)
from kube_agent_sandbox.sdk.cli import app as cli
from kube_agent_sandbox.sdk.cli import output


def sandbox(name: str, ready: str = "True", reason: str = "DependenciesReady") -> dict[str, Any]:
    return {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {
            "name": name,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [],
        },
        "spec": {"operatingMode": "Running"},
        "status": {"conditions": [{"type": "Ready", "status": ready, "reason": reason}]},
    }


class Box:
    def __init__(self, name: str, claim_name: str | None = None) -> None:
        self.name = name
        self.namespace = "ns"
        self.claim_name = claim_name


class FakeClient:
    namespace = "ns"

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.raises: Exception | None = None
        self.files: dict[str, bytes] = {}

    def _record(self, call: str, /, *args: Any, **kwargs: Any) -> None:
        self.calls.append((call, args, kwargs))
        if self.raises is not None:
            raise self.raises

    def list_sandboxes(self, **kwargs: Any) -> list[dict[str, Any]]:
        self._record("list_sandboxes", **kwargs)
        return [sandbox("a"), sandbox("b", "False", "DependenciesNotReady")]

    def list_claims(self, **kwargs: Any) -> list[dict[str, Any]]:
        self._record("list_claims", **kwargs)
        return []

    def get(self, name: str, **kwargs: Any) -> dict[str, Any]:
        self._record("get", name, **kwargs)
        return sandbox(name)

    def get_claim(self, name: str, **kwargs: Any) -> dict[str, Any]:
        self._record("get_claim", name, **kwargs)
        return {"metadata": {"name": name}, "spec": {"warmPoolRef": {"name": "p"}}}

    def create_sandbox(self, source: Path, **kwargs: Any) -> Box:
        self._record("create_sandbox", source, **kwargs)
        return Box(kwargs.get("name") or "created")

    def claim_sandbox(self, pool: str, **kwargs: Any) -> Box:
        self._record("claim_sandbox", pool, **kwargs)
        return Box("bound", claim_name="c1")

    def wait_ready(self, name: str, **kwargs: Any) -> None:
        self._record("wait_ready", name, **kwargs)

    def wait_claim_ready(self, name: str, **kwargs: Any) -> None:
        self._record("wait_claim_ready", name, **kwargs)

    def wait_deleted(self, name: str, **kwargs: Any) -> None:
        self._record("wait_deleted", name, **kwargs)

    def suspend(self, name: str, **kwargs: Any) -> None:
        self._record("suspend", name, **kwargs)

    def resume(self, name: str, **kwargs: Any) -> None:
        self._record("resume", name, **kwargs)

    def delete(self, name: str, **kwargs: Any) -> None:
        self._record("delete", name, **kwargs)

    def delete_claim(self, name: str, **kwargs: Any) -> None:
        self._record("delete_claim", name, **kwargs)

    def exec(self, name: str, command: list[str], **kwargs: Any) -> ExecResult:
        self._record("exec", name, command, **kwargs)
        kwargs["on_output"](1, b"out\n")
        kwargs["on_output"](2, b"err\n")
        return ExecResult(7, b"out\n", b"err\n")

    def write_file(self, name: str, path: str, stream: Any, **kwargs: Any) -> None:
        self._record("write_file", name, path)
        self.files[path] = stream.read()

    def download(self, name: str, path: str, target: Any, **kwargs: Any) -> int:
        self._record("download", name, path)
        data = self.files.get(path, b"\x00\x01binary")
        target.write(data)
        return len(data)

    def logs(self, name: str, **kwargs: Any) -> Iterator[str]:
        self._record("logs", name, **kwargs)
        yield "line 1"
        yield "line 2"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeClient:
    client = FakeClient()
    monkeypatch.setattr(cli.state, "factory", lambda _state: client)
    return client


runner = CliRunner()


def invoke(*args: str, input: bytes | None = None) -> Any:
    return runner.invoke(cli.app, list(args), input=input)


def test_list_table_and_formats(fake: FakeClient) -> None:
    table = invoke("list", "-n", "ns")
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["NAME", "READY", "REASON", "MODE", "AGE"]
    assert lines[1].split()[:4] == ["a", "True", "DependenciesReady", "Running"]
    assert lines[2].split()[:3] == ["b", "False", "DependenciesNotReady"]
    # kubectl's layout: left-aligned columns three spaces apart, no trailing blanks
    assert lines[0].index("READY") == len("NAME") + 3
    assert lines[1].index("True") == len("NAME") + 3
    assert all(line == line.rstrip() for line in lines)
    assert fake.calls[0] == ("list_sandboxes", (), {"namespace": "ns", "label_selector": None})
    as_json = json.loads(invoke("list", "-o", "json").stdout)
    assert as_json["kind"] == "SandboxList"
    assert [i["metadata"]["name"] for i in as_json["items"]] == ["a", "b"]
    assert "managedFields" not in as_json["items"][0]["metadata"]
    as_yaml = yaml.safe_load(invoke("get", "a", "-o", "yaml").stdout)
    assert as_yaml["metadata"]["name"] == "a"
    assert invoke("list", "-o", "name").stdout.split() == ["a", "b"]
    wide = invoke("list", "-o", "wide").stdout.splitlines()[0].split()
    assert wide[-3:] == ["POD", "NODE", "IP"]
    bad = invoke("list", "-o", "xml")
    assert bad.exit_code == cli.EXIT_USAGE
    assert "unknown output format" in bad.stderr


def test_empty_claim_list(fake: FakeClient) -> None:
    result = invoke("list", "--claims", "-l", "a=b")
    assert result.exit_code == 0
    assert "No resources found" in result.stderr
    assert fake.calls[0][2]["label_selector"] == "a=b"


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (NotFoundError("sandboxes x not found", 404), cli.EXIT_NOT_FOUND),
        (SandboxTimeoutError("not Ready after 3s"), cli.EXIT_TIMEOUT),
        (SandboxClaimFailedError("claim c: ClaimExpired", reason="ClaimExpired"), cli.EXIT_FAILED),
        (PermissionDeniedError("cannot get x", 403, verb="get", resource="x"), cli.EXIT_FORBIDDEN),
    ],
)
def test_errors_map_to_exit_codes(fake: FakeClient, error: Exception, code: int) -> None:
    fake.raises = error
    result = invoke("wait", "x", "--timeout", "3")
    assert result.exit_code == code
    assert str(error) in result.stderr
    assert fake.calls[0] == ("wait_ready", ("x",), {"namespace": None, "timeout": 3.0})


def test_wait_variants(fake: FakeClient) -> None:
    assert invoke("wait", "c", "--claim").exit_code == 0
    assert invoke("wait", "x", "--for", "delete").exit_code == 0
    assert [c[0] for c in fake.calls] == ["wait_claim_ready", "wait_deleted"]
    assert invoke("wait", "x", "--for", "nothing").exit_code == cli.EXIT_USAGE


def test_create_from_file(fake: FakeClient, tmp_path: Path) -> None:
    manifest = tmp_path / "s.yaml"
    manifest.write_text("kind: Sandbox\n")
    result = invoke("create", "-f", str(manifest), "--name", "mine", "--no-wait")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "mine"
    name, args, kwargs = fake.calls[0]
    assert (name, args[0], kwargs["wait"]) == ("create_sandbox", manifest, False)
    missing = invoke("create", "-f", str(tmp_path / "nope.yaml"))
    assert missing.exit_code == cli.EXIT_USAGE


def test_claim_options(fake: FakeClient) -> None:
    result = invoke(
        "claim", "pool-a", "-e", "A=1", "--pod-label", "team=x", "--shutdown-after", "60"
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "bound"
    _, args, kwargs = fake.calls[0]
    assert args == ("pool-a",)
    assert kwargs["env"] == {"A": "1"}
    assert kwargs["pod_labels"] == {"team": "x"}
    assert kwargs["pod_annotations"] is None
    assert kwargs["shutdown_after_seconds"] == 60
    bad = invoke("claim", "pool-a", "-e", "novalue")
    assert bad.exit_code == cli.EXIT_USAGE
    assert "KEY=VALUE" in bad.stderr


def test_exec_streams_output_and_exits_with_the_remote_code(fake: FakeClient) -> None:
    result = invoke("exec", "box", "--", "sh", "-c", "echo out; echo err >&2; exit 7")
    assert result.exit_code == 7
    assert result.stdout == "out\n"
    assert result.stderr == "err\n"
    _, args, kwargs = fake.calls[0]
    assert args == ("box", ["sh", "-c", "echo out; echo err >&2; exit 7"])
    assert kwargs["stdin"] is None
    with_stdin = invoke("exec", "box", "-i", "--", "cat", input=b"data")
    assert with_stdin.exit_code == 7
    assert fake.calls[1][2]["stdin"] == b"data"
    assert invoke("exec", "box").exit_code == cli.EXIT_USAGE


def test_cp_both_ways(fake: FakeClient, tmp_path: Path) -> None:
    local = tmp_path / "in.bin"
    local.write_bytes(b"\x00\xffpayload")
    up = invoke("cp", str(local), "box:/tmp/x.bin")
    assert up.exit_code == 0, up.output
    assert fake.files["/tmp/x.bin"] == b"\x00\xffpayload"
    target = tmp_path / "out.bin"
    down = invoke("cp", "box:/tmp/x.bin", str(target))
    assert down.exit_code == 0, down.output
    assert target.read_bytes() == b"\x00\xffpayload"
    into_dir = invoke("cp", "box:/tmp/x.bin", str(tmp_path))
    assert into_dir.exit_code == 0
    assert (tmp_path / "x.bin").read_bytes() == b"\x00\xffpayload"
    assert invoke("cp", str(local), str(target)).exit_code == cli.EXIT_USAGE
    assert invoke("cp", "a:/x", "b:/y").exit_code == cli.EXIT_USAGE
    assert invoke("cp", str(tmp_path / "missing"), "box:/x").exit_code == cli.EXIT_USAGE


def test_cp_download_failure_leaves_no_partial_file(fake: FakeClient, tmp_path: Path) -> None:
    fake.raises = NotFoundError("no such file: /nope", 404)
    result = invoke("cp", "box:/nope", str(tmp_path / "f"))
    assert result.exit_code == cli.EXIT_NOT_FOUND
    assert list(tmp_path.iterdir()) == []


def test_lifecycle_commands(fake: FakeClient) -> None:
    assert invoke("suspend", "a", "--no-wait").exit_code == 0
    assert invoke("resume", "a").exit_code == 0
    assert invoke("delete", "a", "b", "--wait").exit_code == 0
    assert invoke("delete", "c1", "--claim", "--ignore-not-found").exit_code == 0
    assert [(c[0], c[1]) for c in fake.calls] == [
        ("suspend", ("a",)),
        ("resume", ("a",)),
        ("delete", ("a",)),
        ("delete", ("b",)),
        ("delete_claim", ("c1",)),
    ]
    assert fake.calls[0][2]["wait"] is False
    assert fake.calls[4][2]["missing_ok"] is True
    logs = invoke("logs", "a", "--tail", "5")
    assert logs.stdout.splitlines() == ["line 1", "line 2"]
    assert fake.calls[-1][2]["tail_lines"] == 5


def test_port_forward_rejects_bad_ports(fake: FakeClient) -> None:
    result = invoke("port-forward", "a", "x:y")
    assert result.exit_code == cli.EXIT_USAGE


def test_completion_script_is_offered() -> None:
    result = invoke("--show-completion", "bash")
    assert result.exit_code == 0
    assert "complete" in result.stdout


def test_output_helpers() -> None:
    assert output.split_remote("box:/a/b") == ("box", "/a/b")
    assert output.split_remote("./a:b") == (None, "./a:b")
    assert output.split_remote("plain") == (None, "plain")
    assert output.parse_pairs(["a=b=c"], what="x") == {"a": "b=c"}
    import datetime

    now = datetime.datetime(2026, 1, 3, tzinfo=datetime.UTC)
    assert output.age("2026-01-02T23:59:30Z", now=now) == "30s"
    assert output.age("2026-01-02T23:00:00Z", now=now) == "60m"
    assert output.age("2026-01-01T00:00:00Z", now=now) == "2d"
    assert output.age(None) == "<unknown>"
