"""envd's surface over ``pods/exec``, for sandboxes whose image has no daemon.

What the E2B SDK needs of envd, answered by running small commands in the sandbox container
through the Kubernetes exec API (:mod:`.podexec`, scripts in :mod:`.execscripts`, answers in
envd's wire shapes from :mod:`.execwire`):

- ``GET /health`` → 204;
- ``process.Process/Start`` → ``sh`` starts the command (``bash -l -c ...`` from the SDK),
  its stdout/stderr are streamed as Connect frames as they arrive, the exit code comes from the
  exec status channel; ``process.Process/List`` → no processes (exec keeps none);
- ``GET /files`` → ``cat``, streamed; ``POST /files`` (multipart or octet-stream) → ``cat >
  file`` with stdin closed through v5's close channel, streamed from the request;
- ``POST /files/compose`` → ``cat`` of the sources into a temporary file, ``mv`` over the
  destination, ``rm`` of the sources;
- ``process.Process/Start`` with ``stdin: true`` keeps the exec stream's stdin open and feeds
  it from a FIFO in the container (:mod:`.execinput`): ``SendInput`` and each data message of
  ``StreamInput`` write to the FIFO, ``CloseStdin`` ends it (stdin closed through v5), from any
  gateway replica; ``process.Process/SendSignal`` → ``kill`` of the PID and its descendants;
- ``process.Process/Start`` with ``pty`` runs the command on the exec API's terminal
  (``tty=true``, its first size set through the resize channel): output as ``pty`` data,
  ``SendInput`` with ``input.pty`` types into it through the same FIFO, ``Update`` resizes it
  with ``stty`` on the terminal (the kernel sends SIGWINCH), from any gateway replica;
- ``filesystem.Filesystem/{Stat, ListDir, MakeDir, Remove, Move}`` → ``stat``/``find``/
  ``mkdir``/``rm``/``mv``.

Limits (documented): every call costs an apiserver and kubelet round trip; commands run as the
container's user (``username`` is ignored); stdin and PTYs need ``mkfifo``, ``head`` and
``stty -F`` in the image and a writable ``/tmp``; no reattach, watch or port forwarding. A client
that disconnects from a running command has it killed.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import posixpath
import zlib
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from starlette.responses import Response

from kube_agent_sandbox.controller.runtime import ClusterConfig
from kube_agent_sandbox.gateway.dataplane import execinput
from kube_agent_sandbox.gateway.dataplane import execscripts as scripts
from kube_agent_sandbox.gateway.dataplane.execwire import (
    CONNECT_STATUS,
    ExecFailure,
    body_chunks,
    connect_error,
    envelope,
    header,
    query,
    read_body,
    read_envelopes,
    rest_error,
    take_envelopes,
)
from kube_agent_sandbox.gateway.dataplane.interfaces import (
    CommandOutput,
    CommandStream,
    PodCommands,
    Record,
)
from kube_agent_sandbox.gateway.dataplane.multipart import (
    MultipartError,
    PartStart,
    boundary_of,
    parts,
)
from kube_agent_sandbox.gateway.dataplane.podexec import PodExec, PodExecError, container_of
from kube_agent_sandbox.gateway.dataplane.proxy import Receive, Scope, Send
from kube_agent_sandbox.sdk import execproto

logger = logging.getLogger(__name__)

KEEPALIVE_SECONDS = 50.0
MAX_RPC_BODY = 1024 * 1024
STDIN_METHODS = frozenset({"/process.Process/SendInput", "/process.Process/CloseStdin"})
# process.Signal in proto3 JSON (name or number) → the name ``kill -s`` takes.
SIGNALS: dict[object, str] = {
    "SIGNAL_SIGTERM": "TERM",
    "SIGNAL_SIGKILL": "KILL",
    15: "TERM",
    9: "KILL",
}


class ExecFallback:
    """Serves envd's calls for pods without a daemon.

    Args:
        config: where the apiserver is and how to authenticate (the gateway's own client's).
        pod_exec: the exec opener (tests pass their own); built from ``config`` when omitted.

    Raises:
        ValueError: without ``config`` and without ``pod_exec``.
    """

    def __init__(
        self, config: ClusterConfig | None, *, pod_exec: PodCommands | None = None
    ) -> None:
        if pod_exec is None:
            if config is None:
                raise ValueError("the exec fallback needs a client with a cluster config")
            pod_exec = PodExec(config)
        self.pod_exec = pod_exec

    async def aclose(self) -> None:
        """Close the exec connection pool."""
        await self.pod_exec.aclose()

    async def handle(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        *,
        record: Record,
        on_stream: Callable[[bool], None] | None = None,
    ) -> None:
        """Answer one envd request for ``record``'s pod."""
        pod = record.pod or {}
        target = _Target(
            self.pod_exec,
            namespace=record.namespace,
            pod=str((pod.get("metadata") or {}).get("name") or ""),
            container=container_of(pod),
        )
        method = scope["method"]
        path = scope.get("path", "")
        response: Response | None
        try:
            if path == "/health" and method in ("GET", "HEAD"):
                response = Response(status_code=204)
            elif path == "/files" and method == "GET":
                response = await self._read_file(target, scope, send)
            elif path == "/files" and method == "POST":
                response = await self._write_files(target, scope, receive)
            elif path == "/files/compose" and method == "POST":
                response = await self._compose(target, receive)
            elif path == "/envs" and method == "GET":
                response = Response(b"{}", media_type="application/json")
            elif path == "/process.Process/Start" and method == "POST":
                response = await self._start(target, scope, receive, send, on_stream)
            elif path == "/process.Process/List" and method == "POST":
                await read_body(receive, MAX_RPC_BODY)
                response = Response(b"{}", media_type="application/json")
            elif path == "/process.Process/StreamInput" and method == "POST":
                response = await self._stream_input(target, scope, receive)
            elif path in STDIN_METHODS and method == "POST":
                response = await self._stdin(target, path.rsplit("/", 1)[1], receive)
            elif path == "/process.Process/Update" and method == "POST":
                response = await self._update(target, receive)
            elif path == "/process.Process/SendSignal" and method == "POST":
                response = await self._signal(target, receive)
            elif path.startswith("/filesystem.Filesystem/") and method == "POST":
                response = await self._filesystem(target, path.rsplit("/", 1)[1], receive)
            elif path.startswith(("/process.", "/filesystem.")):
                response = connect_error(
                    "unimplemented", f"{path} is not available without sandboxd in the image"
                )
            else:
                response = rest_error(404, f"{path} is not available without sandboxd")
        except ExecFailure as failure:
            if path.startswith(("/process.", "/filesystem.")):
                response = connect_error(failure.code, failure.message)
            else:
                response = rest_error(CONNECT_STATUS.get(failure.code, 500), failure.message)
        except PodExecError as err:
            logger.warning("exec fallback for %s/%s: %s", target.namespace, target.pod, err)
            response = rest_error(502, f"The sandbox could not be reached: {err}")
        if response is not None:
            await response(scope, receive, send)

    # -- files -------------------------------------------------------------------------------
    async def _read_file(self, target: _Target, scope: Scope, send: Send) -> Response | None:
        path = (query(scope).get("path") or [""])[0]
        if not path:
            return rest_error(400, "missing path")
        async with target.open(scripts.sh(scripts.READ_FILE, path)) as stream:
            first: bytes | None = None
            errors: list[bytes] = []
            while (chunk := await stream.read()) is not None:
                if chunk[0] == execproto.STDOUT:
                    first = chunk[1]
                    break
                errors.append(chunk[1])
            if first is None:
                code = stream.exit_code
                if code == 0:
                    return Response(b"", media_type="application/octet-stream")
                return _file_error(code, path, b"".join(errors), stream.failure)
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/octet-stream")],
                }
            )
            await send({"type": "http.response.body", "body": first, "more_body": True})
            while (chunk := await stream.read()) is not None:
                if chunk[0] == execproto.STDOUT:
                    await send({"type": "http.response.body", "body": chunk[1], "more_body": True})
            if stream.exit_code != 0:
                logger.warning("reading %s ended with %s", path, stream.exit_code)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        return None

    async def _write_files(self, target: _Target, scope: Scope, receive: Receive) -> Response:
        query_path = (query(scope).get("path") or [""])[0]
        content_type = header(scope, b"content-type")
        encoding = header(scope, b"content-encoding").lower()
        if any(name.lower().startswith(b"x-metadata-") for name, _ in scope["headers"]):
            # File metadata lives in extended attributes that only sandboxd writes; dropping
            # it would lose the user's data silently (the SDK raises on a 400).
            return rest_error(400, "file metadata needs sandboxd in the sandbox image")
        written: list[dict[str, str]] = []
        if content_type.startswith("multipart/"):
            try:
                boundary = boundary_of(content_type)
            except MultipartError as err:
                return rest_error(400, str(err))
            events = parts(body_chunks(receive), boundary)
            current: _Upload | None = None
            try:
                async for event in events:
                    if isinstance(event, PartStart):
                        if current is not None:
                            written.append(await current.finish())
                            current = None
                        if event.name != "file":
                            continue
                        dest = query_path or event.filename or ""
                        if not dest:
                            return rest_error(400, "missing path")
                        current = await _Upload.begin(target, dest)
                    elif current is not None:
                        await current.write(event)
                if current is not None:
                    written.append(await current.finish())
                    current = None
            except MultipartError as err:
                return rest_error(400, str(err))
            finally:
                if current is not None:
                    await current.abort()
        else:
            if not query_path:
                return rest_error(400, "missing path")
            upload = await _Upload.begin(target, query_path)
            try:
                inflate = zlib.decompressobj(wbits=31) if encoding == "gzip" else None
                async for chunk in body_chunks(receive):
                    await upload.write(inflate.decompress(chunk) if inflate else chunk)
                if inflate is not None:
                    await upload.write(inflate.flush())
            except zlib.error:
                await upload.abort()
                return rest_error(400, "invalid gzip body")
            except BaseException:
                await upload.abort()
                raise
            written.append(await upload.finish())
        return Response(json.dumps(written).encode(), media_type="application/json")

    async def _compose(self, target: _Target, receive: Receive) -> Response:
        """envd's ``POST /files/compose``: concatenate ``source_paths`` into ``destination``."""
        try:
            request = json.loads(await read_body(receive, MAX_RPC_BODY))
        except ValueError as err:
            return rest_error(400, f"invalid request body: {err}")
        if not isinstance(request, dict):
            return rest_error(400, "invalid request body: expected a JSON object")
        sources = request.get("source_paths")
        if sources is not None and (
            not isinstance(sources, list) or not all(isinstance(item, str) for item in sources)
        ):
            return rest_error(400, "invalid request body: source_paths must be a list of strings")
        destination = request.get("destination")
        if destination is not None and not isinstance(destination, str):
            return rest_error(400, "invalid request body: destination must be a string")
        if not sources:
            return rest_error(400, "source_paths must not be empty")
        if not destination:
            return rest_error(400, "destination is required")
        if any(not path or "\0" in path for path in [destination, *sources]):
            return rest_error(400, "paths must be non-empty and contain no NUL byte")
        output = await target.run(scripts.sh(scripts.COMPOSE, destination, *sources))
        if output.exit_code != 0:
            return _compose_error(output.exit_code, destination, output.stderr, output.failure)
        lines = output.stdout.decode("utf-8", "replace").splitlines()
        full = scripts.absolute(destination, lines[0] if lines and lines[0] else "/")
        body = {"path": full, "name": posixpath.basename(full), "type": "file"}
        return Response(json.dumps(body).encode(), media_type="application/json")

    # -- filesystem --------------------------------------------------------------------------
    async def _filesystem(self, target: _Target, method: str, receive: Receive) -> Response:
        try:
            request = json.loads(await read_body(receive, MAX_RPC_BODY) or b"{}")
        except ValueError:
            return connect_error("invalid_argument", "invalid JSON request")
        if not isinstance(request, dict):
            return connect_error("invalid_argument", "invalid JSON request")
        path = str(request.get("path") or "")
        if method == "Move":
            source = str(request.get("source") or "")
            dest = str(request.get("destination") or "")
            if not source or not dest:
                return connect_error("invalid_argument", "source and destination are required")
            argv = scripts.sh(scripts.MOVE, source, dest)
        elif not path:
            return connect_error("invalid_argument", "path is required")
        elif method == "Stat":
            argv = scripts.sh(scripts.STAT, path)
        elif method == "ListDir":
            depth = request.get("depth") or 1
            if not isinstance(depth, int) or isinstance(depth, bool) or not 0 < depth <= 64:
                return connect_error("invalid_argument", "depth must be between 1 and 64")
            argv = scripts.sh(scripts.LIST_DIR, path, str(depth))
        elif method == "MakeDir":
            argv = scripts.sh(scripts.MAKE_DIR, path)
        elif method == "Remove":
            argv = scripts.sh(scripts.REMOVE, path)
        else:
            return connect_error(
                "unimplemented", f"filesystem.Filesystem/{method} is not available without sandboxd"
            )
        output = await target.run(argv)
        subject = path or str(request.get("source") or "")
        if output.exit_code != 0:
            return _fs_error(output.exit_code, subject, output.stderr, output.failure)
        listing = scripts.parse_listing(output.stdout)
        if method == "ListDir":
            body: dict[str, Any] = {"entries": listing.entries}
        elif method == "Remove":
            body = {}
        elif listing.entries:
            body = {"entry": listing.entries[0]}
        else:
            return connect_error("internal", f"no entry for {subject}")
        return Response(json.dumps(body).encode(), media_type="application/json")

    # -- processes ---------------------------------------------------------------------------
    async def _start(
        self,
        target: _Target,
        scope: Scope,
        receive: Receive,
        send: Send,
        on_stream: Callable[[bool], None] | None,
    ) -> Response | None:
        if not header(scope, b"content-type").startswith("application/connect+json"):
            return connect_error("invalid_argument", "Start is a streaming call (connect+json)")
        try:
            messages = read_envelopes(await read_body(receive, MAX_RPC_BODY))
            request = messages[0] if messages else {}
            process = request.get("process") or {}
            argv = scripts.start_argv(
                str(process.get("cmd") or ""),
                [str(a) for a in process.get("args") or []],
                envs={str(k): str(v) for k, v in (process.get("envs") or {}).items()},
                cwd=str(process["cwd"]) if process.get("cwd") else None,
            )
        except (ValueError, TypeError, AttributeError) as err:
            return connect_error("invalid_argument", f"invalid Start request: {err}")
        size: tuple[int, int] | None = None
        if request.get("pty"):
            try:
                size = _pty_size(request["pty"])
            except ExecFailure as failure:
                return connect_error(failure.code, failure.message)
        # A terminal always has an input: SendInput with ``input.pty`` writes to it.
        stdin = request.get("stdin") is True or size is not None
        interval = KEEPALIVE_SECONDS
        with contextlib.suppress(ValueError):
            interval = max(1.0, float(header(scope, b"keepalive-ping-interval") or interval))
        async with (
            contextlib.AsyncExitStack() as relays,
            target.open(argv, stdin=stdin, tty=size is not None) as stream,
        ):

            async def started(pid: int) -> None:
                # Before the client learns the PID: its input may come through any replica.
                if stdin and pid > 0:
                    await relays.enter_async_context(
                        execinput.relay(target, stream, pid, tty=size is not None)
                    )

            if size is not None:
                await stream.resize(*size)
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/connect+json")],
                }
            )
            if on_stream is not None:
                on_stream(True)
            try:
                await _relay_process(
                    stream,
                    receive,
                    send,
                    interval=interval,
                    target=target,
                    on_start=started,
                    tty=size is not None,
                )
            finally:
                if on_stream is not None:
                    on_stream(False)
        return None

    async def _process_request(self, receive: Receive) -> tuple[dict[str, Any], int]:
        """A unary process request's JSON and the PID its ``process`` selector names.

        Raises:
            ExecFailure: malformed, or a selector without a PID (tags need sandboxd).
        """
        try:
            request = json.loads(await read_body(receive, MAX_RPC_BODY) or b"{}")
        except ValueError as err:
            raise ExecFailure("invalid_argument", "invalid JSON request") from err
        if not isinstance(request, dict):
            raise ExecFailure("invalid_argument", "invalid JSON request")
        return request, _pid_of(request)

    async def _stdin(self, target: _Target, method: str, receive: Receive) -> Response:
        """``SendInput`` and ``CloseStdin`` through the command's FIFO (:mod:`.execinput`)."""
        request, pid = await self._process_request(receive)
        if method == "CloseStdin":
            await execinput.close_input(target, pid)
        else:
            kind, data = _input_of(request.get("input"))
            await execinput.send_input(target, pid, kind, data)
        return Response(b"{}", media_type="application/json")

    async def _stream_input(self, target: _Target, scope: Scope, receive: Receive) -> Response:
        """``StreamInput``: ``start{process}``, then ``data{input}`` and ``keepalive`` messages,
        each data message written through the FIFO as it arrives."""
        if not header(scope, b"content-type").startswith("application/connect+json"):
            return connect_error(
                "invalid_argument", "StreamInput is a streaming call (connect+json)"
            )
        pid: int | None = None
        pending = b""
        try:
            async for chunk in body_chunks(receive):
                pending += chunk
                try:
                    messages, pending = take_envelopes(pending, limit=MAX_RPC_BODY)
                except ValueError as err:
                    raise ExecFailure(
                        "invalid_argument", f"invalid StreamInput message: {err}"
                    ) from err
                for message in messages:
                    if "start" in message:
                        if pid is not None:
                            raise ExecFailure("invalid_argument", "the stream was already started")
                        start = message["start"]
                        pid = _pid_of(start if isinstance(start, dict) else {})
                    elif "data" in message:
                        if pid is None:
                            raise ExecFailure("invalid_argument", "the first message must be start")
                        data = message["data"]
                        kind, payload = _input_of(
                            data.get("input") if isinstance(data, dict) else None
                        )
                        await execinput.send_input(target, pid, kind, payload)
                    elif "keepalive" not in message:
                        raise ExecFailure("invalid_argument", "unknown StreamInput message")
            if pending:
                raise ExecFailure("invalid_argument", "invalid StreamInput message: truncated")
            if pid is None:
                raise ExecFailure("invalid_argument", "the stream had no start message")
        except ExecFailure as failure:
            error = {"code": failure.code, "message": failure.message}
            body = envelope({"error": error}, end=True)
        else:
            body = envelope({}) + envelope({}, end=True)
        return Response(body, media_type="application/connect+json")

    async def _update(self, target: _Target, receive: Receive) -> Response:
        """``Update``: resize the terminal of a PTY started through any gateway replica."""
        request, pid = await self._process_request(receive)
        if not request.get("pty"):
            raise ExecFailure("invalid_argument", "pty.size is required")
        cols, rows = _pty_size(request["pty"])
        await execinput.resize_pty(target, pid, cols, rows)
        return Response(b"{}", media_type="application/json")

    async def _signal(self, target: _Target, receive: Receive) -> Response:
        request, pid = await self._process_request(receive)
        name = SIGNALS.get(request.get("signal"))
        if name is None:
            raise ExecFailure(
                "invalid_argument",
                f"unsupported signal {request.get('signal')!r} (SIGNAL_SIGTERM or SIGNAL_SIGKILL)",
            )
        output = await target.run(scripts.sh(scripts.SIGNAL_TREE, name, str(pid)))
        if output.exit_code == scripts.NOT_FOUND:
            raise ExecFailure("not_found", f"process with pid {pid} not found")
        if output.exit_code != 0:
            text = _stderr_text(output.stderr, output.failure)
            raise ExecFailure("internal", f"signalling pid {pid} failed: {text}")
        return Response(b"{}", media_type="application/json")


