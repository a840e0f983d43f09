"""Sandboxes through the SDK with a kubeconfig: what ``agent-sandbox mcp`` serves over stdio.

"My sandboxes" are those of the client's namespace. Commands and files go over ``pods/exec``
(any image with ``sh``); code goes to the in-sandbox code interpreter through a few lines of
Python run in the sandbox, so no port-forward is needed.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Awaitable
from typing import Any, Final, TypeVar

from kube_agent_sandbox.sdk import AsyncSandboxClient
from kube_agent_sandbox.sdk.constants import SANDBOX_TEMPLATES
from kube_agent_sandbox.sdk.errors import (
    ExecFailedError,
    ExecTimeoutError,
    NotFoundError,
    PermissionDeniedError,
    SandboxError,
    SandboxFailedError,
    SandboxTimeoutError,
)
from kube_agent_sandbox.sdk.mcp import interpreter
from kube_agent_sandbox.sdk.mcp.backend import (
    CodeOutput,
    CommandOutput,
    FileEntry,
    SandboxGone,
    SandboxInfo,
    Source,
    ToolFailure,
)

T = TypeVar("T")
READY_TIMEOUT: Final = 180.0
_EXECUTE: Final = (
    "import sys, urllib.request as u\n"
    "r = u.Request('http://127.0.0.1:{port}/execute', data=sys.stdin.buffer.read(),"
    " headers={{'Content-Type': 'application/json'}})\n"
    "with u.urlopen(r, timeout={timeout}) as a:\n"
    "    for line in a: sys.stdout.buffer.write(line)\n"
)


def _state(obj: dict[str, Any]) -> str:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Suspended" and condition.get("status") == "True":
            return "suspended"
        if condition.get("type") == "Ready":
            return "ready" if condition.get("status") == "True" else "not ready"
    return "pending"


def _info(obj: dict[str, Any]) -> SandboxInfo:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    lifecycle = (obj.get("spec") or {}).get("lifecycle") or {}
    owner = next(
        (o["name"] for o in meta.get("ownerReferences") or [] if o.get("kind") == "SandboxClaim"),
        None,
    )
    details = {"namespace": str(meta.get("namespace", ""))}
    if owner:
        details["claim"] = owner
    return SandboxInfo(
        sandbox_id=str(meta.get("name", "")),
        state=_state(obj),
        template=labels.get("agents.x-k8s.io/sandbox-template-ref"),
        expires_at=lifecycle.get("shutdownTime"),
        details=details,
    )


class KubeBackend:
    """The sandboxes of the client's namespace, through :class:`AsyncSandboxClient`."""

    def __init__(self, client: AsyncSandboxClient) -> None:
        self.client = client

    async def _guard(self, sandbox_id: str | None, call: Awaitable[T]) -> T:
        """Await ``call``, turning SDK errors into messages a model can act on."""
        try:
            return await call
        except NotFoundError as exc:
            if sandbox_id is not None and not await self._exists(sandbox_id):
                raise SandboxGone(sandbox_id) from exc
            raise ToolFailure(str(exc)) from exc
        except SandboxFailedError as exc:
            if exc.reason == "SandboxExpired" and sandbox_id is not None:
                raise SandboxGone(sandbox_id, "shutdown time reached") from exc
            raise ToolFailure(f"the sandbox failed: {exc}") from exc
        except PermissionDeniedError as exc:
            raise ToolFailure(f"permission denied by the cluster: {exc}") from exc
        except ExecFailedError as exc:
            raise ToolFailure(f"the command could not run in the sandbox: {exc}") from exc
        except SandboxTimeoutError as exc:
            raise ToolFailure(f"timed out: {exc}") from exc
        except (SandboxError, ValueError) as exc:
            raise ToolFailure(str(exc)) from exc

    async def _exists(self, name: str) -> bool:
        try:
            await self.client.get(name)
        except NotFoundError:
            return False
        return True

    async def get_sandbox(
        self, source: Source, name: str, *, timeout_seconds: int, env: dict[str, str]
    ) -> SandboxInfo:
        """Claim from the warm pool ``name``, or create from the SandboxTemplate ``name``."""
        if source == "pool":
            box = await self._guard(
                None,
                self.client.claim_sandbox(
                    name, env=env or None, shutdown_after_seconds=timeout_seconds
                ),
            )
        else:
            template = await self._guard(
                None, self.client._get(SANDBOX_TEMPLATES, name, namespace=self.client.namespace)
            )
            pod_template = (template.get("spec") or {}).get("podTemplate") or {}
            manifest = {"spec": {"podTemplate": pod_template}}
            box = await self._guard(
                None,
                self.client.create_sandbox(
                    manifest, shutdown_after_seconds=timeout_seconds, timeout=READY_TIMEOUT
                ),
            )
        return await self.describe(box.name)

    async def list_sandboxes(self) -> list[SandboxInfo]:
        """The Sandboxes of the namespace."""
        objs = await self._guard(None, self.client.list_sandboxes())
        return [_info(obj) for obj in objs]

    async def describe(self, sandbox_id: str) -> SandboxInfo:
        """One Sandbox."""
        try:
            return _info(await self.client.get(sandbox_id))
        except NotFoundError as exc:
            raise ToolFailure(
                f"no sandbox {sandbox_id!r} in namespace {self.client.namespace!r}: it never "
                "existed, expired or was deleted. list_sandboxes shows yours"
            ) from exc

    async def run_command(
        self,
        sandbox_id: str,
        command: str,
        *,
        time_limit: float,
        cwd: str | None,
        env: dict[str, str],
    ) -> CommandOutput:
        """``sh -c`` over exec, after ``cd`` and ``export`` when asked."""
        prefix = "".join(f"export {k}={shlex.quote(v)}; " for k, v in env.items())
        if cwd:
            prefix += f"cd {shlex.quote(cwd)} && "
        argv = ["sh", "-c", prefix + command]
        try:
            result = await self._guard(
                sandbox_id,
                self.client.exec(sandbox_id, argv, timeout=time_limit, kill_on_timeout=True),
            )
        except ToolFailure as exc:
            cause = exc.__cause__
            if isinstance(cause, ExecTimeoutError):
                out, err = cause.stdout.decode(errors="replace"), cause.stderr.decode("replace")
                return CommandOutput(None, out, err, timed_out=True)
            raise
        return CommandOutput(result.exit_code, result.stdout, result.stderr)

    async def run_code(
        self, sandbox_id: str, code: str, *, language: str, time_limit: float
    ) -> CodeOutput:
        """POST the code to the interpreter on the sandbox's loopback, from inside it."""
        script = _EXECUTE.format(port=interpreter.INTERPRETER_PORT, timeout=time_limit)
        body = json.dumps(interpreter.execute_body(code, language, time_limit))
        result = await self._guard(
            sandbox_id,
            self.client.exec(
                sandbox_id, ["python3", "-c", script], stdin=body, timeout=time_limit + 10
            ),
        )
        if result.exit_code != 0:
            raise ToolFailure(
                "the sandbox's code interpreter did not answer (does its image run "
                f"sandboxd-interpreter on port {interpreter.INTERPRETER_PORT}?): "
                + result.stderr[-500:]
            )
        return interpreter.read_events(result.stdout.splitlines())

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        """The file's bytes."""
        return await self._guard(sandbox_id, self.client.read_file(sandbox_id, path))

    async def write_file(self, sandbox_id: str, path: str, data: bytes) -> None:
        """Write (parents created)."""
        await self._guard(sandbox_id, self.client.write_file(sandbox_id, path, data))

    async def list_files(self, sandbox_id: str, path: str) -> list[FileEntry]:
        """The directory's entries."""
        entries = await self._guard(sandbox_id, self.client.list_files(sandbox_id, path))
        base = path.rstrip("/")
        return [FileEntry(e.name, f"{base}/{e.name}", e.type, e.size) for e in entries]

    async def delete_file(self, sandbox_id: str, path: str) -> None:
        """Remove recursively."""
        await self._guard(sandbox_id, self.client.delete_file(sandbox_id, path, recursive=True))

    async def suspend(self, sandbox_id: str) -> None:
        """Suspend and wait until the pod is gone."""
        await self._guard(sandbox_id, self.client.suspend(sandbox_id))

    async def resume(self, sandbox_id: str) -> None:
        """Resume and wait until Ready."""
        await self._guard(sandbox_id, self.client.resume(sandbox_id))

    async def delete(self, sandbox_id: str) -> None:
        """Delete the claim that owns the Sandbox, else the Sandbox."""
        claim = (await self.describe(sandbox_id)).details.get("claim")
        handle = self.client.sandbox(sandbox_id, claim_name=claim)
        await self._guard(sandbox_id, handle.terminate(wait=False))
