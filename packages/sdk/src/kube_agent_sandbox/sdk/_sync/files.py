# Generated from _async/files.py by scripts/unasync_sdk.py: do not edit.
"""AsyncFileCalls: read, stream, write, list, test and delete files in a Sandbox, over the exec
API (any image with ``sh``, ``cat``, ``head`` and ``rm``). Each call is traced as upstream's
(spans ``read``, ``write``, ``list``, ``exists``, ``delete`` with ``sandbox.file.*``
attributes) when the client traces.

Hand-written source: ``_sync/files.py`` is generated from it by ``scripts/unasync_sdk.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import BinaryIO

from kube_agent_sandbox.sdk import execproto
from kube_agent_sandbox.sdk._sync.exec import STDIN_CHUNK, ExecCalls, ExecSession
from kube_agent_sandbox.sdk.errors import ExecFailedError, ExecTimeoutError, NotFoundError
from kube_agent_sandbox.sdk.execproto import ExecResult, FileEntry


class FileCalls(ExecCalls):
    """The file calls of :class:`~kube_agent_sandbox.sdk.SandboxClient`."""

    def read_file(
        self, name: str, path: str, *, namespace: str | None = None, timeout: float | None = 300.0
    ) -> bytes:
        """The bytes of ``path`` in the Sandbox (binary safe).

        Raises:
            NotFoundError: no such file.
        """
        with self._tracer.span("read", _file_attributes(name, path)):
            result = self.exec(name, ["cat", "--", path], namespace=namespace, timeout=timeout)
            _check_file_result(result, path)
            self._tracer.set_attributes({"sandbox.file.size": len(result.stdout_bytes)})
        return result.stdout_bytes

    def download(
        self,
        name: str,
        path: str,
        target: BinaryIO,
        *,
        namespace: str | None = None,
        timeout: float | None = 600.0,
    ) -> int:
        """Stream ``path`` into ``target`` without holding it in memory; returns bytes copied."""
        copied = 0

        def sink(channel: int, chunk: bytes) -> None:
            nonlocal copied
            if channel == execproto.STDOUT:
                target.write(chunk)
                copied += len(chunk)

        with self._tracer.span("read", _file_attributes(name, path)):
            result = self._exec_streaming(name, ["cat", "--", path], namespace, timeout, sink)
            _check_file_result(result, path)
            self._tracer.set_attributes({"sandbox.file.size": copied})
        return copied

    def _exec_streaming(
        self,
        name: str,
        command: list[str],
        namespace: str | None,
        timeout: float | None,
        sink: Callable[[int, bytes], None],
    ) -> ExecResult:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.exec_session(name, command, namespace=namespace) as session:
            err = _read_to_end(
                session, deadline=deadline, timeout=timeout, running=f"{command!r}", sink=sink
            )
        if session.exit_code is None:
            raise ExecFailedError(f"exec stream of {command!r} ended without an exit status")
        return ExecResult(session.exit_code, b"", err)

    def write_file(
        self,
        name: str,
        path: str,
        content: bytes | str | BinaryIO,
        *,
        namespace: str | None = None,
        size: int | None = None,
        timeout: float | None = 600.0,
    ) -> None:
        """Create or replace ``path`` with ``content`` (bytes, text or a binary file object).

        A file object is streamed in chunks; its ``size`` is taken from ``seek``/``tell`` when
        not given. The remote side reads exactly that many bytes (``head -c``), so it works on
        servers without the v5 exec protocol too.
        """
        if isinstance(content, str):
            content = content.encode()
        if isinstance(content, bytes | bytearray):
            stream: BinaryIO | None = None
            total = len(content)
        else:
            stream = content
            if size is None:
                here = stream.tell()
                stream.seek(0, 2)
                size = stream.tell() - here
                stream.seek(here)
            total = size
        with self._tracer.span(
            "write", {**_file_attributes(name, path), "sandbox.file.size": total}
        ):
            self._write(name, path, content, total, namespace, timeout)

    def _write(
        self,
        name: str,
        path: str,
        content: bytes | bytearray | BinaryIO,
        total: int,
        namespace: str | None,
        timeout: float | None,
    ) -> None:
        command = ["sh", "-c", execproto.WRITE_SCRIPT, "sh", str(total), path]
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.exec_session(name, command, namespace=namespace, stdin=True) as session:
            if isinstance(content, bytes | bytearray):
                session.write(bytes(content))
            else:
                while chunk := content.read(STDIN_CHUNK):
                    session.write(chunk)
            session.close_stdin()
            err = _read_to_end(
                session, deadline=deadline, timeout=timeout, running=f"writing {path}"
            )
        code = session.exit_code
        if code != 0:
            message = err.decode("utf-8", "replace").strip()
            raise ExecFailedError(f"cannot write {path}: {message or f'exit code {code}'}")

    def list_files(
        self, name: str, path: str, *, namespace: str | None = None, timeout: float | None = 60.0
    ) -> list[FileEntry]:
        """The entries of directory ``path``.

        Raises:
            NotFoundError: no such directory.
        """
        with self._tracer.span("list", _file_attributes(name, path)):
            result = self.exec(
                name,
                ["sh", "-c", execproto.LIST_SCRIPT, "sh", path],
                namespace=namespace,
                timeout=timeout,
            )
            if result.exit_code == 2:
                raise NotFoundError(f"no such directory: {path}", 404, reason="NotFound")
            if result.exit_code != 0:
                raise ExecFailedError(f"cannot list {path}: {result.stderr.strip()}")
            entries = execproto.parse_listing(result.stdout)
            self._tracer.set_attributes({"sandbox.file.count": len(entries)})
        return entries

    def file_exists(
        self, name: str, path: str, *, namespace: str | None = None, timeout: float | None = 60.0
    ) -> bool:
        """Whether ``path`` exists in the Sandbox."""
        with self._tracer.span("exists", _file_attributes(name, path)):
            result = self.exec(name, ["test", "-e", path], namespace=namespace, timeout=timeout)
            exists = result.exit_code == 0
            self._tracer.set_attributes({"sandbox.file.exists": exists})
        return exists

    def delete_file(
        self,
        name: str,
        path: str,
        *,
        namespace: str | None = None,
        recursive: bool = False,
        timeout: float | None = 60.0,
    ) -> None:
        """Remove ``path`` (a directory tree only with ``recursive``).

        Raises:
            NotFoundError: no such file.
        """
        with self._tracer.span("delete", _file_attributes(name, path)):
            if not self.file_exists(name, path, namespace=namespace, timeout=timeout):
                raise NotFoundError(f"no such file: {path}", 404, reason="NotFound")
            command = ["rm", "-rf", "--", path] if recursive else ["rm", "-f", "--", path]
            result = self.exec(name, command, namespace=namespace, timeout=timeout)
            if result.exit_code != 0:
                raise ExecFailedError(f"cannot delete {path}: {result.stderr.strip()}")


def _read_to_end(
    session: ExecSession,
    *,
    deadline: float | None,
    timeout: float | None,
    running: str,
    sink: Callable[[int, bytes], None] | None = None,
) -> bytes:
    """Read ``session`` until its streams end, passing each chunk to ``sink``; return stderr.

    Raises:
        ExecTimeoutError: ``deadline`` passed first (``running`` names what was running).
    """
    err: list[bytes] = []
    while True:
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            raise ExecTimeoutError(f"{running} still running after {timeout:g}s")
        try:
            chunk = session.read(remaining)
        except TimeoutError:
            continue
        if chunk is None:
            return b"".join(err)
        if chunk[0] == execproto.STDERR:
            err.append(chunk[1])
        if sink is not None:
            sink(chunk[0], chunk[1])


def _file_attributes(name: str, path: str) -> dict[str, str]:
    """The attributes of a file call's span (upstream's ``sandbox.file.path``)."""
    return {"sandbox.name": name, "sandbox.file.path": path}


def _check_file_result(result: ExecResult, path: str) -> None:
    if result.exit_code == 0:
        return
    message = result.stderr.strip()
    if "No such file" in message or "not found" in message.lower():
        raise NotFoundError(f"no such file: {path}", 404, reason="NotFound")
    raise ExecFailedError(f"cannot read {path}: {message or f'exit code {result.exit_code}'}")