class _Target:
    """One pod's container, where the fallback's commands run."""

    def __init__(
        self, pod_exec: PodCommands, *, namespace: str, pod: str, container: str | None
    ) -> None:
        self.pod_exec = pod_exec
        self.namespace = namespace
        self.pod = pod
        self.container = container

    def open(
        self, argv: list[str], *, stdin: bool = False, tty: bool = False
    ) -> AbstractAsyncContextManager[CommandStream]:
        if not self.pod:
            raise PodExecError("the sandbox has no pod")
        return self.pod_exec.open(
            self.namespace, self.pod, argv, container=self.container, stdin=stdin, tty=tty
        )

    async def run(self, argv: list[str], *, stdin: bytes | None = None) -> CommandOutput:
        if not self.pod:
            raise PodExecError("the sandbox has no pod")
        return await self.pod_exec.run(
            self.namespace, self.pod, argv, container=self.container, stdin=stdin
        )


def _pid_of(request: dict[str, Any]) -> int:
    """The PID a request's ``process`` selector names.

    Raises:
        ExecFailure: no selector, a selector without a PID (tags need sandboxd), a bad PID.
    """
    selector = request.get("process")
    if not isinstance(selector, dict) or "pid" not in selector:
        if isinstance(selector, dict) and "tag" in selector:
            raise ExecFailure(
                "unimplemented", "selecting a process by tag needs sandboxd in the image"
            )
        raise ExecFailure("invalid_argument", "process.pid is required")
    pid = selector["pid"]
    if isinstance(pid, str) and pid.isdigit():
        pid = int(pid)
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        raise ExecFailure("invalid_argument", f"invalid process.pid {pid!r}")
    return pid


