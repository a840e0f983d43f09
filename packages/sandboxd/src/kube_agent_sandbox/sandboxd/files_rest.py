"""``GET /files`` (download) and ``POST /files`` (upload), envd's REST file transfer.

Uploads are ``multipart/form-data`` (field ``file``, the file name is the target path unless the
``path`` query gives it) or a raw body (``application/octet-stream``, envd ≥ 0.5.7), optionally
``Content-Encoding: gzip``; they stream to disk. The answer lists what was written:
``[{"path", "name", "type": "file"}]``. Downloads are raw bytes, gzip-compressed on the fly when
the client asks for gzip specifically (see :func:`_wants_gzip`). Errors are envd's, as the
``e2b`` 2.63.0 client parses them (``docs/reference/sandboxd.md``):
``{"code": <status>, "message"}`` with 400 (bad path, directory), 401 (unknown user),
404 (missing), 507 (no space).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import posixpath
import stat
import zlib
from collections.abc import AsyncIterator
from typing import IO, Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse

from kube_agent_sandbox.sandboxd import file_metadata
from kube_agent_sandbox.sandboxd.filesystem_rpc import chown, make_dirs
from kube_agent_sandbox.sandboxd.init_state import DaemonState
from kube_agent_sandbox.sandboxd.multipart_parser import (
    MultipartError,
    MultipartParser,
    PartHeaders,
    boundary_of,
)
from kube_agent_sandbox.sandboxd.users import (
    BadPathError,
    UnknownUserError,
    User,
    resolve_path,
    resolve_user,
)

GZIP_CHUNK = 1024 * 1024
GZIP_LEVEL = 1


class FilesError(Exception):
    """An error answered with envd's JSON error body."""

    def __init__(self, status: int, message: str) -> None:
        """Create the error.

        Args:
            status: The HTTP status (also the body's ``code``).
            message: Human-readable text.
        """
        super().__init__(message)
        self.status = status
        self.message = message

    def response(self) -> Response:
        """The HTTP answer."""
        return JSONResponse({"code": self.status, "message": self.message}, self.status)


def api_error(status: int, message: str) -> Response:
    """An envd-style JSON error response."""
    return FilesError(status, message).response()


def os_error(exc: OSError, path: str) -> FilesError:
    """envd's answer for an OS error on ``path`` (404, 507, 403, 400 or 500)."""
    reason = exc.strerror or str(exc)
    if exc.errno == errno.ENOENT:
        return FilesError(404, f"path '{path}' does not exist")
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return FilesError(507, f"not enough disk space to write '{path}'")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return FilesError(403, f"permission denied: '{path}'")
    if exc.errno in (errno.EISDIR, errno.ENOTDIR, errno.ENAMETOOLONG, errno.ELOOP, errno.EINVAL):
        return FilesError(400, f"invalid path '{path}': {reason}")
    return FilesError(500, f"{path}: {reason}")


def _user(request: Request, state: DaemonState) -> User:
    try:
        return resolve_user(request.query_params.get("username"), default_user=state.default_user)
    except UnknownUserError as exc:
        raise FilesError(401, str(exc)) from exc


def _resolve(path: str | None, user: User) -> str:
    try:
        return resolve_path(path or "", user)
    except BadPathError as exc:
        raise FilesError(400, str(exc)) from exc


def _wants_gzip(header: str) -> bool:
    """Whether a download should be gzip-compressed.

    Only when the client asks for gzip specifically (``Accept-Encoding: gzip``, what the SDK's
    ``gzip=True`` sends). A generic list such as httpx's default ``gzip, deflate`` gets the raw
    bytes, which HTTP always allows: compressing in Python costs far more CPU than it saves on
    a pod network, and the SDK sends that default list on every download.
    """
    codings: list[str] = []
    for item in header.split(","):
        coding, _, params = item.strip().partition(";")
        coding = coding.strip().lower()
        if not coding:
            continue
        quality = params.strip().removeprefix("q=").strip()
        try:
            if quality and float(quality) <= 0:
                continue
        except ValueError:
            pass
        codings.append(coding)
    return bool(codings) and all(coding in ("gzip", "x-gzip") for coding in codings)


