"""Kubeconfig files for the identities that talk to a test cluster.

Components, tests and the in-process controller each get a self-contained kubeconfig (all
certificates embedded), so a file can be handed to kubectl, to the Python client or to another
process without anything else.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def write_kubeconfig(
    path: Path,
    *,
    server: str,
    ca_pem: bytes,
    user: str,
    client_cert_pem: bytes | None = None,
    client_key_pem: bytes | None = None,
    token: str | None = None,
    namespace: str | None = None,
) -> Path:
    """Write a single-context kubeconfig authenticating with a client certificate or a token.

    Args:
        path: File to write (mode 0600).
        server: API server URL, e.g. ``https://127.0.0.1:6443``.
        ca_pem: CA bundle that signed the server certificate.
        user: Name of the user entry (informational; the credential decides who you are).
        client_cert_pem: Client certificate, together with ``client_key_pem``.
        client_key_pem: Key of the client certificate.
        token: Bearer token, instead of a client certificate.
        namespace: Default namespace of the context.

    Returns:
        ``path``.

    Raises:
        ValueError: Unless exactly one credential (certificate+key or token) is given.
    """
    has_cert = client_cert_pem is not None and client_key_pem is not None
    if (client_cert_pem is None) != (client_key_pem is None):
        raise ValueError("client_cert_pem and client_key_pem go together")
    if has_cert == (token is not None):
        raise ValueError("give exactly one credential: a client certificate and key, or a token")
    credentials: dict[str, str] = {}
    if client_cert_pem is not None and client_key_pem is not None:
        credentials["client-certificate-data"] = _b64(client_cert_pem)
        credentials["client-key-data"] = _b64(client_key_pem)
    if token is not None:
        credentials["token"] = token
    context: dict[str, str] = {"cluster": "testenv", "user": user}
    if namespace:
        context["namespace"] = namespace
    document: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "testenv",
                "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)},
            }
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": "testenv", "context": context}],
        "current-context": "testenv",
    }
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def read_server_and_ca(path: Path) -> tuple[str, bytes]:
    """Server URL and CA bundle of a kubeconfig's current context.

    Args:
        path: A kubeconfig file.

    Returns:
        The server URL and the CA certificate bytes (empty when the file names none).

    Raises:
        ValueError: If the current context or its cluster is missing.
    """
    document = yaml.safe_load(path.read_text())
    current = document.get("current-context")
    contexts = {c["name"]: c["context"] for c in document.get("contexts") or []}
    if current not in contexts:
        raise ValueError(f"{path}: current context {current!r} not found")
    clusters = {c["name"]: c["cluster"] for c in document.get("clusters") or []}
    cluster = clusters.get(contexts[current]["cluster"])
    if cluster is None:
        raise ValueError(f"{path}: cluster of context {current!r} not found")
    if "certificate-authority-data" in cluster:
        ca = base64.b64decode(cluster["certificate-authority-data"])
    elif "certificate-authority" in cluster:
        ca_path = Path(cluster["certificate-authority"])
        if not ca_path.is_absolute():
            ca_path = path.parent / ca_path
        ca = ca_path.read_bytes()
    else:
        ca = b""
    return str(cluster["server"]), ca