def _input_of(given: Any) -> tuple[str, bytes]:
    """``(kind, bytes)`` of a ``ProcessInput`` (``{"stdin": b64}`` or ``{"pty": b64}``).

    Raises:
        ExecFailure: neither field, or not base64.
    """
    field = "pty" if isinstance(given, dict) and "pty" in given else "stdin"
    if not isinstance(given, dict) or not isinstance(given.get(field, ""), str):
        raise ExecFailure("invalid_argument", "input.stdin (base64) is required")
    try:
        return field, base64.b64decode(given.get(field, ""), validate=True)
    except ValueError as err:
        raise ExecFailure("invalid_argument", f"input.{field} is not base64") from err


def _pty_size(pty: Any) -> tuple[int, int]:
    """``(cols, rows)`` of a request's ``pty`` (``{"size": {"cols": .., "rows": ..}}``).

    Raises:
        ExecFailure: when the size is missing or out of 1..65535.
    """
    size = pty.get("size") if isinstance(pty, dict) else None
    if not isinstance(size, dict):
        raise ExecFailure("invalid_argument", "pty.size is required")
    values = (size.get("cols"), size.get("rows"))
    if not all(isinstance(v, int) and not isinstance(v, bool) and 0 < v < 65536 for v in values):
        raise ExecFailure("invalid_argument", f"invalid pty.size {size!r} (cols and rows 1..65535)")
    return int(size["cols"]), int(size["rows"])


