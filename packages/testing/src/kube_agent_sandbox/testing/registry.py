"""A real OCI registry on loopback: the CNCF distribution registry that ``build.py`` compiled.

Snapshots are pushed to and pulled from a registry an operator runs; the local cluster runs
this one when :attr:`~kube_agent_sandbox.testing.clusteroptions.LocalClusterOptions.registry`
asks for it, either over TLS (a serving certificate from the cluster's CA) or plain HTTP, with
or without htpasswd credentials. Blobs live in the work directory and go with it.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import ssl
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kube_agent_sandbox.testing import pki, versions
from kube_agent_sandbox.testing.prerequisites import check_binaries
from kube_agent_sandbox.testing.probes import free_port
from kube_agent_sandbox.testing.processes import ManagedProcess, ProcessSupervisor, wait_until

REGISTRY_USER = "agent-sandbox"


@dataclass(frozen=True)
class RegistryOptions:
    """How to run the registry.

    Attributes:
        tls: Serve HTTPS with a certificate of the cluster's CA (plain HTTP when False).
        auth: Require htpasswd credentials (:data:`REGISTRY_USER` and a random password).
    """

    tls: bool = True
    auth: bool = True


@dataclass(frozen=True)
class RunningRegistry:
    """Where a started registry answers and how to authenticate to it.

    Attributes:
        host: ``127.0.0.1:<port>``, the registry part of image references.
        url: ``https://`` or ``http://`` + host.
        ca_file: The CA bundle that verifies its certificate (None over plain HTTP).
        username: User name of the htpasswd entry (None without authentication).
        password: Its password (None without authentication).
        storage: Folder of the registry's blobs and manifests.
    """

    host: str
    url: str
    ca_file: Path | None
    username: str | None
    password: str | None
    storage: Path

    @property
    def tls(self) -> bool:
        """Whether it serves HTTPS."""
        return self.ca_file is not None

    def ssl_context(self) -> ssl.SSLContext | None:
        """A client context that trusts the registry's CA (None over plain HTTP)."""
        if self.ca_file is None:
            return None
        return ssl.create_default_context(cafile=str(self.ca_file))

    def dockerconfigjson(self) -> bytes:
        """Its credentials as ``.dockerconfigjson`` (the node agent's file, a Secret's data)."""
        auth = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        return json.dumps({"auths": {self.host: {"auth": auth}}}).encode()

    def pull_secret(self, name: str, namespace: str) -> dict[str, Any]:
        """A ``kubernetes.io/dockerconfigjson`` Secret that lets Pods pull from it."""
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": base64.b64encode(self.dockerconfigjson()).decode()},
        }


def htpasswd_entry(bin_dir: Path, user: str, password: str) -> str:
    """``user:bcrypt-hash`` from the helper built beside the registry.

    Raises:
        RuntimeError: If the helper fails.
    """
    result = subprocess.run(
        [str(bin_dir / "registry-htpasswd"), user],
        input=password + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"registry-htpasswd failed: {result.stderr.strip()}")
    return result.stdout.strip()


def registry_config(
    *, port: int, storage: Path, tls: tuple[Path, Path] | None, htpasswd: Path | None
) -> dict[str, object]:
    """The registry's configuration (``version: 0.1`` schema) for loopback use.

    Deleting manifests is enabled: a deleted snapshot removes its image from the registry.
    """
    http: dict[str, object] = {"addr": f"127.0.0.1:{port}", "secret": secrets.token_hex(16)}
    if tls is not None:
        http["tls"] = {"certificate": str(tls[0]), "key": str(tls[1])}
    config: dict[str, object] = {
        "version": 0.1,
        "log": {"level": "info", "formatter": "text"},
        "storage": {
            "filesystem": {"rootdirectory": str(storage)},
            "delete": {"enabled": True},
            "cache": {"blobdescriptor": "inmemory"},
        },
        "http": http,
    }
    if htpasswd is not None:
        config["auth"] = {"htpasswd": {"realm": "agent-sandbox", "path": str(htpasswd)}}
    return config


def _answers(url: str, context: ssl.SSLContext | None) -> bool:
    """True once ``/v2/`` answers at all (401 counts: authentication is switched on)."""
    try:
        with urllib.request.urlopen(f"{url}/v2/", timeout=2, context=context):
            return True
    except urllib.error.HTTPError as err:
        return err.code == 401
    except OSError:
        return False


def start_registry(
    options: RegistryOptions,
    *,
    supervisor: ProcessSupervisor,
    workdir: Path,
    ca: pki.CertificateAuthority | None,
    bin_dir: Path | None = None,
    timeout: float = 30.0,
) -> tuple[RunningRegistry, ManagedProcess]:
    """Start the registry under ``supervisor`` and wait until it answers.

    Args:
        options: TLS and authentication.
        supervisor: Starts the process and stops it with the rest.
        workdir: Folder for its configuration, certificate and storage.
        ca: Signs the serving certificate (required with TLS).
        bin_dir: Folder of ``registry`` and ``registry-htpasswd``.
        timeout: Seconds to wait for ``/v2/``.

    Returns:
        The running registry and its process.

    Raises:
        PrerequisiteError: If the binaries are missing.
        ValueError: If TLS is asked for without a CA.
        ProcessFailedError: If it exits or does not answer in time.
    """
    bin_dir = bin_dir or versions.bin_dir()
    check_binaries(bin_dir, ["registry", "registry-htpasswd"] if options.auth else ["registry"])
    if options.tls and ca is None:
        raise ValueError("a TLS registry needs a CA to sign its certificate")
    workdir.mkdir(parents=True, exist_ok=True)
    storage = workdir / "storage"
    storage.mkdir(exist_ok=True)
    port = free_port()
    host = f"127.0.0.1:{port}"
    tls_files: tuple[Path, Path] | None = None
    ca_file: Path | None = None
    if options.tls:
        assert ca is not None
        serving = ca.issue_serving("registry", dns_names=["localhost"], ip_addresses=["127.0.0.1"])
        tls_files = serving.write(workdir, "registry")
        ca_file = workdir / "registry-ca.crt"
        ca_file.write_bytes(ca.key_pair.cert_pem)
    username = password = None
    htpasswd: Path | None = None
    if options.auth:
        username, password = REGISTRY_USER, secrets.token_urlsafe(18)
        htpasswd = workdir / "htpasswd"
        htpasswd.write_text(htpasswd_entry(bin_dir, username, password) + "\n")
    config = workdir / "registry.yaml"
    config.write_text(
        yaml.safe_dump(
            registry_config(port=port, storage=storage, tls=tls_files, htpasswd=htpasswd)
        )
    )
    # No tracing exporter: the registry would otherwise try to reach an OTLP collector.
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "none"}
    argv = [str(bin_dir / "registry"), "serve", str(config)]
    process = supervisor.start("registry", argv, env=env)
    running = RunningRegistry(
        host=host,
        url=("https://" if options.tls else "http://") + host,
        ca_file=ca_file,
        username=username,
        password=password,
        storage=storage,
    )
    context = running.ssl_context()
    wait_until(
        lambda: _answers(running.url, context),
        timeout=timeout,
        what="the registry to answer /v2/",
        process=process,
        interval=0.1,
    )
    return running, process
