"""Where snapshots go: the registry the operator configured, shared by the SandboxSnapshot
controller (which names the target and deletes images) and the node agent (which pushes).

Only the operator's registry is used, never one a snapshot names: its credentials live in one
Secret the operator controls, and a user cannot make the node agent push to a host of their
choosing with them. The Secret reaches the controller and the agent as a mounted file, not
through the API: neither needs a right to read Secrets (decisions.md, "Snapshot registry
credentials are a mounted file").
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from kube_agent_sandbox.extensions.snapshot.registry import (
    RegistryClient,
    check_repository,
    credentials_from_dockerconfig_json,
)


class SettingsError(ValueError):
    """A snapshot flag has a value that cannot work (the message names the flag)."""


@dataclass(frozen=True)
class RegistrySettings:
    """The snapshot registry.

    Attributes:
        url: ``https://host[:port]`` (or ``http://`` for a test registry).
        auth_file: A dockerconfigjson file (a mounted Secret's ``.dockerconfigjson``), or
            ``""`` (anonymous).
        ca_file: PEM file of the registry certificate's CA, or ``""`` (the system's).
        prefix: Repository prefix of snapshot images.
    """

    url: str
    auth_file: str = ""
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

    async def client(self) -> RegistryClient:
        """A registry client with the credentials file's, read now (the kubelet rewrites a
        mounted Secret when it changes, so a rotation is picked up by the next call).

        Raises:
            ValueError: The file is unreadable, not a dockerconfigjson, or has no
                credentials for this registry.
        """
        credentials = None
        if self.auth_file:
            try:
                raw = await asyncio.to_thread(Path(self.auth_file).read_bytes)
            except OSError as err:
                raise ValueError(
                    f"registry credentials {self.auth_file}: {err.strerror or err}"
                ) from err
            credentials = credentials_from_dockerconfig_json(raw, self.host)
            if credentials is None:
                raise ValueError(f"{self.auth_file} has no credentials for {self.host}")
        return RegistryClient(self.url, credentials=credentials, ssl_context=self.ssl_context())


def parse_settings(url: str, auth_file: str, ca_file: str, prefix: str) -> RegistrySettings:
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
    if auth_file and not Path(auth_file).is_absolute():
        raise SettingsError(
            f"--snapshot-registry-auth-file {auth_file!r}: expected an absolute path (the "
            "mounted Secret's .dockerconfigjson)"
        )
    try:
        check_repository(prefix)
    except ValueError as err:
        raise SettingsError(f"--snapshot-repository-prefix: {err}") from err
    if ca_file:
        try:
            ssl.create_default_context(cafile=ca_file)
        except (OSError, ssl.SSLError) as err:
            raise SettingsError(f"--snapshot-registry-ca {ca_file!r}: {err}") from err
    return RegistrySettings(
        url=url.rstrip("/"), auth_file=auth_file, ca_file=ca_file, prefix=prefix
    )