class _Upload:
    """One file being written with ``cat > file`` (stdin streamed, closed at the end)."""

    def __init__(
        self,
        path: str,
        context: AbstractAsyncContextManager[CommandStream],
        stream: CommandStream,
    ) -> None:
        self.path = path
        self._context = context
        self._stream = stream
        self._sent = 0

    @classmethod
    async def begin(cls, target: _Target, path: str) -> _Upload:
        context = target.open(scripts.sh(scripts.WRITE_FILE, path), stdin=True)
        stream = await context.__aenter__()
        if not stream.can_close_stdin:
            await context.__aexit__(None, None, None)
            raise ExecFailure(
                "unimplemented", "uploads need the v5 exec protocol (Kubernetes >= 1.30)"
            )
        return cls(path, context, stream)

    async def write(self, data: bytes) -> None:
        if data:
            await self._stream.write(data)
            self._sent += len(data)

    async def finish(self) -> dict[str, str]:
        try:
            await self._stream.close_stdin()
            out: list[bytes] = []
            err: list[bytes] = []
            while (chunk := await self._stream.read()) is not None:
                (out if chunk[0] == execproto.STDOUT else err).append(chunk[1])
            code = self._stream.exit_code
        finally:
            await self._context.__aexit__(None, None, None)
        if code != 0:
            detail = b"".join(err).decode("utf-8", "replace").strip()
            if code == scripts.IS_A_DIRECTORY:
                raise ExecFailure("invalid_argument", f"path is a directory: {self.path}")
            raise ExecFailure(
                "internal", f"writing {self.path} failed: {detail or self._stream.failure}"
            )
        lines = b"".join(out).decode("utf-8", "replace").splitlines()
        home = lines[0] if lines and lines[0] else "/"
        written = lines[1].strip() if len(lines) > 1 else ""
        if written != str(self._sent):
            raise ExecFailure(
                "internal", f"writing {self.path}: {written or 'no'} of {self._sent} bytes arrived"
            )
        full = scripts.absolute(self.path, home)
        return {"path": full, "name": posixpath.basename(full), "type": "file"}

    async def abort(self) -> None:
        await self._context.__aexit__(None, None, None)


