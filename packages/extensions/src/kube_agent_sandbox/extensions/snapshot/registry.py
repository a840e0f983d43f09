"""A client of the OCI distribution API: the calls a snapshot needs, and nothing more.

Pushing an image is: each blob (layers, then the config) unless the registry has it already
(``HEAD``), by a monolithic upload (``POST`` a session, ``PUT`` the bytes with their digest),
then the manifest under a tag (``PUT``), whose digest the registry answers with. Deleting a
snapshot deletes its manifest by digest. Authentication follows the registry's challenge:
``Basic`` sends the credentials, ``Bearer`` trades them for a token at the realm it names
(distribution's token flow), once per scope.

Credentials come from a ``kubernetes.io/dockerconfigjson`` Secret, the kind a Pod's
``imagePullSecrets`` names, so one Secret serves the push and the pull: either its ``data`` or
its ``.dockerconfigjson`` key mounted as a file.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import re
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import urljoin

import aiohttp

MANIFEST_MEDIA_TYPES: Final = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
_CHUNK: Final = 1 << 20
_REPOSITORY = re.compile(
    r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$"
)
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[a-f0-9]{64}$")


class RegistryError(RuntimeError):
    """The registry refused or failed a request; the message names the call and its answer.

    Attributes:
        status: HTTP status (0 when the registry could not be reached).
        body: The registry's answer, up to 4 KiB (the message keeps only its start; a storage
            error's detail, with its long path, comes after).
    """

    def __init__(self, message: str, *, status: int = 0, body: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.body = body


@dataclass(frozen=True)
class Credentials:
    """A user name and password (or token) for one registry."""

    username: str
    password: str


def check_repository(name: str) -> str:
    """Return ``name`` when it is a valid repository path (lower case, ``/``-separated)."""
    if not _REPOSITORY.match(name) or len(name) > 255:
        raise ValueError(f"invalid repository name {name!r}: lower-case path components only")
    return name


def check_reference(reference: str) -> str:
    """Return ``reference`` when it is a valid tag or ``sha256:`` digest."""
    if not (_TAG.match(reference) or _DIGEST.match(reference)):
        raise ValueError(f"invalid tag or digest {reference!r}")
    return reference


def credentials_from_dockerconfig(
    secret_data: Mapping[str, str], registry_host: str
) -> Credentials | None:
    """The credentials for ``registry_host`` in a dockerconfigjson Secret's ``data``.

    Args:
        secret_data: The Secret's ``data`` (base64 values), with ``.dockerconfigjson``.
        registry_host: ``host[:port]`` as image references name the registry.

    Returns:
        The credentials, or None when the Secret has none for that registry.

    Raises:
        ValueError: The Secret is not a readable dockerconfigjson.
    """
    encoded = secret_data.get(".dockerconfigjson")
    if encoded is None:
        raise ValueError("the Secret has no .dockerconfigjson key (type dockerconfigjson)")
    try:
        raw = base64.b64decode(encoded, validate=True)
    except ValueError as err:
        raise ValueError(f"the Secret's .dockerconfigjson is not valid: {err}") from err
    return credentials_from_dockerconfig_json(raw, registry_host)


def credentials_from_dockerconfig_json(raw: bytes, registry_host: str) -> Credentials | None:
    """The credentials for ``registry_host`` in a ``.dockerconfigjson`` document (a mounted
    Secret's file, or its decoded ``data``).

    Raises:
        ValueError: The document is not a readable dockerconfigjson.
    """
    try:
        config = json.loads(raw)
        auths = config["auths"]
        if not isinstance(auths, dict):
            raise TypeError("auths is not an object")
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"the Secret's .dockerconfigjson is not valid: {err}") from err
    for key, entry in auths.items():
        host = re.sub(r"^https?://", "", str(key)).split("/", 1)[0]
        if host != registry_host or not isinstance(entry, dict):
            continue
        if "username" in entry and "password" in entry:
            return Credentials(str(entry["username"]), str(entry["password"]))
        if "auth" in entry:
            try:
                user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
            except ValueError as err:
                raise ValueError(f"the auth of {host} is not base64 user:password") from err
            return Credentials(user, password)
    return None


def _challenge(header: str) -> tuple[str, dict[str, str]]:
    scheme, _, rest = header.partition(" ")
    params = dict(re.findall(r'(\w+)="([^"]*)"', rest))
    return scheme.lower(), params


def sha256_digest(data: bytes) -> str:
    """``sha256:<hex>`` of ``data``."""
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


class RegistryClient:
    """Talks to one registry (``https://host[:port]`` or ``http://``), one session for all calls."""

    def __init__(
        self,
        url: str,
        *,
        credentials: Credentials | None = None,
        ssl_context: ssl.SSLContext | None = None,
        timeout: float = 300.0,
    ) -> None:
        """Prepare a client; the connection opens on first use.

        Args:
            url: The registry's base URL, without ``/v2``.
            credentials: Sent when the registry asks (None: anonymous).
            ssl_context: Trust for its certificate (the system's when None).
            timeout: Seconds for each request, uploads included.
        """
        self.url = url.rstrip("/")
        self._credentials = credentials
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None
        self._authorization: dict[str, str] = {}

    @property
    def credentials(self) -> Credentials | None:
        """What this client sends when the registry asks (None: anonymous)."""
        return self._credentials

    async def __aenter__(self) -> RegistryClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connections."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self._ssl), timeout=self._timeout
            )
        return self._session

    async def _authorize(self, challenge: str, scope_key: str) -> None:
        if self._credentials is None:
            raise RegistryError(f"{self.url} asks for credentials and none were given", status=401)
        scheme, params = _challenge(challenge)
        basic = aiohttp.encode_basic_auth(self._credentials.username, self._credentials.password)
        if scheme == "basic":
            self._authorization[scope_key] = basic
            return
        if scheme != "bearer" or "realm" not in params:
            raise RegistryError(f"{self.url} asks for an unknown authentication: {challenge!r}")
        query = {k: v for k, v in params.items() if k in ("service", "scope")}
        headers = {"Authorization": basic}
        async with self._http().get(params["realm"], params=query, headers=headers) as response:
            body = await response.read()
            if response.status != 200:
                raise RegistryError(
                    f"token server {params['realm']} refused the credentials: "
                    f"{response.status} {body[:200]!r}",
                    status=response.status,
                )
        token = json.loads(body).get("token") or json.loads(body).get("access_token")
        if not token:
            raise RegistryError(f"token server {params['realm']} answered no token")
        self._authorization[scope_key] = f"Bearer {token}"

    async def _request(
        self,
        method: str,
        path_or_url: str,
        *,
        repository: str,
        expected: tuple[int, ...],
        headers: Mapping[str, str] | None = None,
        body: bytes | Path | None = None,
    ) -> tuple[int, Mapping[str, str], bytes]:
        """One call, answering a 401 challenge once; returns status, headers and body."""
        url = (
            urljoin(self.url + "/", path_or_url.lstrip("/"))
            if "://" not in path_or_url
            else path_or_url
        )
        for attempt in range(2):
            sent = dict(headers or {})
            if repository in self._authorization:
                sent["Authorization"] = self._authorization[repository]
            data: Any = body
            if isinstance(body, Path):
                data = _file_chunks(body)
                size = (await asyncio.to_thread(body.stat)).st_size
                sent["Content-Length"] = str(size)
            try:
                async with self._http().request(method, url, headers=sent, data=data) as response:
                    content = await response.read()
                    status, answer = response.status, response.headers
            except aiohttp.ClientError as err:
                raise RegistryError(f"{method} {url}: {err}") from err
            if status == 401 and attempt == 0 and "WWW-Authenticate" in answer:
                await self._authorize(answer["WWW-Authenticate"], repository)
                continue
            if status == 401 and attempt == 1:
                self._authorization.pop(repository, None)
                break
            if status not in expected:
                raise RegistryError(
                    f"{method} {url} answered {status}: {content[:300].decode(errors='replace')}",
                    status=status,
                    body=content[:4096].decode(errors="replace"),
                )
            return status, answer, content
        raise RegistryError(f"{method} {url}: the credentials were refused", status=401)

    async def has_blob(self, repository: str, digest: str) -> bool:
        """Whether the repository holds the blob."""
        status, _, _ = await self._request(
            "HEAD",
            f"/v2/{check_repository(repository)}/blobs/{check_reference(digest)}",
            repository=repository,
            expected=(200, 404),
        )
        return status == 200

    async def push_blob(self, repository: str, digest: str, content: bytes | Path) -> bool:
        """Upload a blob unless the repository has it; True when it was uploaded.

        Raises:
            RegistryError: The upload failed, or the registry computed another digest.
        """
        if await self.has_blob(repository, digest):
            return False
        _, answer, _ = await self._request(
            "POST",
            f"/v2/{check_repository(repository)}/blobs/uploads/",
            repository=repository,
            expected=(202,),
        )
        location = answer.get("Location")
        if not location:
            raise RegistryError(f"{self.url} started an upload without a Location")
        location = urljoin(self.url + "/", location)
        separator = "&" if "?" in location else "?"
        try:
            _, done, _ = await self._request(
                "PUT",
                f"{location}{separator}digest={digest}",
                repository=repository,
                expected=(201,),
                headers={"Content-Type": "application/octet-stream"},
                body=content,
            )
        except RegistryError as err:
            await self._cancel_upload(repository, location)
            # The size tells a registry short of space how much more it needs.
            size = (
                len(content)
                if isinstance(content, bytes)
                else (await asyncio.to_thread(content.stat)).st_size
            )
            raise RegistryError(
                f"uploading {size} bytes: {err}", status=err.status, body=err.body
            ) from err
        stored = done.get("Docker-Content-Digest")
        if stored is not None and stored != digest:
            raise RegistryError(f"{self.url} stored blob {digest} as {stored}")
        return True

    async def _cancel_upload(self, repository: str, location: str) -> None:
        """Cancel a failed upload so the registry drops what it stored of it (a full registry
        would keep the partial blob until its upload purge, days later); best effort.

        The status query comes first: its Location carries the upload's current offset, which
        distribution checks on a DELETE (the first Location says 0).
        """
        with contextlib.suppress(RegistryError):
            _, answer, _ = await self._request(
                "GET", location, repository=repository, expected=(204,)
            )
            current = urljoin(self.url + "/", answer.get("Location") or location)
            await self._request("DELETE", current, repository=repository, expected=(202, 204, 404))

    async def put_manifest(
        self, repository: str, reference: str, manifest: bytes, media_type: str
    ) -> str:
        """Store a manifest under a tag (or its digest); return its digest.

        Raises:
            RegistryError: The registry refused it or answered another digest.
        """
        digest = sha256_digest(manifest)
        _, answer, _ = await self._request(
            "PUT",
            f"/v2/{check_repository(repository)}/manifests/{check_reference(reference)}",
            repository=repository,
            expected=(201,),
            headers={"Content-Type": media_type},
            body=manifest,
        )
        stored = answer.get("Docker-Content-Digest")
        if stored is not None and stored != digest:
            raise RegistryError(f"{self.url} stored the manifest as {stored}, not {digest}")
        return digest

    async def get_manifest(self, repository: str, reference: str) -> tuple[bytes, str, str]:
        """A manifest's bytes, media type and digest.

        Raises:
            RegistryError: It does not exist (status 404) or cannot be read.
        """
        _, answer, content = await self._request(
            "GET",
            f"/v2/{check_repository(repository)}/manifests/{check_reference(reference)}",
            repository=repository,
            expected=(200,),
            headers={"Accept": ", ".join(MANIFEST_MEDIA_TYPES)},
        )
        media_type = answer.get("Content-Type", "").split(";")[0]
        return content, media_type, sha256_digest(content)

    async def get_blob(self, repository: str, digest: str) -> bytes:
        """A blob's bytes, checked against its digest.

        Raises:
            RegistryError: It does not exist, or its bytes do not match the digest.
        """
        _, _, content = await self._request(
            "GET",
            f"/v2/{check_repository(repository)}/blobs/{check_reference(digest)}",
            repository=repository,
            expected=(200,),
        )
        if sha256_digest(content) != digest:
            raise RegistryError(f"blob {digest} of {repository} does not match its digest")
        return content

    async def delete_manifest(self, repository: str, digest: str) -> bool:
        """Delete a manifest by digest; False when it was already gone.

        Raises:
            RegistryError: The registry refused (e.g. 405 when deletion is disabled).
        """
        status, _, _ = await self._request(
            "DELETE",
            f"/v2/{check_repository(repository)}/manifests/{check_reference(digest)}",
            repository=repository,
            expected=(202, 404),
        )
        return status == 202


async def _file_chunks(path: Path) -> AsyncIterator[bytes]:
    # A layer can be larger than memory allows: stream it, reading off the event loop.
    with path.open("rb") as source:
        while chunk := await asyncio.to_thread(source.read, _CHUNK):
            yield chunk
