"""Where snapshots go: the registry the operator configured, shared by the SandboxSnapshot
controller (which names the target and deletes images) and the node agent (which pushes).

Only the operator's registry is used, never one a snapshot names: its credentials live in one
Secret the operator controls, and a user cannot make the node agent push to a host of their
choosing with them.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from kube_agent_sandbox.api.rest import SECRETS
from kube_agent_sandbox.controller.runtime import Client
from kube_agent_sandbox.extensions.snapshot.registry import (
    RegistryClient,
    check_repository,
    credentials_from_dockerconfig,
)

_NAME: Final = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


class SettingsError(ValueError):
    """A snapshot flag has a value that cannot work (the message names the flag)."""


@dataclass(frozen=True)
class RegistrySettings:
    """The snapshot registry.

    Attributes:
        url: ``https://host[:port]`` (or ``http://`` for a test registry).
        secret: ``(namespace, name)`` of a dockerconfigjson Secret, or None (anonymous).
        ca_file: PEM file of the registry certificate's CA, or ``""`` (the system's).
        prefix: Repository prefix of snapshot images.
    """

    url: str
    secret: tuple[str, str] | None = None
    ca_file: str = ""
    prefix: str = "agent-sandbox/snapshots"

    @property
    def host(self) -> str:
        """``host[:port]`` as image references name the registry."""
        return urlsplit(self.url).netloc

    def repository(self, namespace: str, sandbox: str, override: str | None = None) -> str:
        """The repository of a snapshot: ``override`` under the prefix, or
        ``<prefix>/<namespace>/<sandbox>``."""
        tail = override or f"{namespace}/{sandbox}"
        return check_repository(f"{self.prefix}/{tail}".lower())

    def ssl_context(self) -> ssl.SSLContext | None:
        """Trust for the registry's certificate (None: the system's)."""
        if not self.ca_file:
            return None
        return ssl.create_default_context(cafile=self.ca_file)

    async def client(self, api: Client) -> RegistryClient:
        """A registry client with the Secret's credentials, read now (a rotated Secret is
        picked up by the next call).

        Raises:
            ValueError: The Secret is not a readable dockerconfigjson.
            ApiError: The Secret cannot be read.
        """
        credentials = None
        if self.secret is not None:
            namespace, name = self.secret
            secret = await api.get(SECRETS, namespace, name)
            credentials = credentials_from_dockerconfig(secret.get("data") or {}, self.host)
            if credentials is None:
                raise ValueError(f"Secret {namespace}/{name} has no credentials for {self.host}")
        return RegistryClient(self.url, credentials=credentials, ssl_context=self.ssl_context())


def parse_settings(url: str, secret: str, ca_file: str, prefix: str) -> RegistrySettings:
    """Check the ``--snapshot-*`` flag values and build the settings.

    Raises:
        SettingsError: A value cannot work; the message names the flag.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.netloc or parts.path not in ("", "/"):
        raise SettingsError(
            f"--snapshot-registry {url!r}: expected https://host[:port] (no path; "
            "put the path in --snapshot-repository-prefix)"
        )
    if parts.query or parts.fragment or parts.username:
        raise SettingsError(f"--snapshot-registry {url!r}: no query, fragment or user allowed")
    where: tuple[str, str] | None = None
    if secret:
        namespace, sep, name = secret.partition("/")
        if not sep or not _NAME.match(namespace) or not _NAME.match(name):
            raise SettingsError(
                f"--snapshot-registry-secret {secret!r}: expected <namespace>/<name>"
            )
        where = (namespace, name)
    try:
        check_repository(prefix)
    except ValueError as err:
        raise SettingsError(f"--snapshot-repository-prefix: {err}") from err
    if ca_file:
        try:
            ssl.create_default_context(cafile=ca_file)
        except (OSError, ssl.SSLError) as err:
            raise SettingsError(f"--snapshot-registry-ca {ca_file!r}: {err}") from err
    return RegistrySettings(url=url.rstrip("/"), secret=where, ca_file=ca_file, prefix=prefix)
