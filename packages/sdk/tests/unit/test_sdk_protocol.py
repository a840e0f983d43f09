"""Pure protocol pieces: API error mapping, REST paths, exec channel frames and listings."""

from __future__ import annotations

import json

import pytest

from kube_agent_sandbox.sdk import (
    ApiRequestError,
    ConflictError,
    ExecFailedError,
    NotFoundError,
    PermissionDeniedError,
    SandboxError,
    SandboxTimeoutError,
    execproto,
)
from kube_agent_sandbox.sdk.apierrors import api_error, verb_of
from kube_agent_sandbox.sdk.constants import PODS, SANDBOX_CLAIMS, SANDBOXES
from kube_agent_sandbox.sdk.paths import exec_params, resource_label, resource_path


def status(code: int, reason: str, message: str) -> bytes:
    return json.dumps(
        {"kind": "Status", "code": code, "reason": reason, "message": message}
    ).encode()


def test_error_mapping() -> None:
    denied = api_error(
        403, status(403, "Forbidden", "no"), verb="create", resource="sandboxes.agents.x-k8s.io"
    )
    assert isinstance(denied, PermissionDeniedError)
    assert (denied.verb, denied.resource, denied.status_code) == (
        "create",
        "sandboxes.agents.x-k8s.io",
        403,
    )
    assert "cannot create sandboxes.agents.x-k8s.io" in str(denied)
    assert isinstance(
        api_error(404, status(404, "NotFound", "x"), verb="get", resource="r"), NotFoundError
    )
    conflict = api_error(409, status(409, "AlreadyExists", "exists"), verb="create", resource="r")
    assert isinstance(conflict, ConflictError)
    assert conflict.reason == "AlreadyExists"
    invalid = api_error(422, status(422, "Invalid", "spec.x: bad"), verb="create", resource="r")
    assert type(invalid) is ApiRequestError
    assert "spec.x: bad" in str(invalid)
    assert invalid.body is not None
    raw = api_error(502, b"<html>bad gateway</html>", verb="get", resource="r")
    assert "bad gateway" in str(raw)
    assert raw.body is None
    assert "HTTP 500" in str(api_error(500, None, verb="get", resource="r"))


def test_hierarchy() -> None:
    for cls in (
        ApiRequestError,
        NotFoundError,
        ConflictError,
        PermissionDeniedError,
        ExecFailedError,
    ):
        assert issubclass(cls, SandboxError)
    assert issubclass(SandboxError, RuntimeError)
    assert issubclass(SandboxTimeoutError, TimeoutError)


def test_verbs() -> None:
    assert verb_of("GET") == "get"
    assert verb_of("GET", collection=True) == "list"
    assert verb_of("GET", watch=True) == "watch"
    assert verb_of("POST") == "create"
    assert verb_of("PATCH") == "patch"


def test_paths() -> None:
    assert (
        resource_path(SANDBOXES, "ns", "a")
        == "/apis/agents.x-k8s.io/v1beta1/namespaces/ns/sandboxes/a"
    )
    assert resource_path(SANDBOX_CLAIMS, "ns") == (
        "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/ns/sandboxclaims"
    )
    assert resource_path(PODS, "ns", "p", "exec") == "/api/v1/namespaces/ns/pods/p/exec"
    assert resource_label(PODS, "exec") == "pods/exec"
    assert resource_label(SANDBOXES) == "sandboxes.agents.x-k8s.io"
    with pytest.raises(ValueError, match="namespaced"):
        resource_path(SANDBOXES, None, "a")
    with pytest.raises(ValueError, match="subresource"):
        resource_path(PODS, "ns", None, "exec")
    with pytest.raises(ValueError, match="empty"):
        resource_path(PODS, "ns", "")


def test_exec_params() -> None:
    params = exec_params(["sh", "-c", "echo hi"], container="main", stdin=True, tty=False)
    assert params == [
        ("command", "sh"),
        ("command", "-c"),
        ("command", "echo hi"),
        ("stdout", "true"),
        ("stderr", "true"),
        ("stdin", "true"),
        ("tty", "false"),
        ("container", "main"),
    ]
    assert ("stderr", "false") in exec_params(["sh"], container=None, stdin=True, tty=True)
    with pytest.raises(ValueError, match="non-empty"):
        exec_params([], container=None, stdin=False, tty=False)


def test_frames() -> None:
    assert execproto.frame(execproto.STDIN, b"ab") == b"\x00ab"
    assert execproto.close_stdin_frame() == b"\xff\x00"
    assert execproto.split(b"\x02err") == (2, b"err")
    assert json.loads(execproto.resize_frame(80, 24)[1:]) == {"Width": 80, "Height": 24}
    with pytest.raises(ExecFailedError):
        execproto.split(b"")


def test_exit_codes() -> None:
    assert execproto.exit_code(b'{"metadata":{},"status":"Success"}') == 0
    failure = {
        "status": "Failure",
        "reason": "NonZeroExitCode",
        "message": "command terminated with non-zero exit code",
        "details": {"causes": [{"reason": "ExitCode", "message": "42"}]},
    }
    assert execproto.exit_code(json.dumps(failure).encode()) == 42
    with pytest.raises(ExecFailedError, match="executable file not found") as info:
        execproto.exit_code(
            json.dumps(
                {
                    "status": "Failure",
                    "reason": "InternalError",
                    "message": "executable file not found",
                }
            ).encode()
        )
    assert info.value.reason == "InternalError"
    with pytest.raises(ExecFailedError, match="not json"):
        execproto.exit_code(b"not json")


def test_exec_result_and_listing() -> None:
    result = execproto.ExecResult(0, b"caf\xc3\xa9\n", b"\xff")
    assert result.stdout == "café\n"
    assert result.stderr == "\ufffd"
    assert result.ok
    listing = execproto.parse_listing(
        "12 1700000000 regular file|./b.txt\n"
        "0 1700000001 directory|./a dir\n"
        "0 1700000002 regular empty file|./.hidden\n"
        "3 1700000003 symbolic link|./l\n"
        "garbage line\n"
    )
    assert [(e.name, e.size, e.type) for e in listing] == [
        (".hidden", 0, "file"),
        ("a dir", 0, "directory"),
        ("b.txt", 12, "file"),
        ("l", 3, "symlink"),
    ]
    assert listing[2].mod_time == 1700000000.0


def test_task_group_wrapping_is_undone() -> None:
    from kube_agent_sandbox.sdk._async.api import unwrap_group

    ours = ExecFailedError("exec failed: boom")
    nested = BaseExceptionGroup("outer", [ValueError("x"), ExceptionGroup("inner", [ours])])
    assert unwrap_group(nested) is ours
    other = KeyError("k")
    assert unwrap_group(ExceptionGroup("g", [other])) is other
