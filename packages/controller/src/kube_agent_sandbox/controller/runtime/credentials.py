"""Credentials that change while the controller runs: token files and exec plugins.

A static token or client certificate never changes and lives in
:class:`~kube_agent_sandbox.controller.runtime.config.ClusterConfig` directly. The sources here
are consulted before every request and must never block the event loop:

* :class:`TokenFileSource` re-reads a token file (the in-cluster service account token that the
  kubelet rotates, or a kubeconfig ``tokenFile``) once a minute, and at once after a 401.
* :class:`ExecSource` runs a client-go credential plugin
  (``client.authentication.k8s.io/v1`` or ``v1beta1`` ``ExecCredential``) as an asyncio
  subprocess, caches its answer until ``expirationTimestamp`` and runs it again after a 401.
  Concurrent requests share one run.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

logger = logging.getLogger(__name__)

EXEC_API_VERSIONS: Final = frozenset(
    {"client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"}
)
TOKEN_FILE_REREAD: Final = 60.0
"""Seconds a token read from a file is used before the file is read again (client-go: 1 min)."""
EXPIRY_MARGIN: Final = 10.0
"""An exec credential is refreshed this many seconds before its expirationTimestamp."""
EXEC_TIMEOUT: Final = 60.0
"""Seconds a credential plugin may run before it is killed."""


class CredentialError(Exception):
    """A credential source could not produce credentials (the message says why)."""


@dataclass(frozen=True)
class Credential:
    """What a source produced.

    Attributes:
        token: bearer token, if any.
        client_certificate: PEM client certificate (exec plugins only), if any.
        client_key: PEM key of ``client_certificate``.
        expires_at: wall-clock seconds after which the credential must be fetched again;
            None for "until the server rejects it".
    """

    token: str | None = None
    client_certificate: str | None = None
    client_key: str | None = None
    expires_at: float | None = None


class CredentialSource(Protocol):
    """Something that yields the current credential without blocking the loop."""

    async def credential(self) -> Credential:
        """The current credential (refreshed when due)."""
        ...

    def invalidate(self) -> None:
        """Forget the cached credential (the server answered 401)."""
        ...

    def cached(self) -> Credential | None:
        """The cached credential, without refreshing; None before the first fetch."""
        ...


class TokenFileSource:
    """A bearer token read from a file, re-read every :data:`TOKEN_FILE_REREAD` seconds.

    Args:
        path: the token file.
        reread: seconds between reads.
        clock: monotonic seconds.
    """

    def __init__(
        self,
        path: str,
        *,
        reread: float = TOKEN_FILE_REREAD,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.reread = reread
        self._clock = clock
        self._token: str | None = None
        self._read_at = 0.0

    def _read(self) -> str:
        try:
            with open(self.path, encoding="utf-8") as fh:
                token = fh.read().strip()
        except OSError as exc:
            raise CredentialError(f"cannot read token file {self.path}: {exc}") from exc
        if not token:
            raise CredentialError(f"token file {self.path} is empty")
        return token

    def load(self) -> str:
        """Read the file now (at start-up: a missing file is a configuration error)."""
        self._token = self._read()
        self._read_at = self._clock()
        return self._token

    async def credential(self) -> Credential:
        """The token, re-read when the cached copy is older than ``reread`` seconds."""
        if self._token is None or self._clock() - self._read_at >= self.reread:
            try:
                self.load()
            except CredentialError:
                if self._token is None:
                    raise
                logger.warning("cannot re-read token file %s, keeping the last token", self.path)
                self._read_at = self._clock()
        return Credential(token=self._token)

    def invalidate(self) -> None:
        """Re-read the file before the next request."""
        self._read_at = float("-inf")

    def cached(self) -> Credential | None:
        """The last token read, if any."""
        return None if self._token is None else Credential(token=self._token)


@dataclass
class ExecConfig:
    """The ``user.exec`` stanza of a kubeconfig.

    Attributes:
        command: the plugin executable.
        api_version: the ExecCredential version the plugin speaks.
        args: its arguments.
        env: extra environment variables.
        provide_cluster_info: pass the cluster in ``KUBERNETES_EXEC_INFO``.
        cluster: the cluster stanza (``server``, ``certificate-authority-data``...) when
            ``provide_cluster_info`` is set.
        install_hint: printed when the command cannot be found.
    """

    command: str
    api_version: str
    args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    provide_cluster_info: bool = False
    cluster: Mapping[str, Any] = field(default_factory=dict)
    install_hint: str = ""

    @classmethod
    def from_kubeconfig(
        cls, stanza: Mapping[str, Any], *, cluster: Mapping[str, Any]
    ) -> ExecConfig:
        """Parse and check ``user.exec``.

        Raises:
            CredentialError: no command, an unsupported apiVersion or a malformed env list.
        """
        command = stanza.get("command")
        if not isinstance(command, str) or not command:
            raise CredentialError("exec plugin: command is required")
        api_version = stanza.get("apiVersion")
        if api_version not in EXEC_API_VERSIONS:
            raise CredentialError(
                f"exec plugin: unsupported apiVersion {api_version!r} "
                f"(supported: {', '.join(sorted(EXEC_API_VERSIONS))})"
            )
        args = stanza.get("args") or []
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise CredentialError("exec plugin: args must be a list of strings")
        env: dict[str, str] = {}
        for item in stanza.get("env") or []:
            if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
                raise CredentialError("exec plugin: env entries need a name and a value")
            env[item["name"]] = str(item.get("value") or "")
        return cls(
            command=command,
            api_version=str(api_version),
            args=tuple(args),
            env=env,
            provide_cluster_info=bool(stanza.get("provideClusterInfo")),
            cluster=dict(cluster),
            install_hint=str(stanza.get("installHint") or ""),
        )

    def exec_info(self) -> str:
        """The ``KUBERNETES_EXEC_INFO`` value: the ExecCredential request the plugin reads."""
        spec: dict[str, Any] = {"interactive": False}
        if self.provide_cluster_info:
            spec["cluster"] = {
                name: self.cluster[name] for name in _CLUSTER_FIELDS if name in self.cluster
            }
            for named in self.cluster.get("extensions") or ():
                if isinstance(named, Mapping) and named.get("name") == _EXEC_EXTENSION:
                    spec["cluster"]["config"] = named.get("extension")
        return json.dumps({"apiVersion": self.api_version, "kind": "ExecCredential", "spec": spec})


_CLUSTER_FIELDS: Final = (
    "server",
    "tls-server-name",
    "insecure-skip-tls-verify",
    "certificate-authority-data",
    "proxy-url",
    "disable-compression",
)
_EXEC_EXTENSION: Final = "client.authentication.k8s.io/exec"


def _parse_timestamp(value: object) -> float:
    if not isinstance(value, str):
        raise CredentialError("exec plugin: expirationTimestamp must be an RFC 3339 string")
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise CredentialError(f"exec plugin: invalid expirationTimestamp {value!r}") from exc
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.timestamp()


def parse_exec_credential(output: bytes, *, api_version: str) -> Credential:
    """Decode a plugin's stdout (an ExecCredential) into a :class:`Credential`.

    Raises:
        CredentialError: not JSON, the wrong kind or apiVersion, or no token and no certificate.
    """
    try:
        doc = json.loads(output)
    except ValueError as exc:
        raise CredentialError(f"exec plugin: output is not JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("kind") != "ExecCredential":
        raise CredentialError("exec plugin: output is not an ExecCredential")
    if doc.get("apiVersion") != api_version:
        raise CredentialError(
            f"exec plugin: apiVersion {doc.get('apiVersion')!r} does not match {api_version!r}"
        )
    status = doc.get("status")
    if not isinstance(status, dict):
        raise CredentialError("exec plugin: ExecCredential has no status")
    token = status.get("token") or None
    cert = status.get("clientCertificateData") or None
    key = status.get("clientKeyData") or None
    if bool(cert) != bool(key):
        raise CredentialError("exec plugin: clientCertificateData and clientKeyData go together")
    if not token and not cert:
        raise CredentialError("exec plugin: ExecCredential has neither token nor certificate")
    expires = status.get("expirationTimestamp")
    return Credential(
        token=str(token) if token else None,
        client_certificate=str(cert) if cert else None,
        client_key=str(key) if key else None,
        expires_at=_parse_timestamp(expires) if expires else None,
    )


class ExecSource:
    """Runs a credential plugin when needed, without blocking the loop.

    Args:
        config: the exec stanza.
        clock: wall-clock seconds (compared with ``expirationTimestamp``).
        timeout: seconds the plugin may run.
    """

    def __init__(
        self,
        config: ExecConfig,
        *,
        clock: Callable[[], float] = time.time,
        timeout: float = EXEC_TIMEOUT,
    ) -> None:
        self.config = config
        self.timeout = timeout
        self._clock = clock
        self._cached: Credential | None = None
        self._lock: asyncio.Lock | None = None
        self.runs = 0
        """How many times the plugin ran (tests and logs)."""

    def _fresh(self, cred: Credential | None) -> bool:
        if cred is None:
            return False
        return cred.expires_at is None or self._clock() < cred.expires_at - EXPIRY_MARGIN

    async def credential(self) -> Credential:
        """The cached credential, or a new one from the plugin (one run for all waiters)."""
        cred = self._cached
        if self._fresh(cred):
            assert cred is not None
            return cred
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._fresh(self._cached):  # another request refreshed it meanwhile
                assert self._cached is not None
                return self._cached
            self._cached = await self._run()
            return self._cached

    def invalidate(self) -> None:
        """Run the plugin again before the next request."""
        self._cached = None

    def cached(self) -> Credential | None:
        """The last credential the plugin returned, if any."""
        return self._cached

    async def _run(self) -> Credential:
        cfg = self.config
        env = dict(os.environ)
        env.update(cfg.env)
        env["KUBERNETES_EXEC_INFO"] = cfg.exec_info()
        self.runs += 1
        started = time.monotonic()
        try:
            proc = await asyncio.create_subprocess_exec(
                cfg.command,
                *cfg.args,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            hint = f" ({cfg.install_hint})" if cfg.install_hint else ""
            raise CredentialError(f"exec plugin {cfg.command}: {exc}{hint}") from exc
        try:
            async with asyncio.timeout(self.timeout):
                stdout, stderr = await proc.communicate()
        except TimeoutError as exc:
            proc.kill()
            await proc.wait()
            raise CredentialError(
                f"exec plugin {cfg.command}: no answer within {self.timeout:g}s"
            ) from exc
        if proc.returncode != 0:
            detail = stderr.decode("utf-8", "replace").strip()[:512]
            raise CredentialError(
                f"exec plugin {cfg.command} exited with {proc.returncode}: {detail}"
            )
        cred = parse_exec_credential(stdout, api_version=cfg.api_version)
        logger.debug(
            "exec credential plugin ran",
            extra={"command": cfg.command, "seconds": round(time.monotonic() - started, 3)},
        )
        return cred
