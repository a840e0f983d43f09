"""Where the API server is and how to authenticate to it.

Parsing kubeconfig files (contexts, embedded or file certificates, tokens, exec plugins) and the
in-cluster service account is done by the ``kubernetes`` package's loaders; this module turns
their result into what an aiohttp session needs: a base URL, an SSL context and auth headers.
"""

from __future__ import annotations

import logging
import os
import ssl
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


class ConfigError(Exception):
    """No usable cluster configuration was found."""


@dataclass
class ClusterConfig:
    """Connection settings for one API server.

    Attributes:
        host: base URL, e.g. ``https://127.0.0.1:6443``.
        ssl_context: TLS settings (CA, client certificate); None for plain HTTP.
        tls_server_name: overrides the name checked in the server certificate.
        namespace: the default namespace of the context or service account.
        source: the kubernetes package ``Configuration`` the settings came from; its refresh
            hook (in-cluster token rotation, exec plugins) is consulted for every request.
        static_headers: extra headers sent on every request.
    """

    host: str
    ssl_context: ssl.SSLContext | None = None
    tls_server_name: str | None = None
    namespace: str = "default"
    source: Any = None
    static_headers: dict[str, str] = field(default_factory=dict)

    def auth_headers(self) -> dict[str, str]:
        """Current authentication headers (refreshes rotating tokens when needed)."""
        headers = dict(self.static_headers)
        cfg = self.source
        if cfg is None:
            return headers
        hook = cfg.refresh_api_key_hook
        if hook is not None:  # rotates in-cluster tokens, re-runs expired exec plugins
            hook(cfg)
        # kubernetes >= 30 stores tokens under "BearerToken" (value "Bearer ..."), older
        # releases under "authorization".
        for key_name in ("BearerToken", "authorization"):
            key = cfg.api_key.get(key_name)
            if key:
                prefix = cfg.api_key_prefix.get(key_name)
                headers["Authorization"] = f"{prefix} {key}" if prefix else str(key)
                return headers
        if cfg.username or cfg.password:
            headers["Authorization"] = cfg.get_basic_auth_token()
        return headers


def _ssl_context_from(cfg: Any) -> ssl.SSLContext | None:
    if not str(cfg.host).startswith("https"):
        return None
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert or None)
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file or None)
    if not cfg.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def from_kubernetes_configuration(cfg: Any, *, namespace: str = "default") -> ClusterConfig:
    """Build a :class:`ClusterConfig` from a ``kubernetes.client.Configuration``."""
    return ClusterConfig(
        host=str(cfg.host).rstrip("/"),
        ssl_context=_ssl_context_from(cfg),
        tls_server_name=getattr(cfg, "tls_server_name", None) or None,
        namespace=namespace,
        source=cfg,
    )


def load_kubeconfig(path: str | None = None, *, context: str | None = None) -> ClusterConfig:
    """Load a kubeconfig file (``$KUBECONFIG`` or ``~/.kube/config`` when ``path`` is None).

    Raises:
        ConfigError: if the file is missing or invalid.
    """
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config

    if path is None:
        # read the environment now: the kubernetes package captures it at import time
        path = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    cfg = k8s_client.Configuration()
    try:
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=path, context=context, client_configuration=cfg, persist_config=False
        )
        _, active = k8s_config.list_kube_config_contexts(config_file=path)  # type: ignore[no-untyped-call]
    except (k8s_config.ConfigException, OSError, TypeError) as exc:
        raise ConfigError(f"cannot load kubeconfig {path or '(default)'}: {exc}") from exc
    namespace = "default"
    if context is None and active:
        namespace = (active.get("context") or {}).get("namespace") or "default"
    return from_kubernetes_configuration(cfg, namespace=namespace)


def load_incluster() -> ClusterConfig:
    """Load the in-cluster service account configuration (token is re-read as it rotates).

    Raises:
        ConfigError: when not running in a Pod.
    """
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config

    cfg = k8s_client.Configuration()
    try:
        k8s_config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    except k8s_config.ConfigException as exc:
        raise ConfigError(f"not running in a cluster: {exc}") from exc
    namespace = "default"
    try:
        with open(os.path.join(SERVICE_ACCOUNT_DIR, "namespace"), encoding="utf-8") as fh:
            namespace = fh.read().strip() or "default"
    except OSError:
        logger.debug("no service account namespace file")
    return from_kubernetes_configuration(cfg, namespace=namespace)


def load_config(kubeconfig: str | None = None, *, context: str | None = None) -> ClusterConfig:
    """Load configuration the way controller-runtime does.

    ``kubeconfig`` (the ``--kubeconfig`` flag) wins; else ``$KUBECONFIG``; else in-cluster; else
    ``~/.kube/config``.

    Raises:
        ConfigError: if none of them works.
    """
    if kubeconfig:
        return load_kubeconfig(kubeconfig, context=context)
    if os.environ.get("KUBECONFIG"):
        return load_kubeconfig(None, context=context)
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return load_incluster()
    return load_kubeconfig(None, context=context)