async def _relay_process(
    stream: CommandStream,
    receive: Receive,
    send: Send,
    *,
    interval: float,
    target: _Target,
    on_start: Callable[[int], Awaitable[None]] | None = None,
    tty: bool = False,
) -> None:
    # The wrapper prints the PID first on stderr, which a terminal merges into stdout.
    pid_channel = execproto.STDOUT if tty else execproto.STDERR
    pid_prefix = execproto.PidPrefix()
    started = False

    async def frame(message: dict[str, Any], *, end: bool = False) -> None:
        await send(
            {"type": "http.response.body", "body": envelope(message, end=end), "more_body": not end}
        )

    async def pump() -> None:
        nonlocal started
        while (chunk := await stream.read()) is not None:
            channel, payload = chunk
            if channel == pid_channel:
                payload = pid_prefix.feed(payload)
                if pid_prefix.pid is not None and not started:
                    started = True
                    pid = int(pid_prefix.pid) if pid_prefix.pid.isdigit() else 0
                    if on_start is not None:
                        await on_start(pid)
                    await frame({"event": {"start": {"pid": pid}}})
                if not payload:
                    continue
            elif not started:
                started = True
                await frame({"event": {"start": {"pid": 0}}})
            key = "pty" if tty else "stdout" if channel == execproto.STDOUT else "stderr"
            data = base64.b64encode(payload).decode()
            await frame({"event": {"data": {key: data}}})

    async def keepalive() -> None:
        while True:
            await asyncio.sleep(interval)
            await frame({"event": {"keepalive": {}}})

    async def disconnected() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    pump_task = asyncio.ensure_future(pump())
    tasks = {pump_task, asyncio.ensure_future(keepalive()), asyncio.ensure_future(disconnected())}
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            if task is not pump_task:
                task.cancel()
    if not pump_task.done():
        # The client went away: stop the command like envd does when its stream is cancelled.
        pump_task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if pid_prefix.pid:
            with contextlib.suppress(Exception):
                await target.run(scripts.sh(scripts.SIGNAL_TREE, "KILL", pid_prefix.pid))
        return
    await asyncio.gather(*tasks, return_exceptions=True)
    pump_task.result()
    if not started:
        await frame({"event": {"start": {"pid": int(pid_prefix.pid or 0)}}})
    if stream.exit_code is None:
        message = stream.failure or "the command's exit status was lost"
        await frame({"error": {"code": "unknown", "message": message}}, end=True)
        return
    code = stream.exit_code
    end: dict[str, Any] = {"exited": True, "status": f"exit status {code}"}
    if code:
        end["exitCode"] = code
    await frame({"event": {"end": end}})
    await frame({}, end=True)