async def download(request: Request, state: DaemonState) -> Response:
    """``GET /files?path=&username=``: the file's bytes."""
    try:
        user = _user(request, state)
        path = _resolve(request.query_params.get("path"), user)
        try:
            info = os.stat(path)
        except OSError as exc:
            raise os_error(exc, path) from exc
        if stat.S_ISDIR(info.st_mode):
            raise FilesError(400, f"path '{path}' is a directory")
        if not stat.S_ISREG(info.st_mode):
            raise FilesError(400, f"path '{path}' is not a regular file")
        if not os.access(path, os.R_OK):
            raise FilesError(403, f"permission denied: '{path}'")
    except FilesError as exc:
        return exc.response()
    name = posixpath.basename(path)
    if _wants_gzip(request.headers.get("accept-encoding", "")):
        return StreamingResponse(
            _gzip_file(path),
            media_type="application/octet-stream",
            headers={
                "Content-Encoding": "gzip",
                "Content-Disposition": f'attachment; filename="{_quote(name)}"',
                "Vary": "Accept-Encoding",
            },
        )
    return FileResponse(
        path,
        media_type="application/octet-stream",
        filename=name,
        stat_result=info,
        content_disposition_type="attachment",
    )


def _quote(name: str) -> str:
    return name.replace("\\", "\\\\").replace('"', '\\"')


def _read_compressed(handle: IO[bytes], compressor: Any) -> bytes | None:
    """Read and compress the next chunk (runs in a worker thread); None at the end."""
    chunk = handle.read(GZIP_CHUNK)
    if not chunk:
        return None
    return bytes(compressor.compress(chunk))


async def _gzip_file(path: str) -> AsyncIterator[bytes]:
    # Level 1: clients send "Accept-Encoding: gzip" by default (httpx does), so compression must
    # cost little; it runs off the event loop.
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)
    handle = await asyncio.to_thread(open, path, "rb")
    try:
        while True:
            compressed = await asyncio.to_thread(_read_compressed, handle, compressor)
            if compressed is None:
                break
            if compressed:
                yield compressed
        yield compressor.flush()
    finally:
        await asyncio.to_thread(handle.close)


class _Target:
    """One file being written by an upload."""

    def __init__(self, path: str, user: User, metadata: dict[str, str] | None = None) -> None:
        self.path = path
        self.user = user
        self.metadata = metadata or {}
        self.created = False
        self.handle: IO[bytes] | None = None

    def open(self) -> None:
        if os.path.isdir(self.path):
            raise FilesError(400, f"path '{self.path}' is a directory")
        parent = posixpath.dirname(self.path)
        try:
            if parent:
                make_dirs(parent, self.user)
            self.created = not os.path.lexists(self.path)
            self.handle = open(self.path, "wb")  # noqa: SIM115 - closed in finish()/abort()
        except OSError as exc:
            if exc.errno == errno.ENOTDIR:
                raise FilesError(400, f"a parent of '{self.path}' is not a directory") from exc
            raise os_error(exc, self.path) from exc
        if self.created:
            chown(self.path, self.user)

    def write(self, data: bytes) -> None:
        assert self.handle is not None
        try:
            self.handle.write(data)
        except OSError as exc:
            raise os_error(exc, self.path) from exc

    def finish(self) -> dict[str, Any]:
        assert self.handle is not None
        try:
            self.handle.close()
        except OSError as exc:
            raise os_error(exc, self.path) from exc
        result: dict[str, Any] = {
            "path": self.path,
            "name": posixpath.basename(self.path),
            "type": "file",
        }
        if self.metadata:
            try:
                file_metadata.write(self.path, self.metadata)
            except OSError as exc:
                raise FilesError(
                    400, f"cannot store metadata on '{self.path}': {exc.strerror or exc}"
                ) from exc
            result["metadata"] = dict(self.metadata)
        return result

    def abort(self) -> None:
        if self.handle is not None:
            with contextlib.suppress(OSError):
                self.handle.close()
            if self.created:
                with contextlib.suppress(OSError):
                    os.unlink(self.path)


class _Decoder:
    """Undo ``Content-Encoding`` on the fly (identity or gzip)."""

    def __init__(self, encoding: str) -> None:
        encoding = encoding.strip().lower()
        if encoding in ("", "identity"):
            self._inflater = None
        elif encoding in ("gzip", "x-gzip"):
            self._inflater = zlib.decompressobj(wbits=47)  # gzip or zlib, auto-detected
        else:
            raise FilesError(400, f"unsupported Content-Encoding {encoding!r}")

    def feed(self, chunk: bytes) -> bytes:
        if self._inflater is None:
            return chunk
        try:
            data = self._inflater.decompress(chunk)
            while self._inflater.eof and self._inflater.unused_data:  # concatenated members
                rest = self._inflater.unused_data
                self._inflater = zlib.decompressobj(wbits=47)
                data += self._inflater.decompress(rest)
            return data
        except zlib.error as exc:
            raise FilesError(400, f"invalid gzip body: {exc}") from exc

    def finish(self) -> bytes:
        if self._inflater is None:
            return b""
        if not self._inflater.eof:
            raise FilesError(400, "invalid gzip body: truncated")
        return self._inflater.flush()


async def upload(request: Request, state: DaemonState) -> Response:
    """``POST /files?path=&username=``: write one or more files."""
    targets: list[_Target] = []
    written: list[dict[str, Any]] = []
    try:
        user = _user(request, state)
        try:
            metadata = file_metadata.from_headers(request.headers.items())
        except file_metadata.MetadataError as exc:
            raise FilesError(400, str(exc)) from exc
        decoder = _Decoder(request.headers.get("content-encoding", ""))
        content_type = request.headers.get("content-type", "")
        if content_type.split(";", 1)[0].strip().lower() == "multipart/form-data":
            written = await _upload_multipart(
                request, user, decoder, content_type, targets, metadata
            )
        else:
            target = _Target(_resolve(request.query_params.get("path"), user), user, metadata)
            targets.append(target)
            target.open()
            async for chunk in request.stream():
                data = decoder.feed(chunk)
                if data:
                    target.write(data)
            tail = decoder.finish()
            if tail:
                target.write(tail)
            written.append(target.finish())
            targets.clear()
    except FilesError as exc:
        for target in targets:
            target.abort()
        return exc.response()
    except ClientDisconnect:
        for target in targets:
            target.abort()
        return api_error(400, "the upload was interrupted")
    return JSONResponse(written)


async def _upload_multipart(
    request: Request,
    user: User,
    decoder: _Decoder,
    content_type: str,
    targets: list[_Target],
    metadata: dict[str, str],
) -> list[dict[str, Any]]:
    written: list[dict[str, Any]] = []
    query_path = request.query_params.get("path")
    current: list[_Target | None] = [None]

    def on_part(headers: PartHeaders) -> None:
        if headers.name != "file":
            current[0] = None
            return
        use_query = bool(query_path) and not written and not targets
        raw = query_path if use_query else headers.filename
        if not raw:
            raise FilesError(400, "a file part needs a file name (its target path) or ?path=")
        target = _Target(_resolve(raw, user), user, metadata)
        targets.append(target)
        target.open()
        current[0] = target

    def on_data(data: bytes) -> None:
        if current[0] is not None:
            current[0].write(data)

    def on_part_end() -> None:
        target = current[0]
        if target is not None:
            written.append(target.finish())
            targets.remove(target)
        current[0] = None

    try:
        parser = MultipartParser(
            boundary_of(content_type), on_part=on_part, on_data=on_data, on_part_end=on_part_end
        )
        async for chunk in request.stream():
            data = decoder.feed(chunk)
            if data:
                parser.feed(data)
        tail = decoder.finish()
        if tail:
            parser.feed(tail)
        parser.close()
    except MultipartError as exc:
        raise FilesError(400, f"invalid multipart body: {exc}") from exc
    if not written:
        raise FilesError(400, "the multipart body has no 'file' part")
    return written