def _stderr_text(stderr: bytes, failure: str | None) -> str:
    return stderr.decode("utf-8", "replace").strip() or (failure or "")


def _file_error(code: int | None, path: str, stderr: bytes, failure: str | None) -> Response:
    if code == scripts.NOT_FOUND:
        return rest_error(404, f"path not found: {path}")
    if code == scripts.IS_A_DIRECTORY:
        return rest_error(400, f"path is a directory: {path}")
    text = _stderr_text(stderr, failure)
    if "Permission denied" in text:
        return rest_error(403, f"permission denied: {path}")
    return rest_error(500, f"reading {path} failed: {text}")


def _compose_error(code: int, destination: str, stderr: bytes, failure: str | None) -> Response:
    text = _stderr_text(stderr, failure)
    messages = {
        scripts.NOT_FOUND: (404, f"source file not found: {text}"),
        scripts.IS_A_DIRECTORY: (400, f"destination is a directory: {text}"),
        scripts.SOURCE_IS_A_DIRECTORY: (400, f"source path is a directory: {text}"),
        scripts.NOT_A_REGULAR_FILE: (400, f"source path is not a regular file: {text}"),
        scripts.SAME_FILE: (400, f"source path {text} cannot be the same as the destination"),
        scripts.NOT_A_DIRECTORY: (400, f"a parent of {destination} is not a directory: {text}"),
    }
    if code in messages:
        return rest_error(*messages[code])
    if "No space left" in text or "Disk quota exceeded" in text:
        return rest_error(507, f"not enough disk space to write {destination}")
    if "Permission denied" in text:
        return rest_error(403, f"permission denied: {text}")
    if "Not a directory" in text:
        return rest_error(400, f"a parent of {destination} is not a directory")
    return rest_error(500, f"composing {destination} failed: {text}")


def _fs_error(code: int, path: str, stderr: bytes, failure: str | None) -> Response:
    if code == scripts.NOT_FOUND:
        return connect_error("not_found", f"no such file or directory: {path}")
    if code == scripts.NOT_A_DIRECTORY:
        return connect_error("invalid_argument", f"path is not a directory: {path}")
    if code == scripts.ALREADY_EXISTS:
        return connect_error("already_exists", f"path already exists: {path}")
    text = _stderr_text(stderr, failure)
    if "Permission denied" in text:
        return connect_error("permission_denied", f"permission denied: {path}")
    return connect_error("internal", f"{path}: {text}")
